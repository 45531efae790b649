"""An experiment's frozen replays: each recorded operation a ``[[replays]]`` entry selects,
replayed at its recorded prefix by :func:`controlscope.replay.replay_operation` (paper 3.3,
6.2, C.1, C.2, Figure 3), one row each in ``OUT/replays/NAME/replays.json``.

Each operation's replay is written under ``OUT/replays/NAME/RUN_ID/opN/`` with its row
(``row.json``) last, so a resumed experiment skips the operations already replayed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from controlscope._tree import remove_tree
from controlscope.core import ChatModel
from controlscope.experiments._config import ReplayEntry
from controlscope.models import CachedModel, RequestCache
from controlscope.panel import PanelConfig, finished, read_manifest, run_dir
from controlscope.replay import ENDPOINT_KINDS, Recording, ReplayError, replay_operation
from controlscope.run import build_models

REPLAYS_FILE = "replays.json"
"""A replay entry's rows, in its folder."""

ROW_FILE = "row.json"
"""One replayed operation's row, written last in its folder."""

ROW_COLUMNS = (
    "replay",
    "panel",
    "run",
    "source_program",
    "draw",
    "operation",
    "call_index",
    "endpoint",
    "goal_reached",
    "block_finished",
    "success",
    "matched",
    "calls",
    "ok",
    "detail",
)
"""The columns of a replay row."""

_KINDS = {
    "replacements": ENDPOINT_KINDS["candidate"],
    "first_replacement": ENDPOINT_KINDS["candidate"],
    "patches": ENDPOINT_KINDS["shared_patch"],
}


def selected_operations(recording: Recording, operations: str) -> list[int]:
    """The indices of the recorded operations ``operations`` selects (``replacements``,
    ``first_replacement``, ``patches``) among the recording's reviews."""
    kinds = _KINDS[operations]
    chosen = [r.index for r in recording.reviews if r.realized.kind in kinds]
    return chosen[:1] if operations == "first_replacement" else chosen


def run_replays(
    entry: ReplayEntry, panel: Path, config: PanelConfig, folder: Path, cache: Path
) -> pd.DataFrame:
    """Replay every operation ``entry`` selects in the finished runs of ``panel``.

    Args:
        entry: the replay entry.
        panel: its panel's folder.
        config: the panel's configuration (its planner plans on after ``retained`` and
            ``shared_patch`` boundaries, through the experiment's cache).
        folder: the entry's folder (``OUT/replays/NAME``).
        cache: the experiment's exact-request cache file.

    Returns:
        One row per replayed operation (:data:`ROW_COLUMNS`), also written to
        ``folder/replays.json``. A replay that fails is a row with ``ok`` False and the reason.
    """
    plan = read_manifest(panel).plan
    rows: list[dict[str, Any]] = []
    planner: ChatModel | None = None
    for run in plan.runs:
        record = finished(panel, run.id)
        if run.scope != entry.scope or record is None or record.status != "done":
            continue
        if entry.failing_only and record.success:
            continue
        try:
            recording = Recording.load(run_dir(panel, run.id))
        except ReplayError as err:  # a run that cannot be replayed: a row saying why
            rows.append({**dict.fromkeys(ROW_COLUMNS), "replay": entry.name, "run": run.id,
                         "panel": entry.panel, "ok": False, "detail": str(err)})  # fmt: skip
            continue
        for index in selected_operations(recording, entry.operations):
            target = folder / run.id / f"op{index}"
            if (target / ROW_FILE).is_file():
                rows.append(json.loads((target / ROW_FILE).read_text(encoding="utf-8")))
                continue
            if entry.endpoint != "candidate" and planner is None:
                planner = _planner(config, cache)
            base: dict[str, Any] = {"replay": entry.name, "panel": entry.panel, "run": run.id}
            base.update(source_program=run.source_program, draw=run.draw, operation=index)
            row = _replay_one(recording, index, entry, target, planner, base)
            (target / ROW_FILE).write_text(json.dumps(row, indent=2) + "\n", encoding="utf-8")
            rows.append(row)
    table = pd.DataFrame(rows, columns=list(ROW_COLUMNS))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / REPLAYS_FILE).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return table


def _planner(config: PanelConfig, cache: Path) -> ChatModel:
    models = build_models(
        planner=config.planner.model,
        reviewer=None,
        base_url=config.planner.base_url,
        need_reviewer=False,
    )
    return CachedModel(models.planner, RequestCache(cache))


def _replay_one(
    recording: Recording,
    index: int,
    entry: ReplayEntry,
    target: Path,
    planner: ChatModel | None,
    base: dict[str, Any],
) -> dict[str, Any]:
    if target.exists():
        remove_tree(target)
    target.mkdir(parents=True)
    row: dict[str, Any] = {**dict.fromkeys(ROW_COLUMNS), **base, "endpoint": entry.endpoint}
    try:
        found = replay_operation(
            recording, index, entry.endpoint, out=target / "run", planner=planner
        )
    except ReplayError as err:
        return {**row, "ok": False, "detail": str(err)}
    first = found.runs[0]
    row.update(
        call_index=found.call_index,
        goal_reached=first.success,
        block_finished=found.block_finished,
        success=all(r.success for r in found.runs) if found.ok else None,
        matched=found.matched,
        calls=first.calls,
        ok=found.ok,
        detail=found.difference or (found.divergence.message if found.divergence else ""),
    )
    return row


def read_replays(folder: Path) -> pd.DataFrame:
    """Every replay entry's rows under ``OUT/replays`` (empty when none ran)."""
    rows: list[dict[str, Any]] = []
    for path in sorted(folder.glob(f"*/{REPLAYS_FILE}")):
        rows.extend(json.loads(path.read_text(encoding="utf-8")))
    return pd.DataFrame(rows, columns=list(ROW_COLUMNS))
