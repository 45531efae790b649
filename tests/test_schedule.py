"""Tests of schedules: each one driven over sequences of boundaries like the agent loop does."""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from _schedules_golden import BRANCH_SPECS, GOLDEN, SPECS, branch_answers, spec_answers
from controlscope.cli import _branch
from controlscope.core import (
    Boundary,
    CallSite,
    Keep,
    Operation,
    PatchArguments,
    ReplaceWorkflow,
    ToolAnnotations,
)
from controlscope.envs.filesystem._planning import READ_TOOLS, WRITE_TOOLS
from controlscope.replay import branch_schedule
from controlscope.schedule import (
    BRANCH_SCHEDULE_FORMS,
    SCHEDULE_FORMS,
    SCHEDULES,
    AtCall,
    Continuous,
    Destructive,
    EveryBoundary,
    Never,
    OnceOnline,
    PerBlock,
    Protect,
    RetainFirst,
    Schedule,
    ScheduleContext,
    ScheduleKind,
    ScheduleSpec,
    SourceBlock,
    branch_schedule_forms,
    local_rule_boundary,
    needs_source,
    parse_schedule,
    place_from_source,
    schedule_forms,
    schedule_name,
    static_call_count,
    static_write_count,
    tool_risk,
)

TOOLS = {"write_tools": WRITE_TOOLS, "read_tools": READ_TOOLS}
"""The filesystem environment's tool sets, which the local rule reads."""


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
    tool: str = "read_text_file"


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
            tool=step.tool,
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


def test_never_and_every_boundary() -> None:
    steps = reads("b0", 3) + reads("b1", 2)
    assert drive(Never(), steps) == []
    assert drive(EveryBoundary(), steps) == [0, 1, 2, 3, 4]


def test_continuous_reviews_each_boundary_after_a_completed_call() -> None:
    """Paper B.1: continuous review "can recur after a further public call"; B.2 counts 517
    reviews for 537 calls over 20 tasks: one review per completed call that a boundary follows,
    none before the task's first call."""
    steps = reads("b0", 3) + reads("b1", 2)
    assert drive(Continuous(), steps) == [1, 2, 3, 4]  # 5 calls, 4 reviews
    assert drive(parse("continuous"), reads("b0", 1)) == []  # the first call is not reviewed


def test_continuous_does_not_rereview_a_replacements_first_call() -> None:
    steps = [
        *reads("b0", 2),
        Step("b0", realized=REPLACE),  # the boundary after call 2: reviewed, replaced
        *reads("b0.r1", 3),  # its first call: no further call completed, no review
    ]
    log: list[tuple[int, str]] = []
    assert drive(Continuous(), steps, log=log) == [1, 2, 3, 4]
    assert log == [(1, "keep"), (2, "replace_workflow"), (3, "keep"), (4, "keep")]
    # A replacement that makes no call before the next block: the next block's first call is
    # not reviewed either (no call completed since the replaced boundary).
    steps = [*reads("b0", 2), Step("b0", realized=REPLACE), *reads("b1", 2)]
    assert drive(Continuous(), steps) == [1, 2, 3]
    # every_boundary keeps the old behaviour: 4 reviews for these 3 calls plus a replacement.
    steps = [Step("b0"), Step("b0", realized=REPLACE), *reads("b0.r1", 2)]
    assert len(drive(EveryBoundary(), steps)) == 4
    assert len(drive(Continuous(), steps)) == 2


def test_per_block_reviews_the_first_boundary_of_each_natural_block() -> None:
    """Paper A.2: "its review occurs once per natural block"; a replacement is not one."""
    steps = [*reads("b0", 2), Step("b1", realized=REPLACE), *reads("b1.r1", 3), *reads("b2", 1)]
    # b0 at 0; b1's first boundary at 2 (replaced, not completed); b1.r1 not; b2 at 5.
    assert drive(PerBlock(), steps) == [0, 2, 5]


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
    # calls completed: b0 0 (first call), 1 | replaced at 2 | b0.r1 calls 2,3,4 kept
    # (protected), at 5 reviewed -> replaced again (window to 8) | b0.r2 calls 5,6,7 protected,
    # 8 reviewed.
    assert reviewed == [1, 2, 5, 8]


