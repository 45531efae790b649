"""One run of a panel, executed where a backend puts it (a pool process, a Ray worker).

:func:`execute` is the one function every backend calls: it clears an unfinished attempt,
runs the planned run (a whole run through :func:`controlscope.run.run_prepared`, or a branch
of the unit's Keep run through :func:`controlscope.replay.run_branch`), and writes the run's
record last, so a run killed at any point is not finished. Planning goes through the panel's
exact-request cache (paper A.5: identical planning requests share one answer, so the unit's
scopes share its source program); reviews do not (review draws are sampled separately, and a
person's decision is never cached). A panel reviewed by a person (``[reviewer] reviewer =
"human"``) posts each reviewed boundary to the panel's review desk, whose address the panel
command shares with this process (:func:`controlscope.review.claim_desk`).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from controlscope._tree import remove_tree
from controlscope.core import ChatModel, RunStartEvent, SourceProgram
from controlscope.envs import get_environment
from controlscope.models import (
    CachedModel,
    EndpointGate,
    OpenAIModel,
    RequestCache,
    install_gate,
)
from controlscope.panel._config import PanelConfig
from controlscope.panel._folder import (
    CACHE_FILE,
    RunRecord,
    branched_record,
    log_identity,
    run_dir,
    write_record,
)
from controlscope.panel._linked import diverged, reuse_keep
from controlscope.panel._plan import KEEP, PlannedRun, run_spec
from controlscope.record import LogError, iter_events
from controlscope.replay import (
    BRANCHES_FILE,
    PREFIX_DIR,
    BranchResult,
    Recording,
    ReplayError,
    branch,
    resolve_boundary,
    run_branch,
)
from controlscope.review import HumanReviewer, ModelReviewer, RemoteDesk, Reviewer, claim_desk
from controlscope.run import (
    RunResult,
    build_models,
    place_schedule,
    prepare,
    read_source,
    run_prepared,
)

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.sharedctypes import Synchronized

BRANCH_AT: dict[str, int | str] = {
    "first_boundary": 1,
    "midpoint": "midpoint",
    "local_rule": "local-rule",
    "feedback_rule": "feedback-rule",
}
"""Where a branched start places its boundary in the Keep run (paper B.1, appendix B, A.3)."""


Finished = tuple[int, RunRecord | str]
"""A run handed back by a served backend's process: its key, and its record or why it has
none."""


@dataclass(frozen=True)
class RunJob:
    """What a backend hands to :func:`execute`.

    Attributes:
        panel: the panel folder (absolute).
        config: the panel's configuration.
        run: the run.
        siblings: the unit's other branches, to start with ``run`` from one replay of the
            Keep run's prefix, forked once per branch (:func:`execute`); empty: ``run``
            alone.
        fork: a second-schedule run (``diverge_from``) may start by fork from its shared
            prefix (its process is its own: :func:`~controlscope.panel._runner.diverged_by_fork`);
            False: it replays the prefix itself.
    """

    panel: Path
    config: PanelConfig
    run: PlannedRun
    siblings: tuple[PlannedRun, ...] = ()
    fork: bool = False


def execute(job: RunJob) -> RunRecord:
    """Run one planned run into its run directory and record it (``panel_run.json``).

    An earlier unfinished attempt in the directory is removed first. Whatever fails in the
    run is recorded in the run's log by the run itself (paper A.4); what prevents it from
    running at all is recorded as ``error`` (run again on resumption). The record names the
    run's log by its SHA-256, so that it counts for this log only.

    A job with ``siblings`` runs every branch of its unit from one replay of the prefix,
    forked once per branch where the worker can be forked, else each replaying it (the
    records say which: ``mechanism``), and records each.

    Returns:
        The run's record, as written.
    """
    if job.config.reviewer.person:
        claim_desk()  # now: the run's tool server and worker, started later, never inherit it
    if job.siblings:
        return _execute_forked(job)
    directory = run_dir(job.panel, job.run.id)
    if directory.exists():
        remove_tree(directory)
    directory.mkdir(parents=True)
    started = time.monotonic()
    try:
        record = _execute(job, directory)
    except Exception as err:  # recorded; the panel goes on with its other runs
        record = RunRecord(id=job.run.id, status="error", detail=f"{type(err).__name__}: {err}")
    return _record(directory, record, time.monotonic() - started)


def _record(directory: Path, record: RunRecord, seconds: float) -> RunRecord:
    """Write ``record`` with the seconds the run took and its log's identity; return it."""
    update: dict[str, object] = {"seconds": round(seconds, 3)}
    try:  # the record names its log: a record copied from elsewhere does not count
        identity = log_identity(directory)
        if identity is not None:
            update.update(log_sha256=identity.sha256, log_fingerprint=identity.fingerprint)
    except (OSError, LogError) as err:
        update.update(status="error", detail=f"its log cannot be read: {err}")
    record = record.model_copy(update=update)
    write_record(directory, record)
    return record


