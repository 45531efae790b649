"""A second schedule branched from a first schedule's run at the divergence point (paper B.1:
one-time and continuous share the first review request, response and decision; B.2: the two
Full schedules share the first replacement and every earlier decision), with scripted models.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import controlscope as cs
from controlscope import replay
from controlscope.core import (
    EVENTS_FILE,
    Event,
    ModelCallEvent,
    RealizedOperationEvent,
    ReviewRequestEvent,
)
from controlscope.models import ScriptedModel
from controlscope.replay._run import run_from_prefix
from controlscope.review import ModelReviewer
from controlscope.schedule import Never
from test_api import BROKEN, SOLVE
from test_replay import KEEP, PATCH, REPLACE, fenced, record

PATCH_THREE = json.dumps(
    {
        "reason": "write part three here",
        "operation": "patch_arguments",
        "arguments": {"path": "/workspace/split/part_03.txt"},
    }
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A Keep source (7 calls), its one-time Arg branch at the midpoint (a patch at call 3),
    and a continuous Full run that replaces at call 3 (the first replacement)."""
    tmp = tmp_path_factory.mktemp("divergence")
    keep = record(tmp, "keep", [fenced(SOLVE), "Done."], [], scope="keep", schedule="never")
    one_time = replay.run_branch(
        keep,
        at="midpoint",
        scope="arg",
        out=tmp / "one_time",
        planner=ScriptedModel(["Done."] * 3),
        reviewer=ModelReviewer(ScriptedModel([PATCH_THREE])),
        schedule="once",
    )
    assert one_time.divergence is None and one_time.summary is not None
    continuous = record(
        tmp,
        "continuous",
        [fenced(BROKEN), "Done."],
        [KEEP, PATCH, REPLACE, *[KEEP] * 8],
        scope="full",
        schedule="continuous",
    )
    kept = record(tmp, "kept", [fenced(SOLVE), "Done."], [KEEP] * 10, scope="full")
    return {"keep": keep, "one_time": one_time.run_dir, "continuous": continuous, "kept": kept}


def log(run_dir: Path) -> list[Event]:
    return cs.read_events(run_dir)


def reviewer_calls(run_dir: Path) -> list[dict[str, Any]]:
    """Each reviewer call's request and answer as logged; whether the answer was replayed
    (accounting, paper A.5) aside."""
    return [
        {
            "request": e.request.model_dump(mode="json"),
            "response": e.response.model_dump(mode="json", exclude={"replayed"}),
        }
        for e in log(run_dir)
        if isinstance(e, ModelCallEvent) and e.role == "reviewer" and e.response is not None
    ]


def decisions(run_dir: Path) -> list[tuple[int, dict[str, Any]]]:
    return [
        (e.call_index, e.operation.model_dump(mode="json"))
        for e in log(run_dir)
        if isinstance(e, RealizedOperationEvent)
    ]


def reviewed_calls(run_dir: Path) -> list[int]:
    return [e.call_index for e in log(run_dir) if isinstance(e, ReviewRequestEvent)]


