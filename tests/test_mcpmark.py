"""MCPMark's filesystem task folders (``controlscope.envs.external``, ``--mcpmark``): found,
refused when incomplete, run on real parts (the pinned npm server, the isolated worker) with
scripted models, and graded by their own ``verify.py`` in the sandbox.

The folders under ``tests/fixtures/mcpmark`` are our own, in MCPMark's layout (see the fixtures'
README): ``notes/shout`` and ``notes/tally`` pass or fail with the agent's work, ``notes/stuck``
never finishes, ``notes/nosy`` reaches for the network and the workspace, ``notes/unfinished``
has no ``verify.py``, ``ledger/reconcile`` needs a state that is not there, and a notion task
belongs to another service.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import controlscope as cs
from controlscope import panel as cp
from controlscope import replay
from controlscope.core import FinalVerdictEvent, RunStartEvent, TaskError
from controlscope.envs import Environment, get_environment
from controlscope.envs.external import (
    MAX_FOLDER_BYTES,
    MAX_STATE_BYTES,
    CommandLimits,
    McpmarkEnvironment,
)
from controlscope.models import ScriptedModel
from controlscope.replay import Recording, ReplayError
from controlscope.review import ModelReviewer
from test_replay import KEEP

FIXTURES = Path(__file__).parent / "fixtures" / "mcpmark"
TASKS = FIXTURES / "tasks" / "filesystem" / "standard"
SHOUT = TASKS / "notes" / "shout"
NOTES = FIXTURES / "test_environments" / "notes"

SOLVE = """
root = "/workspace"
listing = list_directory(path=root)
create_directory(path=root + "/loud")
for line in listing.splitlines():
    if line.startswith("[FILE] ") and line.endswith(".txt"):
        name = line[len("[FILE] "):]
        text = read_text_file(path=f"{root}/{name}")
        write_file(path=f"{root}/loud/{name}", content=text.upper())