def _execute_forked(job: RunJob) -> RunRecord:
    """The job's run and its siblings by :func:`controlscope.replay.branch` into their run
    directories (the unit's folder also gets the trunk's run, ``prefix``, and
    ``branches.json``), each recorded; returns the job's run's record."""
    runs = (job.run, *job.siblings)
    dirs = [run_dir(job.panel, r.id) for r in runs]
    out = dirs[0].parent
    for path in (*dirs, out / PREFIX_DIR):  # what an unfinished attempt left
        if path.exists():
            remove_tree(path)
    (out / BRANCHES_FILE).unlink(missing_ok=True)
    started = time.monotonic()
    try:
        records = _forked(job, runs, out)
    except Exception as err:  # recorded; the panel goes on with its other runs
        detail = f"{type(err).__name__}: {err}"
        records = [RunRecord(id=r.id, status="error", detail=detail) for r in runs]
    seconds = time.monotonic() - started
    written = [_record(d, r, seconds) for d, r in zip(dirs, records, strict=True)]
    return written[0]


def _forked(job: RunJob, runs: Sequence[PlannedRun], out: Path) -> list[RunRecord]:
    """Each of ``runs`` (every branch of one unit) as its record, not yet written."""
    config = job.config
    at = BRANCH_AT[config.start]
    recording = Recording.load(run_dir(job.panel, job.run.after or ""))
    try:
        resolve_boundary(recording, at)
    except ReplayError as err:
        return [RunRecord(id=r.id, status="ineligible", detail=str(err)) for r in runs]
    planner, reviewer = _reviewing_models(job)
    try:
        found = branch(
            recording,
            at=at,
            scopes=list(dict.fromkeys(r.scope for r in runs)),
            out=out,
            planner=planner,
            reviewer=_reviewer(job, reviewer, out.relative_to(job.panel).as_posix()),
            draws=config.draws,
            schedule=config.schedule,
        )
    finally:
        _close(planner, reviewer)
    results = {b.run_dir.name: b for b in found.branches}
    stopped = found.divergence.message if found.divergence else "the branch set stopped"
    return [_forked_record(r, results.get(f"{r.scope}-d{r.draw}"), stopped) for r in runs]


def _forked_record(run: PlannedRun, found: BranchResult | None, stopped: str) -> RunRecord:
    """A branch's record (``error``, run again on resumption, when the set stopped before
    it, ``stopped`` saying why, or when its process ended abnormally before its log's end:
    killed, e.g. by the kernel's out-of-memory killer)."""
    if found is None:
        return RunRecord(id=run.id, status="error", detail=f"not started: {stopped}")
    unended = found.summary is not None and found.summary.end_reason is None
    if found.problem and unended:
        detail = f"{found.problem} before its run ended; it runs again on resumption"
        return RunRecord(id=run.id, status="error", detail=detail, mechanism=found.mechanism)
    detail = found.divergence.message if found.divergence else (found.problem or "")
    return branched_record(run.id, found, detail, mechanism=found.mechanism)


def _execute(job: RunJob, directory: Path) -> RunRecord:
    run, config = job.run, job.config
    keep_dir = run_dir(job.panel, run.after) if run.after is not None else None
    if run.scope == KEEP and config.execution.keep_from is not None:
        return reuse_keep(job.panel, config, run, directory)
    if run.scope != KEEP and config.execution.diverge_from is not None:
        return _diverged(job, directory)
    if run.scope == KEEP or config.start == "whole":
        return _whole(job, directory, keep_dir)
    assert keep_dir is not None
    return _branch(job, directory, keep_dir)


def _diverged(job: RunJob, directory: Path) -> RunRecord:
    """A reviewing run branched from another panel's first schedule (``diverge_from``)."""
    config = job.config
    planner, reviewer = _reviewing_models(job)
    try:
        return diverged(
            job.panel,
            config,
            job.run,
            directory,
            planner=planner,
            reviewer=_reviewer(job, reviewer, job.run.id),
            mechanism="auto" if job.fork else "replay",
        )
    finally:
        _close(planner, reviewer)


def _reviewing_models(job: RunJob) -> tuple[ChatModel, ChatModel | None]:
    """The planner (behind the panel's exact-request cache when it keeps one) and the reviewer
    model of a reviewing run (None when a person reviews); the caller closes both with
    :func:`_close`."""
    config = job.config
    models = build_models(
        planner=config.planner.model,
        reviewer=config.reviewer.model,
        base_url=config.planner.base_url,
        need_reviewer=not config.reviewer.person,
    )
    try:
        return _planner(models.planner, job), models.reviewer
    except BaseException:
        _close(models.planner, models.reviewer)
        raise


