"""Paired panels: tasks x source programs x scopes x reviewer draws, run paired on this machine
or on Ray, resumable (paper sections 3.2, 4 and A.5).

- :func:`load_config` reads a panel's TOML file and checks it (:class:`ConfigError`, one line;
  :func:`anchor_paths` reads the relative paths it names from its folder);
  :func:`plan_panel` resolves it against the environment (tasks, parameters, models) into a
  :class:`PanelPlan` of :class:`PlannedRun` s, before any run starts;
- :func:`run_panel` runs or resumes a panel into its folder (what ``controlscope panel``
  does): each unit's Keep run first (it samples the source program and is reused by every
  reviewer draw), then its reviewing scopes from its state (whole runs sharing planning
  through the exact-request cache, or branches of its recorded prefix); finished runs are
  skipped, unfinished ones run again (a record counts only for the run and the log it names,
  :func:`record_problem`); a folder of another configuration is refused
  (:class:`PanelError`, the difference named); one command at a time holds a folder
  (:func:`lock_panel`; another is refused with :class:`PanelBusy`, its holder named);
- :class:`LocalBackend` runs a process per run; :class:`ServedBackend` runs the runs of
  served models on threads of a few processes, their requests bounded by one endpoint gate
  (``[planner] max_connections``); :class:`RayBackend` runs them on Ray (served ones on
  :class:`RunActor` s, their endpoint counts gathered by :class:`ActorCounts`);
- a panel may take its Keep runs (``execution.keep_from``) and its reviewing runs' first
  schedule (``execution.diverge_from``) from another panel of its experiment
  (:func:`lending_difference` says when it cannot);
- :class:`PanelProgress` shows the progress live; :func:`read_manifest` and
  :func:`read_record` read a panel folder back (the report does); :func:`read_endpoint`
  reads what its served endpoint cost it (``endpoint.json``: requests, waits on answers and
  on rate limits, per panel command).
"""

from controlscope.core import ClusterBy
from controlscope.panel._backends import (
    ActorCounts,
    Backend,
    LocalBackend,
    RayBackend,
    RunActor,
    ServedBackend,
    core_shares,
    machine_cores,
)
from controlscope.panel._config import (
    STARTS,
    BudgetSettings,
    ConfigError,
    ExecutionSettings,
    PanelConfig,
    PlannerSettings,
    ReviewerSettings,
    Start,
    anchor_paths,
    config_problem,
    load_config,
    parse_config,
)
from controlscope.panel._config import Backend as BackendName
from controlscope.panel._endpoint import (
    ENDPOINT_FILE,
    EndpointRecorder,
    EndpointSession,
    endpoint_line,
    read_endpoint,
)
from controlscope.panel._folder import (
    CACHE_FILE,
    LOCK_FILE,
    MANIFEST_FILE,
    RUN_MARKER,
    RUNS_DIR,
    LogIdentity,
    PanelError,
    PanelManifest,
    RunRecord,
    RunStatus,
    difference,
    finished,
    log_identity,
    open_panel,
    read_manifest,
    read_record,
    record_problem,
    run_dir,
)
from controlscope.panel._linked import lending_difference
from controlscope.panel._lock import PanelBusy, lock_panel
from controlscope.panel._plan import (
    KEEP,
    PanelPlan,
    PlannedRun,
    condition_label,
    plan_panel,
    run_spec,
)
from controlscope.panel._progress import PanelProgress
from controlscope.panel._runner import (
    PanelObserver,
    PanelResult,
    PanelStatus,
    ReviewDeskServer,
    default_workers,
    make_backend,
    run_panel,
)
from controlscope.panel._unit import RunJob, execute

__all__ = [
    "CACHE_FILE",
    "ENDPOINT_FILE",
    "KEEP",
    "LOCK_FILE",
    "MANIFEST_FILE",
    "RUNS_DIR",
    "RUN_MARKER",
    "STARTS",
    "ActorCounts",
    "Backend",
    "BackendName",
    "BudgetSettings",
    "ClusterBy",
    "ConfigError",
    "EndpointRecorder",
    "EndpointSession",
    "ExecutionSettings",
    "LocalBackend",
    "LogIdentity",
    "PanelBusy",
    "PanelConfig",
    "PanelError",
    "PanelManifest",
    "PanelObserver",
    "PanelPlan",
    "PanelProgress",
    "PanelResult",
    "PanelStatus",
    "PlannedRun",
    "PlannerSettings",
    "RayBackend",
    "ReviewDeskServer",
    "ReviewerSettings",
    "RunActor",
    "RunJob",
    "RunRecord",
    "RunStatus",
    "ServedBackend",
    "Start",
    "anchor_paths",
    "condition_label",
    "config_problem",
    "core_shares",
    "default_workers",
    "difference",
    "endpoint_line",
    "execute",
    "finished",
    "lending_difference",
    "load_config",
    "lock_panel",
    "log_identity",
    "machine_cores",
    "make_backend",
    "open_panel",
    "parse_config",
    "plan_panel",
    "read_endpoint",
    "read_manifest",
    "read_record",
    "record_problem",
    "run_dir",
    "run_panel",
    "run_spec",
]
