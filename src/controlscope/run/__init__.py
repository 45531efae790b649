"""Running one trajectory: the spec, the entry points, the result.

- :func:`run_task` runs a :class:`RunSpec` (what ``controlscope run`` does), showing its
  progress (:class:`RunProgress`) on a terminal (:class:`TerminalProgress`) or giving it to a
  callback of yours (:class:`ProgressTracker` builds it from the events);
- :func:`run_trajectory` runs ready objects (environment, task, models, reviewer, condition);
- :func:`prepare` checks a spec against the outside world without running it;
  :func:`settings_condition` resolves the condition of settings alone (an agent's session);
- :func:`read_source`, :func:`local_rule_of` and :func:`feedback_rule_of` read a recorded
  source run and say where the paper's local rule (appendix B) or feedback-visibility rule
  (A.3) places a one-time review in it, or why the pair is ineligible;
- :class:`TrajectoryHook` steers a trajectory from outside (the prefix replays and branches
  of :mod:`controlscope.replay`) through :class:`TrajectoryControl` (what its
  :class:`Controller` lets it read, and :meth:`Controller.steer`); :class:`StopRun` ends it
  (a controller is built from its :class:`RunContext` and :class:`Review`);
- :class:`ForkPoint` forks a trajectory paused at a boundary into branches (where
  :func:`env_unforkable` and :meth:`ForkPoint.unavailable` allow it); a branch's process is
  made :func:`interruptible_branch`, interrupted with :data:`BRANCH_INTERRUPT` (one of
  :data:`INTERRUPTS`) and waited for with :func:`reap`, within its budget plus
  :data:`CHILD_GRACE_S`.
"""

from controlscope.run._api import human_reviewer, run_prepared, run_task
from controlscope.run._controller import Controller, Review, RunContext
from controlscope.run._fork import (
    BRANCH_INTERRUPT,
    CHILD_GRACE_S,
    INTERRUPTS,
    ForkPoint,
    env_unforkable,
    interruptible_branch,
    reap,
)
from controlscope.run._frozen import FROZEN_MODEL_ID, FrozenSourcePlanner, frozen_reply
from controlscope.run._hook import StopRun, TrajectoryControl, TrajectoryHook
from controlscope.run._loop import REPLACEMENT_CODE_CHARS, Ending, receipts_by_block
from controlscope.run._models import LOCAL_MAX_TOKENS, RunModels, build_models
from controlscope.run._progress import (
    ProgressCallback,
    ProgressOption,
    ProgressTracker,
    RunProgress,
    TerminalProgress,
)
from controlscope.run._replay_check import (
    REPLAYED_SETTINGS,
    check_replay,
    recorded_settings,
    recorded_start,
)
from controlscope.run._source import (
    OnceRule,
    SourceTrajectory,
    feedback_rule_of,
    local_rule_of,
    place_schedule,
    read_source,
)
from controlscope.run._spec import (
    PreparedRun,
    RunSpec,
    SpecError,
    ViewBounds,
    prepare,
    settings_condition,
)
from controlscope.run._trajectory import Observer, RunResult, run_trajectory

__all__ = [
    "BRANCH_INTERRUPT",
    "CHILD_GRACE_S",
    "FROZEN_MODEL_ID",
    "INTERRUPTS",
    "LOCAL_MAX_TOKENS",
    "REPLACEMENT_CODE_CHARS",
    "REPLAYED_SETTINGS",
    "Controller",
    "Ending",
    "ForkPoint",
    "FrozenSourcePlanner",
    "Observer",
    "OnceRule",
    "PreparedRun",
    "ProgressCallback",
    "ProgressOption",
    "ProgressTracker",
    "Review",
    "RunContext",
    "RunModels",
    "RunProgress",
    "RunResult",
    "RunSpec",
    "SourceTrajectory",
    "SpecError",
    "StopRun",
    "TerminalProgress",
    "TrajectoryControl",
    "TrajectoryHook",
    "ViewBounds",
    "build_models",
    "check_replay",
    "env_unforkable",
    "feedback_rule_of",
    "frozen_reply",
    "human_reviewer",
    "interruptible_branch",
    "local_rule_of",
    "place_schedule",
    "prepare",
    "read_source",
    "reap",
    "receipts_by_block",
    "recorded_settings",
    "recorded_start",
    "run_prepared",
    "run_task",
    "run_trajectory",
    "settings_condition",
]