def _reviewer(job: RunJob, model: ChatModel | None, label: str) -> Reviewer:
    """The reviewer model, or (``model`` None) the person at the panel's review desk; its
    boundaries named ``label`` in the desk's queue.

    Raises:
        RuntimeError: a person reviews, and no desk was shared with this process.
    """
    if model is not None:
        return ModelReviewer(model)
    address = claim_desk()
    if address is None:
        raise RuntimeError("a person reviews this panel, and no review desk was shared with it")
    timeout_s = job.config.reviewer.review_timeout_s
    return HumanReviewer("browser", remote=RemoteDesk(address), timeout_s=timeout_s, label=label)


def _planner(model: ChatModel, job: RunJob) -> ChatModel:
    if not job.config.execution.cache:
        return model
    return CachedModel(model, RequestCache(cache_path(job.panel, job.config)))


def cache_path(panel: Path, config: PanelConfig) -> Path:
    """The panel's exact-request cache file: ``execution.cache_file`` (relative to the panel
    folder), else ``cache.sqlite`` in it."""
    name = config.execution.cache_file
    return (panel / name).resolve() if name else panel / CACHE_FILE


def _whole(job: RunJob, directory: Path, keep_dir: Path | None) -> RunRecord:
    spec = run_spec(job.config, job.run, out=directory, source=keep_dir)
    if spec.source_run is not None:
        problem = _source_problem(spec.source_run, spec.schedule, spec.env)
        if problem is not None:
            return RunRecord(id=job.run.id, status="ineligible", detail=problem)
    person = job.config.reviewer.person and spec.reviews
    prepared = prepare(spec, build_reviewer=not person)
    edited = _edited_source(prepared.program, keep_dir)
    if edited is not None:
        _close(prepared.models.planner, prepared.models.reviewer)
        return RunRecord(id=job.run.id, status="error", detail=edited)
    planner = prepared.models.planner
    try:
        planner = _planner(planner, job)
        reviewer = _reviewer(job, None, job.run.id) if person else None
        result = run_prepared(prepared, planner=planner, reviewer=reviewer)
    finally:
        _close(planner, prepared.models.reviewer)
    return _done(job.run.id, result)


def _edited_source(program: SourceProgram | None, keep_dir: Path | None) -> str | None:
    """Why a reviewing run cannot start from its unit's Keep run: the frozen source program
    was edited since the Keep run read it (the unit's runs would not share one program);
    None when it was not, or the unit's program is sampled."""
    if program is None or keep_dir is None:
        return None
    start = next(iter_events(keep_dir), None)
    recorded = start.source_file if isinstance(start, RunStartEvent) else None
    if recorded is None or recorded.sha256 == program.file.sha256:
        return None
    return (
        f"the frozen source program {program.file.path} was edited since the unit's Keep run "
        f"read it (source_file.sha256 {recorded.sha256[:12]}… recorded, "
        f"{program.file.sha256[:12]}… now): run the panel in a new folder"
    )


def _close(*models: ChatModel | None) -> None:
    """Close the run's endpoint clients and its cache's connection: their event-loop threads
    and connections would otherwise outlive the run in a process that goes on to run others
    (and an open cache keeps its ``-wal`` and ``-shm`` files)."""
    for model in models:
        if isinstance(model, CachedModel):
            model.cache.close()
            model = model.inner
        if isinstance(model, OpenAIModel):
            model.close()


def _source_problem(source_run: Path, schedule: str, env_name: str) -> str | None:
    """Why the Keep run cannot place a bare ``once``/``midpoint`` (the local rule finds no
    boundary, paper appendix B); None when it can."""
    env = get_environment(env_name)
    try:
        place_schedule(
            schedule,
            read_source(source_run),
            write_tools=env.write_tools,
            read_tools=env.read_tools,
        )
    except (FileNotFoundError, ValueError) as err:
        return str(err)
    return None


def _branch(job: RunJob, directory: Path, keep_dir: Path) -> RunRecord:
    config = job.config
    at = BRANCH_AT[config.start]
    recording = Recording.load(keep_dir)
    try:
        resolve_boundary(recording, at)
    except ReplayError as err:
        return RunRecord(id=job.run.id, status="ineligible", detail=str(err))
    planner, reviewer = _reviewing_models(job)
    try:
        found = run_branch(
            recording,
            at=at,
            scope=job.run.scope,
            out=directory,
            planner=planner,
            reviewer=_reviewer(job, reviewer, job.run.id),
            draw=job.run.draw,
            schedule=config.schedule,
        )
    finally:
        _close(planner, reviewer)
    detail = found.divergence.message if found.divergence else ""
    return branched_record(job.run.id, found, detail, mechanism="replay")


