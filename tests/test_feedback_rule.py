"""The feedback-visibility rule of paper A.3 (section 5.4): "the first same-block boundary
following an information-returning API call; the pending call must be a unique direct API site
outside control-flow constructs".

Synthetic source trajectories check the rule's reading case by case; recorded ones (the npm
filesystem server, the isolated worker, scripted models) check that ``controlscope branch --at
feedback-rule`` and a panel's ``start = "feedback_rule"`` branch there, and refuse a source
the rule finds ineligible.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import controlscope as cs
from controlscope import panel as cp
from controlscope import replay
from controlscope.cli import main as cli
from controlscope.core import Boundary, CallSite, RunStartEvent, SourceBoundary
from controlscope.envs.filesystem._planning import READ_TOOLS
from controlscope.run import feedback_rule_of, read_source
from controlscope.schedule import SourceBlock, direct_site_problem, feedback_rule_boundary
from test_api import BROKEN, SOLVE, TASK, script
from test_replay import KEEP, fenced, record

TAIL = SOLVE[SOLVE.index("create_directory") :]
"""SOLVE from its create_directory call on: the replacement that fixes BROKEN's file names."""
REPLACE_TAIL = json.dumps(
    {"reason": "fix the names", "operation": "replace_workflow", "code": TAIL}
)


def bound(block: str, i: int, tool: str, line: int, code: str, **extra: object) -> Boundary:
    """The boundary of a block's ``i``-th call (its call index is ``i`` too)."""
    site = CallSite(module=block, function=extra.pop("function", None))  # type: ignore[arg-type]
    return Boundary(
        block_id=block,
        call_index=i,
        block_call_index=i,
        tool=tool,
        arguments={},
        line=line,
        call_site=site,
        code=code,
        **extra,  # type: ignore[arg-type]
    )


def block(block_id: str, code: str, calls: list[tuple[str, int]], start: int = 0) -> SourceBlock:
    """A natural block of ``code`` whose calls (tool, line) were all observed."""
    bounds = tuple(
        bound(block_id, i, tool, line, code).model_copy(update={"call_index": start + i})
        for i, (tool, line) in enumerate(calls)
    )
    return SourceBlock(block_id, bounds, tuple(tool for tool, _ in calls))


def rule(*blocks: SourceBlock) -> tuple[int | None, str, str]:
    found = feedback_rule_boundary(blocks, read_tools=READ_TOOLS)
    return found.call_index, found.block_id, found.reason


# --- the rule on synthetic trajectories ------------------------------------------------------

STRAIGHT = """names = list_directory(path="/w")
text = read_text_file(path="/w/a.txt")
write_file(path="/w/b.txt", content=text)
"""


def test_the_boundary_after_the_first_read_call_in_its_block_is_chosen() -> None:
    straight = block("t0.b0", STRAIGHT, [("list_directory", 1), ("read_text_file", 2),
                                         ("write_file", 3)])  # fmt: skip
    assert rule(straight) == (1, "t0.b0", "")
    # a block whose only read call ends it has no same-block boundary after it: the search
    # goes on to a later block, which need not be the task's first (A.3)
    alone = block("t0.b0", 'print(list_directory(path="/w"))', [("list_directory", 1)])
    writes = 'write_file(path="/w/x", content="1")\nwrite_file(path="/w/y", content="2")\n'
    writer = block("t1.b0", writes, [("write_file", 1), ("write_file", 2)], start=1)
    later = block("t2.b0", STRAIGHT, [("list_directory", 1), ("read_text_file", 2),
                                      ("write_file", 3)], start=3)  # fmt: skip
    assert rule(alone, writer, later) == (4, "t2.b0", "")
    found = feedback_rule_boundary([alone, writer, later], read_tools=READ_TOOLS)
    assert found.eligible and not found.read_fallback


