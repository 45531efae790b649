"""What the schedule grammar answers, for the golden fixture ``fixtures/schedules_v1.json``:
canonical names (recorded in logs, panel manifests and experiment hashes), the schedules each
spec builds (their reviews on fixed trajectories), source placement, a branch's schedules, and
the words of every refusal. They must not change.

``python tests/_schedules_golden.py`` rewrites the fixture from the code in ``PYTHONPATH``;
``tests/test_schedule.py`` checks the code against it.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controlscope.core import Boundary, CallSite, Keep, Operation, PatchArguments, ReplaceWorkflow
from controlscope.replay import ReplayError, branch_schedule
from controlscope.schedule import (
    BRANCH_SCHEDULE_FORMS,
    SCHEDULE_FORMS,
    Schedule,
    ScheduleContext,
    needs_source,
    parse_schedule,
    place_from_source,
    schedule_name,
)

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "schedules_v1.json"

WRITE_TOOLS = frozenset({"write_file"})
READ_TOOLS = frozenset({"read_text_file"})

SPECS = [
    # the forms, bare and with arguments
    "never",
    "continuous",
    "every_boundary",
    "per_block",
    "once:0",
    "once:3",
    "once_online",
    "midpoint:0",
    "midpoint:1",
    "midpoint:9",
    "midpoint:40",
    "protect:0",
    "protect:5",
    "retain_first",
    "once",
    "midpoint",
    # spelling the grammar tolerates
    " once:3 ",
    "once:03",
    "once:+1",
    "protect: 2",
    "once:1_0",
    "per_block + protect:2",
    "continuous:",
    "never:",
    # modifiers and compositions
    "continuous+protect:5",
    "continuous+retain_first",
    "per_block+protect:5",
    "per_block+retain_first",
    "every_boundary+protect:2",
    "never+protect:1",
    "once_online+continuous",
    "once:3+protect:2",
    "once:3+continuous",
    "midpoint:40+continuous",
    "midpoint:40+continuous+protect:3",
    "midpoint:40+continuous+retain_first",
    "once:4+continuous+protect:2+retain_first",
    "protect:2+retain_first",
    "retain_first+protect:2",
    "protect:1+protect:2",
    "continuous+continuous",
    "retain_first+continuous",
    "once+continuous",
    "midpoint+continuous",
    "once+protect:2",
    "midpoint+protect:3",
    "once+continuous+retain_first",
    "per_block+once",
    # the annotations' schedule (no tool here gives annotations: every call counts)
    "destructive",
    "destructive+protect:2",
    "destructive+retain_first",
    "continuous+destructive",
    "per_block+destructive",
    "midpoint:40+destructive",
    "destructive+continuous",
    "destructive+destructive",
    "destructive:1",
    "Destructive",
    "destructive+per_block",
    "destructive+",
    # refused
    "",
    " ",
    "+",
    "per_block+",
    "+per_block",
    "sometimes",
    "Never",
    "once :3",
    "once:",
    "once:x",
    "once:1.5",
    "once:-1",
    "midpoint:-4",
    "protect",
    "protect:",
    "protect:-2",
    "protect:x",
    "never:3",
    "continuous:1",
    "retain_first:2",
    "once_online:1",
    "per_block:1",
    "every_boundary:0",
    "continuous+once:3",
    "protect:2+per_block",
    "continuous+never",
    "once:3+midpoint:4",
    "once+midpoint",
    "once:3+continuous+once",
]
"""Schedule specs: every form, tolerated spellings, compositions and refusals."""

BRANCH_SPECS = [
    "once",
    " once ",
    "continuous",
    "protect:2",
    "protect:0",
    "retain_first",
    "continuous+protect:2",
    "continuous+retain_first",
    "protect:2+retain_first",
    "continuous+protect:2+retain_first",
    "continuous + protect:3",
    "retain_first+continuous",
    "continuous+continuous",
    "once+continuous",
    "never",
    "per_block",
    "midpoint",
    "once:3",
    "protect",
    "protect:x",
    "protect:-1",
    "protect: 2",
    "",
    "continuous+",
]
"""What ``controlscope branch --schedule`` and a panel's branch schedule may be given."""

READ_BLOCK = "x = read_text_file('/w/a.txt')\ny = read_text_file('/w/b.txt')\n"
WRITE_BLOCK = "d = read_text_file('/w/a.txt')\nwrite_file('/w/o1', d)\nwrite_file('/w/o2', d)\n"
LOOP_WRITE_BLOCK = "for n in names:\n    write_file('/w/' + n, 'x')\n"

Step = tuple[str, str, str | None, Operation, tuple[str, ...]]
"""(block id, code, enclosing function, what a review realizes, queued blocks)."""


