"""Any MCP server's tasks from a TOML task spec (``--task-spec``, ``taskspec:FILE``): the pinned
npm filesystem server under a spec gives the built-in task's verdicts; our own stdio server
(``fixtures/task_specs/notebook_server.py``) runs confined, with a set-up command, its own
tools and verifier; a spec that cannot run is refused before a run, and one that fails during
a run is recorded.
"""

from __future__ import annotations

import json
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import controlscope as cs
from controlscope import _bwrap
from controlscope.core import (
    ModelCallEvent,
    PrimitiveCallEvent,
    RunStartEvent,
    TaskError,
    changed_data,
)
from controlscope.envs import Environment, get_environment
from controlscope.envs.external import (
    McpmarkEnvironment,
    SpecEnvironment,
    grant_network,
    load_task_spec,
)
from controlscope.envs.filesystem.environment import FilesystemEnvironment
from controlscope.envs.filesystem.server import find_server_script
from test_api import BROKEN, SOLVE, TASK
from test_replay import KEEP

SPECS = Path(__file__).parent / "fixtures" / "task_specs"
NOTEBOOK = SPECS / "notebook.toml"


def script(tmp_path: Path, *answers: str) -> str:
    path = tmp_path / f"script{len(list(tmp_path.glob('script*')))}.json"
    path.write_text(json.dumps(list(answers)))
    return f"scripted:{path}"


def program(code: str) -> str:
    return f"```python\n{code}\n```"


def split_spec(tmp_path: Path, **sections: str) -> Path:
    """A spec of the built-in file-splitting task on the pinned npm server: its state made by
    the built-in generator (seed 0), its verifier ``fixtures/task_specs/verify_split.py``.
    ``sections`` replace whole sections' bodies (``verifier="..."``)."""
    folder = tmp_path / "split"
    (folder / "state").mkdir(parents=True)
    env = FilesystemEnvironment()
    task = env.task(TASK)
    env.setup(task, 0, folder / "state")
    shutil.copy(SPECS / "verify_split.py", folder)
    script = find_server_script()
    body = {
        "server": f'command = "node"\nargs = ["{script}", "{{workspace}}"]\n'
        f'paths = ["{script.parents[3]}"]',
        "state": 'directory = "state"',
        "tools": 'read = ["read_text_file", "list_directory"]\n'
        'write = ["write_file", "create_directory"]',
        "verifier": 'command = ["{python}", "{spec_dir}/verify_split.py", '
        '"{spec_dir}/state/large_file.txt"]\ntimeout_s = 60',
        **sections,
    }
    text = "".join(f"[{name}]\n{content}\n\n" for name, content in body.items())
    text += f'[[tasks]]\nid = "{TASK}"\ncategory = "file_context"\n'
    text += f"instruction = {json.dumps(task.instruction)}\n"
    path = folder / "spec.toml"
    path.write_text(text)
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlscope.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_pinned_server_under_a_spec_gives_the_built_in_tasks_verdicts(tmp_path: Path) -> None:
    spec_file = split_spec(tmp_path)
    for name, code, success in (("solve", SOLVE, True), ("broken", BROKEN, False)):
        runs: dict[str, cs.RunResult] = {}
        for kind, where in (("builtin", {"task": TASK}), ("spec", {"task_spec": spec_file})):
            runs[kind] = cs.run_task(
                cs.RunSpec(
                    **where,
                    model=script(tmp_path, program(code), "Done."),
                    schedule="never",
                    out=tmp_path / f"{name}-{kind}",
                )
            )
        assert runs["builtin"].verdict.success is success, runs["builtin"].verdict
        assert runs["spec"].verdict.success is success, runs["spec"].verdict
        calls = {k: r.summary.primitive_calls for k, r in runs.items()}
        assert calls["builtin"] == calls["spec"] == 7
    start = cs.read_events(tmp_path / "solve-spec")[0]
    built_in = cs.read_events(tmp_path / "solve-builtin")[0]
    assert isinstance(start, RunStartEvent) and isinstance(built_in, RunStartEvent)
    assert start.task.env == f"taskspec:{spec_file}" and start.isolation == "bwrap"
    assert start.server == built_in.server  # the same pinned server, confined alike
    assert start.task_data_hash == built_in.task_data_hash  # the same initial state
    hashes = start.task.metadata["data_hashes"]
    assert str(spec_file) in hashes and str(spec_file.parent / "verify_split.py") in hashes


