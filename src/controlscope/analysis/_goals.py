"""Task and scenario goal completion (paper section 5.3 and A.2, AppWorld's measures).

TGC is the share of task instances solved; SGC the share of scenario templates whose every
instance is solved (AppWorld gives three instances per template).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from controlscope.analysis._paired import CLUSTER, check_outcomes


@dataclass(frozen=True)
class GoalCompletion:
    """One condition's goal completion.

    Attributes:
        condition: the condition's column.
        tasks: task instances.
        tasks_solved: instances solved.
        tgc: ``tasks_solved / tasks`` (a share).
        scenarios: templates (the ``cluster`` column).
        scenarios_solved: templates with every instance solved.
        sgc: ``scenarios_solved / scenarios`` (a share).
    """

    condition: str
    tasks: int
    tasks_solved: int
    tgc: float
    scenarios: int
    scenarios_solved: int
    sgc: float


def goal_completion(outcomes: pd.DataFrame, condition: str) -> GoalCompletion:
    """TGC and SGC of one condition; templates are the outcome table's ``cluster`` column.

    Args:
        outcomes: one row per task instance: ``unit``, ``cluster`` (its template) and a boolean
            column per condition.
        condition: the condition's column.

    Returns:
        The condition's TGC and SGC with their counts.

    Raises:
        ValueError: see :func:`~controlscope.analysis.check_outcomes`; or no tasks.
    """
    check_outcomes(outcomes, [condition])
    if outcomes.empty:
        raise ValueError("no tasks")
    solved = outcomes[condition]
    per_template = solved.groupby(outcomes[CLUSTER]).all()
    return GoalCompletion(
        condition=condition,
        tasks=len(outcomes),
        tasks_solved=int(solved.sum()),
        tgc=float(solved.mean()),
        scenarios=len(per_template),
        scenarios_solved=int(per_template.sum()),
        sgc=float(per_template.mean()),
    )
