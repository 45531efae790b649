"""Prefix replay, branches from one prefix and frozen operation replays (paper 3.1, 3.3, 6.2,
A.4, B.1, C.1, C.2), on real parts (the npm filesystem server, the isolated worker) with
scripted models.

Two recorded sources are made once per module: a Keep run of a correct program, and a
continuous Full run of a broken program whose reviewer patches one call's arguments and then
replaces the rest of the block.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

import controlscope as cs
from controlscope import replay
from controlscope.cli import main as cli
from controlscope.core import (
    BranchPointEvent,
    Event,
    ModelCallEvent,
    ReviewRequestEvent,
    RunStartEvent,
)
from controlscope.models import ScriptedModel
from controlscope.review import ModelReviewer
from test_api import BROKEN, SOLVE, TASK, script

KEEP = json.dumps({"reason": "fine", "operation": "keep"})
PATCH = json.dumps(
    {
        "reason": "the parts are named part_NN",
        "operation": "patch_arguments",
        "arguments": {"path": "/workspace/split/part_01.txt"},
    }
)
REST = """
for i in range(1, 5):
    chunk = lines[i * per:(i + 1) * per]
    write_file(path=f"{root}/split/part_{i + 1:02d}.txt", content="\\n".join(chunk) + "\\n")
"""
REPLACE = json.dumps({"reason": "fix the names", "operation": "replace_workflow", "code": REST})


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def record(tmp: Path, name: str, planner: list[str], reviewer: list[str], **spec: Any) -> Path:
    options: dict[str, Any] = {"task": TASK, "model": script(tmp, *planner)}
    options["reviewer_model"] = script(tmp, *reviewer)
    options.update(spec)
    result = cs.run_task(cs.RunSpec(out=tmp / name, **options))
    assert result.summary.complete
    return result.run_dir


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The Keep source (7 calls, succeeds) and the revised source (a patch at call 2, a
    replacement at call 3)."""
    tmp = tmp_path_factory.mktemp("sources")
    keep = record(tmp, "keep", [fenced(SOLVE), "Done."], [], scope="keep", schedule="never")
    revised = record(
        tmp,
        "revised",
        [fenced(BROKEN), "Done."],
        [KEEP, PATCH, REPLACE, *[KEEP] * 8],
        scope="full",
        schedule="continuous",
    )
    return {"keep": keep, "revised": revised}


def events(run_dir: Path) -> list[Event]:
    return cs.read_events(run_dir)


def after_point(run_dir: Path) -> list[Event]:
    """The events after a run's ``branch_point``."""
    log = events(run_dir)
    at = next(i for i, e in enumerate(log) if isinstance(e, BranchPointEvent))
    return log[at + 1 :]


def test_the_recorded_sources_are_what_the_tests_expect(sources: dict[str, Path]) -> None:
    revised = cs.read_summary(sources["revised"])
    assert (revised.argument_patches, revised.replacements, revised.success) == (1, 1, True)
    assert revised.primitive_calls == 7 and cs.read_summary(sources["keep"]).success
    start = events(sources["revised"])[0]
    assert isinstance(start, RunStartEvent) and start.task_data_hash is not None


# --- prefix replay -----------------------------------------------------------------------------