def test_protect_zero_is_continuous() -> None:
    steps = [*reads("b0", 2), Step("b0", realized=REPLACE), *reads("b0.r1", 2)]
    assert drive(parse("protect:0"), steps) == drive(Continuous(), steps) == [1, 2, 3]


def test_retain_first_stops_after_first_replacement() -> None:
    steps = [
        Step("b0"),
        Step("b0", realized=PatchArguments(arguments={"path": "/w/b"})),
        Step("b0", realized=REPLACE),
        *[Step("b0.r1", realized=REPLACE) for _ in range(3)],
    ]
    assert drive(parse("retain_first"), steps) == [1, 2]


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


def test_once_online_picks_first_module_level_boundary_of_multi_writer() -> None:
    steps = [
        *reads("b0", 2),  # read block, but a multi-writer is queued behind it
        Step("b1", code=WRITE_BLOCK),
        Step("b1", code=WRITE_BLOCK),
        Step("b2", code=WRITE_BLOCK),
    ]
    steps[0].queued = steps[1].queued = (WRITE_BLOCK,)
    assert drive(parse("once_online"), steps) == [2]


def test_once_online_skips_function_internal_boundaries() -> None:
    steps = [
        Step("b0", code=FUNC_WRITE_BLOCK, function="go"),
        Step("b0", code=FUNC_WRITE_BLOCK, function="go"),
        Step("b1", code=LOOP_WRITE_BLOCK),
    ]
    assert drive(OnceOnline(**TOOLS), steps) == [2]


def test_once_online_falls_back_to_a_read_block() -> None:
    single_write = "d = read_text_file('/w/a')\nwrite_file('/w/o', d)\n"
    steps = [Step("b0", code=single_write), Step("b0", code=single_write), *reads("b1", 2)]
    # b0 writes once and reads: with no multi-writer known, it is the read-block fallback.
    assert drive(OnceOnline(**TOOLS), steps) == [0]
    # A block that neither writes more than once nor reads is never chosen.
    steps = [Step("b0", code="create_directory('/w/x')")]
    assert drive(OnceOnline(**TOOLS), steps) == []


def test_once_online_honours_environment_tools() -> None:
    code = "put('a')\nput('b')\n"
    sched = parse_schedule("once_online", write_tools=frozenset({"put"}), read_tools=frozenset())
    assert drive(sched, [Step("b0", code=code), Step("b0", code=code)]) == [0]
    assert drive(OnceOnline(**TOOLS), [Step("b0", code=code)]) == []


def test_static_counts() -> None:
    assert static_write_count(WRITE_BLOCK, WRITE_TOOLS) == 2
    assert static_write_count(LOOP_WRITE_BLOCK, WRITE_TOOLS) == 2
    assert static_write_count("write_file('/a', [x for x in y])", WRITE_TOOLS) == 1
    assert static_write_count("[write_file(p, '') for p in ps]", WRITE_TOOLS) == 2
    assert static_write_count("obj.write_file('/a', '')", WRITE_TOOLS) == 0
    assert static_write_count("write_file(", WRITE_TOOLS) == 0  # does not parse
    assert static_call_count(READ_BLOCK, frozenset({"read_text_file"})) == 2


def _bounds(block: str, start: int, n: int, *, function: str | None = None) -> tuple[Boundary, ...]:
    return tuple(
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
    )


