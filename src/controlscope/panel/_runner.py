"""``run_panel``: a panel's runs, paired and resumable, on a backend (paper 3.2, 4, A.5).

Each unit's Keep run goes first (it samples the source program and is the baseline every
reviewer draw reuses); the unit's reviewing scopes start once it has finished, from its state.
Runs already finished in the panel folder are skipped; unfinished ones run again from
nothing. One panel command at a time runs on a folder: it holds the folder's lock
(:func:`~controlscope.panel.lock_panel`) for its whole life.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from controlscope.core import Connections, ModelSpec, Workers, absolute_path, range_problem
from controlscope.envs import get_environment
from controlscope.models import CacheError, GateStats, RequestCache
from controlscope.panel._backends import (
    Backend,
    LocalBackend,
    RayBackend,
    ServedBackend,
    machine_cores,
    served_runs,
)
from controlscope.panel._config import ConfigError, PanelConfig, load_config
from controlscope.panel._endpoint import EndpointRecorder
from controlscope.panel._folder import (
    CACHE_FILE,
    RunRecord,
    check_folder,
    finished,
    open_panel,
    read_record,
    record_problem,
    run_dir,
    write_record,
)
from controlscope.panel._linked import linked_folder
from controlscope.panel._lock import lock_panel
from controlscope.panel._plan import PanelPlan, PlannedRun, condition_label, plan_panel
from controlscope.panel._unit import RunJob, cache_path
from controlscope.review import DeskAddress, share_desk
from controlscope.run import env_unforkable


@dataclass
class PanelStatus:
    """A panel's progress (what the live display shows).

    Attributes:
        total: runs in the plan.
        finished: runs finished (skipped ones included).
        skipped: runs found finished when the panel started.
        running: runs executing now.
        failed: runs that could not run (``error``; they run again on resumption).
        ineligible: runs left out of the comparison (no boundary to branch at).
        successes: successes so far by condition (``keep``, ``arg``, ``full-d1``...).
        verdicts: finished runs with a verdict so far, by condition.
        elapsed_s: seconds since the panel started its runs.
        endpoint: the served endpoint's counts so far (requests in flight, done, seconds
            waited on answers and on rate limits); None when the runs' models are not served
            or the backend does not count them.
    """

    total: int
    finished: int = 0
    skipped: int = 0
    running: int = 0
    failed: int = 0
    ineligible: int = 0
    successes: dict[str, int] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    endpoint: GateStats | None = None

    @property
    def rate_limit_wait_s(self) -> float:
        """Wall seconds the panel's requests were paused by the endpoint's rate limits."""
        return self.endpoint.rate_limited_s if self.endpoint is not None else 0.0

    @property
    def requests_per_s(self) -> float:
        """Endpoint requests per second since the panel started (0 without counts)."""
        if self.endpoint is None or self.elapsed_s <= 0:
            return 0.0
        return self.endpoint.requests / self.elapsed_s

    @property
    def remaining_s(self) -> float | None:
        """The time the rest of the runs will take at the pace of those run so far (None
        before one has finished)."""
        ran = self.finished + self.failed - self.skipped
        left = self.total - self.finished - self.failed
        if ran <= 0 or self.elapsed_s <= 0:
            return None
        return left * self.elapsed_s / ran

    def count(self, run: PlannedRun, record: RunRecord, draws: int) -> None:
        """Fold one finished run in."""
        label = condition_label(run.scope, run.draw, draws)
        self.successes.setdefault(label, 0)
        self.verdicts.setdefault(label, 0)
        if record.status == "error":
            self.failed += 1
            return
        self.finished += 1
        if record.status == "ineligible":
            self.ineligible += 1
        elif record.success is not None:
            self.verdicts[label] += 1
            self.successes[label] += int(record.success)


PanelObserver = Callable[[PanelStatus], None]
"""Called with the panel's status whenever it changes."""


@dataclass(frozen=True)
class PanelResult:
    """A panel run (or resumed).

    Attributes:
        panel: the panel folder.
        plan: its runs.
        records: each run's record (a run that could not run has status ``error``).
        status: the final status.
        complete: True when every run finished (a property).
    """

    panel: Path
    plan: PanelPlan
    records: dict[str, RunRecord]
    status: PanelStatus

    @property
    def complete(self) -> bool:
        """True when every run finished (none failed to run)."""
        return all(r.status != "error" for r in self.records.values())


def default_workers(config: PanelConfig) -> int:
    """Runs at a time on this machine: one per core, or one for a model that runs here (the
    embedded model or a GGUF file, :attr:`ModelSpec.is_local`: its inference uses every core).

    Raises:
        ValueError: a model spec that names no model (``ModelSpec.parse``'s words).
    """
    models = (config.planner.model, config.reviewer.model or config.planner.model)
    if any(ModelSpec.parse(m).is_local for m in models):
        return 1
    return machine_cores()