def _done(run_id: str, result: RunResult) -> RunRecord:
    return RunRecord(
        id=run_id,
        status="done",
        success=result.verdict.success,
        end_reason=result.end_reason,
        primitive_calls=result.summary.primitive_calls,
        detail=result.detail or "",
    )


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def start_pool_process(
    threads: int | None,
    shares: Sequence[Sequence[int]] = (),
    started: Synchronized[int] | None = None,
) -> None:
    """Set up a pool process: SIGTERM ends its run like Ctrl-C does (recorded as interrupted,
    its processes and workspace cleaned up), and a watcher ends the process when the panel's
    process dies (even by SIGKILL), so no run outlives its panel; ``threads`` sets the local
    model's threads (None: its default). The process ends without the interpreter's teardown
    (:func:`_exit_now`).

    Args:
        threads: the local model's threads (None: its default).
        shares: the pool's core shares, one per process (empty: not kept to cores).
        started: the pool's count of processes started so far, shared by them (with
            ``shares``): the n-th process to start keeps to share n (its threads and every
            process its runs start inherit it).
    """
    if shares and started is not None:
        _keep_to_share(shares, started)
    signal.signal(signal.SIGTERM, _interrupt)
    if threads is not None:
        os.environ.setdefault("CONTROLSCOPE_THREADS", str(threads))
    parent = os.getppid()
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if multiprocessing.parent_process() is not None:  # never in a panel's own process
        atexit.register(_exit_now)


def _keep_to_share(shares: Sequence[Sequence[int]], started: Synchronized[int]) -> None:
    """Keep this process to the next share of cores (a share no longer usable, after the
    machine's CPU set changed, leaves it free)."""
    with started.get_lock():
        index = started.value
        started.value += 1
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, shares[index % len(shares)])


def _exit_now() -> None:
    """End the pool process at once when it exits (status 0), skipping the interpreter's
    teardown of every module a run imported: about 0.5 s a process, paid inside the panel's
    wall time since the panel waits for its pool to end. By then every run it executed has
    recorded itself and removed its workspace, and multiprocessing has run its finalizers;
    what is left to do is flushing (logging, standard streams)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def _watch_parent(parent: int, period_s: float = 0.2, grace_s: float = 20.0) -> None:
    while os.getppid() == parent:
        time.sleep(period_s)
    os.kill(os.getpid(), signal.SIGTERM)  # the run ends recorded, its workspace removed
    time.sleep(grace_s)
    os._exit(1)


def serve_runs(
    jobs: Queue[tuple[int, RunJob] | None],
    done: Queue[Finished],
    gate: EndpointGate,
    member: int = 0,
) -> None:
    """A process of a :class:`~controlscope.panel.ServedBackend`: each job it is handed runs
    at once on a thread of its own (a run waiting for its endpoint costs a thread, not a
    process), its requests through ``gate``; each run still has its own worker process, tool
    server and workspace. ``None`` ends it once its runs have ended. SIGTERM interrupts every
    run (each ends recorded as interrupted, as Ctrl-C would end it) and ends the process.

    Args:
        jobs: ``(key, job)`` pairs, then None.
        done: where each run's ``(key, record)`` goes, or ``(key, reason)`` when it ended
            without a record (interrupted, or its run raised).
        gate: the endpoint's gate, shared with the panel's other processes.
        member: this process's member number in the gate.
    """
    start_pool_process(None)
    gate.join(member)
    install_gate(gate)
    runs: list[threading.Thread] = []
    try:
        while (item := jobs.get()) is not None:
            key, job = item
            thread = threading.Thread(target=_serve_one, args=(key, job, done), daemon=True)
            thread.start()
            runs = [t for t in runs if t.is_alive()] + [thread]
        for thread in runs:
            thread.join()
    except KeyboardInterrupt:
        _interrupt_threads(runs)


def _serve_one(key: int, job: RunJob, done: Queue[Finished]) -> None:
    outcome: RunRecord | str
    try:
        outcome = execute(job)
    except BaseException as err:  # interrupted: the run recorded its end, not its record
        outcome = f"{type(err).__name__}: {err}"
    done.put((key, outcome))


def _interrupt_threads(runs: list[threading.Thread], grace_s: float = 25.0) -> None:
    """Raise KeyboardInterrupt once in every run's thread (a thread blocked in a wait takes
    it when the wait returns; once only, so that it cannot cut into the run's own clean-up),
    and wait at most ``grace_s`` seconds for them to end."""
    deadline = time.monotonic() + grace_s
    for thread in runs:
        if thread.is_alive() and thread.ident is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(thread.ident), ctypes.py_object(KeyboardInterrupt)
            )
    for thread in runs:
        thread.join(max(0.0, deadline - time.monotonic()))