"""
BROKEN = SOLVE.replace("text.upper()", "text")


def script(tmp_path: Path, *answers: str) -> str:
    """A ``scripted:FILE`` model answering with ``answers`` in order."""
    path = tmp_path / f"script{len(list(tmp_path.glob('script*')))}.json"
    path.write_text(json.dumps(list(answers)))
    return f"scripted:{path}"


def program(code: str) -> str:
    return f"```python\n{code}\n```"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlscope.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def copy_task(tmp_path: Path, name: str = "shout") -> Path:
    """A copy of a fixture task folder (to break or change), with the notes state beside it."""
    target = tmp_path / "mcpmark" / "tasks" / name
    shutil.copytree(TASKS / "notes" / name, target)
    shutil.copytree(NOTES, tmp_path / "mcpmark" / "test_environments" / "notes")
    return target


# --- finding and refusing task folders -------------------------------------------------------


def test_every_task_folder_of_a_checkout_is_listed_with_its_state() -> None:
    env = get_environment(f"mcpmark:{FIXTURES}")
    assert isinstance(env, McpmarkEnvironment) and isinstance(env, Environment)
    assert env.name == f"mcpmark:{FIXTURES.resolve()}"
    tasks = {t.id: t for t in env.tasks()}
    assert sorted(tasks) == [
        "standard/ledger/reconcile",
        "standard/notes/nosy",
        "standard/notes/shout",
        "standard/notes/stuck",
        "standard/notes/tally",
    ]  # the notion task is another service's; the unfinished folder is a problem
    shout = tasks["standard/notes/shout"]
    assert (shout.category, shout.metadata["difficulty"], shout.metadata["state"]) == (
        "notes",
        "L1",
        "notes",
    )
    assert shout.metadata["state_found"] and shout.metadata["state_dir"] == str(NOTES.resolve())
    assert set(shout.metadata["data_hashes"]) == {"description.md", "meta.json", "verify.py"}
    assert shout.instruction.startswith("Make loud copies of the notes.")
    assert tasks["standard/ledger/reconcile"].metadata["state_found"] is False
    assert len(env.problems) == 1 and "unfinished" in env.problems[0]
    assert "no verify.py" in env.problems[0]


def test_controlscope_tasks_lists_a_checkout_and_names_missing_states() -> None:
    out = cli("tasks", "--mcpmark", str(FIXTURES))
    assert out.returncode == 0, out.stderr
    assert "standard/notes/shout" in out.stdout and "state_found" in out.stdout
    assert "states missing: ledger (1 task)" in out.stdout
    assert "skipped" in out.stderr and "no verify.py" in out.stderr
    listed = json.loads(cli("tasks", "--mcpmark", str(SHOUT), "--json").stdout)
    assert [t["id"] for t in listed] == ["notes/shout"]  # one folder: category/task_id
    assert listed[0]["metadata"]["data_hashes"]["verify.py"]
    out = cli("tasks", "--mcpmark", str(FIXTURES / "nowhere"))
    assert out.returncode == 2 and "no folder" in out.stderr


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        ("description.md", "no description.md"),
        ("verify.py", "no verify.py"),
        ("meta.json", "cannot be read as JSON"),
    ],
)
def test_an_incomplete_folder_is_refused_before_a_run(
    tmp_path: Path, breakage: str, expected: str
) -> None:
    folder = copy_task(tmp_path)
    if breakage == "meta.json":
        (folder / "meta.json").write_text("{not json")
    else:
        (folder / breakage).unlink()
    spec = cs.RunSpec(mcpmark=folder, model=script(tmp_path, "Done."), out=tmp_path / "r")
    with pytest.raises(cs.SpecError, match=expected):
        cs.prepare(spec)
    assert not (tmp_path / "r").exists()
    out = cli("run", "--mcpmark", str(folder), "--out", str(tmp_path / "r"))
    assert out.returncode == 2 and expected in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        ("[" * 100_000 + "]" * 100_000, "cannot be read as JSON"),  # the parser's recursion
        (json.dumps({"task_id": "x", "pad": "a" * (2 << 20)}), "longer than 1048576 bytes"),
        ('{"task_id": NaN}', "cannot be read as JSON"),
    ],
)
def test_a_hostile_meta_json_is_refused_in_one_line(
    tmp_path: Path, meta: str, expected: str
) -> None:
    folder = copy_task(tmp_path)
    (folder / "meta.json").write_text(meta)
    with pytest.raises(TaskError, match=expected):
        McpmarkEnvironment(folder)
    out = cli("tasks", "--mcpmark", str(folder))
    assert out.returncode == 2 and expected in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    listed = cli("tasks", "--mcpmark", str(folder.parent.parent))  # the checkout: one skipped
    assert listed.returncode == 0 and "skipped" in listed.stderr and expected in listed.stderr


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("task_id", "../../../escaped", "'..' is no name"),
        ("category_id", "..", "'..' is no name"),
        ("task_id", "two\nlines", "holds '\\n'"),
        ("meta_data", {"stateUrl": "https://example.invalid/x/.."}, "state '..' is no name"),
    ],
)
def test_names_from_meta_json_that_would_leave_a_folder_are_refused(
    tmp_path: Path, field: str, value: object, expected: str
) -> None:
    """A task's id names its folders in a panel, its state a folder of the checkout."""
    folder = copy_task(tmp_path)
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, field: value}))
    with pytest.raises(TaskError, match=re.escape(expected)):
        McpmarkEnvironment(folder)
    listed = cli("tasks", "--mcpmark", str(folder.parent.parent))
    assert listed.returncode == 0 and "skipped" in listed.stderr