def test_local_rule_on_observed_calls() -> None:
    """Appendix B: "the first supported module-level internal boundary of the earliest
    multi-call writer block, with a read-block fallback"; function-internal boundaries are
    excluded; selected contexts have empty queues."""
    reader = SourceBlock("t0.b0", _bounds("t0.b0", 0, 2), ("read_text_file",) * 2)
    # Written to call write_file twice, but observed to write once: not a multi-call writer
    # by a static count of call sites, a single call as observed.
    one_call = SourceBlock("t1.b0", _bounds("t1.b0", 2, 1), ("write_file",))
    in_function = SourceBlock(
        "t2.b0", _bounds("t2.b0", 3, 2, function="go"), ("write_file", "write_file")
    )
    queued = SourceBlock("t3.b0", _bounds("t3.b0", 5, 2), ("read_text_file", "write_file"), 1)
    writer = SourceBlock("t4.b0", _bounds("t4.b0", 7, 3), ("read_text_file", "write_file") * 2)
    chosen = local_rule_boundary([reader, one_call, in_function, queued, writer], **TOOLS)
    # the writer's internal boundary: its second call (call 8), not its first (call 7)
    assert (chosen.call_index, chosen.block_id, chosen.read_fallback) == (8, "t4.b0", False)
    fallback = local_rule_boundary([reader, one_call, in_function, queued], **TOOLS)
    assert (fallback.call_index, fallback.block_id, fallback.read_fallback) == (1, "t0.b0", True)
    ineligible = local_rule_boundary([one_call, in_function, queued], **TOOLS)
    assert ineligible.call_index is None and not ineligible.eligible
    assert "queued" in ineligible.reason


def test_bare_once_and_midpoint_are_placed_from_a_source() -> None:
    assert needs_source("once") and needs_source("midpoint + continuous")
    assert not needs_source("once:3") and not needs_source("continuous")
    assert schedule_name(" once + protect:2 ") == "once+protect:2"
    assert schedule_name("midpoint+continuous") == "midpoint+continuous"
    placed = place_from_source("midpoint+continuous", call_index=None, calls=9)
    assert schedule_name(placed) == "midpoint:9+continuous"
    assert place_from_source("once", call_index=4, calls=9) == "once:4"
    with pytest.raises(ValueError, match="no boundary"):
        place_from_source("once", call_index=None, calls=9)


@pytest.mark.parametrize(
    ("spec", "cls", "name"),
    [
        ("never", Never, "never"),
        ("continuous", Continuous, "continuous"),
        ("every_boundary", EveryBoundary, "every_boundary"),
        (" per_block ", PerBlock, "per_block"),
        ("once_online", OnceOnline, "once_online"),
        ("once:4", AtCall, "once:4"),
        ("midpoint:40", AtCall, "midpoint:40"),
        ("protect:5", Protect, "protect:5"),
        ("retain_first", RetainFirst, "retain_first"),
        ("continuous+protect:5", Protect, "protect:5"),
        ("destructive", Destructive, "destructive"),
        (" destructive + protect:3 ", Protect, "destructive+protect:3"),
        ("continuous+destructive", Destructive, "continuous+destructive"),
        ("per_block+destructive+retain_first", RetainFirst, "per_block+destructive+retain_first"),
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
        ("once", "recorded source run"),
        ("once:x", "not an integer"),
        ("once:-1", "must be >= 0"),
        ("midpoint", "source trajectory's call count"),
        ("protect", "needs a call count"),
        ("protect:-2", "must be >= 0"),
        ("never:3", "takes no argument"),
        ("continuous+once:3", "may follow"),
        ("per_block+", "empty schedule"),
        ("destructiv", "unknown schedule"),
        ("Destructive", "unknown schedule"),
        ("destructive:2", "destructive takes no argument"),
        ("destructive+per_block", "only protect:n, retain_first, continuous or destructive"),
        ("destructive+", "empty schedule"),
    ],
)
def test_parse_schedule_rejects_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(spec)


