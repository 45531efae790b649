"""An environment's optional capabilities are declared by the ``Environment`` protocol with
defaults: an environment that overrides none of them runs, branches, lists its tasks and is
refused the network like any other, and one that declares a capability gets it wherever it is
read (no reader tests an environment's name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import controlscope as cs
import controlscope.panel as cp
from controlscope import replay
from controlscope.cli import main as cli
from controlscope.core import (
    AnswerKey,
    ClusterBy,
    ModelCallEvent,
    PlannerFormat,
    Task,
    TaskError,
    ToolSchema,
    ToolServer,
    Verdict,
)
from controlscope.envs import ENVIRONMENTS, Environment, get_environment
from controlscope.envs.external import grant_network
from controlscope.envs.filesystem.environment import FilesystemEnvironment
from controlscope.models import ScriptedModel
from controlscope.planner import render_signature
from controlscope.run._fork import env_unforkable
from test_api import SOLVE, TASK, script
from test_replay import fenced


class Plain(Environment):
    """The filesystem's tasks under another name, with none of the optional capabilities:
    every required method is the filesystem environment's, nothing else is overridden."""

    name = "plain"
    read_tools = FilesystemEnvironment.read_tools
    write_tools = FilesystemEnvironment.write_tools

    def __init__(self) -> None:
        self._fs = FilesystemEnvironment()

    def _own(self, task: Task) -> Task:
        return task.model_copy(update={"env": self.name})

    def tasks(self) -> list[Task]:
        return [self._own(t) for t in self._fs.tasks()]

    def task(self, task_id: str, **params: Any) -> Task:
        return self._own(self._fs.task(task_id, **params))

    def setup(self, task: Task, seed: int, workspace: Path) -> AnswerKey:
        return self._fs.setup(task, seed, workspace)

    def start_server(self, workspace: Path) -> ToolServer:
        return self._fs.start_server(workspace)

    def verify(self, task: Task, workspace: Path, answer_key: AnswerKey) -> Verdict:
        return self._fs.verify(task, workspace, answer_key)

    def normalise_observation(self, text: str, *, since: float | None = None) -> str:
        return self._fs.normalise_observation(text, since=since)

    def state_hash(self, task: Task, workspace: Path, *, since: float | None = None) -> str:
        return self._fs.state_hash(task, workspace, since=since)

    def file_hashes(
        self, task: Task, workspace: Path, *, since: float | None = None
    ) -> dict[str, str]:
        return self._fs.file_hashes(task, workspace, since=since)

    def planner_example(self, fmt: PlannerFormat) -> str:
        return self._fs.planner_example(fmt)

    def planner_note(self) -> str | None:
        return self._fs.planner_note()

    def error_hint(self, error: str) -> str | None:
        return self._fs.error_hint(error)


class ByCategory(Plain):
    """The same, declaring one capability: its panels cluster by category."""

    name = "bycategory"
    cluster_by: ClusterBy = "category"


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """``plain`` and ``bycategory`` are environment names, as a new environment's would be."""
    monkeypatch.setitem(ENVIRONMENTS, "plain", f"{__name__}:Plain")
    monkeypatch.setitem(ENVIRONMENTS, "bycategory", f"{__name__}:ByCategory")


def test_an_environment_that_declares_no_capability_has_the_defaults(registered: None) -> None:
    env = get_environment("plain")
    assert isinstance(env, Plain) and isinstance(env, Environment)
    assert env.state_in_workspace is False and env.cluster_by == "template"
    assert list(env.problems) == []
    tools = [ToolSchema(name=n, description=n) for n in ("a", "b")]
    assert env.prompt_tools(tools) == tools
    assert env_unforkable(env) is not None
    with pytest.raises(TaskError, match="plain has none"):
        env.with_network()
    with pytest.raises(TaskError, match="plain has none"):
        grant_network(env)


def test_an_environment_without_capabilities_runs_branches_and_lists_its_tasks(
    registered: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its prompt lists every tool, its branches replay their prefix (its state is not declared
    to be its workspace), ``tasks`` prints no problem, ``--allow-network`` is refused in one
    line."""
    planner = script(tmp_path, fenced(SOLVE), "Done.")
    source = cs.run_task(cs.RunSpec(env="plain", task=TASK, model=planner, out=tmp_path / "src"))
    assert source.summary.complete and source.verdict.success
    first = next(e for e in cs.read_events(source.run_dir) if isinstance(e, ModelCallEvent))
    assert first.request is not None
    system = first.request.messages[0].content
    (tmp_path / "ws").mkdir()
    with FilesystemEnvironment().start_server(tmp_path / "ws") as server:
        tools = server.list_tools()
    assert len(tools) > 5 and all(render_signature(tool) in system for tool in tools)
    found = replay.branch(
        source.run_dir,
        out=tmp_path / "branches",
        at=1,
        scopes=["keep"],
        planner=ScriptedModel(["Done."] * 3),
        reviewer=None,
    )
    assert found.ok and found.mechanism == "replay"
    assert "plain environment's state is not only its workspace" in found.mechanism_note
    assert found.branches[0].summary is not None and found.branches[0].summary.success

    capsys.readouterr()
    assert cli(["tasks", "--env", "plain"]) == 0
    listed = capsys.readouterr()
    assert TASK in listed.out and "skipped" not in listed.err

    argv = ["run", "--env", "plain", "--task", TASK, "--model", planner, "--allow-network"]
    assert cli([*argv, "--out", str(tmp_path / "net")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--allow-network" in err and "plain has none" in err and "\n" not in err
    assert not (tmp_path / "net").exists()


def test_a_panel_clusters_by_what_its_environment_declares(
    registered: None, tmp_path: Path
) -> None:
    def plan(env: str, cluster: ClusterBy | None = None) -> ClusterBy:
        config = cp.PanelConfig.model_validate(
            {"env": env, "tasks": [TASK], "planner": {"model": "scripted:x.json"}}
            | ({"cluster": cluster} if cluster else {})
        )
        return cp.plan_panel(config, check_models=False).cluster

    assert plan("bycategory") == "category"  # a new environment's declaration
    assert plan("plain") == "template"  # the default
    assert plan("filesystem") == "category"
    assert plan("bycategory", "task") == "task"  # the panel's own choice first