@pytest.mark.parametrize("name", ["description.md", "meta.json", "verify.py"])
def test_a_task_file_that_links_out_of_its_folder_is_refused(tmp_path: Path, name: str) -> None:
    """A downloaded folder whose ``description.md`` links to a host file (a key) would put
    that file into the planner's prompt, sent to a model provider and recorded."""
    folder = copy_task(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text(json.dumps({"key": "sk-secret-of-this-machine"}))
    (folder / name).unlink()
    (folder / name).symlink_to(secret)
    with pytest.raises(TaskError, match=f"{name} links out of the task folder"):
        McpmarkEnvironment(folder)
    (folder / name).unlink()
    (folder / "real").mkdir()
    shutil.copy(SHOUT / name, folder / "real" / name)
    (folder / name).symlink_to(Path("real") / name)  # inside the folder: fine
    assert McpmarkEnvironment(folder).task("notes/shout").instruction.startswith("Make loud")


def test_a_checkout_folder_whose_name_cannot_be_an_id_is_skipped(tmp_path: Path) -> None:
    folder = copy_task(tmp_path)
    folder.rename(folder.parent / "bad\x1bname")
    env = McpmarkEnvironment(tmp_path / "mcpmark")
    assert env.tasks() == [] and len(env.problems) == 1 and "holds '\\x1b'" in env.problems[0]


def test_a_missing_state_is_refused_before_a_run(tmp_path: Path) -> None:
    model = script(tmp_path, "Done.")
    reconcile = TASKS / "ledger" / "reconcile"
    with pytest.raises(cs.SpecError, match="needs the initial state 'ledger'"):
        cs.prepare(cs.RunSpec(mcpmark=reconcile, model=model, out=tmp_path / "a"))
    with pytest.raises(cs.SpecError, match="is not a directory"):
        cs.prepare(
            cs.RunSpec(mcpmark=SHOUT, state=tmp_path / "none", model=model, out=tmp_path / "b")
        )
    with pytest.raises(cs.SpecError, match="holds 5 tasks"):
        cs.prepare(cs.RunSpec(mcpmark=FIXTURES, model=model, out=tmp_path / "c"))
    given = cs.prepare(cs.RunSpec(mcpmark=reconcile, state=NOTES, model=model, out=tmp_path / "d"))
    assert given.task.params == {"state": str(NOTES.resolve())}
    out = cli("run", "--state", str(NOTES), "--task", "x", "--out", str(tmp_path / "e"))
    assert out.returncode == 2 and "initial state of an MCPMark task" in out.stderr
    out = cli("run", "--out", str(tmp_path / "e"))
    assert out.returncode == 2 and "--mcpmark" in out.stderr


@pytest.mark.parametrize("option", ["--mcpmark", "--state", "--task-spec", "--out"])
def test_an_empty_path_is_refused_not_taken_for_the_current_folder(
    tmp_path: Path, option: str
) -> None:
    """``--state "$UNSET"`` named the current folder: its whole tree became the workspace."""
    given = {"--mcpmark": str(SHOUT), "--state": str(NOTES), "--out": str(tmp_path / "r")}
    given[option] = ""
    args = [a for k, v in given.items() for a in (k, v)]
    out = cli("run", *args, "--model", script(tmp_path, "Done."))
    assert out.returncode == 2 and f"{option}: an empty path" in out.stderr
    assert not (tmp_path / "r").exists()
    field = option.removeprefix("--").replace("-", "_")
    spec = {"mcpmark": SHOUT, "out": tmp_path / "r", "model": "local", field: ""}
    with pytest.raises(ValueError, match=f"{field}\n.*an empty path"):
        cs.RunSpec(**spec)


# --- verifiers in the sandbox ------------------------------------------------------------------


def _workspace(tmp_path: Path, env: McpmarkEnvironment, task: cs.Task) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env.setup(task, 0, workspace)
    return workspace


def test_a_verifier_grades_with_its_exit_status_and_its_output_is_the_reason(
    tmp_path: Path,
) -> None:
    env = McpmarkEnvironment(FIXTURES)
    task = env.task("standard/notes/tally")
    workspace = _workspace(tmp_path, env, task)
    assert (workspace / "archive" / "old.txt").is_file()
    failed = env.verify(task, workspace, {})
    assert not failed.success and failed.checks[0].name == "verify.py"
    assert failed.checks[0].reason == "exit 1; its output:\nFAIL: counts.csv is missing"
    rows = ["word,count", "the,4", "figures,2", "plan,2", "seating,2"]
    rest = "and are bring final is meeting moved new not quarterly team thursday to"
    (workspace / "counts.csv").write_text("\n".join(rows + [f"{w},1" for w in rest.split()]))
    passed = env.verify(task, workspace, {})  # a verifier of many standard-library imports
    assert passed.success, passed.checks[0].reason
    assert passed.checks[0].reason.startswith("exit 0; its output:\nPASS: counts.csv (")


def test_a_verifier_that_hangs_or_reaches_out_fails_with_the_reason(tmp_path: Path) -> None:
    env = McpmarkEnvironment(FIXTURES, verify_limits=CommandLimits(timeout_s=2))
    stuck = env.task("standard/notes/stuck")
    workspace = _workspace(tmp_path, env, stuck)
    hung = env.verify(stuck, workspace, {}).checks[0]
    assert not hung.passed
    assert hung.reason == "did not finish within 2 s (killed); its output:\nchecking done.txt ..."
    nosy = env.verify(env.task("standard/notes/nosy"), workspace, {}).checks[0]
    assert not nosy.passed and nosy.reason.startswith("exit 1")
    assert "no connection to 1.1.1.1:53" in nosy.reason and "Network is unreachable" in nosy.reason
    assert "Read-only file system" in nosy.reason
    assert not (workspace / "verifier-was-here.txt").exists()


def test_a_verifier_that_crashes_or_floods_its_output_fails_with_the_reason(
    tmp_path: Path,
) -> None:
    folder = copy_task(tmp_path)
    (folder / "verify.py").write_text("import os\nraise SystemError('the verifier broke')\n")
    env = McpmarkEnvironment(folder)
    task = env.task("notes/shout")
    workspace = _workspace(tmp_path, env, task)
    crashed = env.verify(task, workspace, {}).checks[0]
    assert not crashed.passed and crashed.reason.startswith("exit 1; its output:\nTraceback")
    assert "SystemError: the verifier broke" in crashed.reason
    (folder / "verify.py").write_text("import sys\nwhile True: sys.stdout.write('ok ' * 9999)\n")
    flooded = McpmarkEnvironment(folder, verify_limits=CommandLimits(output_mb=2))
    check = flooded.verify(flooded.task("notes/shout"), workspace, {}).checks[0]
    assert not check.passed and "its output reached the 2 MiB limit" in check.reason
    assert len(check.reason) < 20_000 and "bytes cut" in check.reason


# --- runs ------------------------------------------------------------------------------------


def test_a_run_of_a_task_folder_is_graded_by_its_verifier(tmp_path: Path) -> None:
    spec = cs.RunSpec(
        mcpmark=SHOUT,
        state=NOTES,
        model=script(tmp_path, program(SOLVE), "Done."),
        schedule="never",
        out=tmp_path / "pass",
    )
    result = cs.run_task(spec)
    assert result.verdict.success and result.end_reason == "final_answer"
    assert result.verdict.checks[0].reason.endswith("ok: loud/todo.txt\nPASS")
    start = cs.read_events(tmp_path / "pass")[0]
    assert isinstance(start, RunStartEvent) and start.task_data_hash is not None
    assert start.task.env == f"mcpmark:{SHOUT.resolve()}" and start.task.id == "notes/shout"
    assert start.task.params == {"state": str(NOTES.resolve())}
    assert set(start.task.metadata["data_hashes"]) == {"description.md", "meta.json", "verify.py"}
    failed = cs.run_task(
        spec.replace(model=script(tmp_path, program(BROKEN), "Done."), out=tmp_path / "fail")
    )
    assert not failed.verdict.success and failed.summary.primitive_calls == 8
    assert "FAIL: loud/memo.txt is not the upper-case text" in failed.verdict.checks[0].reason
    out = cli(
        "run",
        "--mcpmark",
        str(SHOUT),
        "--state",
        str(NOTES),
        "--model",
        script(tmp_path, program(SOLVE), "Done."),
        "--schedule",
        "never",
        "--quiet",
        "--out",
        str(tmp_path / "cli"),
    )
    assert out.returncode == 0, out.stderr
    assert "notes/shout seed=0 scope=full schedule=never: PASS" in out.stdout
    assert "ok  verify.py: exit 0" in out.stdout


#: Terminal control a hostile verifier or task folder may print: clear the screen, retitle the
#: window, recolour, return to the line's start and overwrite it, a NUL, a bidi override.
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x1b[31m\r  ok  verify.py: exit 0\x08\x00\u202e"


def _raw_control(text: str) -> list[str]:
    return sorted({ch for ch in text if not ch.isprintable() and ch != "\n"})


def test_untrusted_text_prints_inert_on_the_terminal(tmp_path: Path) -> None:
    folder = copy_task(tmp_path)
    (folder / "verify.py").write_text(f"print({HOSTILE!r})\nraise SystemExit(1)\n")
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "difficulty": HOSTILE[:9]}))
    model = script(tmp_path, "Done.")
    out = cli("run", "--mcpmark", str(folder), "--model", model, "--out", str(tmp_path / "r"))
    assert out.returncode == 0, out.stderr
    assert _raw_control(out.stdout) == [] and "bad verify.py: exit 1" in out.stdout
    assert "\\x1b[2J\\x1b]0;pwned\\x07\\x1b[31m\\r  ok  verify.py" in out.stdout
    listed = cli("tasks", "--mcpmark", str(folder))
    assert listed.returncode == 0 and _raw_control(listed.stdout) == []
    assert "\\x1b[2J" in listed.stdout
    (folder / "description.md").write_bytes(b"\xff" + HOSTILE.encode())
    refused = cli("run", "--mcpmark", str(folder), "--model", model, "--out", str(tmp_path / "x"))
    assert refused.returncode == 2 and _raw_control(refused.stderr) == []


