"""``run_panel``: a panel's runs, paired and resumable, on a backend (paper 3.2, 4, A.5).

Each unit's Keep run goes first (it samples the source program and is the baseline every
reviewer draw reuses); the unit's reviewing scopes start once it has finished, from its state.
Runs already finished in the panel folder are skipped; unfinished ones run again from
nothing. One panel command at a time runs on a folder: it holds the folder's lock
(:func:`~controlscope.panel.lock_panel`) for its whole life.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from controlscope.core import Connections, ModelSpec, Workers, absolute_path, range_problem
from controlscope.models import EndpointGate, GateStats
from controlscope.panel._backends import (
    Backend,
    LocalBackend,
    RayBackend,
    ServedBackend,
    machine_cores,
    served_runs,
)
from controlscope.panel._config import ConfigError, PanelConfig, load_config
from controlscope.panel._folder import (
    RunRecord,
    check_folder,
    finished,
    open_panel,
    run_dir,
    write_record,
)
from controlscope.panel._lock import lock_panel
from controlscope.panel._plan import PanelPlan, PlannedRun, condition_label, plan_panel
from controlscope.panel._unit import RunJob


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


def run_panel(
    config: PanelConfig | str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    workers: int | None = None,
    max_connections: int | None = None,
    observer: PanelObserver | None = None,
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

    Returns:
        Every run's record.

    Raises:
        ConfigError: the configuration cannot run, or ``workers`` or ``max_connections``
            is out of its range (checked before any run starts).
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
    if max_connections is not None:
        planner = cfg.planner.model_copy(update={"max_connections": max_connections})
        cfg = cfg.model_copy(update={"planner": planner})
    plan = plan_panel(cfg)
    panel = absolute_path(out)
    check_folder(panel)  # before the lock file is made in it
    with lock_panel(panel):
        open_panel(panel, cfg, plan)
        return _run(panel, cfg, plan, workers, observer)


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
    gate = getattr(backend, "gate", None)

    def notify_now() -> None:
        status.running = len(running)
        status.elapsed_s = time.monotonic() - started
        status.endpoint = gate.stats() if isinstance(gate, EndpointGate) else None
        notify(status)

    while waiting or running:
        for run in list(waiting):
            if len(running) >= backend.slots:
                break
            ready = _ready(run, records)
            if ready is None:
                continue
            waiting.remove(run)
            if not ready:
                _blocked(panel, run, records, status, config.draws)
                continue
            try:
                running[backend.submit(RunJob(panel, config, run))] = run
            except Exception as err:  # a broken pool: the run could not start
                records[run.id] = _lost(run, f"{type(err).__name__}: {err}")
                status.count(run, records[run.id], config.draws)
        notify_now()
        if not running:
            if waiting and all(_ready(r, records) is None for r in waiting):
                raise RuntimeError(f"runs wait for Keep runs that never ran: {waiting[0].id}")
            continue
        for handle, outcome in backend.wait(list(running), timeout_s=0.5):
            run = running.pop(handle)
            record = outcome if isinstance(outcome, RunRecord) else _lost(run, outcome)
            records[run.id] = record
            status.count(run, record, config.draws)
        notify_now()


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
