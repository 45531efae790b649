"""Table 5 of an experiment: its panels' shared settings and budgets, generated from the
resolved panel configurations (paper section 4, Table 5), so the table says what ran."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from controlscope.core import escape_untrusted
from controlscope.panel import PanelConfig

SETTINGS_TABLE = "table5_settings"
"""The table's file names under ``tables/``."""

SETTINGS_TITLE = "Table 5: shared settings and budgets (from the resolved panel configurations)"

SHARED = "shared"
"""The column holding the value every panel shares (``differs`` when they do not)."""


def _settings(config: PanelConfig) -> dict[str, Any]:
    """One panel's settings and budgets, by row name (a budget left to the run's default is
    ``default``)."""
    found: dict[str, Any] = {
        "environment": config.env,
        "scopes": ", ".join(config.scopes),
        "schedule": config.schedule,
        "start": config.start,
        "reviewer draws": config.draws,
        "replace boundary": config.replace_boundary,
        "reviewer tool choice": config.reviewer.tool_choice,
        "reviewer protocol": config.reviewer.protocol,
        "reviewer view": config.reviewer.view,
        "source programs": config.source_programs,
    }
    for key, value in config.budgets.model_dump().items():
        found[f"budget {key}"] = value
    return {k: "default" if v is None else str(v) for k, v in found.items()}


def settings_table(configs: Sequence[tuple[str, PanelConfig]]) -> pd.DataFrame:
    """One row per setting, one column per panel, and :data:`SHARED` (the value when every
    panel has it, else ``differs``).

    Args:
        configs: each panel's name and resolved configuration, in the experiment's order.
    """
    columns = {name: _settings(config) for name, config in configs}
    table = pd.DataFrame(columns)
    table[SHARED] = [
        row.iloc[0] if row.nunique() == 1 else "differs" for _, row in table.iterrows()
    ]
    return table.rename_axis("setting").reset_index()


def write_settings(configs: Sequence[tuple[str, PanelConfig]], folder: Path) -> Path:
    """Write ``tables/table5_settings.md`` and ``.csv``; return the Markdown file."""
    folder.mkdir(parents=True, exist_ok=True)
    table = settings_table(configs)
    table.to_csv(folder / f"{SETTINGS_TABLE}.csv", index=False)
    shown = table.map(lambda v: escape_untrusted(str(v)).replace("|", "\\|"))
    path = folder / f"{SETTINGS_TABLE}.md"
    path.write_text(f"## {SETTINGS_TITLE}\n\n{shown.to_markdown(index=False)}\n", "utf-8")
    return path
