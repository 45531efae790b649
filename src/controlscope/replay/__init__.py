"""Prefix replay, same-state branching and frozen operation replays (paper sections 3.1, 3.3,
6.2, A.4, B.1, C.1 and C.2).

A :class:`Recording` is a recorded run read once (refused when it cannot be replayed: a schema
version this code does not replay, a truncated log, a diverged replay; :meth:`Recording.check_task`
refuses a recorded task that is not the task today, field by field, and a task whose generator
changed). One mechanism serves every use: a trajectory whose
prefix answers from the recording, every request, boundary, decision and primitive call checked
against it, up to a boundary where it records the shared state ``(h, s)`` and then

- stops: :func:`replay_prefix` (or, with no boundary, replays the whole run and compares its
  terminal files);
- goes on under a branch's condition: :func:`branch`, one branch per scope and reviewer draw,
  their first review requests identical except for the operation set (asserted and hashed);
  :func:`run_branch` runs one of them as a unit of its own (a panel's branches);
- replays a recorded operation frozen: :func:`replay_operation` with the ``candidate``,
  ``retained`` or ``shared_patch`` endpoint (the operation kinds each replays:
  :data:`ENDPOINT_KINDS`);
- goes on under a second schedule from the boundary where it first decides otherwise than the
  recorded run's: :func:`branch_at_divergence` (:func:`schedule_divergence` finds the boundary,
  :func:`check_shared_prefix` checks the shared part event by event and by hash; paper B.1,
  B.2).

Each writes ordinary run directories whose ``run_start`` names the source run, the boundary and
the prefix hash. :func:`resolve_boundary` places ``midpoint`` (B.1), ``local-rule``
(appendix B) and ``feedback-rule`` (A.3) boundaries from a recorded source trajectory.
:func:`branch` starts its branches by fork where it can (the prefix replayed once, the
trajectory paused at the boundary forked once per branch: worker, controller and a copy of the
workspace), else each by its own prefix replay (:data:`Mechanism`, :data:`MECHANISM_NOTES`).
:func:`check_branches_out` and :func:`check_operation_out` refuse an output directory that
cannot be one, cheaply, before a caller builds any model.
"""

from controlscope.replay._branch import (
    BOUNDARY_RULES,
    BRANCHES_FILE,
    MECHANISM_NOTES,
    BoundaryChoice,
    BranchResult,
    BranchSet,
    Mechanism,
    branch,
    branch_schedule,
    check_branches_out,
    resolve_boundary,
    run_branch,
)
from controlscope.replay._diverge import (
    DivergencePoint,
    SharedPrefix,
    branch_at_divergence,
    check_shared_prefix,
    schedule_divergence,
)
from controlscope.replay._fork import PREFIX_DIR
from controlscope.replay._hook import FrozenOperation, Plan, PrefixHook, PrefixMismatch
from controlscope.replay._operation import (
    ENDPOINT_KINDS,
    ENDPOINTS,
    Endpoint,
    EndpointRun,
    OperationReplay,
    check_operation_out,
    replay_operation,
)
from controlscope.replay._prefix import PrefixReplay, replay_prefix
from controlscope.replay._recording import (
    OLDEST_REPLAYABLE,
    RecordedReview,
    Recording,
    ReplayError,
)
from controlscope.replay._run import Divergence

__all__ = [
    "BOUNDARY_RULES",
    "BRANCHES_FILE",
    "ENDPOINTS",
    "ENDPOINT_KINDS",
    "MECHANISM_NOTES",
    "OLDEST_REPLAYABLE",
    "PREFIX_DIR",
    "BoundaryChoice",
    "BranchResult",
    "BranchSet",
    "Divergence",
    "DivergencePoint",
    "Endpoint",
    "EndpointRun",
    "FrozenOperation",
    "Mechanism",
    "OperationReplay",
    "Plan",
    "PrefixHook",
    "PrefixMismatch",
    "PrefixReplay",
    "RecordedReview",
    "Recording",
    "ReplayError",
    "SharedPrefix",
    "branch",
    "branch_at_divergence",
    "branch_schedule",
    "check_branches_out",
    "check_operation_out",
    "check_shared_prefix",
    "replay_operation",
    "replay_prefix",
    "resolve_boundary",
    "run_branch",
    "schedule_divergence",
]