def test_a_replay_of_a_recorded_run_verifies_every_call(
    sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = replay.Recording.load(sources["revised"])
    found = replay.replay_prefix(recorded, out=tmp_path / "whole")
    assert found.ok and found.files_compared
    assert found.verified_calls == len(recorded.calls) == 7
    assert found.verified_requests == {"planner": 2, "reviewer": len(recorded.reviewer)}
    assert found.summary is not None and found.summary.success
    assert found.summary.file_hashes == recorded.final.file_hashes  # type: ignore[union-attr]
    start = events(tmp_path / "whole")[0]
    assert isinstance(start, RunStartEvent) and start.branch is not None
    assert (start.branch.purpose, start.branch.source_run) == ("whole", str(recorded.run_dir))
    assert cli(["replay", str(sources["revised"]), "--out", str(tmp_path / "cli")]) == 0
    assert "replayed the whole run: 7 calls verified" in capsys.readouterr().out


def test_a_prefix_replay_stops_at_its_boundary_with_the_shared_state(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    found = replay.replay_prefix(sources["revised"], out=tmp_path / "p", until=3)
    assert found.ok and found.verified_calls == 3 and found.point is not None
    assert found.summary is not None and found.summary.end_reason == "prefix_end"
    log = events(tmp_path / "p")
    assert [e.type for e in log[-4:]] == ["boundary", "block_end", "final_verdict", "run_end"]
    assert log[-5].type == "branch_point" and found.point.call_index == 3
    assert set(found.point.file_hashes) == {"large_file.txt", "split/part_01.txt"}
    # The prefix replay's log replays to the same boundary, and its files are compared there.
    again = replay.replay_prefix(tmp_path / "p", out=tmp_path / "again")
    assert again.ok and again.files_compared and again.call_index == 3
    assert again.point is not None and again.point.request_hash == found.point.request_hash


def edit(source: Path, to: Path, event_type: str, nth: int, change: Any) -> Path:
    """A copy of ``source`` whose ``nth`` event of ``event_type`` is changed by ``change``."""
    shutil.copytree(source, to)
    lines = (to / "events.jsonl").read_text().splitlines()
    seen = -1
    for i, line in enumerate(lines):
        data = json.loads(line)
        if data["type"] == event_type:
            seen += 1
            if seen == nth:
                change(data)
                lines[i] = json.dumps(data)
    (to / "events.jsonl").write_text("\n".join(lines) + "\n")
    return to


def test_an_edited_observation_argument_or_file_is_caught_where_it_was_edited(
    sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def observation(e: dict[str, Any]) -> None:
        e["call"]["result"]["text"] = "Successfully created directory /workspace/elsewhere"

    def argument(e: dict[str, Any]) -> None:
        e["call"]["arguments"]["path"] = "/workspace/split/part_09.txt"

    def terminal(e: dict[str, Any]) -> None:
        e["file_hashes"]["split/part_03.txt"] = "0" * 64

    cases = [
        ("primitive_call", 1, observation, "primitive call 1", "observation.text"),
        ("primitive_call", 4, argument, "primitive call 4", "arguments.path"),
        ("final_verdict", 0, terminal, "terminal files", "split/part_03.txt"),
    ]
    for event_type, nth, change, where, field in cases:
        edited = edit(sources["revised"], tmp_path / field, event_type, nth, change)
        found = replay.replay_prefix(edited, out=tmp_path / f"{field}-out")
        assert found.divergence is not None, field
        assert where in found.divergence.message and found.divergence.field == field
        code = cli(["replay", str(edited), "--out", str(tmp_path / f"{field}-cli")])
        assert code == 1 and where in capsys.readouterr().err
    diverged = events(tmp_path / "arguments.path-out")
    assert diverged[-1].type == "run_end" and diverged[-1].end_reason == "replay_diverged"
    assert sum(e.type == "primitive_call" for e in diverged) == 5  # it stopped at that call


def test_clock_readings_an_agent_wrote_are_masked_not_divergences(tmp_path: Path) -> None:
    """Paper A.4: file-clock fields are handled by explicit normalisation, the raw
    differences kept. The program writes a get_file_info answer (creation and access times of
    a file it wrote) into a file; a second later, replays and branches see other readings."""
    program = """
write_file(path="/workspace/note.txt", content="x")
info = get_file_info(path="/workspace/note.txt")
write_file(path="/workspace/info.txt", content=info)
print(list_directory(path="/workspace"))
"""
    source = record(tmp_path, "src", [fenced(program), "Done."], [KEEP] * 8, scope="full")
    time.sleep(1.1)  # the readings are whole seconds
    found = replay.replay_prefix(source, out=tmp_path / "whole")
    assert found.ok and found.files_compared and found.clock_differences > 0
    differences = [e for e in events(tmp_path / "whole") if e.type == "clock_differences"]
    assert differences and "created" in differences[0].differences[0].recorded
    branches = replay.branch(
        source,
        at=3,
        scopes=["keep", "full"],
        out=tmp_path / "b",
        planner=ScriptedModel(["Done."] * 2),
        reviewer=ModelReviewer(ScriptedModel([KEEP] * 4)),
    )
    assert branches.ok, branches.divergence
    assert all("info.txt" in b.files for b in branches.branches)
    point = next(e for e in events(branches.branches[0].run_dir) if e.type == "branch_point")
    assert set(point.clock_files) == {"info.txt"}  # compared masked, not by its bytes


def test_bad_input_is_refused_before_anything_runs(
    sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def version(n: int) -> Any:
        return lambda e: e.update(schema_version=n)

    def diverged(e: dict[str, Any]) -> None:
        e["end_reason"] = "replay_diverged"

    def generator_changed(e: dict[str, Any]) -> None:
        e["task_data_hash"] = "f" * 64

    src = sources["revised"]
    bad = {
        "newer": edit(src, tmp_path / "newer", "run_start", 0, version(99)),
        "older": edit(src, tmp_path / "older", "run_start", 0, version(2)),
        "diverged": edit(src, tmp_path / "diverged", "run_end", 0, diverged),
        "generator": edit(src, tmp_path / "gen", "run_start", 0, generator_changed),
        "cut": shutil.copytree(src, tmp_path / "cut"),
        "killed": shutil.copytree(src, tmp_path / "killed"),
    }
    log = (bad["cut"] / "events.jsonl").read_text()
    (bad["cut"] / "events.jsonl").write_text(log[: log.rstrip().rfind("\n") + 40])
    lines = (bad["killed"] / "events.jsonl").read_text().splitlines()
    (bad["killed"] / "events.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    expected = {
        "newer": "schema version 99",
        "older": "schema version 2",
        "diverged": "replay_diverged",
        "generator": "generator changed",
        "cut": "last line was cut",
        "killed": "no run_end",
    }
    for name, run_dir in bad.items():
        out = tmp_path / f"out-{name}"
        assert cli(["replay", str(run_dir), "--out", str(out)]) == 2, name
        assert expected[name] in capsys.readouterr().err, name
        assert not (out / "events.jsonl").exists()
    out = tmp_path / "out"
    for argv, message in (
        (["--until", "40"], "not among the recorded boundaries"),
        (["--operation", "1", "--endpoint", "candidate"], "realized patch_arguments"),
        (["--operation", "9", "--endpoint", "retained"], "operation 9 is not recorded"),
        (["--operation", "1"], "go together"),
    ):
        assert cli(["replay", str(src), *argv, "--out", str(out)]) == 2, argv
        assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("field", "change", "shown"),
    [
        ("instruction", lambda t: t.update(instruction=t["instruction"] + " Also delete "
                                           "everything."), "Also delete everything."),
        ("template", lambda t: t.update(template="elsewhere"), '"elsewhere"'),
        ("budgets.primitive_calls", lambda t: t["budgets"].update(primitive_calls=7), "7"),
        ("python_allowed", lambda t: t.update(python_allowed=False), "false"),
    ],
)  # fmt: skip
def test_a_recording_whose_task_was_edited_is_refused_naming_the_field(
    sources: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    field: str,
    change: Any,
    shown: str,
) -> None:
    """The replay regenerates the task; the task the log records must be that task, field by
    field, or the replay would check a run of one task against the log of another."""
    edited = edit(sources["keep"], tmp_path / "edited", "run_start", 0, lambda e: change(e["task"]))
    out = tmp_path / "out"
    assert cli(["replay", str(edited), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"is not the task the replay runs: its {field} is " in err and shown in err, err
    assert not out.exists()
    with pytest.raises(replay.ReplayError, match=f"its {field} is "):
        replay.branch(edited, at=2, scopes=["keep"], out=tmp_path / "b", planner=None,
                      reviewer=None)  # fmt: skip
    assert not (tmp_path / "b").exists()


# --- branches ----------------------------------------------------------------------------------


def first_review_request(run_dir: Path) -> dict[str, Any]:
    call = next(
        e for e in after_point(run_dir) if isinstance(e, ModelCallEvent) and e.role == "reviewer"
    )
    return call.request.model_dump(mode="json")


def test_branches_of_one_prefix_share_the_first_review_request(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    """Paper A.4: identical first public inputs; 3.1: branches start from the same (h, s)."""
    found = replay.branch(
        sources["keep"],
        at=3,
        scopes=["keep", "arg", "full"],
        out=tmp_path / "b",
        planner=ScriptedModel(["Done."] * 5),
        reviewer=ModelReviewer(ScriptedModel([KEEP] * 10)),
        draws=2,
    )
    assert found.ok and found.request_hash is not None and found.schedule == "once:3"
    assert [(b.scope, b.draw) for b in found.branches] == [
        ("keep", 0), ("arg", 0), ("arg", 1), ("full", 0), ("full", 1),
    ]  # fmt: skip
    assert {b.request_hash for b in found.branches} == {found.request_hash}
    assert len({b.state_hash for b in found.branches}) == 1
    source = replay.Recording.load(sources["keep"])
    for b in found.branches:
        start = events(b.run_dir)[0]
        assert isinstance(start, RunStartEvent) and start.branch is not None
        assert start.branch.prefix_hash == found.prefix_hash == source.prefix_hash(3)
        assert (start.branch.call_index, start.scope.name.lower()) == (3, b.scope)
        assert b.summary is not None and b.summary.success
        assert replay.Recording.load(b.run_dir).prefix_hash(3) == found.prefix_hash
    # The requests themselves differ only in the operation set offered (and the draw).
    requests = [first_review_request(b.run_dir) for b in found.branches[1:]]
    assert requests[0] != requests[2]  # Arg and Full offer different operations
    for request in requests:
        for key in ("tools", "json_schema", "draw"):
            request.pop(key)
        request["messages"].pop(0)  # the system prompt lists the operations
    assert all(r == requests[0] for r in requests)
    # once: one opportunity, then Keep.
    for b in found.branches[1:]:
        assert sum(isinstance(e, ReviewRequestEvent) for e in after_point(b.run_dir)) == 1
    assert json.loads((tmp_path / "b" / replay.BRANCHES_FILE).read_text())["request_hash"]


def test_a_keep_branch_continued_by_the_recording_ends_in_its_terminal_files(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    found = replay.branch(
        sources["keep"], at=2, scopes=["keep"], out=tmp_path / "k", planner=None, reviewer=None
    )
    [keep] = found.branches
    recorded = replay.Recording.load(sources["keep"]).final
    assert found.ok and keep.summary is not None and recorded is not None
    assert keep.summary.file_hashes == recorded.file_hashes
    assert keep.summary.state_hash == recorded.state_hash


def test_continuous_branches_review_again_after_a_further_call(
    sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planner, reviewer = script(tmp_path, "Done."), script(tmp_path, *[KEEP] * 10)
    argv = ["branch", str(sources["keep"]), "--at", "midpoint", "--scope", "arg"]
    argv += ["--schedule", "continuous", "--model", planner, "--reviewer-model", reviewer]
    assert cli([*argv, "--out", str(tmp_path / "c")]) == 0
    printed = capsys.readouterr().out
    assert "at boundary 3 (schedule once:3+continuous)" in printed and "mechanism: fork" in printed
    run_dir = tmp_path / "c" / "arg-d0"
    reviewed = [e.call_index for e in after_point(run_dir) if isinstance(e, ReviewRequestEvent)]
    assert reviewed == [3, 4, 5, 6]
    start = events(run_dir)[0]
    assert isinstance(start, RunStartEvent)
    assert start.config["source"]["rule"] == "midpoint" and start.config["source"]["calls"] == 7


def test_the_local_rule_places_a_branch_or_refuses_an_ineligible_source(
    sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    choice = replay.resolve_boundary(replay.Recording.load(sources["keep"]), "local-rule")
    assert (choice.call_index, choice.position) == (1, 1)
    assert choice.source is not None and choice.source.rule == "local"
    one_call = record(tmp_path, "one", [fenced('print(list_directory(path="/workspace"))'), "ok"],
                      [], scope="keep", schedule="never")  # fmt: skip
    for at, message in (("local-rule", "ineligible"), ("9", "not among"), ("later", "--at")):
        argv = ["branch", str(one_call), "--at", at, "--scope", "keep"]
        assert cli([*argv, "--out", str(tmp_path / "x")]) == 2
        assert message in capsys.readouterr().err
    argv = ["branch", str(sources["revised"]), "--at", "midpoint", "--scope", "keep"]
    assert cli([*argv, "--out", str(tmp_path / "x")]) == 2
    assert "realized 2 revision(s)" in capsys.readouterr().err  # not a Keep source
    assert not (tmp_path / "x").exists()


def test_a_scope_given_twice_is_refused_before_anything_runs(
    sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two branches of one scope and draw would share one run directory."""
    reviewer = script(tmp_path, *[KEEP] * 4)
    argv = ["branch", str(sources["keep"]), "--at", "3", "--scope", "full, FULL"]
    argv += ["--model", "recorded", "--reviewer-model", reviewer, "--out", str(tmp_path / "d")]
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert "scope full is given twice" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "d").exists()


# --- frozen operation replays -----------------------------------------------------------------


def test_the_candidate_endpoint_runs_the_recorded_replacement_alone(
    sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    found = replay.replay_operation(sources["revised"], 2, "candidate", out=tmp_path / "c")
    assert found.ok and found.block_finished is True and found.call_index == 3
    [run] = found.runs
    assert (run.success, run.calls) == (True, 7)
    assert run.summary is not None and run.summary.end_reason == "candidate_end"
    assert run.summary.planning_turns == 1  # no further planning
    tail = after_point(run.run_dir)
    assert [e.call.call_index for e in tail if e.type == "primitive_call"] == [3, 4, 5, 6]
    assert sum(isinstance(e, ReviewRequestEvent) for e in tail) == 1  # the recorded one
    argv = ["replay", str(sources["revised"]), "--operation", "2", "--endpoint", "candidate"]
    assert cli([*argv, "--out", str(tmp_path / "cli")]) == 0
    assert "goal reached, 7 calls" in capsys.readouterr().out


def test_the_candidate_endpoint_stops_at_the_original_call_budget(tmp_path: Path) -> None:
    source = record(
        tmp_path, "src", [fenced(BROKEN), "Done."], [KEEP, PATCH, REPLACE, *[KEEP] * 8],
        scope="full", schedule="continuous", max_calls=5,
    )  # fmt: skip
    found = replay.replay_operation(source, 2, "candidate", out=tmp_path / "c")
    [run] = found.runs
    assert found.ok and found.block_finished is False
    assert (run.success, run.calls) == (False, 5)  # graded where the budget stopped it


def test_the_retained_endpoint_keeps_the_replacement_and_plans_on(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    planner = ScriptedModel(["All parts are written."])
    found = replay.replay_operation(
        sources["revised"], 2, "retained", out=tmp_path / "r", planner=planner
    )
    [run] = found.runs
    assert found.ok and (run.success, run.calls) == (True, 7)
    assert run.summary is not None and run.summary.end_reason == "final_answer"
    tail = after_point(run.run_dir)
    assert sum(isinstance(e, ReviewRequestEvent) for e in tail) == 1  # later reviews: Keep
    assert [e.operation.kind for e in tail if e.type == "realized_operation"] == [
        "replace_workflow"
    ]
    assert planner.requests  # ordinary planning went on
    with pytest.raises(replay.ReplayError, match="plans on"):
        replay.replay_operation(sources["revised"], 2, "retained", out=tmp_path / "no")
    with pytest.raises(replay.ReplayError, match="realized keep"):
        replay.replay_operation(sources["revised"], 0, "retained", out=tmp_path / "no")
    # A recorded argument patch can be retained too (a frozen candidate of another kind).
    patched = replay.replay_operation(
        sources["revised"], 1, "retained", out=tmp_path / "p", planner=ScriptedModel(["Done."])
    )
    [run] = patched.runs
    assert patched.ok and run.calls == 7 and run.success is False  # the rest stays broken
    assert run.summary is not None and run.summary.argument_patches == 1


def test_a_shared_patch_under_both_labels_gives_identical_traces(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    """Paper C.1: the same patch implementation serves Arg and Full."""
    planner = ScriptedModel(["Done."])  # the Full label's identical request is answered cached
    found = replay.replay_operation(
        sources["revised"], 1, "shared_patch", out=tmp_path / "s", planner=planner
    )
    assert found.ok and found.matched is True and found.difference is None
    assert [run.label for run in found.runs] == ["arg", "full"]
    for run in found.runs:
        start = events(run.run_dir)[0]
        assert isinstance(start, RunStartEvent) and start.scope.name.lower() == run.label
        realized = [e for e in after_point(run.run_dir) if e.type == "realized_operation"]
        assert [e.operation.kind for e in realized] == ["patch_arguments"]
        assert realized[0].model_called is False  # frozen: no model asked
    traces = [
        [e.call.arguments for e in events(run.run_dir) if e.type == "primitive_call"]
        for run in found.runs
    ]
    assert traces[0] == traces[1] and traces[0][2]["path"] == "/workspace/split/part_01.txt"
    assert len(planner.requests) == 1


def test_the_replay_package_documents_its_public_names() -> None:
    from test_api_shape import shape

    problems = shape.documentation_problems("controlscope.replay")
    assert [p for plist in problems.values() for p in plist] == []


@pytest.mark.slow
@pytest.mark.needs_weights
def test_the_committed_fixture_branches_with_the_local_model(tmp_path: Path) -> None:
    fixture = Path(__file__).parent / "fixtures" / "main_job"
    recording = replay.Recording.load(fixture)
    k = recording.boundaries[len(recording.boundaries) // 2][0].call_index
    model = cs.make_model("local")
    try:
        found = replay.branch(
            recording,
            at=k,
            scopes=["keep", "full"],
            out=tmp_path / "b",
            planner=model,
            reviewer=ModelReviewer(model),
        )
    finally:
        model.close()
    assert found.ok, found.divergence
    assert all(b.summary is not None and b.summary.complete for b in found.branches)
