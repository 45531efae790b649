"""The trajectory and branch viewer in the browser (``controlscope view``).

It only reads: a run's log (``events.jsonl``, through :func:`controlscope.record.iter_events`),
a branch set's ``branches.json``, run summaries. A run's page shows its planning turns, blocks
and boundaries and, at each boundary, what the reviewer was shown exactly as sent, its proposal,
the validation, the realized operation, the arguments before and after, a code diff of a
block-data edit or a replacement, the primitive call and its observation, printed output,
budgets used and tokens by role (paper 3.1, 3.3, A.3, A.5). A branch set's page puts the branches
of one state side by side from their shared prefix and marks the first call where their traces
differ (paper 3.1, A.4). A live run's page refreshes when its log grows. ``docs/architecture.md``
places it in the data flow.

Public API::

    from controlscope import view
    view.serve("runs/demo")                      # until Ctrl-C; prints the URL
    with view.ViewServer("runs/demo") as server:  # in the background
        print(server.url)
    view.export("runs/demo", "site")             # static files: site/index.html
"""

from controlscope.view._app import build_app, is_loopback
from controlscope.view._branches import BranchColumn, BranchesPage, TraceRow, read_branches
from controlscope.view._changes import ArgumentChange, DiffLine, argument_changes, code_diff
from controlscope.view._export import export
from controlscope.view._folders import DETECTORS, Target, TargetKind, ViewError, find_target
from controlscope.view._serve import DEFAULT_HOST, ViewServer, serve
from controlscope.view._timeline import (
    BlockView,
    BoundaryView,
    BudgetUse,
    NoteView,
    PlannerCall,
    RunPage,
    TurnView,
    read_run,
)

__all__ = [
    "DEFAULT_HOST",
    "DETECTORS",
    "ArgumentChange",
    "BlockView",
    "BoundaryView",
    "BranchColumn",
    "BranchesPage",
    "BudgetUse",
    "DiffLine",
    "NoteView",
    "PlannerCall",
    "RunPage",
    "Target",
    "TargetKind",
    "TraceRow",
    "TurnView",
    "ViewError",
    "ViewServer",
    "argument_changes",
    "build_app",
    "code_diff",
    "export",
    "find_target",
    "is_loopback",
    "read_branches",
    "read_run",
    "serve",
]
