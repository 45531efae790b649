"""controlscope: workflow-revision scopes for language-model agents that act by writing programs.

Run a task under a scope, the same way ``controlscope run`` does::

    import controlscope as cs

    spec = cs.RunSpec(task="student_database/english_talent", params={"students": 25},
                      scope="full", schedule="continuous", out="runs/py-demo")
    result = cs.run_task(spec)
    print(result.verdict.success, result.summary.primitive_calls)

Review inside your own agent: its code blocks run in one isolated worker, reviewed at every
tool call, the session recorded as a run::

    with cs.Executor(servers="mcp.json", settings=cs.RunSettings(scope="arg")) as ex:
        print(ex.execute("print(read_text_file(path='/tmp/x/a.txt'))").output)

Run a paired panel (tasks x source programs x scopes x reviewer draws) and report it, the
same way ``controlscope panel`` and ``controlscope report`` do::

    result = cs.run_panel("scripts/demo.toml", "runs/demo")
    print(cs.report("runs/demo").tables["paired"])

The names below are the public API; subpackages (:mod:`controlscope.core`,
:mod:`controlscope.models`, :mod:`controlscope.envs`, :mod:`controlscope.review`,
:mod:`controlscope.worker`, :mod:`controlscope.record`, :mod:`controlscope.run`,
:mod:`controlscope.replay`, :mod:`controlscope.panel`, :mod:`controlscope.analysis`) export
more.
``docs/architecture.md`` shows how the parts fit and what each is called elsewhere.
"""

import importlib
from typing import TYPE_CHECKING, Any

from controlscope._extras import MissingExtra
from controlscope._leftovers import Leftover, clean
from controlscope._setup import SetupResult, setup
from controlscope.core import (
    BlockResult,
    Boundary,
    ChatModel,
    Condition,
    Event,
    Keep,
    Message,
    ModelRequest,
    ModelResponse,
    Operation,
    PatchArguments,
    PatchBlockData,
    PrimitiveCall,
    ProviderError,
    ReplaceWorkflow,
    RunSettings,
    Scope,
    Task,
    TaskBudgets,
    Validation,
    Verdict,
)
from controlscope.envs import Environment, McpToolServer, get_environment
from controlscope.envs.filesystem import SetupError
from controlscope.executor import (
    Decision,
    Execution,
    Executor,
    ExecutorClosed,
    ExecutorError,
    render_signatures,
    tool_annotations,
)
from controlscope.models import make_model
from controlscope.record import RunSummary, read_events, read_summary
from controlscope.review import (
    HumanReviewer,
    ModelReviewer,
    Proposal,
    PublicState,
    Reviewer,
    ReviewOutcome,
)
from controlscope.run import (
    RunProgress,
    RunResult,
    RunSpec,
    SpecError,
    prepare,
    run_task,
    run_trajectory,
)
from controlscope.schedule import Schedule, parse_schedule
from controlscope.scope import validate_operation
from controlscope.worker import Limits, WorkerSession

if TYPE_CHECKING:
    from controlscope.analysis import Report, report
    from controlscope.experiments import (
        EXPERIMENTS_DIR,
        Experiment,
        ExperimentError,
        ExperimentResult,
        list_experiments,
        load_experiment,
        resolve,
        run_experiment,
        write_results,
    )
    from controlscope.export import export_inspect
    from controlscope.panel import PanelConfig, PanelResult, run_panel

_LAZY = {
    **dict.fromkeys(("Report", "report"), "controlscope.analysis"),
    **dict.fromkeys(
        (
            *("EXPERIMENTS_DIR", "Experiment", "ExperimentError", "ExperimentResult"),
            *("list_experiments", "load_experiment", "resolve", "run_experiment", "write_results"),
        ),
        "controlscope.experiments",
    ),
    **dict.fromkeys(("PanelConfig", "PanelResult", "run_panel"), "controlscope.panel"),
    "export_inspect": "controlscope.export",
}
"""Public names imported on first use: the panel, analysis and experiment layers bring pandas,
numpy and matplotlib, which a process that only runs a trajectory or serves an environment's
tools (started as ``python -m controlscope.envs...``) should not pay for at every start."""


def __getattr__(name: str) -> Any:
    """A lazily imported public name (:data:`_LAZY`).

    Raises:
        AttributeError: not a public name of the package.
    """
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'controlscope' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"
"""The package's version (as in ``pyproject.toml``)."""

__all__ = [
    "EXPERIMENTS_DIR",
    "BlockResult",
    "Boundary",
    "ChatModel",
    "Condition",
    "Decision",
    "Environment",
    "Event",
    "Execution",
    "Executor",
    "ExecutorClosed",
    "ExecutorError",
    "Experiment",
    "ExperimentError",
    "ExperimentResult",
    "HumanReviewer",
    "Keep",
    "Leftover",
    "Limits",
    "McpToolServer",
    "Message",
    "MissingExtra",
    "ModelRequest",
    "ModelResponse",
    "ModelReviewer",
    "Operation",
    "PanelConfig",
    "PanelResult",
    "PatchArguments",
    "PatchBlockData",
    "PrimitiveCall",
    "Proposal",
    "ProviderError",
    "PublicState",
    "ReplaceWorkflow",
    "Report",
    "ReviewOutcome",
    "Reviewer",
    "RunProgress",
    "RunResult",
    "RunSettings",
    "RunSpec",
    "RunSummary",
    "Schedule",
    "Scope",
    "SetupError",
    "SetupResult",
    "SpecError",
    "Task",
    "TaskBudgets",
    "Validation",
    "Verdict",
    "WorkerSession",
    "__version__",
    "clean",
    "export_inspect",
    "get_environment",
    "list_experiments",
    "load_experiment",
    "make_model",
    "parse_schedule",
    "prepare",
    "read_events",
    "read_summary",
    "render_signatures",
    "report",
    "resolve",
    "run_experiment",
    "run_panel",
    "run_task",
    "run_trajectory",
    "setup",
    "tool_annotations",
    "validate_operation",
    "write_results",
]
