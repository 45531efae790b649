"""The paper's experiments at quick size (paper sections 4-6; ``controlscope experiment``).

* ``experiments``, ``completed``, ``tables_written``: every packaged experiment run at quick
  size with scripted models (model-free: a scripted planner whose program works on the
  filesystem's split task, and answers "Done." elsewhere; a scripted reviewer that keeps,
  patches, then replaces; the experiments whose diagnostics need another operation get their
  own, :data:`OWN_SCRIPTS`: Table 6's reviewer patches, the file-organisation and student
  confirmations' replaces first), each into a fresh folder; completed when every run of every panel
  finished and every table was written. Target: every experiment completed.
* ``cells_checked``, ``cells_wrong``, ``undefined_cells``: every determined cell (successes,
  paired wins/losses/ties and differences within a panel and across two, activations, sums of
  the runs' counts and tokens) computed again from the panel folders' files alone
  (``_cells_check.py``, no analysis code) and compared with the published tables; an ``n/a``
  where a value is defined is an undefined cell. Targets: at least 150 checked, 0 wrong, 0
  undefined (the wrong and undefined ones are printed).
* ``paper_numbers_checked``, ``paper_numbers_wrong``: every paper value holding a number in
  each experiment's ``paper-vs-ours.md`` checked against the reading of the paper the
  experiments were built from (``paper-experiments.md`` in ``shared/`` beside the repository,
  or ``--paper FILE``; read at run time, never copied into the repository): found when one of
  its lines holds every number of the value (``_paper_check.py``). Target: 0 wrong (printed).
  Without the file both are null and the reason is printed.
* ``diagnostics``: the paper's diagnostic tables that ran (written, no cell ``n/a`` where the
  cell check defines one): B.1's within-scope change, B.2's protected-vs-continuous W/L/T,
  A.3's code-only-vs-feedback pairing, A.4's matched-interface check, C.2's retained-first
  replays, M11's frozen batch-read comparison, the workload exploration, C.1's two-label
  replay of Table 6's Full argument patches, Table 5 (settings and budgets), the derived cost
  cells (5.2's, 6.1's and 7's; scripted models log no tokens, so their token cells are
  ``n/a`` with that reason at this size), the AppWorld V1 accounting (on our app world);
  ``diagnostics_missing`` names the paper's diagnostics no experiment produces yet.
* ``quick_minutes_local`` (with ``--local NAME``): that experiment at quick size on the embedded
  model (every role), wall minutes. Target: at most 30 (the experiment's header states it).

ALFWorld's games (Table 7) come from ``$ALFWORLD_DATA``, else from the published tarball in
``shared/alfworld/`` beside the repository, unpacked into the run's temporary folder; without
either, Table 7 stops with the environment's message. AppWorld's data (``table2_appworld``) is
not available offline: that experiment stops likewise.

Usage: ``python benchmarks/experiments_quick.py [--local NAME] [--model SPEC] [--paper FILE]``.
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import tarfile
import tempfile
import time
from pathlib import Path

from _cells_check import Tally, check
from _paper_check import PaperTally, check_paper, reading_lines
from analysis import PROGRAM as SPLIT  # the split task's program, wrongly named parts
from controlscope import experiments as ce

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO.parent / "shared" / "paper-experiments.md"
"""The reading of the paper beside the repository (``--paper`` names another)."""

ALFWORLD_TARBALL = REPO.parent / "shared" / "alfworld" / "json_2.1.1_valid.tar.gz"
"""The published ALFWorld evaluation splits beside the repository (where the tests find them)."""


def alfworld_data(tmp: Path) -> None:
    """Without ``$ALFWORLD_DATA``, unpack :data:`ALFWORLD_TARBALL` (when it is there) into
    ``tmp`` and point ``$ALFWORLD_DATA`` at it, so that Table 7 runs too."""
    if os.environ.get("ALFWORLD_DATA") or not ALFWORLD_TARBALL.is_file():
        return
    target = tmp / "alfworld-data"
    with tarfile.open(ALFWORLD_TARBALL) as archive:
        archive.extractall(target, filter="data")
    os.environ["ALFWORLD_DATA"] = str(target)


DIAGNOSTICS = {
    "B.1 within-scope change": ("table4_midpoint", "table4_within"),
    "B.2 protection W/L/T": ("protection_five_calls", "protection_paired"),
    "A.3 code-only vs feedback": ("feedback_visibility", "feedback_paired"),
    "A.4 matched interface": ("table1_sustained", "table1_matched"),
    "C.2 retained first": ("file_organisation", "retained_first"),
    "M11 frozen batch read": ("table3_students", "batch_read"),
    "5.2 workload exploration": ("table3_students", "workload_exploration"),
    "C.1 two-label replay of Full patches": ("table6_local", "table6_shared_patch"),
    "Table 5 shared settings and budgets": ("table1_sustained", "table5_settings"),
    "5.2 derived cost and workload cells": ("table7_alfworld", "table7_derived"),
    "6.1 Full vs Arg output change": ("table3_students", "table3_output_change"),
    "7 protected output change": ("protection_five_calls", "protection_output_change"),
    "AppWorld V1 accounting": ("table2_apps_v1", "table2_accounting"),
}
"""The paper's diagnostics an experiment produces: name -> (experiment, table)."""

