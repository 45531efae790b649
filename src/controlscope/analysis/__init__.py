"""Analysis of paired runs: paired differences, cluster-bootstrap intervals, goal completion.

Outcomes come as a table (a :class:`pandas.DataFrame`) with one row per paired unit: its
``unit`` id, its ``cluster`` (task category, scenario template or scene: what the bootstrap
resamples) and one boolean column per condition (terminal success).
"""

from controlscope.analysis._bootstrap import ClusterInterval, cluster_bootstrap
from controlscope.analysis._goals import GoalCompletion, goal_completion
from controlscope.analysis._paired import (
    CLUSTER,
    UNIT,
    PairedComparison,
    check_outcomes,
    paired_comparison,
)

__all__ = [
    "CLUSTER",
    "UNIT",
    "ClusterInterval",
    "GoalCompletion",
    "PairedComparison",
    "check_outcomes",
    "cluster_bootstrap",
    "goal_completion",
    "paired_comparison",
]