def test_the_listed_forms_are_the_ones_the_parsers_accept() -> None:
    for form in SCHEDULE_FORMS.split(", "):
        spec = form.replace(":K", ":3").replace(":N", ":8").replace(":n", ":2")
        if spec.endswith(" (with a source run)"):  # bare once / midpoint: placed from a source
            with pytest.raises(ValueError, match="source"):
                parse(spec.split(" ")[0])
        else:
            assert parse(spec).name == schedule_name(spec)
    with pytest.raises(ValueError, match=re.escape(f"expected one of {SCHEDULE_FORMS}")):
        parse("sometimes")
    for form in BRANCH_SCHEDULE_FORMS.split(", "):
        name, _ = branch_schedule(form.split(" ")[0].replace(":n", ":2"), 4)
        assert name.startswith("once:4")


def test_the_branch_command_lists_the_branch_forms() -> None:
    parser = argparse.ArgumentParser()
    _branch.add_arguments(parser)
    [option] = [a for a in parser._actions if a.dest == "schedule"]
    assert option.help == f"after the boundary: {BRANCH_SCHEDULE_FORMS}"


def test_schedules_satisfy_the_protocol() -> None:
    specs = ("never", "continuous", "every_boundary", "per_block", "once_online", "once:2")
    for spec in (*specs, "midpoint:9", "protect:1"):
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
    n = len(steps)
    assert drive(Never(), steps) == []
    assert len(drive(EveryBoundary(), steps)) == n
    log: list[tuple[int, str]] = []
    continuous = drive(Continuous(), steps, log=log)
    # The paper's continuous rule: never before the first call, never twice at one count of
    # completed calls (a replacement's first call is not re-reviewed), and at every boundary
    # reached after a further call completed.
    assert 0 not in continuous
    assert all(a < b for a, b in itertools.pairwise(continuous))
    for spec in ("once_online", f"once:{rng.randint(0, n)}", f"midpoint:{rng.randint(0, 2 * n)}"):
        assert len(drive(parse(spec), steps)) <= 1, spec
    # per_block: exactly one review per natural block that reached a boundary.
    natural = {s.block for s in steps if ".r" not in s.block}
    assert len(drive(PerBlock(), steps)) == len(natural)
    k = rng.randint(0, 4)
    protect_log: list[tuple[int, str]] = []
    protected = drive(parse(f"protect:{k}"), steps, log=protect_log)
    assert set(protected) <= set(range(1, n + 1))
    # No review inside a window: after a replacement with c calls completed, the next review
    # comes only once c + k calls have completed.
    for (c, kind), (c_next, _) in itertools.pairwise(protect_log):
        if kind == "replace_workflow":
            assert c_next >= c + k
    if k == 0:
        assert protected == continuous
    # retain_first reviews as continuous does up to and including the first replacement.
    retained = drive(parse("retain_first"), steps)
    first = next((i for i, (_, kind) in enumerate(log) if kind == "replace_workflow"), None)
    assert retained == (continuous if first is None else continuous[: first + 1])


# --- the golden fixture: what the grammar answered before the schedule package ----------------


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return dict(json.loads(GOLDEN.read_text()))


def test_the_listed_forms_are_the_recorded_ones(recorded: dict[str, Any]) -> None:
    assert recorded["SCHEDULE_FORMS"] == SCHEDULE_FORMS
    assert recorded["BRANCH_SCHEDULE_FORMS"] == BRANCH_SCHEDULE_FORMS


@pytest.mark.parametrize("spec", SPECS)
def test_what_the_grammar_answers_is_unchanged(spec: str, recorded: dict[str, Any]) -> None:
    """Canonical names (recorded in logs, manifests and experiment hashes), the schedules built
    and their reviews, placement from a source run, and every refusal's words."""
    assert spec_answers(spec) == recorded["specs"][spec]


@pytest.mark.parametrize("spec", BRANCH_SPECS)
def test_a_branchs_schedule_is_unchanged(spec: str, recorded: dict[str, Any]) -> None:
    assert branch_answers(spec) == recorded["branch_schedule(spec, 4)"][spec]


# --- the registry: one ScheduleKind per kind, a spec parsed once ------------------------------