def test_a_hanging_verifier_ends_the_run_recorded_and_failed(tmp_path: Path) -> None:
    env = McpmarkEnvironment(FIXTURES, verify_limits=CommandLimits(timeout_s=2))
    make = "write_file(path='/workspace/done.txt', content='')"
    prepared = cs.prepare(
        cs.RunSpec(
            env=env.name,
            task="standard/notes/stuck",
            model=script(tmp_path, program(make), "Done."),
            schedule="never",
            out=tmp_path / "r",
        )
    )
    result = cs.run_trajectory(
        env,
        prepared.task,
        seed=0,
        planner=prepared.models.planner,
        reviewer=None,
        condition=prepared.condition,
        out_dir=tmp_path / "r",
    )
    assert result.end_reason == "final_answer" and not result.verdict.success
    assert "did not finish within 2 s" in result.verdict.checks[0].reason
    assert cs.read_summary(tmp_path / "r").complete
    assert cs.read_events(tmp_path / "r")[-1].type == "run_end"


def test_a_replay_sees_that_the_task_folder_changed(tmp_path: Path) -> None:
    folder = copy_task(tmp_path)
    spec = cs.RunSpec(
        mcpmark=folder,
        model=script(tmp_path, program(SOLVE), "Done."),
        schedule="never",
        out=tmp_path / "recorded",
    )
    assert cs.run_task(spec).verdict.success
    recording = Recording.load(tmp_path / "recorded")
    assert recording.check_task() is not None  # the same task: replays
    again = cs.run_task(
        spec.replace(model=f"replay:{tmp_path / 'recorded'}", out=tmp_path / "again")
    )
    assert again.verdict.success and again.summary.primitive_calls == 8
    (folder / "verify.py").write_text((folder / "verify.py").read_text() + "\n# changed\n")
    with pytest.raises(ReplayError, match=r"files changed since .* verify\.py"):
        Recording.load(tmp_path / "recorded").check_task()
    with pytest.raises(cs.SpecError, match=r"the task's files \(verify.py changed"):
        cs.prepare(spec.replace(model=f"replay:{tmp_path / 'recorded'}", out=tmp_path / "x"))
    (folder.parent.parent / "test_environments" / "notes" / "memo.txt").write_text("other\n")
    (folder / "verify.py").write_text((SHOUT / "verify.py").read_text())
    with pytest.raises(ReplayError, match="task-data hash"):
        Recording.load(tmp_path / "recorded").check_task()


