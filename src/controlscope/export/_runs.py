"""The runs a directory holds: one run (``controlscope run``, an executor's session) or the
runs of a panel folder, with the panel's plan entry for each."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from controlscope.core import EVENTS_FILE
from controlscope.panel import MANIFEST_FILE, PanelError, PlannedRun, read_manifest, run_dir


class ExportError(ValueError):
    """What was asked to be exported cannot be (one line): not a run or a panel folder, an
    unreadable log, an output that cannot be written."""


@dataclass(frozen=True)
class FoundRuns:
    """The runs of a run directory or a panel folder.

    Attributes:
        name: the folder's name (the Inspect log's task name).
        runs: (run directory, the panel's plan entry or None for a lone run), in plan order.
        missing: the panel's runs that left no log, by id, with why.
        panel: whether the folder is a panel's.
    """

    name: str
    runs: list[tuple[Path, PlannedRun | None]]
    missing: dict[str, str]
    panel: bool


def find_runs(path: Path) -> FoundRuns:
    """The runs ``path`` holds.

    Args:
        path: a run directory (``events.jsonl``; an executor's session is one) or a panel
            folder (``panel.json``).

    Raises:
        ExportError: ``path`` is not a directory, neither kind of folder, or a panel folder
            whose manifest cannot be read.
    """
    if not path.is_dir():
        raise ExportError(f"{path} is not a directory (give a run directory or a panel folder)")
    name = path.resolve().name or "controlscope"
    if (path / MANIFEST_FILE).exists():
        try:
            manifest = read_manifest(path)
        except PanelError as err:
            raise ExportError(str(err)) from None
        runs: list[tuple[Path, PlannedRun | None]] = []
        missing: dict[str, str] = {}
        for planned in manifest.plan.runs:
            directory = run_dir(path, planned.id)
            if (directory / EVENTS_FILE).is_file():
                runs.append((directory, planned))
            else:
                missing[planned.id] = f"no {EVENTS_FILE} (the run has not run or wrote no log)"
        return FoundRuns(name, runs, missing, panel=True)
    if (path / EVENTS_FILE).is_file():
        return FoundRuns(name, [(path, None)], {}, panel=False)
    raise ExportError(
        f"{path} is neither a run directory (no {EVENTS_FILE}) nor a panel folder "
        f"(no {MANIFEST_FILE})"
    )
