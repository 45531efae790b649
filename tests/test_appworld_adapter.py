"""The adapter for the real AppWorld, tested without AppWorld's data: every entry point says
what is missing; with a stand-in ``appworld`` package (``tests/fixtures/fake_appworld``) the
bridge, its MCP server and the environment run a task end to end under an app protocol and
grade it with the package's evaluator. Compatibility with the real package is not tested here
(its data cannot be had offline; the README says so)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import controlscope as cs
from controlscope.cli import main as cli
from controlscope.envs import get_environment
from controlscope.envs.apps.appworld_env import AppWorldMissing

STAND_IN = Path(__file__).parent / "fixtures" / "fake_appworld"


def fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def script(tmp_path: Path, *answers: str) -> str:
    path = tmp_path / f"script{len(list(tmp_path.glob('script*')))}.json"
    path.write_text(json.dumps(list(answers)))
    return f"scripted:{path}"


@pytest.fixture
def appworld_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An AppWorld folder with three tasks of the stand-in's counter app."""
    root = tmp_path / "appworld"
    datasets = root / "data" / "datasets"
    datasets.mkdir(parents=True)
    splits = {"dev": ["5e1f00a_1", "5e1f00a_2"], "test_normal": ["77aa01c_1"], "test_challenge": []}
    for split, ids in splits.items():
        (datasets / f"{split}.txt").write_text("".join(f"{i}\n" for i in ids))
        for n, task_id in enumerate(ids, start=2):
            folder = root / "data" / "tasks" / task_id
            folder.mkdir(parents=True)
            specs = {"instruction": f"Make the counter hold {n} and answer it.", "target": n}
            (folder / "specs.json").write_text(json.dumps(specs))
    monkeypatch.setenv("APPWORLD_ROOT", str(root))
    monkeypatch.setenv("APPWORLD_PYTHON", sys.executable)
    monkeypatch.setenv("APPWORLD_PYTHONPATH", str(STAND_IN))
    return root


def test_without_appworld_every_entry_point_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("APPWORLD_ROOT", raising=False)
    with pytest.raises(AppWorldMissing, match="APPWORLD_ROOT"):
        get_environment("appworld").tasks()
    assert cli(["tasks", "--env", "appworld"]) == 2
    assert "appworld download data" in capsys.readouterr().err
    argv = ["run", "--env", "appworld", "--task", "5e1f00a_1", "--out", str(tmp_path / "r")]
    assert cli([*argv, "--model", "scripted:x.json"]) == 2
    assert "APPWORLD_ROOT" in capsys.readouterr().err
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("APPWORLD_ROOT", str(tmp_path))
    monkeypatch.setenv("APPWORLD_PYTHON", sys.executable)  # controlscope's: no appworld here
    with pytest.raises(AppWorldMissing, match="does not import"):
        get_environment("appworld").tasks()


def test_the_official_tasks_are_listed_by_split_and_scenario(appworld_root: Path) -> None:
    tasks = get_environment("appworld").tasks()
    assert [t.id for t in tasks] == ["5e1f00a_1", "5e1f00a_2", "77aa01c_1"]
    first = tasks[0]
    assert first.template == "5e1f00a" and first.category == "dev"
    assert first.instruction == "Make the counter hold 2 and answer it."
    assert first.budgets.blocks == 40 and first.budgets.block_requests == 250


def test_a_task_runs_under_v1_and_appworlds_evaluator_grades_it(
    appworld_root: Path, tmp_path: Path
) -> None:
    code = (
        "print(api_docs__show_api_descriptions(app_name='counter'))\n"
        "counter__increment(amount=1)\n"
        "counter__increment(amount=1)\n"
        "try:\n"
        "    counter__increment(amount=0)\n"
        "except ToolError as err:\n"
        "    print('refused:', err)\n"
        "supervisor__complete_task(answer=2)\n"
    )
    result = cs.run_task(
        cs.RunSpec(
            task="5e1f00a_1",
            env="appworld",
            scope="keep",
            app_protocol="v1",
            model=script(tmp_path, fenced(code), "Done."),
            out=tmp_path / "good",
        )
    )
    assert result.verdict.success, result.verdict.checks
    assert "2 of AppWorld's tests passed" in result.verdict.checks[0].reason
    log = [json.loads(line) for line in (result.run_dir / "events.jsonl").read_text().splitlines()]
    assert log[0]["server"]["name"] == "controlscope-appworld"
    assert log[0]["config"]["app_protocol"] == "v1"
    calls = [e["call"] for e in log if e["type"] == "primitive_call"]
    assert [c["tool"] for c in calls][1:4] == ["counter__increment"] * 3
    assert calls[3]["result"]["is_error"] and "422" in calls[3]["result"]["text"]
    prompt = next(e for e in log if e["type"] == "model_call")["request"]["messages"][0]["content"]
    assert "def api_docs__show_api_doc" in prompt and "def counter__increment" not in prompt
    wrong = cs.run_task(
        cs.RunSpec(
            task="5e1f00a_1",
            env="appworld",
            scope="keep",
            schedule="never",
            model=script(tmp_path, fenced("counter__increment(amount=5)\n"), "Done."),
            out=tmp_path / "wrong",
        )
    )
    [check] = wrong.verdict.checks
    assert not check.passed and "counter holds the target" in check.reason