def _trajectories() -> dict[str, list[Step]]:
    """Fixed trajectories: a scripted one and a few drawn from fixed seeds."""
    replace = ReplaceWorkflow(code="print(1)")
    patch = PatchArguments(arguments={"path": "/w/b"})
    scripted: list[Step] = [
        ("t0.b0", READ_BLOCK, None, Keep(), ("b",)),
        ("t0.b0", READ_BLOCK, None, Keep(), ("b",)),
        ("t0.b1", WRITE_BLOCK, "go", patch, ()),
        ("t0.b1", WRITE_BLOCK, None, replace, ()),
        ("t0.b1.r1", LOOP_WRITE_BLOCK, None, Keep(), ()),
        ("t0.b1.r1", LOOP_WRITE_BLOCK, None, replace, ()),
        ("t0.b1.r2", READ_BLOCK, None, Keep(), ()),
        ("t1.b0", WRITE_BLOCK, None, Keep(), ()),
        ("t1.b0", WRITE_BLOCK, None, patch, ()),
        ("t1.b0", WRITE_BLOCK, None, Keep(), ()),
    ]
    out = {"scripted": scripted}
    for seed in range(4):
        rng = random.Random(seed)
        steps: list[Step] = []
        for b in range(rng.randint(1, 5)):
            block = f"t{b}.b0"
            for _ in range(rng.randint(1, 6)):
                op = rng.choices([Keep(), patch, replace], weights=[5, 2, 1])[0]
                code = rng.choice([READ_BLOCK, WRITE_BLOCK, LOOP_WRITE_BLOCK])
                function = rng.choice([None, None, "f"])
                steps.append((block, code, function, op, ()))
                if op.kind == "replace_workflow":
                    block = f"{block.split('.r')[0]}.r{block.count('.r') + 1}"
        out[f"seed{seed}"] = steps
    return out


def _drive(schedule: Schedule, steps: list[Step]) -> list[int]:
    """The call counts at which ``schedule`` reviews ``steps`` (as the agent loop drives it)."""
    reviewed: list[int] = []
    completed = 0
    block_calls: dict[str, int] = {}
    block_index: dict[str, int] = {}
    for block, code, function, op, queued in steps:
        block_index.setdefault(block, len(block_index))
        boundary = Boundary(
            block_id=block,
            call_index=completed,
            block_call_index=block_calls.get(block, 0),
            tool="read_text_file",
            arguments={"path": "/w/a.txt"},
            line=1,
            call_site=CallSite(module=block, function=function),
            code=code,
        )
        ctx = ScheduleContext(
            code=code,
            block_index=block_index[block],
            is_replacement=".r" in block,
            queued_blocks=queued,
            calls_completed=completed,
        )
        review = schedule.should_review(boundary, ctx)
        realized = op if review else Keep()
        if review:
            reviewed.append(completed)
        schedule.observe(boundary, realized)
        if realized.kind != "replace_workflow":
            completed += 1
            block_calls[block] = block_calls.get(block, 0) + 1
    return reviewed


def _answer(call: Callable[[], Any]) -> dict[str, Any]:
    """``{"value": ...}`` or ``{"error": "<exception class>: <message>"}``."""
    try:
        return {"value": call()}
    except (ValueError, ReplayError) as err:
        return {"error": f"{type(err).__name__}: {err}"}


def _parse(spec: str) -> Schedule:
    return parse_schedule(spec, write_tools=WRITE_TOOLS, read_tools=READ_TOOLS)


def _built(spec: str) -> dict[str, Any]:
    """What ``spec`` builds: its name, class and reviews on every fixed trajectory (a fresh
    schedule each), and whether its name rebuilds the same."""
    schedule = _parse(spec)
    reviews = {label: _drive(_parse(spec), steps) for label, steps in _trajectories().items()}
    again = {label: _drive(_parse(schedule.name), s) for label, s in _trajectories().items()}
    return {
        "name": schedule.name,
        "class": type(schedule).__name__,
        "reviews": reviews,
        "name_rebuilds_it": again == reviews,
    }


def spec_answers(spec: str) -> dict[str, Any]:
    """What the grammar answers for ``spec``; placement only for a spec that is a schedule
    (its canonical name after placement: what a condition records)."""

    def placed(call_index: int | None) -> Callable[[], str]:
        return lambda: schedule_name(place_from_source(spec, call_index=call_index, calls=12))

    out = {
        "parse_schedule": _answer(lambda: _built(spec)),
        "schedule_name": _answer(lambda: schedule_name(spec)),
    }
    if "value" in out["schedule_name"]:
        out["needs_source"] = _answer(lambda: needs_source(spec))
        out["place_from_source(7, 12)"] = _answer(placed(7))
        out["place_from_source(None, 12)"] = _answer(placed(None))
    return out


def branch_answers(spec: str) -> dict[str, Any]:
    def answer() -> dict[str, Any]:
        name, factory = branch_schedule(spec, 4)
        after = factory()
        return {
            "name": name,
            "after": after.name,
            "class": type(after).__name__,
            "reviews": {label: _drive(factory(), s) for label, s in _trajectories().items()},
        }

    return _answer(answer)


def golden() -> dict[str, Any]:
    """Everything the fixture holds, computed by the code in ``PYTHONPATH``."""
    return {
        "SCHEDULE_FORMS": SCHEDULE_FORMS,
        "BRANCH_SCHEDULE_FORMS": BRANCH_SCHEDULE_FORMS,
        "specs": {spec: spec_answers(spec) for spec in SPECS},
        "branch_schedule(spec, 4)": {spec: branch_answers(spec) for spec in BRANCH_SPECS},
    }


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(golden(), indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    sys.stdout.write(f"wrote {GOLDEN}\n")