def test_every_listed_form_parses_and_its_name_reads_back_as_itself() -> None:
    for form in SCHEDULE_FORMS.split(", "):
        bare = form.endswith(" (with a source run)")
        text = form.split(" ")[0].replace(":K", ":3").replace(":N", ":8").replace(":n", ":2")
        spec = ScheduleSpec.parse(text)
        assert spec.needs_source is bare
        assert ScheduleSpec.parse(spec.name) == spec
        if not bare:
            assert spec.build(**TOOLS).name == spec.name == parse(text).name


@pytest.mark.parametrize("text", [s for s in SPECS if s.strip() and "sometimes" not in s])
def test_a_specs_name_is_the_name_of_what_it_builds(text: str) -> None:
    """The grammar names a spec without building it; the schedules name themselves: the two
    agree for every spec that builds, and a spec with a bare part stays bare."""
    try:
        spec = ScheduleSpec.parse(text)
    except ValueError:
        return
    assert ScheduleSpec.parse(spec.name) == spec
    if spec.needs_source:
        placed = spec.placed(call_index=5, calls=10)
        assert placed.build(**TOOLS).name == placed.name
        assert not placed.needs_source
        with pytest.raises(ValueError, match=r"source run|source trajectory"):
            spec.build(**TOOLS)
    else:
        assert spec.build(**TOOLS).name == spec.name == schedule_name(text)


def test_a_leading_continuous_is_implied_by_a_wrapping_modifier() -> None:
    assert ScheduleSpec.parse("continuous+protect:5") == ScheduleSpec.parse("protect:5")
    assert ScheduleSpec.parse("continuous + retain_first").parts == (("retain_first", None),)
    assert ScheduleSpec.parse("continuous+continuous").parts == (("continuous", None),) * 2


def test_a_branchs_schedules_are_specs() -> None:
    recorded, after = ScheduleSpec.parse("retain_first+continuous").for_branch(6)
    assert (recorded.name, after.name) == ("once:6+continuous+retain_first", "retain_first")
    recorded, after = ScheduleSpec.parse("once").for_branch(2)
    assert (recorded.name, after.name) == ("once:2", "never")
    with pytest.raises(ValueError, match=re.escape("not 'per_block + protect:2'")):
        ScheduleSpec.parse("per_block + protect:2").for_branch(2)