MISSING_DIAGNOSTICS = (
    "C.1 argument-only shortcut",
    "M11 parser-repair case",
    "24-task supplementary record",
)
"""The paper's diagnostics no experiment produces yet."""

REST = """
for i in range(1, 5):
    write_file(path=f"/workspace/split/part_{i + 1:02d}.txt", content="x\\n")
"""
REVIEWS = [
    {"reason": "fine", "operation": "keep"},
    {
        "reason": "the parts are named part_NN",
        "operation": "patch_arguments",
        "arguments": {"path": "/workspace/split/part_01.txt"},
    },
    {"reason": "fix the names", "operation": "replace_workflow", "code": REST},
]


LISTING = """
found = list_directory(path="/workspace")
again = list_directory(path="/workspace")
"""
"""A read block of two module-level calls: the local rule's boundary is its second call
(paper appendix B) on every filesystem task."""

REPLACE_FIRST = [{"reason": "look first", "operation": "replace_workflow", "code": LISTING}]
"""A reviewer whose first review replaces the workflow (C.2's and M11's retained first
replacement need one), then keeps."""

OWN_SCRIPTS: dict[str, tuple[str | None, list[dict[str, object]]]] = {
    "table6_local": (
        LISTING,
        [
            {
                "reason": "same folder",
                "operation": "patch_arguments",
                "arguments": {"path": "/workspace/"},
            }
        ],
    ),
    "file_organisation": (LISTING, REPLACE_FIRST),
    "table3_students": (LISTING, REPLACE_FIRST),
}
"""Experiments whose diagnostics need other operations than :data:`REVIEWS` gives them:
name -> (the planner's program, None: :data:`SPLIT`; the reviews before it keeps). Table 6's
one review per branch patches the listing's path (C.1's two-label replay of Full argument
patches needs one); the file-organisation and student confirmations replace at the first
review (C.2's and M11's replays retain the first replacement)."""


def scripted(folder: Path, env: str, name: str = "") -> dict[str, str]:
    """Scripted models for experiment ``name`` of environment ``env``."""
    code, reviews = OWN_SCRIPTS.get(name, (None, REVIEWS))
    program = f"```python\n{code or SPLIT}\n```" if env == "filesystem" else "Done."
    planner = folder / "planner.json"
    planner.write_text(json.dumps({"by": "turn", "answers": [program, "Done.", "Done."]}))
    reviewer = folder / "reviewer.json"
    keep = json.dumps(REVIEWS[0])
    reviewer.write_text(json.dumps([json.dumps(r) for r in reviews] + [keep] * 200))
    return {"planner": f"scripted:{planner}", "*": f"scripted:{reviewer}"}