def test_no_read_call_followed_by_a_call_in_its_block_is_ineligible() -> None:
    alone = block("t0.b0", 'print(list_directory(path="/w"))', [("list_directory", 1)])
    writes = 'write_file(path="/w/x", content="1")\nwrite_file(path="/w/y", content="2")\n'
    writer = block("t1.b0", writes, [("write_file", 1), ("write_file", 2)], start=1)
    index, _, reason = rule(alone, writer)
    assert index is None and "no information-returning call" in reason
    # read tools are the environment's: with none, nothing is information-returning
    straight = block("t0.b0", STRAIGHT, [("list_directory", 1), ("read_text_file", 2)])
    assert feedback_rule_boundary([straight], read_tools=frozenset()).call_index is None


@pytest.mark.parametrize(
    ("code", "line", "problem"),
    [
        # in a loop, a conditional, a try, a comprehension, a short-circuit expression
        ('x = read_file(path="/w/a")\nfor p in ["/w/b"]:\n    write_file(path=p, content=x)\n',
         3, "control-flow"),
        ('x = read_file(path="/w/a")\nif x:\n    write_file(path="/w/b", content=x)\n',
         3, "control-flow"),
        ('x = read_file(path="/w/a")\ntry:\n    write_file(path="/w/b", content=x)\n'
         "except Exception:\n    pass\n", 3, "control-flow"),
        ('x = read_file(path="/w/a")\n[write_file(path=p, content=x) for p in ["/w/b"]]\n',
         2, "control-flow"),
        ('x = read_file(path="/w/a")\nx and write_file(path="/w/b", content=x)\n',
         2, "control-flow"),
        # not unique: the pending tool has two call sites in the block
        ('x = read_file(path="/w/a")\nwrite_file(path="/w/b", content=x)\n'
         'write_file(path="/w/c", content=x)\n', 2, "2 call sites of write_file"),
        # not a direct call through the tool's name at that line
        ('x = read_file(path="/w/a")\nw = write_file\nw(path="/w/b", content=x)\n',
         3, "no direct call"),
        ("x = read_file(path='/w/a'\n", 2, "does not parse"),
    ],
)  # fmt: skip
def test_the_pending_call_must_be_a_unique_direct_site_outside_control_flow(
    code: str, line: int, problem: str
) -> None:
    candidate = bound("t0.b0", 1, "write_file", line, code)
    assert problem in (direct_site_problem(candidate) or "")
    read = block("t0.b0", code, [("read_file", 1), ("write_file", line)])
    index, _, reason = rule(read)
    assert index is None and problem in reason and "call 1, write_file" in reason


def test_a_call_made_indirectly_or_inside_a_function_is_not_direct() -> None:
    code = 'x = read_file(path="/w/a")\nwrite_file(path="/w/b", content=x)\n'
    assert direct_site_problem(bound("t0.b0", 1, "write_file", 2, code)) is None
    refused = bound("t0.b0", 1, "write_file", 2, code, params_refusal="called indirectly")
    in_function = bound("t0.b0", 1, "write_file", 2, code, function="go")
    for candidate in (refused, in_function):
        assert "not made directly" in (direct_site_problem(candidate) or "")


def test_the_rule_names_one_boundary_and_does_not_search_on() -> None:
    """The first read call's following boundary is in a loop: the pair is ineligible, even
    though a later block has an eligible one (17 of the paper's 40 pairs are eligible)."""
    looped = 'x = read_file(path="/w/a")\nfor p in ["/w/b"]:\n    write_file(path=p, content=x)\n'
    first = block("t0.b0", looped, [("read_file", 1), ("write_file", 3)])
    later = block("t1.b0", STRAIGHT, [("list_directory", 1), ("read_text_file", 2)], start=2)
    index, _, reason = rule(first, later)
    assert index is None and "control-flow" in reason


# --- recorded trajectories: branch and panel ---------------------------------------------------


