"""What the embedded model does in the main job and as a planner: functions other benchmarks
import (``benchmarks/embedded_review.py``), and a command that prints them.

- :func:`programs_2plus_calls_ratio`: over the first ``tasks`` python-allowed filesystem tasks
  and ``samples`` source programs each (P1, P2...: the planner's draw), the share of the
  planner's source programs (its first reply, run alone: one planning turn, Keep) that made two
  or more primitive calls. The full measure is 20 tasks x 2 samples (40 planner requests of
  up to 1,024 tokens: tens of minutes on 2 cores); a smaller ``tasks`` gives a quick estimate.
- :func:`demo_non_ties`: the paired units of the main job's panel (``scripts/demo.toml``)
  whose Arg or Full outcome differs from Keep's; :func:`demo_minutes`: that panel's wall
  minutes after set-up (the weights loaded by the panel itself included). Both read one run of
  the panel, made once per process (:func:`run_demo`) unless a finished panel folder is given.

``python benchmarks/_embedded_demo.py [--tasks N] [--samples S] [--demo-only]`` prints one JSON
object as its last line.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "scripts" / "demo.toml"


@dataclass(frozen=True)
class DemoRun:
    """One run of the main job's panel.

    Attributes:
        panel: its folder.
        minutes: its wall minutes (None: a folder given, not timed here).
    """

    panel: Path
    minutes: float | None


@functools.cache
def run_demo() -> DemoRun:
    """Run the main job's panel once (per process) into a temporary folder, timed."""
    from controlscope.panel import load_config, run_panel

    folder = Path(tempfile.mkdtemp(prefix="cs-demo-bench-")) / "demo"
    started = time.monotonic()
    run_panel(load_config(DEMO), folder)
    return DemoRun(folder, (time.monotonic() - started) / 60)


def demo_non_ties(panel: Path | None = None) -> int:
    """Paired units of the main job's panel whose Arg or Full outcome differs from Keep's.

    Args:
        panel: a finished demo panel folder; None runs the panel (once per process).
    """
    from controlscope.analysis import report

    built = report(panel or run_demo().panel, write=False)
    return len({p.unit for p in built.pairs if p.difference not in (0, None)})


def demo_minutes(panel: Path | None = None) -> float | None:
    """The main job's panel in wall minutes (None for a panel folder given, not run here)."""
    return run_demo().minutes if panel is None else None


def programs_2plus_calls_ratio(
    tasks: int = 20, samples: int = 2, model: str = "local", **settings: Any
) -> float:
    """The share of source programs with two or more primitive calls (see the module).

    Args:
        tasks: how many python-allowed filesystem tasks, in the environment's order (20: all).
        samples: source programs per task (P1 = draw 0, P2 = draw 1...).
        model: the planner's model spec.
        settings: further run settings for every run (e.g. a planner option).

    Returns:
        Programs with at least two calls over programs sampled.
    """
    import controlscope as cs
    from controlscope.envs import get_environment

    env = get_environment("filesystem")
    chosen = [t.id for t in env.tasks() if t.python_allowed][:tasks]
    scratch = Path(tempfile.mkdtemp(prefix="cs-programs-bench-"))
    multi = total = 0
    try:
        for task in chosen:
            for draw in range(samples):
                spec = cs.RunSpec(
                    task=task,
                    model=model,
                    scope="keep",
                    schedule="never",
                    source_program=draw,
                    max_turns=1,  # the source program alone: the planner's first reply
                    out=scratch / f"{task.replace('/', '_')}-p{draw}",
                    **settings,
                )
                result = cs.run_task(spec)
                total += 1
                multi += result.summary.primitive_calls >= 2
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return multi / total if total else 0.0


def main() -> None:
    """Measure and print one JSON object (the last line)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--demo-only", action="store_true")
    args = parser.parse_args()
    out: dict[str, Any] = {"demo_non_ties": demo_non_ties(), "demo_minutes": demo_minutes()}
    if not args.demo_only:
        out["programs_2plus_calls_ratio"] = programs_2plus_calls_ratio(args.tasks, args.samples)
        out["programs_measured"] = args.tasks * args.samples
    print(json.dumps(out))


if __name__ == "__main__":
    main()
