"""The report's figures (matplotlib's object API drawn by Agg, PNG): the paper's Figure 2 for
a panel.

- effort: the share of units completed within k primitive calls (or actions), per condition
  (Figure 2, left);
- tokens: logged output tokens per condition, planner and reviewer, including reused
  responses (Figure 2, right).

Each stands alone in a paper: a title with n, labelled axes, and a note when its lines or bars
say nothing (every line flat, no token logged). ``*_png`` give the bytes (the viewer shows
them inline); ``*_figure`` write them to a file.
"""

from __future__ import annotations

import io
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

    fig = Figure(figsize=(6.4, 4.4), dpi=100)
    return fig, fig.subplots()


def _png(fig: Any) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def _note(ax: Any, text: str) -> None:
    """A note in the middle of the axes (why the lines or bars say little)."""
    ax.text(
        0.5,
        0.5,
        text,
        transform=ax.transAxes,
        ha="center",
        va="center",
        wrap=True,
        fontsize=9,
        bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.9},
    )


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
    """Write :func:`effort_png` to ``path`` (PNG) and return ``path``."""
    path.write_bytes(effort_png(runs, draws, budget))
    return path


def effort_png(runs: pd.DataFrame, draws: int, budget: int) -> bytes:
    """The share of units completed within each number of primitive calls, per condition (a
    unit counts once its run succeeded in at most k calls; ALFWorld counts the actions until
    the game was won, ``goal_actions``), as a PNG that stands alone: a title with the number
    of units, each condition's n in the legend, labelled axes, and a note when every line is
    flat.

    Args:
        runs: the eligible runs (:func:`read_panel`'s table).
        draws: the panel's reviewer draws.
        budget: the call budget (the x axis ends there).

    Returns:
        The PNG's bytes.
    """
    return _png(effort_chart(runs, draws, budget))


def effort_chart(runs: pd.DataFrame, draws: int, budget: int) -> Any:
    """The figure :func:`effort_png` draws (a :class:`matplotlib.figure.Figure`)."""
    fig, ax = _figure()
    k = np.arange(0, budget + 1)
    flat, units = True, 0
    for label, group in _conditions(runs, draws):
        calls = effort(group)
        share = (calls[None, :] <= k[:, None]).sum(axis=1) / max(len(group), 1) * 100.0
        flat = flat and bool(np.all(share == share[0]))
        units = max(units, len(group))
        style = "--" if label == KEEP else "-"
        ax.step(k, share, where="post", linestyle=style, label=f"{label} (n={len(group)})")
    ax.set_title(f"Units completed within k primitive calls (n = {units} per condition)")
    ax.set_xlabel("primitive calls (k)")
    ax.set_ylabel("units completed within k calls (%)")
    ax.set_ylim(-2, 102)  # a line at 0% or 100% stays visible
    ax.set_xlim(0, budget)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    if flat:
        _note(ax, _flat_note(runs))
    return fig


def _flat_note(runs: pd.DataFrame) -> str:
    """Why every line of the effort figure is flat."""
    if not runs["success"].any():
        return "Every line is flat at 0%: no run of any condition succeeded."
    return "Every line is flat: each condition completes the same share at every k."


def tokens_figure(runs: pd.DataFrame, draws: int, path: Path) -> Path:
    """Write :func:`tokens_png` to ``path`` (PNG) and return ``path``."""
    path.write_bytes(tokens_png(runs, draws))
    return path


def tokens_png(runs: pd.DataFrame, draws: int) -> bytes:
    """Logged output tokens per condition (logical totals: cached and replayed responses
    included, paper A.5), planner and reviewer stacked, as a PNG that stands alone (a title
    with the number of runs, labelled axes, a note when no token was logged).

    Args:
        runs: the eligible runs (:func:`read_panel`'s table).
        draws: the panel's reviewer draws.

    Returns:
        The PNG's bytes.
    """
    return _png(tokens_chart(runs, draws))


def tokens_chart(runs: pd.DataFrame, draws: int) -> Any:
    """The figure :func:`tokens_png` draws (a :class:`matplotlib.figure.Figure`)."""
    fig, ax = _figure()
    labels, planner, reviewer = [], [], []
    for label, group in _conditions(runs, draws):
        labels.append(f"{label}\n(n={len(group)})")
        planner.append(float(group["planner_logical_output"].sum()))
        reviewer.append(float(group["reviewer_logical_output"].sum()))
    x = np.arange(len(labels))
    ax.bar(x, planner, label="planner")
    ax.bar(x, reviewer, bottom=planner, label="reviewer")
    ax.set_xticks(x, labels)
    ax.set_title(f"Logged output tokens per condition ({len(runs)} runs; cached included)")
    ax.set_xlabel("condition (n = runs)")
    ax.set_ylabel("logged output tokens")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    if not any(planner) and not any(reviewer):
        _note(ax, "No output tokens were logged in any condition.")
    return fig
