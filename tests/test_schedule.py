"""Tests of schedules: each one driven over sequences of boundaries like the agent loop does."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from controlscope.core import Boundary, CallSite, Keep, Operation, PatchArguments, ReplaceWorkflow
from controlscope.envs.filesystem._planning import READ_TOOLS, WRITE_TOOLS
from controlscope.schedule import (
    AtCall,
    Continuous,
    Never,
    OnceLocalRule,
    PerBlock,
    Protect,
    RetainFirst,
    Schedule,
    ScheduleContext,
    local_rule_call_index,
    parse_schedule,
    schedule_name,
    static_call_count,
    static_write_count,
)

TOOLS = {"write_tools": WRITE_TOOLS, "read_tools": READ_TOOLS}
"""The filesystem environment's tool sets, which the ``once`` rule reads."""


def parse(spec: str) -> Schedule:
    """A schedule for the filesystem environment."""
    return parse_schedule(spec, **TOOLS)


READ_BLOCK = "x = read_text_file('/w/a.txt')\ny = read_text_file('/w/b.txt')\n"
WRITE_BLOCK = "d = read_text_file('/w/a.txt')\nwrite_file('/w/o1', d)\nwrite_file('/w/o2', d)\n"
LOOP_WRITE_BLOCK = "for n in names:\n    write_file('/w/' + n, 'x')\n"
FUNC_WRITE_BLOCK = "def go():\n    write_file('/w/a', '1')\n    write_file('/w/b', '2')\ngo()\n"


@dataclass
class Step:
    """One boundary of a scripted trajectory and what the reviewer would realize if asked."""

    block: str
    code: str = READ_BLOCK
    function: str | None = None
    realized: Operation = field(default_factory=Keep)
    queued: tuple[str, ...] = ()


def drive(
    schedule: Schedule, steps: Sequence[Step], *, log: list[tuple[int, str]] | None = None
) -> list[int]:
    """Run ``steps`` through ``schedule`` as the agent loop would; return reviewed call indices.

    An operation is realized only where a review happens; elsewhere the program's own call is
    kept. A replacement cancels the pending call, so it does not count as completed. ``log``
    receives (calls completed, realized kind) for each reviewed boundary.
    """
    reviewed: list[int] = []
    completed = 0
    block_calls: dict[str, int] = {}
    block_index: dict[str, int] = {}
    for step in steps:
        block_index.setdefault(step.block, len(block_index))
        b = Boundary(
            block_id=step.block,
            call_index=completed,
            block_call_index=block_calls.get(step.block, 0),
            tool="read_text_file",
            arguments={"path": "/w/a.txt"},
            line=1,
            call_site=CallSite(module=step.block, function=step.function),
            code=step.code,
        )
        ctx = ScheduleContext(
            code=step.code,
            block_index=block_index[step.block],
            is_replacement=".r" in step.block,
            queued_blocks=step.queued,
            calls_completed=completed,
        )
        review = schedule.should_review(b, ctx)
        assert schedule.should_review(b, ctx) == review, "should_review must be a query"
        realized = step.realized if review else Keep()
        if review:
            reviewed.append(completed)
            if log is not None:
                log.append((completed, realized.kind))
        schedule.observe(b, realized)
        if realized.kind != "replace_workflow":
            completed += 1
            block_calls[step.block] = block_calls.get(step.block, 0) + 1
    return reviewed


def reads(block: str, n: int) -> list[Step]:
    return [Step(block) for _ in range(n)]


REPLACE = ReplaceWorkflow(code="print(1)")


def test_never_and_continuous() -> None:
    steps = reads("b0", 3) + reads("b1", 2)
    assert drive(Never(), steps) == []
    assert drive(Continuous(), steps) == [0, 1, 2, 3, 4]


def test_per_block_reviews_first_boundary_of_each_block_including_replacements() -> None:
    steps = [*reads("b0", 2), Step("b1", realized=REPLACE), *reads("b1.r1", 3), *reads("b2", 1)]
    # b0 at 0; b1's first boundary at 2 (replaced, not completed); b1.r1 at 2; b2 at 5.
    assert drive(PerBlock(), steps) == [0, 2, 2, 5]


def test_once_at_index_reviews_once() -> None:
    steps = reads("b0", 6)
    assert drive(parse("once:3"), steps) == [3]
    assert drive(parse("once:0"), steps) == [0]
    assert drive(parse("once:9"), steps) == []


def test_once_at_index_does_not_repeat_after_a_replacement_at_it() -> None:
    steps = [*reads("b0", 2), Step("b0", realized=REPLACE), *reads("b0.r1", 3)]
    # The replaced call is cancelled, so the replacement's first call is again index 2.
    assert drive(parse("once:2"), steps) == [2]


def test_midpoint_reviews_after_half_the_source_calls() -> None:
    steps = reads("b0", 10)
    assert drive(parse("midpoint:7"), steps) == [3]
    assert drive(parse("midpoint:8"), steps) == [4]
    assert parse("midpoint:7").name == "midpoint:7"


