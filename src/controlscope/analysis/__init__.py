"""Analysis of paired runs: paired differences, cluster-bootstrap intervals, goal completion,
and a panel's report.

Outcomes come as a table (a :class:`pandas.DataFrame`) with one row per paired unit: its
``unit`` id, its ``cluster`` (task category, scenario template or scene: what the bootstrap
resamples) and one boolean column per condition (terminal success).

:func:`report` reads a panel folder (:func:`read_panel`: every planned run, the missing and
corrupt ones counted as missing in the denominators) and builds the tables (successes per
condition, the paper's Table 1, paired differences with intervals, resources, TGC/SGC) and
figures (the paper's Figure 2) that ``controlscope report`` writes, with one sentence per
condition on what its reviewers did (``Report.reviewers``); :func:`report_cells` gives the runs
behind each cell of those tables (what the viewer links a cell to).
"""

from controlscope.analysis._bootstrap import ClusterInterval, cluster_bootstrap
from controlscope.analysis._cells import CellRuns, report_cells
from controlscope.analysis._decisions import PairedOutcome, paired_outcomes
from controlscope.analysis._figures import (
    EFFORT_FILE,
    TOKENS_FILE,
    effort,
    effort_chart,
    effort_figure,
    effort_png,
    tokens_chart,
    tokens_figure,
    tokens_png,
)
from controlscope.analysis._goals import GoalCompletion, goal_completion
from controlscope.analysis._paired import (
    CLUSTER,
    UNIT,
    PairedComparison,
    check_outcomes,
    paired_comparison,
)
from controlscope.analysis._records import PanelRuns, read_panel
from controlscope.analysis._report import (
    REPORT_DIR,
    TABLE_TITLES,
    Report,
    ReportFormat,
    frozen_sources,
    pair_lines,
    report,
    write_report,
)
from controlscope.analysis._tables import outcomes

__all__ = [
    "CLUSTER",
    "EFFORT_FILE",
    "REPORT_DIR",
    "TABLE_TITLES",
    "TOKENS_FILE",
    "UNIT",
    "CellRuns",
    "ClusterInterval",
    "GoalCompletion",
    "PairedComparison",
    "PairedOutcome",
    "PanelRuns",
    "Report",
    "ReportFormat",
    "check_outcomes",
    "cluster_bootstrap",
    "effort",
    "effort_chart",
    "effort_figure",
    "effort_png",
    "frozen_sources",
    "goal_completion",
    "outcomes",
    "pair_lines",
    "paired_comparison",
    "paired_outcomes",
    "read_panel",
    "report",
    "report_cells",
    "tokens_chart",
    "tokens_figure",
    "tokens_png",
    "write_report",
]