@pytest.fixture(scope="module")
def keep_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Keep run of SOLVE: read_text_file (call 0), then create_directory (call 1, a unique
    direct module-level site), then five writes in a loop."""
    tmp = tmp_path_factory.mktemp("feedback")
    return record(tmp, "keep", [fenced(SOLVE), "Done."], [], scope="keep", schedule="never")


def test_a_recorded_source_places_the_feedback_boundary(keep_source: Path) -> None:
    source = read_source(keep_source)
    found = feedback_rule_of(source, read_tools=READ_TOOLS)
    assert (found.call_index, found.block_id) == (1, "t0.b0")
    choice = replay.resolve_boundary(replay.Recording.load(keep_source), "feedback_rule")
    assert (choice.call_index, choice.position) == (1, 1)
    assert choice.source == SourceBoundary(
        run=str(keep_source), rule="feedback", calls=source.calls, call_index=1, block_id="t0.b0"
    )
    # the local rule places another boundary in the same source (appendix B): the writer
    # block's first module-level internal boundary, also call 1 here; its record says local
    local = replay.resolve_boundary(replay.Recording.load(keep_source), "local-rule")
    assert local.source is not None and local.source.rule == "local"


def test_branch_at_the_feedback_rule_with_both_views(
    keep_source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Section 5.4: one Full opportunity at the A.3 boundary, later decisions Keep."""
    planner, reviewer = script(tmp_path, "Done."), script(tmp_path, REPLACE_TAIL, KEEP)
    argv = ["branch", str(keep_source), "--at", "feedback-rule", "--scope", "full"]
    argv += ["--model", planner, "--reviewer-model", reviewer, "--out", str(tmp_path / "b")]
    assert cli(argv) == 0
    assert "at boundary 1 (schedule once:1)" in capsys.readouterr().out
    run_dir = tmp_path / "b" / "full-d0"
    start = cs.read_events(run_dir)[0]
    assert isinstance(start, RunStartEvent) and start.config is not None
    assert start.config["source"]["rule"] == "feedback"
    summary = cs.read_summary(run_dir)
    assert summary.success and summary.replacements == 1  # SOLVE's tail replaced at call 1


def test_an_ineligible_source_is_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    looped = 'x = read_text_file(path="/workspace/large_file.txt")\n'
    looped += 'for d in ["/workspace/split"]:\n    create_directory(path=d)\n'
    src = record(tmp_path, "src", [fenced(looped), "Done."], [], scope="keep", schedule="never")
    argv = ["branch", str(src), "--at", "feedback-rule", "--scope", "keep"]
    assert cli([*argv, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "ineligible for the feedback rule" in err and "control-flow" in err
    assert not (tmp_path / "x").exists()
    assert cli([*argv[:3], "later", *argv[4:], "--out", str(tmp_path / "x")]) == 2
    assert "feedback-rule" in capsys.readouterr().err  # the accepted names are listed


def test_a_panel_starts_its_scopes_at_the_feedback_rule(tmp_path: Path) -> None:
    """A unit whose source has a read call followed by a same-block call branches there; the
    one-call task's unit is ineligible, with the rule's reason."""
    planner = tmp_path / "planner.json"
    planner.write_text(json.dumps({"by": "turn", "answers": [fenced(BROKEN), "Done."]}))
    reviewer = script(tmp_path, REPLACE_TAIL, *[KEEP] * 5)
    config = cp.parse_config(
        {
            "tasks": [TASK, "file_context/uppercase"],
            "scopes": ["keep", "full"],
            "schedule": "once",
            "start": "feedback_rule",
            "planner": {"model": f"scripted:{planner}"},
            "reviewer": {"model": reviewer, "view": "code_only"},
            "execution": {"workers": 1},
        }
    )
    folder = tmp_path / "panel"
    cp.run_panel(config, folder)
    plan = cp.read_manifest(folder).plan
    records = {r.id: cp.read_record(cp.run_dir(folder, r.id)) for r in plan.runs}
    split = {k: v for k, v in records.items() if k.startswith(TASK)}
    assert {k.rsplit("/", 1)[1]: v.success for k, v in split.items()} == {
        "keep": False,
        "full-d0": True,
    }
    upper = [v for k, v in records.items() if "uppercase" in k and k.endswith("full-d0")]
    assert [v.status for v in upper] == ["ineligible"]
    assert "no information-returning call is followed" in upper[0].detail
    branch_dir = cp.run_dir(folder, next(k for k in split if k.endswith("full-d0")))
    start = cs.read_events(branch_dir)[0]
    assert isinstance(start, RunStartEvent) and start.branch is not None
    assert start.branch.call_index == 1 and start.config is not None
    assert start.config["view"] == "code_only"