def test_our_own_server_runs_confined_from_its_spec_and_the_cli(tmp_path: Path) -> None:
    listed = cli("tasks", "--task-spec", str(NOTEBOOK), "--json")
    assert listed.returncode == 0 and [t["id"] for t in json.loads(listed.stdout)] == [
        "notebook/greet"
    ]
    greet = program('add_line(text="hello notebook")\nprint(read_notebook())')
    out = cli(
        "run",
        "--task-spec",
        str(NOTEBOOK),
        "--model",
        script(tmp_path, greet, "Done."),
        "--reviewer-model",
        script(tmp_path, *[KEEP] * 3),
        "--quiet",
        "--out",
        str(tmp_path / "greet"),
    )
    assert out.returncode == 0, out.stderr
    assert "notebook/greet seed=0 scope=full schedule=continuous: PASS" in out.stdout
    assert "1 reviews" in out.stdout  # at read_notebook, after the first completed call
    replayed = cli("replay", str(tmp_path / "greet"), "--out", str(tmp_path / "again"))
    assert replayed.returncode == 0, replayed.stderr
    assert "2 calls verified (2 planner, 1 reviewer requests; files match" in replayed.stdout
    assert "the notebook holds ['first line', 'hello notebook']" in out.stdout
    events = cs.read_events(tmp_path / "greet")
    first = next(e for e in events if isinstance(e, ModelCallEvent))
    assert "The notebook is reached only through the tools" in first.request.messages[0].content
    calls = [e.call for e in events if isinstance(e, PrimitiveCallEvent)]
    assert [c.tool for c in calls] == ["add_line", "read_notebook"]
    assert "first line\nhello notebook" in calls[1].result.text
    twice = program('add_line(text="hello notebook")\nadd_line(text="hello notebook")')
    failed = cs.run_task(
        cs.RunSpec(
            task_spec=NOTEBOOK,
            model=script(tmp_path, twice, "Done."),
            schedule="never",
            out=tmp_path / "twice",
        )
    )
    assert not failed.verdict.success and "'hello notebook', 'hello notebook'" in (
        failed.verdict.checks[0].reason
    )