def served(config: PanelConfig) -> bool:
    """Whether both of the panel's models are served (``openai`` specs): its runs then wait
    on the endpoint, not on this machine's cores."""
    models = (config.planner.model, config.reviewer.model or config.planner.model)
    return all(ModelSpec.parse(m).kind == "openai" for m in models)


def make_backend(config: PanelConfig, workers: int | None = None) -> Backend:
    """The configured backend (``workers`` overrides the configuration's).

    A panel of served models (:func:`served`) on the local backend runs its runs on threads
    of a few processes (:class:`ServedBackend`), :func:`served_runs` of
    ``planner.max_connections`` at a time unless ``workers`` says otherwise, and on Ray on
    threads of actors sharing the connections out; any other runs a process per run, one per
    core (:func:`default_workers`).

    Raises:
        MissingExtra: ``ray`` asked for and not installed.
    """
    if config.execution.backend == "ray":
        connections = config.planner.max_connections if served(config) else None
        return RayBackend(config.execution.cpus_per_run, connections)
    if served(config):
        connections = config.planner.max_connections
        runs = workers or config.execution.workers or served_runs(connections)
        return ServedBackend(runs, min(machine_cores(), runs), connections)
    count = workers or config.execution.workers or default_workers(config)
    threads = max(1, machine_cores() // count) if count > 1 else None
    return LocalBackend(count, threads)


ReviewDeskServer = Callable[[Path], AbstractContextManager[DeskAddress]]
"""What serves a panel's review desk: called with the panel folder, a context manager that
serves it while it is open and gives its address."""


def run_panel(
    config: PanelConfig | str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    workers: int | None = None,
    max_connections: int | None = None,
    observer: PanelObserver | None = None,
    review_desk: ReviewDeskServer | None = None,
) -> PanelResult:
    """Run (or resume) a panel into the folder ``out``; what ``controlscope panel`` does.

    The local backend starts its processes with ``spawn``, which imports the calling script
    again in each: call this under ``if __name__ == "__main__":`` in a script.

    Args:
        config: the configuration, or its TOML file.
        out: the panel folder (created; an existing one must hold the same configuration).
        workers: runs at a time on the local backend (None: the configuration's, else sized
            to the machine, see :func:`default_workers`; at most
            :data:`~controlscope.core.MAX_WORKERS`).
        max_connections: requests in flight at once to a served endpoint (None: the
            configuration's ``[planner] max_connections``); it may differ on resumption.
        observer: called with the status whenever it changes (e.g. a live display).
        review_desk: serves the review desk of a panel a person reviews (``[reviewer]
            reviewer = "human"``): called with the panel folder once it is opened, it serves a
            :class:`~controlscope.review.ReviewDesk` with the viewer's review page for the
            runs' whole life and gives its address (``controlscope panel`` serves it on
            loopback and prints the page's address). The address reaches the runs' processes
            in their environment only (:func:`~controlscope.review.share_desk`).

    Returns:
        Every run's record.

    Raises:
        ConfigError: the configuration cannot run, ``workers`` or ``max_connections``
            is out of its range, or a person reviews and no ``review_desk`` is given (checked
            before any run starts).
        PanelError: ``out`` holds another panel (the difference named) or is unusable.
        PanelBusy: another panel command runs on ``out`` (a :class:`PanelError` naming its
            pid, host and since when); the folder is held for this call's whole life.
        KeyboardInterrupt: interrupted; running runs end recorded as interrupted and run
            again on resumption.
    """
    problem = None if workers is None else range_problem("workers", Workers, workers)
    if problem is None and max_connections is not None:
        problem = range_problem("max_connections", Connections, max_connections)
    if problem is not None:
        raise ConfigError(problem)
    cfg = config if isinstance(config, PanelConfig) else load_config(Path(config))
    if cfg.reviewer.person and review_desk is None:
        raise ConfigError(
            "reviewer.reviewer: a person reviews this panel at a review desk; serve one "
            "(review_desk=...), or run it with controlscope panel"
        )
    if max_connections is not None:
        planner = cfg.planner.model_copy(update={"max_connections": max_connections})
        cfg = cfg.model_copy(update={"planner": planner})
    panel = absolute_path(out)
    check_folder(panel)  # before the lock file is made in it, and before any model is built
    _check_cache(panel, cfg)
    _check_links(panel, cfg)
    plan = plan_panel(cfg)
    with lock_panel(panel):
        open_panel(panel, cfg, plan)
        try:
            with contextlib.ExitStack() as desk:
                if cfg.reviewer.person and review_desk is not None:
                    desk.enter_context(share_desk(desk.enter_context(review_desk(panel))))
                return _run(panel, cfg, plan, workers, observer)
        finally:
            _settle_cache(panel, cfg)


def _check_links(panel: Path, cfg: PanelConfig) -> None:
    """Refuse a panel that takes runs from itself (``execution.keep_from`` or
    ``diverge_from`` naming its own folder): none of its runs could ever finish."""
    for key in ("keep_from", "diverge_from"):
        relative = getattr(cfg.execution, key)
        if relative is not None and linked_folder(panel, relative) == panel:
            raise ConfigError(
                f"execution.{key}: {relative!r} is this panel's own folder ({panel}); name "
                "another panel's folder"
            )


def _check_cache(panel: Path, cfg: PanelConfig) -> None:
    """Refuse, before anything runs or is written, an exact-request cache file that cannot be
    one: a folder (``cache_file = "/"``), something other than a regular file, a file SQLite
    cannot open, a path under a file."""
    if not cfg.execution.cache:
        return
    path = cache_path(panel, cfg)
    where = "execution.cache_file"
    if path.is_dir():
        raise ConfigError(
            f"{where}: {path} is a folder; name a file, or leave it out for {CACHE_FILE} in "
            "the panel folder"
        )
    if path.exists() and not path.is_file():
        raise ConfigError(f"{where}: {path} is not a regular file")
    if path.exists():
        try:
            RequestCache(path).close()
        except CacheError as err:
            raise ConfigError(f"{where}: {err}") from None
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ConfigError(f"{where}: {path} lies under {parent}, which is not a folder")


def _settle_cache(panel: Path, cfg: PanelConfig) -> None:
    """Fold the cache's write-ahead log into its file as the panel ends: the last connection
    to close removes ``-wal`` and ``-shm`` (a run killed with its connection open leaves
    them)."""
    path = cache_path(panel, cfg)
    if cfg.execution.cache and path.is_file():
        with contextlib.suppress(CacheError):
            RequestCache(path).close()


def _run(
    panel: Path,
    cfg: PanelConfig,
    plan: PanelPlan,
    workers: int | None,
    observer: PanelObserver | None,
) -> PanelResult:
    """Run the plan's unfinished runs into the locked, opened panel folder."""
    status = PanelStatus(total=len(plan.runs))
    records: dict[str, RunRecord] = {}
    for run in plan.runs:
        found = finished(panel, run.id)
        if found is not None:
            records[run.id] = found
            status.skipped += 1
            status.count(run, found, cfg.draws)
    notify = observer or (lambda status: None)
    notify(status)
    backend = make_backend(cfg, workers)
    cancel = True
    try:
        _drive(backend, panel, cfg, plan, records, status, notify)
        cancel = False
    finally:
        backend.close(cancel=cancel)
    return PanelResult(panel=panel, plan=plan, records=records, status=status)


def _drive(
    backend: Backend,
    panel: Path,
    config: PanelConfig,
    plan: PanelPlan,
    records: dict[str, RunRecord],
    status: PanelStatus,
    notify: PanelObserver,
) -> None:
    """Submit runs whose Keep run has finished, at most ``backend.slots`` at a time, until
    every run has a record."""
    waiting = [r for r in plan.runs if r.id not in records]
    running: dict[object, PlannedRun] = {}
    started = time.monotonic()
    served = backend.connections
    recorder = EndpointRecorder(panel, served) if served is not None else None
    forks = branches_by_fork(backend, config)
    diverge_forks = diverged_by_fork(backend, config)
    groups: dict[object, tuple[PlannedRun, ...]] = {}
    counted = [-1]  # runs ended when the endpoint's counts were last written

    def notify_now() -> None:
        status.running = len(running)
        status.elapsed_s = time.monotonic() - started
        status.endpoint = backend.endpoint()
        done = status.finished + status.failed
        if recorder and status.endpoint and (counted[0] != done or not (waiting or running)):
            counted[0] = done
            recorder.update(status.endpoint)  # what the runs waited is kept as they end
        notify(status)

    while waiting or running:
        taken: set[str] = set()  # runs started with a sibling in this pass
        for run in list(waiting):
            if len(running) >= backend.slots:
                break
            ready = _ready(run, records)
            if ready is None or run.id in taken:
                continue
            waiting.remove(run)
            if not ready:
                _blocked(panel, run, records, status, config.draws)
                continue
            siblings = _siblings(run, waiting, plan) if forks else ()
            for sibling in siblings:
                waiting.remove(sibling)
                taken.add(sibling.id)
            job = RunJob(panel, config, run, siblings, fork=diverge_forks)
            try:
                handle = backend.submit(job)
                running[handle], groups[handle] = run, siblings
            except Exception as err:  # a broken pool: the run could not start
                _fold(job, f"{type(err).__name__}: {err}", records, status)
        notify_now()
        if not running:
            if waiting and all(_ready(r, records) is None for r in waiting):
                raise RuntimeError(f"runs wait for Keep runs that never ran: {waiting[0].id}")
            continue
        for handle, outcome in backend.wait(list(running), timeout_s=0.5):
            job = RunJob(panel, config, running.pop(handle), groups.pop(handle, ()))
            _fold(job, outcome, records, status)
        notify_now()


def _fold(
    job: RunJob, outcome: RunRecord | str, records: dict[str, RunRecord], status: PanelStatus
) -> None:
    """Fold in the records of a job that ended with ``outcome`` (its run's record, or why it
    has none): its run's, and its siblings' as the job wrote them."""
    run = job.run
    ended = [(run, outcome if isinstance(outcome, RunRecord) else _lost(run, outcome))]
    ended += [(s, _recorded(job.panel, s, outcome)) for s in job.siblings]
    for done_run, record in ended:
        records[done_run.id] = record
        status.count(done_run, record, job.config.draws)


def branches_by_fork(backend: Backend, config: PanelConfig) -> bool:
    """Whether the panel starts each unit's branches together, from one replay of its Keep
    run's prefix forked once per branch (:func:`~controlscope.replay.branch`), rather than
    each branch replaying the prefix itself: when the runs branch (``start`` is not
    ``whole``), the environment's state is its workspace (it can be forked) and each run has a
    process of its own (the local backend: a fork copies one thread of a process, and the
    served and Ray backends run many runs on threads of one process), and not branched from
    another panel's runs (``diverge_from``). Where the worker turns
    out not to be forkable the branches replay the prefix after all; each record says how its
    branch started (``RunRecord.mechanism``)."""
    if config.start == "whole" or not isinstance(backend, LocalBackend):
        return False
    if config.execution.diverge_from is not None:  # each branch from another panel's run
        return False
    return env_unforkable(get_environment(config.env)) is None


def diverged_by_fork(backend: Backend, config: PanelConfig) -> bool:
    """Whether the panel's second-schedule runs (``diverge_from``) may start by fork, each
    from one replay of its first run's shared prefix forked at the divergence point
    (:func:`~controlscope.replay.branch_at_divergence`): when each run has a process of its
    own (the local backend, as for :func:`branches_by_fork`) and the environment's state is
    its workspace. Each record says how its run started (``RunRecord.mechanism``)."""
    if config.execution.diverge_from is None or not isinstance(backend, LocalBackend):
        return False
    return env_unforkable(get_environment(config.env)) is None


def _siblings(
    run: PlannedRun, waiting: list[PlannedRun], plan: PanelPlan
) -> tuple[PlannedRun, ...]:
    """The other branches of ``run``'s unit, when none of them has run yet (else none:
    each then runs alone)."""
    if run.after is None:
        return ()
    unit = [r for r in plan.runs if r.after == run.after and r.id != run.id]
    unstarted = {r.id for r in waiting}
    if not unit or any(r.id not in unstarted for r in unit):
        return ()
    return tuple(unit)


def _recorded(panel: Path, run: PlannedRun, outcome: RunRecord | str) -> RunRecord:
    """The record a group's job wrote for ``run`` (an ``error`` one included); a lost one when
    it wrote none."""
    directory = run_dir(panel, run.id)
    reason = outcome if isinstance(outcome, str) else "its branch group recorded no end"
    try:
        record = read_record(directory)
    except (OSError, ValueError):
        return _lost(run, reason)
    return _lost(run, reason) if record_problem(directory, run.id, record) else record


def _ready(run: PlannedRun, records: dict[str, RunRecord]) -> bool | None:
    """True when ``run`` can start, False when it never can (its Keep run could not run),
    None while its Keep run has not finished."""
    if run.after is None:
        return True
    keep = records.get(run.after)
    if keep is None:
        return None
    return keep.status == "done"


def _blocked(
    panel: Path, run: PlannedRun, records: dict[str, RunRecord], status: PanelStatus, draws: int
) -> None:
    keep = records[run.after or ""]
    record = RunRecord(
        id=run.id, status="error", detail=f"the unit's Keep run could not run: {keep.detail}"
    )
    write_record(run_dir(panel, run.id), record)
    records[run.id] = record
    status.count(run, record, draws)


def _lost(run: PlannedRun, reason: str) -> RunRecord:
    """The record of a run whose process died before it could record it (not written: the run
    is unfinished and runs again on resumption)."""
    return RunRecord(id=run.id, status="error", detail=f"its process ended: {reason}")
