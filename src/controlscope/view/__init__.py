"""The trajectory, branch and panel viewer in the browser (``controlscope view``).

It only reads: a run's log (``events.jsonl``, through :func:`controlscope.record.iter_events`),
a branch set's ``branches.json``, a panel's manifest and run records, run summaries. A run's page
shows its planning turns, blocks and boundaries and, at each boundary, what the reviewer was
shown exactly as sent, its proposal, the validation, the realized operation, the arguments
before and after, a code diff of a block-data edit or a replacement, the primitive call and its
observation, printed output, budgets used and tokens by role (paper 3.1, 3.3, A.3, A.5); a long
log is shown in pages. A branch set's page, and a panel unit's, puts runs of one state side by
side from their shared prefix and marks the first call where their traces differ (paper 3.1,
A.4). A panel's page shows its report's tables (:func:`controlscope.analysis.report`) with every
cell linked to the runs it counts, and its units (paper 3.2, 5.1). A live run's or panel's page
refreshes as it is written. ``docs/architecture.md`` places it in the data flow.

Public API::

    from controlscope import view
    view.serve("runs/demo")                      # until Ctrl-C; prints the URL
    with view.ViewServer("runs/demo") as server:  # in the background
        print(server.url)
    view.export("runs/demo", "site")             # static files: site/index.html
    view.serve("panels/demo")                    # a panel: its report's tables, its units
"""

from controlscope.view._app import build_app, is_loopback
from controlscope.view._branches import (
    BranchColumn,
    BranchesPage,
    TraceRow,
    read_branches,
    side_by_side,
)
from controlscope.view._changes import ArgumentChange, DiffLine, argument_changes, code_diff
from controlscope.view._export import export
from controlscope.view._folders import DETECTORS, Target, TargetKind, ViewError, find_target
from controlscope.view._panel import (
    PanelPage,
    RunCell,
    TableCell,
    TableView,
    UnitRow,
    read_panel_page,
)
from controlscope.view._serve import DEFAULT_HOST, ViewServer, listen_on, serve
from controlscope.view._timeline import (
    BlockView,
    BoundaryView,
    BudgetUse,
    NoteView,
    PageSpan,
    PlannerCall,
    RunPage,
    TurnView,
    iter_run_pages,
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
    "PageSpan",
    "PanelPage",
    "PlannerCall",
    "RunCell",
    "RunPage",
    "TableCell",
    "TableView",
    "Target",
    "TargetKind",
    "TraceRow",
    "TurnView",
    "UnitRow",
    "ViewError",
    "ViewServer",
    "argument_changes",
    "build_app",
    "code_diff",
    "export",
    "find_target",
    "is_loopback",
    "iter_run_pages",
    "listen_on",
    "read_branches",
    "read_panel_page",
    "read_run",
    "serve",
    "side_by_side",
]