def test_a_tool_named_like_a_builtin_replaces_it_and_the_run_warns_once(tmp_path: Path) -> None:
    """A server's tool named ``print`` is what ``print`` calls in the agent's program: the run
    says so once, in ``run_start`` and on the command line."""
    renamed = _GOOD.replace(
        'args = ["{spec_dir}/notebook_server.py"]',
        'args = ["{spec_dir}/notebook_server.py", "--rename", "add_line=print"]',
    ).replace('write = ["add_line"]', 'write = ["print"]')
    spec_file = _spec(tmp_path, renamed)
    greet = program('print("hello notebook")\nprint(text=read_notebook().splitlines()[0])')
    model = script(tmp_path, greet, "Done.")
    out = cli("run", "--task-spec", str(spec_file), "--model", model, "--schedule", "never",
              "--quiet", "--out", str(tmp_path / "r"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    warning = "tools named like Python builtins replace them in the agent's program: print"
    assert out.stderr.count(warning) == 1, out.stderr
    assert f"controlscope run: warning: {warning}\n" in out.stderr
    events = cs.read_events(tmp_path / "r")
    start = events[0]
    assert isinstance(start, RunStartEvent) and start.warnings == (warning,)
    calls = [e.call for e in events if isinstance(e, PrimitiveCallEvent)]
    assert [(c.tool, c.arguments) for c in calls] == [
        ("print", {"text": "hello notebook"}),
        ("read_notebook", {}),
        ("print", {"text": "first line"}),
    ]


def _spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    shutil.copy(SPECS / "notebook_server.py", tmp_path)
    shutil.copy(SPECS / "verify_notebook.py", tmp_path)
    return path


_GOOD = NOTEBOOK.read_text()


_SERVER_END = "timeout_s = 30\n\n[state]"
_STATE_END = "timeout_s = 30\n\n[tools]"
_VERIFIER = 'command = ["{python}", "{spec_dir}/verify_notebook.py"]'
#: (text replaced, its replacement, what the refusal says); an empty text appends.
_BREAKAGES = [
    ("", "\n[oops\n", "not TOML"),
    ("[tools]", "[tools]\nsome = 1", "tools.some: unknown key"),
    (_VERIFIER, "", "verifier.command: Field required"),
    (
        'command = "{python}"',
        'command = "no-such-server-xyz"',
        "server command 'no-such-server-xyz' is not an executable",
    ),
    (_VERIFIER, _VERIFIER.replace("{python}", "./missing.sh"), "verifier command './missing.sh'"),
    ("[tools]", 'paths = ["nowhere"]\n[tools]', "a path of the set-up 'nowhere' does not exist"),
    (_STATE_END, _STATE_END.replace("\n\n", '\ndirectory = "x"\n\n'), "directory or command"),
    ("[[tasks]]", "[[tasks]]\ninstruction_file = 'x.md'", "give instruction or instruction_file"),
    (_SERVER_END, _SERVER_END.replace("\n\n", "\nnetwork = true\n\n"), "--allow-network"),
    (_SERVER_END, _SERVER_END.replace("\n\n", '\nenv = {"A=B" = "1"}\n\n'), "not a variable"),
    # Limits the kernel cannot take (they made the verifier fail with an unclear error).
    (_VERIFIER, _VERIFIER + "\nmemory_mb = 1000000000000000", "verifier.memory_mb: Input should"),
    (_VERIFIER, _VERIFIER + "\noutput_mb = 1000000000000000", "verifier.output_mb: Input should"),
    (_STATE_END, _STATE_END.replace("30", "1e300"), "state.timeout_s: Input should"),
    ('instruction = "Add', 'instruction = "' + "x" * (1 << 20) + "Add", "longer than 1048576"),
    ("[tools]", 'paths = ["/"]\n[tools]', "the root folder, is more than a task needs"),
    # A task id names its folders in a panel: never out of it, never a control character.
    ('id = "notebook/greet"', 'id = "../../escaped/greet"', "tasks.0.id: '..' is no name"),
    ('id = "notebook/greet"', 'id = "notebook//greet"', "tasks.0.id: an empty name"),
    ('id = "notebook/greet"', 'id = "note\\nbook"', "tasks.0.id: holds '\\n'"),
]


@pytest.mark.parametrize(("old", "new", "expected"), _BREAKAGES)
def test_a_spec_that_cannot_run_is_refused_before_a_run(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    assert not old or old in _GOOD
    spec_file = _spec(tmp_path, _GOOD.replace(old, new) if old else _GOOD + new)
    run = cs.RunSpec(task_spec=spec_file, model=script(tmp_path, "Done."), out=tmp_path / "r")
    with pytest.raises(cs.SpecError, match=re.escape(expected)):
        cs.prepare(run)
    assert not (tmp_path / "r").exists()
    out = cli("run", "--task-spec", str(spec_file), "--out", str(tmp_path / "r"))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1


def test_a_replay_sees_a_changed_script_the_spec_runs_as_its_command(tmp_path: Path) -> None:
    """Scripts a spec runs directly (``./verify.sh``), not only those it passes as arguments,
    are the task's files: a replay after editing one refuses the changed task (paper A.4)."""
    verifier = tmp_path / "verify.sh"
    verifier.write_text("#!/bin/sh\ngrep -q 'hello notebook' /workspace/notebook.txt\n")
    verifier.chmod(0o755)
    server = tmp_path / "server.sh"
    server.write_text(f'#!/bin/sh\nexec "$1" "{tmp_path}/notebook_server.py"\n')
    server.chmod(0o755)
    spec_file = _spec(
        tmp_path,
        _GOOD.replace(_VERIFIER, 'command = ["./verify.sh"]')
        .replace('command = "{python}"', 'command = "./server.sh"')
        .replace('args = ["{spec_dir}/notebook_server.py"]', 'args = ["{python}"]'),
    )
    recorded = SpecEnvironment(spec_file).task("notebook/greet")
    assert {str(verifier), str(server)} <= set(recorded.metadata["data_hashes"])
    for script_file in (verifier, server):
        script_file.write_text(script_file.read_text() + "# changed\n")
        today = SpecEnvironment(spec_file).task("notebook/greet")
        assert changed_data(recorded, today) == [str(script_file)]
        recorded = today
    assert "{python}" not in str(recorded.metadata["data_hashes"])
    assert str(_bwrap.base_interpreter()) not in recorded.metadata["data_hashes"]


def test_the_network_is_granted_only_when_the_spec_asks_and_the_user_allows(
    tmp_path: Path,
) -> None:
    asks = _spec(
        tmp_path,
        _GOOD.replace(_SERVER_END, _SERVER_END.replace("\n\n", "\nnetwork = true\n\n")),
    )
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    reach = {"host": "127.0.0.1", "port": port}
    try:
        for env, expected in (
            (SpecEnvironment(NOTEBOOK), "unreachable"),  # the spec does not ask
            (grant_network(SpecEnvironment(asks)), "reached"),
        ):
            workspace = tmp_path / f"ws-{expected}"
            workspace.mkdir()
            task = env.task("notebook/greet")
            assert task.metadata["network"] is (expected == "reached")
            env.setup(task, 0, workspace)
            with env.start_server(workspace) as server:
                answer = server.call("reach", reach, timeout_s=20).text
            assert answer.startswith(expected), answer
    finally:
        pending, _, _ = select.select([listener], [], [], 0)
        listener.close()
    assert pending  # the granted server's connection
    with pytest.raises(TaskError, match="--allow-network"):
        SpecEnvironment(asks).task("notebook/greet")
    with pytest.raises(TaskError, match="has none"):
        grant_network(SpecEnvironment(NOTEBOOK))
    granted = cs.prepare(
        cs.RunSpec(
            task_spec=asks,
            allow_network=True,
            model=script(tmp_path, "Done."),
            out=tmp_path / "granted",
        )
    )
    assert granted.task.metadata["network"] is True
    with pytest.raises(cs.SpecError, match="has none"):
        cs.prepare(cs.RunSpec(task=TASK, allow_network=True, model="local", out=tmp_path / "no"))


def test_a_failing_set_up_command_stops_the_run_before_it_starts(tmp_path: Path) -> None:
    spec_file = _spec(
        tmp_path,
        _GOOD.replace(
            """"-c", "open(""",
            """"-c", "import sys; print('no state for you'); sys.exit(3); open(""",
        ),
    )
    env = SpecEnvironment(spec_file)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with pytest.raises(TaskError, match="set-up command of notebook/greet failed: exit 3"):
        env.setup(env.task("notebook/greet"), 0, workspace)
    out = cli(
        "run",
        "--task-spec",
        str(spec_file),
        "--model",
        script(tmp_path, "Done."),
        "--out",
        str(tmp_path / "r"),
    )
    assert out.returncode == 2 and "no state for you" in out.stderr
    assert not (tmp_path / "r" / "events.jsonl").exists()


def test_a_spec_that_fails_during_a_run_is_recorded_and_graded(tmp_path: Path) -> None:
    hangs = _spec(
        tmp_path,
        _GOOD.replace(
            'command = ["{python}", "{spec_dir}/verify_notebook.py"]\ntimeout_s = 30',
            'command = ["{python}", "-c", "import time; time.sleep(999)"]\ntimeout_s = 1',
        ),
    )
    greet = program('add_line(text="hello notebook")')
    result = cs.run_task(
        cs.RunSpec(
            task_spec=hangs,
            model=script(tmp_path, greet, "Done."),
            schedule="never",
            out=tmp_path / "hangs",
        )
    )
    assert result.end_reason == "final_answer" and not result.verdict.success
    assert result.verdict.checks[0].reason == "did not finish within 1 s (killed); no output"
    lacking = tmp_path / "lacking"
    lacking.mkdir()
    spec_file = _spec(lacking, _GOOD.replace('read = ["read_notebook"]', 'read = ["peek"]'))
    result = cs.run_task(
        cs.RunSpec(
            task_spec=spec_file,
            model=script(tmp_path, greet, "Done."),
            out=tmp_path / "no-tool",
        )
    )
    assert result.end_reason == "environment_error" and "['peek']" in result.detail
    assert not result.verdict.success  # graded as the workspace stands: the state's one line
    assert cs.read_summary(tmp_path / "no-tool").complete


def test_the_cli_says_why_a_server_failed_its_run(tmp_path: Path) -> None:
    """A server that crashes at start (or never answers) ends the run recorded; the CLI prints
    why, not only ``environment_error``."""
    crash = "import sys; sys.stderr.write('no database for you' + chr(10)); sys.exit(7)"
    spec_file = _spec(
        tmp_path,
        _GOOD.replace('args = ["{spec_dir}/notebook_server.py"]', f"args = ['-c', {crash!r}]"),
    )
    model = script(tmp_path, "Done.")
    out = cli("run", "--task-spec", str(spec_file), "--model", model, "--out", str(tmp_path / "r"))
    assert out.returncode == 0, out.stderr
    assert "FAIL (environment_error;" in out.stdout
    assert "  why: the tool server did not start: " in out.stdout
    assert "no database for you" in out.stdout
    assert cs.read_summary(tmp_path / "r").complete


def test_a_spec_in_a_folder_that_holds_far_more_than_it_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec's folder is shown to its server and commands: a spec kept in the home folder (or
    the temporary folder, or ``/``) would show them ``~/.ssh`` (or other runs' workspaces)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    monkeypatch.setenv("HOME", str(home))
    for folder in (home, Path(tempfile.gettempdir())):
        spec_file = folder / f"spec-{tmp_path.name}.toml"
        spec_file.write_text(_GOOD)
        try:
            with pytest.raises(TaskError, match="put the spec in a folder of its own"):
                SpecEnvironment(spec_file)
        finally:
            spec_file.unlink()
    (home / "specs").mkdir()
    assert SpecEnvironment(_spec(home / "specs", _GOOD)).task("notebook/greet")
    for name in ("description.md", "verify.py"):  # an MCPMark task folder's verifier sees it
        (home / name).write_text("print('hi')\n")
    with pytest.raises(TaskError, match="is the home folder, not an MCPMark task folder"):
        McpmarkEnvironment(home)


def test_an_instruction_file_is_read_bounded(tmp_path: Path) -> None:
    """An instruction goes into every prompt and into ``run_start``: 1 MiB at most."""
    instruction = (
        'instruction = "Add the line `hello notebook` to the notebook, after its first line."'
    )
    spec_file = _spec(tmp_path, _GOOD.replace(instruction, 'instruction_file = "task.md"'))
    (tmp_path / "task.md").write_text("x" * ((1 << 20) + 1))
    with pytest.raises(TaskError, match=r"task\.md is longer than 1048576 bytes"):
        SpecEnvironment(spec_file).task("notebook/greet")
    (tmp_path / "task.md").write_bytes(b"\xff\xfe not text")
    with pytest.raises(TaskError, match="cannot be read as UTF-8"):
        SpecEnvironment(spec_file).task("notebook/greet")


def test_an_environment_named_with_a_path_needs_one() -> None:
    assert isinstance(get_environment(f"taskspec:{NOTEBOOK}"), Environment)
    with pytest.raises(TaskError, match="taskspec:PATH"):
        get_environment("taskspec:")
    with pytest.raises(TaskError, match="no task spec file"):
        get_environment("taskspec:/nonexistent/spec.toml")
    with pytest.raises(TaskError, match="mcpmark:PATH, taskspec:PATH"):
        get_environment("moon")


# --- the server in the mcpServers format ------------------------------------------------------


def _mcp_forms(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The split spec three ways: ``[server]``, ``[mcpServers.files]`` and ``mcpServers =
    "servers.json"`` (the same server; ``[server]`` keeps what it reads)."""
    plain = split_spec(tmp_path)
    script = find_server_script()
    entry = {"command": "node", "args": [str(script), "{workspace}"]}
    paths = f'paths = ["{script.parents[3]}"]'
    table = split_spec(
        tmp_path / "table",
        server=paths,
        **{"mcpServers.files": f'command = "node"\nargs = {json.dumps(entry["args"])}'},
    )
    from_json = split_spec(tmp_path / "json", server=paths)
    (from_json.parent / "servers.json").write_text(json.dumps({"mcpServers": {"files": entry}}))
    from_json.write_text('mcpServers = "servers.json"\n' + from_json.read_text())
    return plain, table, from_json


def test_a_spec_names_its_server_in_the_mcp_servers_format(tmp_path: Path) -> None:
    plain, table, from_json = _mcp_forms(tmp_path)
    expected = load_task_spec(plain).server
    assert load_task_spec(table).server == expected == load_task_spec(from_json).server
    result = cs.run_task(
        cs.RunSpec(
            task_spec=table,
            model=script(tmp_path, program(SOLVE), "Done."),
            schedule="never",
            out=tmp_path / "run",
        )
    )
    assert result.verdict.success and result.summary.primitive_calls == 7


_MCP_BREAKAGES = [
    ('[mcpServers.a]\ncommand = "x"\n[mcpServers.b]\ncommand = "x"\n', "not 2"),
    ('[server]\ncommand = "x"\n[mcpServers.a]\ncommand = "x"\n', "given in mcpServers too"),
    ('[mcpServers.a]\ncommand = "x"\nurl = "http://x"\n', "server 'a': unknown field 'url'"),
    ('[mcpServers.a]\ncommand = "x"\ncwd = "/tmp"\n', "cwd, workspace and read are the spec's"),
]


@pytest.mark.parametrize(("servers", "expected"), _MCP_BREAKAGES)
def test_a_bad_mcp_servers_entry_is_one_line_before_a_run(
    tmp_path: Path, servers: str, expected: str
) -> None:
    head, rest = _GOOD.split("[server]", 1)
    spec_file = _spec(tmp_path, head + servers + "\n[state]" + rest.split("[state]", 1)[1])
    with pytest.raises(TaskError, match=re.escape(expected)) as caught:
        load_task_spec(spec_file)
    assert "\n" not in str(caught.value)
    out = cli("run", "--task-spec", str(spec_file), "--out", str(tmp_path / "r"))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