def test_continuous_shares_the_one_time_first_review_exactly(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """B.1: from the midpoint (K = 3 of 7 calls) both review at call 3; they part at the next
    boundary a further call follows. The continuous run's reviewer would answer Keep: its
    first review is the one-time run's recorded patch, request and answer byte for byte."""
    point = replay.schedule_divergence(runs["one_time"], "once:3+continuous")
    assert (point.first, point.second, point.call_index) == ("once:3", "once:3+continuous", 4)
    assert point.second_reviews is True and len(point.shared_reviews) == 1
    found, second = replay.branch_at_divergence(
        runs["one_time"],
        schedule="once:3+continuous",
        out=tmp_path / "continuous",
        planner=ScriptedModel(["Done."] * 3),
        reviewer=ModelReviewer(ScriptedModel([KEEP] * 10)),
    )
    assert found == point and second.divergence is None and second.summary is not None
    assert reviewed_calls(second.run_dir) == [3, 4, 5, 6]
    assert reviewed_calls(runs["one_time"]) == [3]
    shared, own = reviewer_calls(runs["one_time"]), reviewer_calls(second.run_dir)
    assert json.dumps(own[0], sort_keys=True) == json.dumps(shared[0], sort_keys=True)
    replayed = [e for e in log(second.run_dir) if isinstance(e, ModelCallEvent)]
    assert next(e for e in replayed if e.role == "reviewer").response.replayed  # type: ignore[union-attr]
    assert "patch_arguments" in own[0]["response"]["text"]
    assert decisions(second.run_dir)[0] == decisions(runs["one_time"])[0]
    assert decisions(second.run_dir)[0][1]["kind"] == "patch_arguments"
    assert all(d["kind"] == "keep" for _, d in decisions(second.run_dir)[1:])
    start = log(second.run_dir)[0]
    assert start.type == "run_start" and start.branch is not None
    assert (start.branch.purpose, start.branch.call_index) == ("divergence", 4)
    assert start.schedule == "once:3+continuous"
    checked = replay.check_shared_prefix(runs["one_time"], second.run_dir)
    assert checked.position == point.position and checked.shared_reviews == 1
    assert checked.prefix_hash == start.branch.prefix_hash


def test_protected_full_shares_the_first_replacement_and_parts_where_protection_holds(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """B.2: continuous Full reviews calls 1, 2, 3 (Keep, patch, replacement) and again at 4;
    protect:5 withholds the review at 4 (its window runs to 3 + 5 completed calls)."""
    point = replay.schedule_divergence(runs["continuous"], "protect:5")
    assert point.call_index == 4 and point.second_reviews is False
    kinds = [r.realized.kind for r in point.shared_reviews]
    assert kinds == ["keep", "patch_arguments", "replace_workflow"]
    _, protected = replay.branch_at_divergence(
        runs["continuous"],
        schedule="protect:5",
        out=tmp_path / "protected",
        planner=ScriptedModel(["Done."] * 3),
        reviewer=ModelReviewer(ScriptedModel([KEEP] * 10)),
    )
    assert protected.divergence is None and protected.summary is not None
    first = reviewer_calls(runs["continuous"])
    assert reviewer_calls(protected.run_dir) == first[:3]
    assert decisions(protected.run_dir) == decisions(runs["continuous"])[:3]
    assert reviewed_calls(protected.run_dir) == [1, 2, 3]
    assert replay.check_shared_prefix(runs["continuous"], protected.run_dir).shared_reviews == 3


def test_schedules_that_never_part_share_the_whole_run(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """No replacement: protection never activates, and the protected run is the continuous
    run replayed whole (its terminal files compared)."""
    point = replay.schedule_divergence(runs["kept"], "protect:5")
    assert point.position is None and point.second_reviews is None
    _, protected = replay.branch_at_divergence(
        runs["kept"],
        schedule="protect:5",
        out=tmp_path / "p",
        planner=None,
        reviewer=ModelReviewer(ScriptedModel([])),
    )
    recorded = cs.read_summary(runs["kept"])
    assert protected.divergence is None and protected.summary is not None
    assert protected.summary.file_hashes == recorded.file_hashes
    assert reviewer_calls(protected.run_dir) == reviewer_calls(runs["kept"])
    assert replay.check_shared_prefix(runs["kept"], protected.run_dir).position is None


def tamper(run_dir: Path, to: Path, role: str, text: str) -> Path:
    """A copy of ``run_dir`` whose first model call of ``role`` answers ``text``."""
    shutil.copytree(run_dir, to)
    lines = (to / EVENTS_FILE).read_text().splitlines()
    for i, line in enumerate(lines):
        data = json.loads(line)
        if data["type"] == "model_call" and data["role"] == role:
            data["response"]["text"] = text
            lines[i] = json.dumps(data)
            break
    (to / EVENTS_FILE).write_text("\n".join(lines) + "\n")
    return to


def test_a_tampered_shared_prefix_is_refused_naming_the_field(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    _, second = replay.branch_at_divergence(
        runs["one_time"],
        schedule="once:3+continuous",
        out=tmp_path / "continuous",
        planner=ScriptedModel(["Done."] * 3),
        reviewer=ModelReviewer(ScriptedModel([KEEP] * 10)),
    )
    edited = tamper(runs["one_time"], tmp_path / "edited", "reviewer", KEEP)
    with pytest.raises(replay.ReplayError, match=r"shared prefix differs at its event \d+ "
                       r"\(model_call\): text is"):  # fmt: skip
        replay.check_shared_prefix(edited, second.run_dir)
    with pytest.raises(replay.ReplayError, match="not a run branched at a divergence point"):
        replay.check_shared_prefix(runs["one_time"], runs["keep"])


def test_a_second_schedule_that_cannot_be_placed_is_refused(runs: dict[str, Path]) -> None:
    with pytest.raises(replay.ReplayError, match="reads the queued blocks"):
        replay.schedule_divergence(runs["keep"], "once_online")
    with pytest.raises(replay.ReplayError, match="the second schedule"):
        replay.schedule_divergence(runs["keep"], "sometimes")


def test_a_schedule_deciding_otherwise_in_the_shared_prefix_ends_the_replay_naming_it(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """The second schedule is asked at every prefix boundary and must decide as recorded:
    one that would not review where the first run did leaves the recording there."""
    recording = replay.Recording.load(runs["continuous"])
    point = replay.schedule_divergence(recording, "protect:5")
    condition = recording.condition.model_copy(update={"schedule": "never"})
    plan = replay.Plan(position=point.position, condition=condition, after=Never(), decides=True)
    outcome = run_from_prefix(
        recording,
        plan,
        out=tmp_path / "never",
        purpose="divergence",
        planner=ScriptedModel(["Done."]),
        reviewer=ModelReviewer(ScriptedModel([KEEP])),
    )
    assert outcome.divergence is not None and outcome.divergence.field == "review"
    assert outcome.divergence.boundary == 1  # the first boundary continuous Full reviewed
    assert "schedule never decides review=False at boundary 1 (call 1), in the shared prefix" in (
        outcome.divergence.message
    )


@pytest.mark.parametrize(
    ("first", "schedule"), [("continuous", "protect:5"), ("one_time", "once:3+continuous")]
)
def test_a_second_schedule_started_by_fork_ends_as_the_replayed_one(
    runs: dict[str, Path], tmp_path: Path, first: str, schedule: str
) -> None:
    """By fork (one replay of the shared prefix, its trunk removed after) and by prefix
    replay: the same events, reviews, decisions, shared prefix and terminal state; each run's
    origin names its mechanism."""
    ends = {}
    for mechanism in ("fork", "replay"):
        _, found = replay.branch_at_divergence(
            runs[first],
            schedule=schedule,
            out=tmp_path / mechanism,
            planner=ScriptedModel(["Done."] * 3),
            reviewer=ModelReviewer(ScriptedModel([KEEP] * 10)),
            mechanism=mechanism,
        )
        assert (found.mechanism, found.divergence, found.problem) == (mechanism, None, None)
        assert found.summary is not None and found.summary.complete
        start = log(found.run_dir)[0]
        assert start.type == "run_start" and start.branch is not None
        assert (start.branch.mechanism, start.branch.purpose) == (mechanism, "divergence")
        checked = replay.check_shared_prefix(runs[first], found.run_dir)
        summary = found.summary.model_dump(
            include={"success", "end_reason", "primitive_calls", "reviews", "replacements",
                     "argument_patches", "file_hashes", "state_hash"}
        )  # fmt: skip
        ends[mechanism] = (
            [e.type for e in log(found.run_dir)],
            reviewer_calls(found.run_dir),
            decisions(found.run_dir),
            reviewed_calls(found.run_dir),
            summary,
            (found.request_hash, found.state_hash),
            checked,
        )
    assert ends["fork"] == ends["replay"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fork", "replay"]  # no trunk left


def test_a_second_schedule_that_never_parts_is_not_forked(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """Nothing to fork where the schedules never part: ``fork`` refuses, naming why; ``auto``
    replays the whole run."""
    with pytest.raises(replay.ReplayError, match="cannot be forked: the schedules never part"):
        replay.branch_at_divergence(
            runs["kept"], schedule="protect:5", out=tmp_path / "p", planner=None,
            reviewer=ModelReviewer(ScriptedModel([])), mechanism="fork",
        )  # fmt: skip
    _, whole = replay.branch_at_divergence(
        runs["kept"], schedule="protect:5", out=tmp_path / "q", planner=None,
        reviewer=ModelReviewer(ScriptedModel([])),
    )  # fmt: skip
    assert whole.mechanism == "replay" and whole.summary is not None
