"""The paper's experiments at quick size (paper sections 4-6; ``controlscope experiment``).

* ``experiments``, ``completed``, ``tables_written``: every packaged experiment run at quick
  size with scripted models (model-free: a scripted planner whose program works on the
  filesystem's split task, and answers "Done." elsewhere; a scripted reviewer that keeps,
  patches, then replaces), each into a fresh folder; completed when every run of every panel
  finished and every table was written. Target: every experiment completed.
* ``cells_checked``, ``cells_wrong``, ``undefined_cells``: every determined cell (successes,
  paired wins/losses/ties and differences within a panel and across two, activations, sums of
  the runs' counts and tokens) computed again from the panel folders' files alone
  (``_cells_check.py``, no analysis code) and compared with the published tables; an ``n/a``
  where a value is defined is an undefined cell. Targets: at least 150 checked, 0 wrong, 0
  undefined (the wrong and undefined ones are printed).
* ``quick_minutes_local`` (with ``--local NAME``): that experiment at quick size on the embedded
  model (every role), wall minutes. Target: at most 30 (the experiment's header states it).

Usage: ``python benchmarks/experiments_quick.py [--local NAME] [--model SPEC]``. The last line
printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _cells_check import Tally, check
from analysis import PROGRAM as SPLIT  # the split task's program, wrongly named parts
from controlscope import experiments as ce

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


def scripted(folder: Path, env: str) -> dict[str, str]:
    """Scripted models for an experiment of environment ``env``."""
    program = f"```python\n{SPLIT}\n```" if env == "filesystem" else "Done."
    planner = folder / "planner.json"
    planner.write_text(json.dumps({"by": "turn", "answers": [program, "Done.", "Done."]}))
    reviewer = folder / "reviewer.json"
    keep = json.dumps(REVIEWS[0])
    reviewer.write_text(json.dumps([json.dumps(r) for r in REVIEWS] + [keep] * 200))
    return {"planner": f"scripted:{planner}", "*": f"scripted:{reviewer}"}


def run_one(
    name: str, folder: Path, models: dict[str, str] | None, tally: Tally | None = None
) -> tuple[bool, int, float]:
    """Run one experiment; (completed, tables written, wall seconds). With ``tally``, its
    cells are checked into it (:func:`check`)."""
    experiment = ce.load_experiment(name)
    env = str(experiment.base.get("env", "filesystem")).partition(":")[0]
    chosen = models if models is not None else scripted(folder, env)
    started = time.monotonic()
    try:
        result = ce.run_experiment(experiment, folder / "out", models=chosen)
    except ce.ExperimentError as err:
        print(f"{name}: {err}")
        return False, 0, time.monotonic() - started
    seconds = time.monotonic() - started
    written = sum(p.is_file() and p.with_suffix(".csv").is_file() for p in result.tables.values())
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local", default=None, metavar="NAME", help="run NAME on the model")
    parser.add_argument("--model", default="local", help="the model of --local (default: local)")
    args = parser.parse_args()
    names = ce.known_names()
    completed = tables = 0
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="experiments-quick-") as tmp:
        for name in names:
            folder = Path(tmp) / name
            folder.mkdir()
            done, written, _ = run_one(name, folder, None, tally)
            completed += done
            tables += written
        result: dict[str, object] = {
            "experiments": len(names),
            "completed": completed,
            "tables_written": tables,
            "cells_checked": tally.checked,
            "cells_wrong": len(tally.wrong),
            "undefined_cells": len(tally.undefined),
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