def test_midpoint_then_continuous() -> None:
    steps = reads("b0", 8)
    assert drive(parse("midpoint:8+continuous"), steps) == [4, 5, 6, 7]


def test_protect_window_after_each_replacement() -> None:
    steps = [
        *reads("b0", 2),
        Step("b0", realized=REPLACE),  # review at 2: replaced, window until 2 + 3 = 5
        *[Step("b0.r1", realized=REPLACE) for _ in range(4)],  # 2, 3, 4 protected; 5 reviewed
        *[Step("b0.r2") for _ in range(4)],
    ]
    reviewed = drive(parse("protect:3"), steps)
    # calls completed: b0 0,1 | replaced at 2 | b0.r1 calls 2,3,4 kept (protected),
    # at 5 reviewed -> replaced again (window to 8) | b0.r2 calls 5,6,7 protected, 8 reviewed.
    assert reviewed == [0, 1, 2, 5, 8]


def test_protect_zero_is_continuous() -> None:
    steps = [*reads("b0", 1), Step("b0", realized=REPLACE), *reads("b0.r1", 2)]
    assert drive(parse("protect:0"), steps) == [0, 1, 1, 2]


def test_retain_first_stops_after_first_replacement() -> None:
    steps = [
        Step("b0", realized=PatchArguments(arguments={"path": "/w/b"})),
        Step("b0", realized=REPLACE),
        *[Step("b0.r1", realized=REPLACE) for _ in range(3)],
    ]
    assert drive(parse("retain_first"), steps) == [0, 1]


def test_modifiers_compose_with_per_block() -> None:
    steps = [
        *reads("b0", 2),
        Step("b1", realized=REPLACE),
        *reads("b1.r1", 1),
        *reads("b2", 1),
        *reads("b3", 1),
    ]
    # per_block: b0@0, b1@2 (replaced; window to 2+2=4), b1.r1@2 protected, b2@3 protected,
    # b3@4 reviewed.
    sched = parse("per_block+protect:2")
    assert sched.name == "per_block+protect:2"
    assert drive(sched, steps) == [0, 2, 4]
    assert drive(parse("per_block+retain_first"), steps) == [0, 2]


def test_once_local_rule_picks_first_module_level_boundary_of_multi_writer() -> None:
    steps = [
        *reads("b0", 2),  # read block, but a multi-writer is queued behind it
        Step("b1", code=WRITE_BLOCK),
        Step("b1", code=WRITE_BLOCK),
        Step("b2", code=WRITE_BLOCK),
    ]
    steps[0].queued = steps[1].queued = (WRITE_BLOCK,)
    assert drive(parse("once"), steps) == [2]


def test_once_local_rule_skips_function_internal_boundaries() -> None:
    steps = [
        Step("b0", code=FUNC_WRITE_BLOCK, function="go"),
        Step("b0", code=FUNC_WRITE_BLOCK, function="go"),
        Step("b1", code=LOOP_WRITE_BLOCK),
    ]
    assert drive(OnceLocalRule(**TOOLS), steps) == [2]


def test_once_local_rule_falls_back_to_a_read_block() -> None:
    single_write = "d = read_text_file('/w/a')\nwrite_file('/w/o', d)\n"
    steps = [Step("b0", code=single_write), Step("b0", code=single_write), *reads("b1", 2)]
    # b0 writes once and reads: with no multi-writer known, it is the read-block fallback.
    assert drive(OnceLocalRule(**TOOLS), steps) == [0]
    # A block that neither writes more than once nor reads is never chosen.
    steps = [Step("b0", code="create_directory('/w/x')")]
    assert drive(OnceLocalRule(**TOOLS), steps) == []


def test_once_local_rule_honours_environment_tools() -> None:
    code = "put('a')\nput('b')\n"
    sched = parse_schedule("once", write_tools=frozenset({"put"}), read_tools=frozenset())
    assert drive(sched, [Step("b0", code=code), Step("b0", code=code)]) == [0]
    assert drive(OnceLocalRule(**TOOLS), [Step("b0", code=code)]) == []


def test_static_counts() -> None:
    assert static_write_count(WRITE_BLOCK, WRITE_TOOLS) == 2
    assert static_write_count(LOOP_WRITE_BLOCK, WRITE_TOOLS) == 2
    assert static_write_count("write_file('/a', [x for x in y])", WRITE_TOOLS) == 1
    assert static_write_count("[write_file(p, '') for p in ps]", WRITE_TOOLS) == 2
    assert static_write_count("obj.write_file('/a', '')", WRITE_TOOLS) == 0
    assert static_write_count("write_file(", WRITE_TOOLS) == 0  # does not parse
    assert static_call_count(READ_BLOCK, frozenset({"read_text_file"})) == 2