REPLACE_BROKEN = json.dumps(
    {"reason": "keep the case", "operation": "replace_workflow", "code": BROKEN}
)


def test_an_mcpmark_trajectory_forks_into_branches_like_the_filesystem(tmp_path: Path) -> None:
    """The environment serves the built-in filesystem server on a workspace that is its whole
    state, so its branches are forked (not refused, not replayed): the same workspace at the
    boundary and the same verdicts as branches that replay their prefix."""
    spec = cs.RunSpec(
        mcpmark=SHOUT,
        state=NOTES,
        model=script(tmp_path, program(SOLVE), "Done."),
        scope="keep",
        schedule="never",
        out=tmp_path / "keep",
    )
    assert cs.run_task(spec).verdict.success
    found = {
        mechanism: replay.branch(
            tmp_path / "keep",
            at=2,
            scopes=["keep", "full"],
            out=tmp_path / mechanism,
            planner=ScriptedModel(["Done."] * 2),
            reviewer=ModelReviewer(ScriptedModel([REPLACE_BROKEN, *[KEEP] * 5])),
            mechanism=mechanism,
        )
        for mechanism in ("fork", "replay")
    }
    forked, replayed = found["fork"], found["replay"]
    assert forked.ok and forked.mechanism == "fork" and forked.mechanism_note == ""
    assert replayed.ok and forked.request_hash == replayed.request_hash is not None
    for f, r in zip(forked.branches, replayed.branches, strict=True):
        assert (f.state_hash, f.files) == (r.state_hash, r.files)
        assert f.summary is not None and r.summary is not None
        assert f.summary.success == r.summary.success
        assert f.summary.file_hashes == r.summary.file_hashes
    keep, full = (b.summary for b in forked.branches)
    assert keep is not None and full is not None
    assert keep.success and full.success is False  # graded by verify.py in each branch
    out = cli("branch", str(tmp_path / "keep"), "--at", "2", "--scope", "keep",
              "--mechanism", "fork", "--model", script(tmp_path, "Done."),
              "--out", str(tmp_path / "cli"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "mechanism: fork" in out.stdout and "keep-d0: PASS" in out.stdout


def test_a_state_or_task_folder_no_task_would_have_is_refused_before_a_run(
    tmp_path: Path,
) -> None:
    """A FIFO in a state hangs every read of it; a device node copied by root is the host's
    disk in a workspace; ``--state ~`` (or ``/``) would copy a whole tree; a task folder of
    gigabytes would be hashed whole at every listing and replay."""
    folder = copy_task(tmp_path)
    model = script(tmp_path, "Done.")
    state = tmp_path / "state"
    shutil.copytree(NOTES, state)
    os.mkfifo(state / "archive" / "pipe")
    with pytest.raises(cs.SpecError, match="archive/pipe', a FIFO, socket or device"):
        cs.prepare(cs.RunSpec(mcpmark=folder, state=state, model=model, out=tmp_path / "a"))
    (state / "archive" / "pipe").unlink()
    with (state / "huge.bin").open("wb") as f:
        f.truncate(MAX_STATE_BYTES + 1)  # sparse: nothing written
    out = cli("run", "--mcpmark", str(folder), "--state", str(state), "--out", str(tmp_path / "b"))
    assert out.returncode == 2 and f"or {MAX_STATE_BYTES >> 20} MiB" in out.stderr
    assert not (tmp_path / "b").exists()
    (state / "huge.bin").unlink()
    # A checkout whose state links to the home folder would copy ~/.ssh into the workspace.
    home = Path.home()
    shutil.rmtree(tmp_path / "mcpmark" / "test_environments" / "notes")
    (tmp_path / "mcpmark" / "test_environments" / "notes").symlink_to(home)
    with pytest.raises(cs.SpecError, match=r"the initial state .* is the home folder"):
        cs.prepare(cs.RunSpec(mcpmark=folder, model=model, out=tmp_path / "c"))
    with pytest.raises(cs.SpecError, match="the initial state / is the root folder"):
        cs.prepare(cs.RunSpec(mcpmark=folder, state=Path("/"), model=model, out=tmp_path / "c"))
    with (folder / "data.bin").open("wb") as f:
        f.truncate(MAX_FOLDER_BYTES + 1)
    with pytest.raises(TaskError, match=f"the task folder .* or {MAX_FOLDER_BYTES >> 20} MiB"):
        McpmarkEnvironment(folder)


def test_a_task_error_names_the_unknown_task_and_parameter() -> None:
    env = McpmarkEnvironment(FIXTURES)
    with pytest.raises(TaskError, match="no MCPMark task 'notes/shout'"):
        env.task("notes/shout")  # in a checkout, ids are paths below it
    with pytest.raises(TaskError, match="one parameter, state=DIR"):
        env.task("standard/notes/shout", students=3)
    with pytest.raises(TaskError, match="named with a path"):
        get_environment("mcpmark")


# --- panels ----------------------------------------------------------------------------------


def _panel_config(tmp_path: Path, tasks: list[str], **params: dict[str, str]) -> Path:
    """A panel of MCPMark tasks: the checkout named relative to the config's folder."""
    planner = tmp_path / "planner.json"
    planner.write_text(json.dumps({"by": "turn", "answers": [program(SOLVE), "Done."]}))
    reviewer = tmp_path / "reviewer.json"
    reviewer.write_text(json.dumps([KEEP] * 20))
    folder = tmp_path / "configs"
    folder.mkdir(exist_ok=True)
    lines = [
        f'env = "mcpmark:{os.path.relpath(FIXTURES, folder)}"',
        f"tasks = {json.dumps(tasks)}",
        'scopes = ["keep", "full"]',
        'start = "whole"',
        *(f'params."{k}" = {{ state = "{v["state"]}" }}' for k, v in params.items()),
        "[planner]",
        f'model = "scripted:{planner}"',
        "[reviewer]",
        f'model = "scripted:{reviewer}"',
        "[execution]",
        "workers = 1",
    ]
    path = folder / "panel.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_panel_names_mcpmark_tasks_and_runs_them(tmp_path: Path) -> None:
    notes = os.path.relpath(NOTES, tmp_path / "configs")
    tasks = ["notes", "standard/ledger/reconcile"]
    config = cp.load_config(_panel_config(tmp_path, tasks, ledger={"state": notes}))
    assert config.env == f"mcpmark:{FIXTURES.resolve()}"
    plan = cp.plan_panel(config, check_models=False)
    assert plan.cluster == "category"
    assert sorted({r.task for r in plan.runs}) == [
        "standard/ledger/reconcile",
        "standard/notes/nosy",
        "standard/notes/shout",
        "standard/notes/stuck",
        "standard/notes/tally",
    ]
    reconcile = next(r for r in plan.runs if r.task == "standard/ledger/reconcile")
    assert reconcile.params == {"state": str(NOTES.resolve())}
    bare = cp.load_config(_panel_config(tmp_path, ["standard/ledger/reconcile"]))
    with pytest.raises(cp.ConfigError, match="needs the initial state 'ledger'"):
        cp.plan_panel(bare, check_models=False)
    result = cs.run_panel(_panel_config(tmp_path, ["standard/notes/shout"]), tmp_path / "panel")
    assert result.complete and result.status.successes == {"keep": 1, "full": 1}


@pytest.mark.slow
@pytest.mark.needs_weights
def test_the_local_model_runs_a_task_folder_to_a_recorded_verdict(tmp_path: Path) -> None:
    run = tmp_path / "local"
    options = ["--model", "local:0.5b", "--schedule", "never", "--max-turns", "2"]
    options += ["--max-calls", "12", "--max-tokens", "400", "--quiet", "--out", str(run)]
    out = subprocess.run(
        [sys.executable, "-m", "controlscope.cli", "run", "--mcpmark", str(SHOUT), *options],
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    summary = cs.read_summary(run)
    assert summary.complete and summary.planning_turns >= 1
    verdict = next(e for e in cs.read_events(run) if isinstance(e, FinalVerdictEvent))
    assert verdict.verdict.checks[0].name == "verify.py"
    assert ("PASS" if summary.success else "FAIL") in out.stdout
