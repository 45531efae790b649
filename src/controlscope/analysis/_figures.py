"""The report's figures (matplotlib's object API drawn by Agg, PNG): the paper's Figure 2 for
a panel.

- effort: the share of units completed within k primitive calls (or actions), per condition
  (Figure 2, left);
- tokens: logged output tokens per condition, planner and reviewer, including reused
  responses (Figure 2, right).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from controlscope.analysis._tables import by_condition
from controlscope.panel import KEEP, condition_label

EFFORT_FILE = "effort.png"
"""The effort figure's file name."""

TOKENS_FILE = "tokens.png"
"""The token figure's file name."""


def _figure() -> tuple[Any, Any]:
    """A figure and its axes, drawn by Agg (matplotlib's object API: no pyplot, no display,
    nothing global)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 4.0), dpi=100)
    return fig, fig.subplots()


def _conditions(runs: pd.DataFrame, draws: int) -> list[tuple[str, pd.DataFrame]]:
    """Each condition's runs (Keep once: its runs are reused by every draw)."""
    return [
        (condition_label(scope, draw, draws), group) for scope, draw, group in by_condition(runs)
    ]


def effort(runs: pd.DataFrame) -> np.ndarray[Any, np.dtype[np.floating[Any]]]:
    """The effort of each successful run: the actions the environment counted until its goal
    (``goal_actions``, ALFWorld; paper Figure 2), else its primitive calls.

    Args:
        runs: runs with ``success`` and ``primitive_calls`` (and ``goal_actions``) columns.

    Returns:
        One number per successful run, in the table's order.
    """
    done = runs.loc[runs["success"]]
    calls = done["primitive_calls"].astype(float)
    if "goal_actions" in done:
        calls = pd.to_numeric(done["goal_actions"], errors="coerce").fillna(calls)
    return calls.to_numpy(dtype=np.float64)


def effort_figure(runs: pd.DataFrame, draws: int, budget: int, path: Path) -> Path:
    """Plot the share of units completed within each number of primitive calls, per
    condition (a unit counts once its run succeeded in at most k calls; ALFWorld counts the
    actions until the game was won, ``goal_actions``).

    Args:
        runs: the eligible runs (:func:`read_panel`'s table).
        draws: the panel's reviewer draws.
        budget: the call budget (the x axis ends there).
        path: the PNG to write.

    Returns:
        ``path``.
    """
    fig, ax = _figure()
    k = np.arange(0, budget + 1)
    for label, group in _conditions(runs, draws):
        calls = effort(group)
        share = (calls[None, :] <= k[:, None]).sum(axis=1) / max(len(group), 1) * 100.0
        style = "--" if label == KEEP else "-"
        ax.step(k, share, where="post", linestyle=style, label=label)
    ax.set_xlabel("primitive calls (k)")
    ax.set_ylabel("units completed within k calls (%)")
    ax.set_ylim(0, 100)
    ax.set_xlim(0, budget)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    return path


def tokens_figure(runs: pd.DataFrame, draws: int, path: Path) -> Path:
    """Plot logged output tokens per condition (logical totals: cached and replayed
    responses included, paper A.5), planner and reviewer stacked.

    Returns:
        ``path``.
    """
    fig, ax = _figure()
    labels, planner, reviewer = [], [], []
    for label, group in _conditions(runs, draws):
        labels.append(label)
        planner.append(float(group["planner_logical_output"].sum()))
        reviewer.append(float(group["reviewer_logical_output"].sum()))
    x = np.arange(len(labels))
    ax.bar(x, planner, label="planner")
    ax.bar(x, reviewer, bottom=planner, label="reviewer")
    ax.set_xticks(x, labels)
    ax.set_ylabel("logged output tokens")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    return path