def test_local_rule_call_index_offline() -> None:
    def bounds(block: str, start: int, n: int, function: str | None = None) -> list[Boundary]:
        return [
            Boundary(
                block_id=block,
                call_index=start + i,
                block_call_index=i,
                tool="t",
                arguments={},
                line=1,
                call_site=CallSite(module=block, function=function),
            )
            for i in range(n)
        ]

    trajectory = [
        (READ_BLOCK, bounds("b0", 0, 2)),
        (FUNC_WRITE_BLOCK, bounds("b1", 2, 2, function="go")),
        (WRITE_BLOCK, bounds("b2", 4, 3)),
    ]
    assert local_rule_call_index(trajectory, **TOOLS) == 4
    assert local_rule_call_index(trajectory[:2], **TOOLS) == 0  # read-block fallback
    assert local_rule_call_index(trajectory[1:2], **TOOLS) is None


@pytest.mark.parametrize(
    ("spec", "cls", "name"),
    [
        ("never", Never, "never"),
        ("continuous", Continuous, "continuous"),
        (" per_block ", PerBlock, "per_block"),
        ("once", OnceLocalRule, "once"),
        ("once:4", AtCall, "once:4"),
        ("midpoint:40", AtCall, "midpoint:40"),
        ("protect:5", Protect, "protect:5"),
        ("retain_first", RetainFirst, "retain_first"),
        ("continuous+protect:5", Protect, "protect:5"),
    ],
)
def test_parse_schedule(spec: str, cls: type, name: str) -> None:
    sched = parse(spec)
    assert isinstance(sched, cls)
    assert sched.name == name
    assert isinstance(parse(sched.name), cls)


def test_schedule_name_is_canonical_without_an_environment() -> None:
    assert schedule_name(" once ") == "once"
    assert schedule_name("per_block + protect:2") == parse("per_block+protect:2").name
    with pytest.raises(ValueError, match="unknown schedule"):
        schedule_name("sometimes")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty schedule"),
        ("sometimes", "unknown schedule"),
        ("once:x", "not an integer"),
        ("once:-1", "must be >= 0"),
        ("midpoint", "source trajectory's call count"),
        ("protect", "needs a call count"),
        ("protect:-2", "must be >= 0"),
        ("never:3", "takes no argument"),
        ("continuous+once:3", "may follow"),
        ("per_block+", "empty schedule"),
    ],
)
def test_parse_schedule_rejects_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(spec)


def test_schedules_satisfy_the_protocol() -> None:
    for spec in ("never", "continuous", "per_block", "once", "once:2", "midpoint:9", "protect:1"):
        assert isinstance(parse(spec), Schedule)


def _random_trajectory(rng: random.Random) -> list[Step]:
    """Blocks of 1-6 boundaries; a realized replacement opens a replacement block."""
    steps: list[Step] = []
    choices: list[Operation] = [Keep(), PatchArguments(arguments={"path": "/w/b"}), REPLACE]
    for b in range(rng.randint(1, 6)):
        block = f"b{b}"
        for _ in range(rng.randint(1, 6)):
            op = rng.choices(choices, weights=[5, 2, 1])[0]
            steps.append(Step(block, code=rng.choice([READ_BLOCK, WRITE_BLOCK]), realized=op))
            if op.kind == "replace_workflow":
                block += ".r"
    return steps


@pytest.mark.parametrize("seed", range(40))
def test_schedule_invariants_on_random_trajectories(seed: int) -> None:
    rng = random.Random(seed)
    steps = _random_trajectory(rng)
    every = drive(Continuous(), steps)
    n = len(steps)
    assert drive(Never(), steps) == []
    # Continuous reviews every boundary (a replaced boundary keeps its call index).
    assert len(every) == n
    for spec in ("once", f"once:{rng.randint(0, n)}", f"midpoint:{rng.randint(0, 2 * n)}"):
        assert len(drive(parse(spec), steps)) <= 1, spec
    # per_block: exactly one review per block that reached a boundary.
    blocks = {s.block for s in steps}
    per_block = drive(PerBlock(), steps)
    assert len(per_block) == len(blocks)
    k = rng.randint(0, 4)
    log: list[tuple[int, str]] = []
    protected = drive(parse(f"protect:{k}"), steps, log=log)
    assert len(protected) <= n
    # No review inside a window: after a replacement with c calls completed, the next review
    # comes only once c + k calls have completed.
    for (c, kind), (c_next, _) in itertools.pairwise(log):
        if kind == "replace_workflow":
            assert c_next >= c + k
    retained = drive(parse("retain_first"), steps)
    assert retained == every[: len(retained)]
    # Since every review realizes the step's operation, retain_first stops right after the
    # first replacement.
    first_replace = next(
        (i for i, s in enumerate(steps) if s.realized.kind == "replace_workflow"), None
    )
    assert len(retained) == (n if first_replace is None else first_replace + 1)
    if k == 0:
        assert protected == every