class Every3rd:
    """A toy schedule: a review at every third boundary."""

    def __init__(self, offset: int) -> None:
        self.name = f"every3rd:{offset}"
        self._offset = offset

    def should_review(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        return (boundary.call_index + self._offset) % 3 == 0

    def observe(self, boundary: Boundary, realized: Operation) -> None:
        """Nothing to track."""


def test_a_kind_added_to_the_registry_parses_builds_and_is_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    toy = ScheduleKind(
        "every3rd",
        "count",
        lambda arg, base, tools: Every3rd(arg or 0),
        missing="needs an offset, e.g. every3rd:1",
        branch=True,
        wraps=True,
        modifier=True,
    )
    monkeypatch.setitem(SCHEDULES, "every3rd", toy)
    assert schedule_forms().endswith(", retain_first, every3rd:n")
    assert branch_schedule_forms().endswith(", every3rd:n")
    assert drive(parse("every3rd:1"), reads("b0", 7)) == [2, 5]
    assert schedule_name(" every3rd:01 ") == "every3rd:1"
    assert isinstance(parse("every3rd:1"), Schedule)
    with pytest.raises(ValueError, match="every3rd needs an offset"):
        parse("every3rd")
    with pytest.raises(ValueError, match=r"expected one of .*, every3rd:n$"):
        parse("sometimes")
    with pytest.raises(
        ValueError, match="only protect:n, retain_first, every3rd:n, continuous or destructive"
    ):
        parse("never+per_block")
    name, after = branch_schedule("every3rd:2", 4)
    assert (name, after().name) == ("once:4+continuous+every3rd:2", "every3rd:2")


# -- destructive: the tools' MCP annotations -----------------------------------------------

HINTS = {
    "read_text_file": ToolAnnotations(read_only_hint=True, open_world_hint=False),
    "write_file": ToolAnnotations(read_only_hint=False, destructive_hint=True),
    "create_directory": ToolAnnotations(read_only_hint=False, destructive_hint=False),
    "odd": ToolAnnotations(read_only_hint=True, destructive_hint=True),
    "plain": None,
}
"""Annotations as servers give them: read-only, destructive, additive (not read-only but not
destructive), contradictory (read-only yet destructive), and none at all."""


def hinted(spec: str) -> Schedule:
    return parse_schedule(spec, **TOOLS, annotations=HINTS)


def calls(block: str, *tools: str, realized: dict[int, Operation] | None = None) -> list[Step]:
    return [
        Step(block, tool=t, realized=(realized or {}).get(i, Keep())) for i, t in enumerate(tools)
    ]


MIXED = ("read_text_file", "write_file", "read_text_file", "create_directory", "plain", "odd")
MIXED += ("unlisted", "read_text_file")


def test_destructive_reviews_only_calls_a_server_marks_destructive_or_not_read_only() -> None:
    # read-only tools are not reviewed; a tool without annotations (or not listed) takes MCP's
    # defaults, not read-only and destructive; a read-only tool that says it is destructive is
    assert drive(hinted("destructive"), calls("b0", *MIXED)) == [1, 3, 4, 5, 6]
    # without annotations every call counts (MCP's defaults)
    assert drive(parse("destructive"), calls("b0", *MIXED)) == list(range(len(MIXED)))


def test_destructive_composes_with_the_other_schedules() -> None:
    steps = calls("b0", "write_file", "read_text_file", "write_file", "write_file", "plain")
    # the continuous rule narrowed: no review before the first completed call
    assert drive(hinted("continuous+destructive"), steps) == [2, 3, 4]
    # a protection window after a replacement (the replaced call is cancelled)
    replaced = calls("b0", "write_file", realized={0: REPLACE})
    replaced += calls("b0.r1", "write_file", "read_text_file", "write_file", "write_file")
    assert drive(hinted("destructive"), replaced) == [0, 0, 2, 3]
    assert drive(hinted("destructive+protect:2"), replaced) == [0, 2, 3]
    assert drive(hinted("destructive+retain_first"), replaced) == [0]
    # per natural block, at a destructive call only
    blocks = calls("b0", "write_file", "write_file") + calls("b1", "read_text_file", "write_file")
    assert drive(hinted("per_block+destructive"), blocks) == [0]


def test_annotations_say_why_a_call_was_reviewed_or_not() -> None:
    risks = {tool: (h or ToolAnnotations()).risk() for tool, h in HINTS.items()}
    assert not risks["read_text_file"].risky
    assert risks["read_text_file"].hints == "readOnlyHint true"
    assert risks["write_file"].risky
    assert risks["write_file"].hints == (
        "readOnlyHint false, destructiveHint true, idempotentHint false (default)"
    )
    assert risks["create_directory"].risky  # not read-only, though additive
    assert risks["plain"].hints == (
        "readOnlyHint false (default), destructiveHint true (default), "
        "idempotentHint false (default)"
    )
    assert risks["odd"].risky and risks["odd"].hints == "readOnlyHint true, destructiveHint true"
    boundary = Boundary(
        block_id="b0",
        call_index=0,
        block_call_index=0,
        tool="write_file",
        arguments={},
        line=1,
        call_site=CallSite(module="b0"),
        code="write_file()",
    )
    for spec in ("destructive", "destructive+protect:2", "per_block+destructive+retain_first"):
        assert tool_risk(hinted(spec), boundary) == risks["write_file"], spec
    for spec in ("continuous", "protect:2", "every_boundary", "midpoint:4+continuous"):
        assert tool_risk(hinted(spec), boundary) is None, spec