def run_one(
    name: str, folder: Path, models: dict[str, str] | None, tally: Tally | None = None
) -> tuple[bool, int, float]:
    """Run one experiment; (completed, tables written, wall seconds). With ``tally``, its
    cells are checked into it (:func:`check`)."""
    experiment = ce.load_experiment(name)
    env = str(experiment.base.get("env", "filesystem")).partition(":")[0]
    chosen = models if models is not None else scripted(folder, env, name)
    started = time.monotonic()
    try:
        result = ce.run_experiment(experiment, folder / "out", models=chosen)
    except ce.ExperimentError as err:
        print(f"{name}: {err}")
        return False, 0, time.monotonic() - started
    seconds = time.monotonic() - started
    names = {t.name for t in experiment.tables}  # Table 5 (settings) is written besides
    written = sum(
        p.is_file() and p.with_suffix(".csv").is_file()
        for n, p in result.tables.items()
        if n in names
    )
    done = result.complete and written == len(experiment.tables)
    print(f"{name}: {'completed' if done else 'incomplete'}, {written} tables, {seconds:.1f} s")
    if tally is not None and written == len(experiment.tables):
        found = check(experiment, folder / "out")
        tally.checked += found.checked
        tally.wrong += found.wrong
        tally.undefined += found.undefined
        for line in found.wrong + found.undefined:
            print(f"  {line}")
    return done, written, seconds


def diagnostics_run(out: Path, name: str) -> list[str]:
    """The :data:`DIAGNOSTICS` of experiment ``name`` whose table was written with at least
    one computed cell (not ``n/a``) in ``out``."""
    found = []
    for diagnostic, (experiment, table) in DIAGNOSTICS.items():
        path = out / "tables" / f"{table}.csv"
        if experiment != name or not path.is_file():
            continue
        rows = list(csv.reader(path.read_text(encoding="utf-8").splitlines()))[1:]
        if any(cell and cell != "n/a" for row in rows for cell in row[1:]):
            found.append(diagnostic)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local", default=None, metavar="NAME", help="run NAME on the model")
    parser.add_argument("--model", default="local", help="the model of --local (default: local)")
    parser.add_argument("--paper", type=Path, default=PAPER, help="the paper's reading")
    args = parser.parse_args()
    try:
        reading = reading_lines(args.paper)
    except OSError as err:
        print(f"paper numbers not checked: {err}")
        reading = None
    names = ce.known_names()
    completed = tables = 0
    tally, paper, ran = Tally(), PaperTally(), []
    with tempfile.TemporaryDirectory(prefix="experiments-quick-") as tmp:
        alfworld_data(Path(tmp))
        for name in names:
            folder = Path(tmp) / name
            folder.mkdir()
            done, written, _ = run_one(name, folder, None, tally)
            completed += done
            tables += written
            versus = folder / "out" / "paper-vs-ours.md"
            if reading is not None and versus.is_file():
                before = len(paper.wrong)
                check_paper(versus, reading, paper, name)
                for line in paper.wrong[before:]:
                    print(f"  paper number not in the reading: {line}")
            ran += diagnostics_run(folder / "out", name)
        result: dict[str, object] = {
            "experiments": len(names),
            "completed": completed,
            "tables_written": tables,
            "cells_checked": tally.checked,
            "cells_wrong": len(tally.wrong),
            "undefined_cells": len(tally.undefined),
            "paper_numbers_checked": paper.checked if reading is not None else None,
            "paper_numbers_wrong": len(paper.wrong) if reading is not None else None,
            "diagnostics": len(ran),
            "diagnostics_run": ran,
            "diagnostics_missing": [d for d in DIAGNOSTICS if d not in ran]
            + list(MISSING_DIAGNOSTICS),
        }
        if args.local is not None:
            folder = Path(tmp) / f"local-{args.local}"
            folder.mkdir()
            _, _, seconds = run_one(args.local, folder, {"*": args.model})
            result["quick_minutes_local"] = round(seconds / 60.0, 1)
            result["local_experiment"] = args.local
    print(json.dumps(result))


if __name__ == "__main__":
    main()
