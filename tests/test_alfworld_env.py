"""The ALFWorld environment on real parts: the published game files (unpacked from the shared
tarball), the game's own text engine, the MCP server as a subprocess, the isolated worker and
scripted models (paper sections 4 and 5.2, appendix C.3).

Covered: the cohorts' task lists (140 and 134 games), the excluded scenes, the missing-data
message, the opening observation against the engine's, an expert plan from the trajectory data
run as a program through the server (it wins), invalid actions and the engine-fault cases
(alfworld issue #128's action pattern, TextWorld issue #366's chained command, an engine that
raises), ordinary recovery (a wrong plan fails after five repairs; a repair wins), and the two
reviewer protocols.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import controlscope as cs
from controlscope import replay
from controlscope.analysis import effort
from controlscope.cli import main as cli
from controlscope.core import ModelRequest, ModelResponse, TaskError
from controlscope.envs import get_environment
from controlscope.envs.alfworld import (
    ACTIONS,
    ENGINE_FAULT,
    AlfworldDataError,
    AlfworldEnvironment,
    Game,
    GameFile,
    expert_plan,
    plan_program,
)
from controlscope.envs.alfworld._actions import command_for
from controlscope.envs.alfworld._engine import speed_up_engine
from controlscope.models import ScriptedModel
from controlscope.review import ModelReviewer

SIMPLE = "valid_seen/look_at_obj_in_light-Bowl-None-DeskLamp-316/trial_T20190908_230702_962704"
HEAT = (
    "valid_unseen/pick_heat_then_place_in_recep-Apple-None-GarbageCan-10/"
    "trial_T20190908_145050_918567"
)
FLOOR = (  # one of its two toilet papers lies on the floor (alfworld issue #107)
    "valid_unseen/pick_two_obj_and_place-ToiletPaper-None-Cabinet-424/trial_T20190906_202926_527010"
)
CLOSED = (
    "valid_unseen/pick_and_place_simple-PepperShaker-None-Drawer-10/trial_T20190906_184021_215264"
)


ACTIONS_BY_NAME = {a.name: a for a in ACTIONS}


def fenced(code: str) -> str:
    return f"```python\n{code}```"


def script(tmp_path: Path, *answers: str) -> str:
    path = tmp_path / f"script{len(list(tmp_path.glob('script*')))}.json"
    path.write_text(json.dumps(list(answers)))
    return f"scripted:{path}"


def expert(task_id: str) -> list[tuple[str, dict[str, str]]]:
    env = AlfworldEnvironment()
    record = env.record(task_id)
    return expert_plan(
        GameFile(record.folder / "game.tw-pddl"), record.folder / "traj_data.json"
    ).calls


def events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def run(tmp_path: Path, name: str, task: str, planner: list[str], **spec: Any) -> cs.RunResult:
    options: dict[str, Any] = {"scope": "keep", "schedule": "never"} | spec
    return cs.run_task(
        cs.RunSpec(
            task=task,
            env="alfworld",
            model=script(tmp_path, *planner),
            out=tmp_path / name,
            **options,
        )
    )


# --- tasks ---------------------------------------------------------------------------------


def test_the_cohorts_hold_140_and_134_playable_games(alfworld_env: Path) -> None:
    tasks = get_environment("alfworld").tasks()
    by_cohort = collections.Counter(t.metadata["cohort"] for t in tasks)
    assert by_cohort == {"valid_seen": 140, "valid_unseen": 134}
    scenes = {
        cohort: collections.Counter(
            t.metadata["scene"] for t in tasks if t.metadata["cohort"] == cohort
        )
        for cohort in by_cohort
    }
    assert len(scenes["valid_seen"]) == 76
    assert scenes["valid_unseen"] == {10: 77, 308: 27, 424: 19, 219: 11}
    assert {t.category for t in tasks} == {
        "pick",
        "examine_in_light",
        "clean",
        "heat",
        "cool",
        "pick_two",
    }
    simple = next(t for t in tasks if t.id == SIMPLE)
    assert simple.template == "valid_seen/scene_316"  # the scene is the bootstrap cluster
    assert simple.metadata["game"].endswith(SIMPLE.split("/", 1)[1] + "/game.tw-pddl")
    assert simple.budgets.primitive_calls == 100 and simple.budgets.repairs == 5
    assert simple.instruction.endswith("Your task is to: examine the bowl with the desklamp.")


def test_excluded_scenes_leave_their_games_out_and_are_recorded(
    alfworld_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    everything = AlfworldEnvironment(excluded_scenes=()).tasks()
    monkeypatch.setenv("CONTROLSCOPE_ALFWORLD_EXCLUDED_SCENES", "316, 10")
    env = get_environment("alfworld")
    kept = env.tasks()
    left_out = [t for t in everything if t.metadata["scene"] in (10, 316)]
    assert len(left_out) > 77 and len(kept) == len(everything) - len(left_out)
    assert all(t.metadata["excluded_scenes"] == [10, 316] for t in kept)
    with pytest.raises(TaskError, match="excluded"):
        env.task(SIMPLE)
    monkeypatch.setenv("CONTROLSCOPE_ALFWORLD_EXCLUDED_SCENES", "ten")
    with pytest.raises(TaskError, match="scene numbers"):
        get_environment("alfworld")


def test_without_data_every_entry_point_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "nothing-here"))
    with pytest.raises(AlfworldDataError, match="ALFWORLD_DATA") as caught:
        get_environment("alfworld").tasks()
    assert "alfworld-download" in str(caught.value) and "valid_unseen" in str(caught.value)
    assert cli(["tasks", "--env", "alfworld"]) == 2
    assert "no ALFWorld game files found" in capsys.readouterr().err
    argv = ["run", "--env", "alfworld", "--task", SIMPLE, "--out", str(tmp_path / "r")]
    assert cli([*argv, "--model", "scripted:x.json"]) == 2
    assert "ALFWORLD_DATA" in capsys.readouterr().err


def test_the_task_list_as_json(alfworld_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["tasks", "--env", "alfworld", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 274
    row = next(r for r in rows if r["id"] == HEAT)
    assert row["category"] == "heat" and row["template"] == "valid_unseen/scene_10"
    assert row["metadata"]["task_type"] == "pick_heat_then_place_in_recep"
    assert row["metadata"]["scene"] == 10 and row["metadata"]["cohort"] == "valid_unseen"
    assert cli(["tasks", "--env", "alfworld"]) == 0
    assert "scene" in capsys.readouterr().out


def test_the_opening_and_the_names_are_the_engines(alfworld_env: Path) -> None:
    env = AlfworldEnvironment()
    for task_id in (SIMPLE, HEAT, CLOSED):
        path = env.record(task_id).folder / "game.tw-pddl"
        game, engine = GameFile(path), Game.load(path)
        assert game.opening() == engine.opening == env.task(task_id).instruction
        known = {info.id: info.name for info in engine._env._entity_infos.values()}
        assert {k: v for k, v in game.names.items() if "_bar_" in k} == {
            k: v for k, v in known.items() if "_bar_" in k
        }


def test_the_sped_up_engine_changes_no_observation(alfworld_env: Path) -> None:
    """The engine with and without its speed-up plays a plan to the same text and state."""
    env = AlfworldEnvironment()
    path = env.record(HEAT).folder / "game.tw-pddl"
    put = GameFile(path).put_template
    commands = [command_for(ACTIONS_BY_NAME[t], a, put) for t, a in expert(HEAT)]
    commands[2:2] = ["look", "inventory", "examine apple 1", "go to fridge 1", "open fridge 1"]
    played = []
    try:
        for fast in (False, True):
            assert speed_up_engine(fast) is fast
            game = Game.load(path)
            steps = [game.step(c) for c in commands]
            played.append(([s.observation for s in steps], game.state_digest(), game.won))
    finally:
        speed_up_engine(True)
    assert played[0] == played[1] and played[1][2] is True


# --- plans as programs ----------------------------------------------------------------------


@pytest.mark.parametrize("task_id", [SIMPLE, HEAT, FLOOR])
def test_the_expert_plan_run_as_a_program_through_the_server_wins(
    alfworld_env: Path, tmp_path: Path, task_id: str
) -> None:
    calls = expert(task_id)
    if task_id == FLOOR:  # the floor's toilet paper cannot be taken: another one is
        record = AlfworldEnvironment().record(FLOOR)
        plan = expert_plan(
            GameFile(record.folder / "game.tw-pddl"), record.folder / "traj_data.json"
        )
        assert plan.substitutions == {"toiletpaper 2": "toiletpaper 1"}
        assert [a["object"] for t, a in calls if t == "take"] == ["toiletpaper 3", "toiletpaper 1"]
    result = run(tmp_path, "expert", task_id, [fenced(plan_program(calls))])
    assert result.verdict.success, result.verdict
    assert result.end_reason == "goal_reached"
    summary = result.summary
    assert summary.primitive_calls == len(calls) == summary.goal_actions
    assert summary.initial_plan_success is True and summary.repairs == 0 and summary.plans == 1
    made = [
        (e["call"]["tool"], e["call"]["arguments"])
        for e in events(result.run_dir)
        if e["type"] == "primitive_call"
    ]
    assert made == calls
    start = events(result.run_dir)[0]
    assert start["server"]["name"] == "controlscope-alfworld"
    assert start["budgets"]["repairs"] == 5 and start["task"]["metadata"]["cohort"]


def test_a_wrong_plan_fails_after_five_repairs(alfworld_env: Path, tmp_path: Path) -> None:
    wrong = fenced('print(look())\nprint(go_to(receptacle="moon 1"))\n')
    right = fenced(plan_program(expert(SIMPLE)))
    result = run(tmp_path, "wrong", SIMPLE, [wrong] * 6 + [right])
    assert not result.verdict.success
    assert result.end_reason == "budget:repairs"
    summary = result.summary
    assert (summary.plans, summary.repairs, summary.planning_turns) == (6, 5, 6)
    assert summary.initial_plan_success is False and summary.goal_actions is None
    assert summary.primitive_calls == 12 and "repairs" in summary.budgets_hit
    log = events(result.run_dir)
    recoveries = [e for e in log if e["type"] == "recovery"]
    assert [e["repair"] for e in recoveries] == [1, 2, 3, 4, 5]
    assert all(e["cause"] == "completed" for e in recoveries)
    observed = [e["call"]["result"] for e in log if e["type"] == "primitive_call"]
    assert {o["text"] for o in observed[1::2]} == {"Nothing happens."}  # the game's feedback
    assert not any(o["is_error"] for o in observed)
    requests = [e["request"]["messages"] for e in log if e["type"] == "model_call"]
    assert "[recovery 5 of 5]" in requests[-1][-1]["content"]


def test_a_repair_after_a_failed_plan_wins(alfworld_env: Path, tmp_path: Path) -> None:
    calls = expert(HEAT)
    first = fenced(plan_program(calls[:2]) + 'raise RuntimeError("lost my way")\n')
    rest = fenced(plan_program(calls[2:]))
    result = run(tmp_path, "repair", HEAT, [first, rest])
    assert result.verdict.success and result.end_reason == "goal_reached"
    summary = result.summary
    assert summary.initial_plan_success is False and summary.repairs == 1
    assert summary.goal_actions == len(calls)
    (recovery,) = [e for e in events(result.run_dir) if e["type"] == "recovery"]
    assert recovery["cause"] == "error"


# --- the server: the game's feedback, engine faults -----------------------------------------


def served(env: AlfworldEnvironment, task_id: str, workspace: Path) -> Any:
    workspace.mkdir()
    env.setup(env.task(task_id), 0, workspace)
    return env.start_server(workspace)


def test_invalid_actions_and_known_engine_traps_are_the_games_feedback(
    alfworld_env: Path, tmp_path: Path
) -> None:
    env = AlfworldEnvironment()
    calls = expert(SIMPLE)
    (_, first), (_, taken) = calls[0], calls[1]
    receptacle, obj = first["receptacle"], taken["object"]
    others = [
        r
        for r in GameFile(env.record(SIMPLE).folder / "game.tw-pddl").names.values()
        if r != receptacle and r.startswith(("drawer", "shelf", "desk", "sidetable"))
    ]
    sequence = [
        ("go_to", {"receptacle": "spaceship 1"}),  # unknown: the game's feedback
        ("open", {"receptacle": f"{receptacle} then go north"}),  # TextWorld issue #366
        ("go_to", first),
        # alfworld issue #128: take, put back, examine twice, examine another receptacle
        ("take", {"object": obj, "receptacle": receptacle}),
        ("put", {"object": obj, "receptacle": receptacle}),
        ("examine", {"target": receptacle}),
        ("examine", {"target": receptacle}),
        ("examine", {"target": others[0]}),
        ("inventory", {}),
    ]
    with served(env, SIMPLE, tmp_path / "ws") as server:
        results = [server.call(tool, args) for tool, args in sequence]
    texts = [r.text for r in results]
    assert not any(r.is_error for r in results)
    assert texts[0] == texts[1] == "Nothing happens."
    assert f"You pick up the {obj}" in texts[3] and f"You put the {obj}" in texts[4]
    assert texts[5] == texts[6] and obj in texts[5]
    assert texts[8] == "You are not carrying anything."
    state = json.loads((tmp_path / "ws" / "state.json").read_text())
    assert state["actions"] == len(sequence) and state["faults"] == [] and not state["won"]
    verdict = env.verify(env.task(SIMPLE), tmp_path / "ws", {})
    assert not verdict.success and f"not won in {len(sequence)} actions" in verdict.checks[0].reason


def test_an_engine_that_raises_gives_feedback_and_the_game_goes_on(
    alfworld_env: Path, tmp_path: Path
) -> None:
    """A game whose grammar lacks the feedback of taking: the engine applies the action, then
    raises; the server answers with the fault and the game is restored to before it."""
    env = AlfworldEnvironment()
    calls = expert(SIMPLE)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    data = json.loads((env.record(SIMPLE).folder / "game.tw-pddl").read_text())
    data["grammar"] = data["grammar"].replace('"PickupObject.feedback"', '"Broken.feedback"')
    (workspace / "game.tw-pddl").write_text(json.dumps(data))
    with env.start_server(workspace) as server:
        arrived = server.call(*calls[0])
        fault = server.call(*calls[1])
        after = [
            server.call("inventory", {}),
            server.call("examine", {"target": calls[0][1]["receptacle"]}),
        ]
    assert fault.text.startswith(ENGINE_FAULT) and "PickupObject.feedback" in fault.text
    assert not fault.is_error
    assert after[0].text == "You are not carrying anything."  # restored: the take had no effect
    assert calls[1][1]["object"] in after[1].text and calls[1][1]["object"] in arrived.text
    state = json.loads((workspace / "state.json").read_text())
    assert state["actions"] == 4 and [f["action"] for f in state["faults"]] == [2]
    verdict = env.verify(env.task(SIMPLE), workspace, {})
    assert "1 engine fault" in verdict.checks[0].reason


# --- reviewer protocols -----------------------------------------------------------------------

KEEP = json.dumps({"reason": "fine", "operation": "keep"})


def test_the_fast_protocol_makes_a_bad_review_a_plan_error_that_recovery_handles(
    alfworld_env: Path, tmp_path: Path
) -> None:
    calls = expert(HEAT)
    spec = {
        "scope": "full",
        "schedule": "continuous",
        "reviewer_protocol": "fast",
        "reviewer_model": script(tmp_path, "this is no decision", *[KEEP] * 10),
    }
    plan, rest = fenced(plan_program(calls)), fenced(plan_program(calls[1:]))
    result = run(tmp_path, "fast", HEAT, [plan, rest], **spec)
    assert result.verdict.success and result.end_reason == "goal_reached"
    summary = result.summary
    assert summary.plan_errors == 1 and summary.repairs == 1
    assert summary.initial_plan_success is False and summary.fallbacks["malformed"] == 1
    log = events(result.run_dir)
    config = log[0]["config"]
    assert config["reviewer_protocol"] == "fast" and config["review_fallback"] == "plan_error"
    review = next(e for e in log if e["type"] == "model_call" and e["role"] == "reviewer")
    assert review["request"]["tool_choice"] == "required"
    assert review["request"]["max_tokens"] == 8192
    (error,) = [e for e in log if e["type"] == "plan_error"]
    assert error["fallback"] == "malformed" and error["call_index"] == 1
    stopped = next(e for e in log if e["type"] == "block_end")["result"]
    assert stopped["status"] == "cancelled" and "plan error" in stopped["error"]
    assert stopped["calls"] == 1  # the pending second call was not made
    (recovery,) = [e for e in log if e["type"] == "recovery"]
    assert recovery["cause"] == "plan_error"


def test_the_reasoning_protocol_keeps_after_a_bad_review(
    alfworld_env: Path, tmp_path: Path
) -> None:
    calls = expert(HEAT)
    spec = {
        "scope": "full",
        "schedule": "continuous",
        "reviewer_protocol": "reasoning",
        "reviewer_model": script(tmp_path, "this is no decision", *[KEEP] * 10),
    }
    result = run(tmp_path, "reasoning", HEAT, [fenced(plan_program(calls))], **spec)
    assert result.verdict.success and result.summary.initial_plan_success is True
    assert result.summary.plan_errors == 0 and result.summary.fallbacks["malformed"] == 1
    log = events(result.run_dir)
    assert log[0]["config"]["review_fallback"] == "keep"
    review = next(e for e in log if e["type"] == "model_call" and e["role"] == "reviewer")
    assert (review["request"]["tool_choice"], review["request"]["max_tokens"]) == ("auto", 16384)
    with pytest.raises(ValueError, match="fast reviewer protocol"):
        cs.RunSpec(
            task=HEAT,
            env="alfworld",
            out=tmp_path / "x",
            reviewer_protocol="fast",
            reviewer_max_tokens=100,
        )


# --- Keep, Arg and Full from the same state ---------------------------------------------------


def test_keep_arg_and_full_branch_from_the_same_state(alfworld_env: Path, tmp_path: Path) -> None:
    """A plan whose last action names a receptacle that is not there: recorded under Keep, then
    branched at that action's boundary. Keep fails the plan and recovers by ordinary repair;
    Arg patches the receptacle; Full replaces the rest of the plan. All from one (h, s)."""
    calls = expert(CLOSED)
    tool, arguments = calls[-1]
    assert tool == "put"
    right = arguments["receptacle"]
    wrong_calls = [*calls[:-1], (tool, {**arguments, "receptacle": "drawer 99"})]
    fix = fenced(plan_program([calls[-1]]))
    source = run(tmp_path, "source", CLOSED, [fenced(plan_program(wrong_calls)), fix])
    assert source.verdict.success and source.summary.repairs == 1
    patch = json.dumps(
        {
            "reason": "that drawer",
            "operation": "patch_arguments",
            "arguments": {"receptacle": right},
        }
    )
    replace = json.dumps(
        {
            "reason": "put it where we are",
            "operation": "replace_workflow",
            "code": plan_program([calls[-1]]),
        }
    )

    def decide(request: ModelRequest) -> ModelResponse:
        """Replace where Full is offered, else patch (every branch gets the reviewer as it was
        at the boundary, so its answer follows the scope, not the branches before it)."""
        offered = json.dumps([request.tools, request.json_schema], default=str)
        return ModelResponse(text=replace if "replace_workflow" in offered else patch)

    found = replay.branch(
        source.run_dir,
        at=len(calls) - 1,
        scopes=["keep", "arg", "full"],
        out=tmp_path / "branches",
        planner=ScriptedModel([fix]),
        reviewer=ModelReviewer(ScriptedModel([decide])),
    )
    assert found.ok, found.divergence
    assert len({b.state_hash for b in found.branches}) == 1  # the same s
    outcome = {b.scope: b.summary for b in found.branches}
    assert all(s is not None and s.success for s in outcome.values())
    keep, arg, full = outcome["keep"], outcome["arg"], outcome["full"]
    assert keep is not None and arg is not None and full is not None
    assert (keep.initial_plan_success, keep.repairs) == (False, 1)
    assert (arg.initial_plan_success, arg.argument_patches, arg.repairs) == (True, 1, 0)
    assert (full.initial_plan_success, full.replacements, full.repairs) == (True, 1, 0)
    assert arg.goal_actions == full.goal_actions == len(calls)
    assert keep.goal_actions == len(calls) + 1


def test_the_effort_of_a_won_game_is_its_actions_to_the_win() -> None:
    """Figure 2's thresholds count actions until the game was won, where the environment
    counts them, else primitive calls; failed runs have no effort."""
    runs = pd.DataFrame(
        {
            "success": [True, True, False],
            "primitive_calls": [30, 7, 100],
            "goal_actions": [12, None, None],
        }
    )
    assert effort(runs).tolist() == [12.0, 7.0]
    assert effort(runs.drop(columns="goal_actions")).tolist() == [30.0, 7.0]
