"""Every file a user names is read bounded, by one reader (``controlscope.core.read_*``): a FIFO
is refused, never waited on; a device (``/dev/zero``), a directory or a file over its kind's
ceiling is refused, never read until memory runs out; bad UTF-8 and TOML or JSON nested too
deeply are refused. The command line says so in one line with exit status 2 before any model
is called; a Python caller gets a ``ValueError`` (``core.InputFileError`` at the bottom).

Commands run in subprocesses with a timeout (a reader that waits on a FIFO fails the test, it
does not hang it) and an address-space limit (one that reads ``/dev/zero`` fails at once).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from controlscope import core
from controlscope.record import LogError, read_regular, read_summary

FIXTURES = Path(__file__).parent / "fixtures"
NOTEBOOK_SPEC = FIXTURES / "task_specs"
MCPMARK_TASK = FIXTURES / "mcpmark" / "tasks" / "filesystem" / "standard" / "notes" / "shout"
TASK = "file_context/file_splitting"
DEEP = 5_000
CHILD_MEMORY = 2 << 30  # bytes of address space a command may map: /dev/zero read whole fails


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))


def child(argv: list[str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``argv`` run by this Python, bounded in time and memory."""
    return subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=_limit_memory,
    )


def deep_toml(depth: int = DEEP) -> str:
    return "x = " + "[" * depth + "]" * depth + "\n"


def deep_json(depth: int = DEEP) -> str:
    return "[" * depth + "]" * depth + "\n"


def make_bad(path: Path, kind: str, deep: str) -> None:
    """Put a bad file of ``kind`` at ``path``: a FIFO, a link to /dev/zero, or ``deep`` text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "/dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "deep":
        path.write_text(deep)
    elif kind == "bad utf-8":
        path.write_bytes(b'x = "\xff\xfe"\n')
    elif kind == "directory":
        path.mkdir()
    elif kind == "oversized":
        with path.open("wb") as f:  # sparse: no disk used, but longer than any ceiling
            f.truncate(core.MAX_SCRIPT_BYTES + 1)
    else:
        raise AssertionError(kind)


# --- every command that reads a file a user names -----------------------------------------------


def _script_run(tmp: Path, kind: str) -> list[str]:
    make_bad(tmp / "script.json", kind, deep_json())
    return ["run", "--task", TASK, "--model", "scripted:script.json", "--quiet", "--out", "out"]


def _panel(tmp: Path, kind: str) -> list[str]:
    make_bad(tmp / "panel.toml", kind, deep_toml())
    return ["panel", "panel.toml", "--out", "out"]


def _spec_run(tmp: Path, kind: str) -> list[str]:
    make_bad(tmp / "specs" / "spec.toml", kind, deep_toml())
    return ["run", "--task-spec", "specs/spec.toml", "--task", "t", "--model", "scripted:none",
            "--quiet", "--out", "out"]  # fmt: skip


def _spec_tasks(tmp: Path, kind: str) -> list[str]:
    make_bad(tmp / "specs" / "spec.toml", kind, deep_toml())
    return ["tasks", "--task-spec", "specs/spec.toml"]


def _experiment(tmp: Path, kind: str) -> list[str]:
    make_bad(tmp / "mine.toml", kind, deep_toml())
    return ["experiment", "./mine.toml", "--model", "scripted:none", "--out", "out"]


def _instruction_file(tmp: Path, kind: str) -> list[str]:
    """A task spec whose task's instruction is a file: read bounded like the spec."""
    shutil.copytree(NOTEBOOK_SPEC, tmp / "specs")
    spec = tmp / "specs" / "notebook.toml"
    text = spec.read_text()
    start = text.index("instruction = ")
    spec.write_text(text[:start] + 'instruction_file = "task.md"\n')
    make_bad(tmp / "specs" / "task.md", kind, "text\n")
    return ["tasks", "--task-spec", "specs/notebook.toml"]


def _mcpmark_meta(tmp: Path, kind: str) -> list[str]:
    shutil.copytree(MCPMARK_TASK, tmp / "task")
    (tmp / "task" / "meta.json").unlink()
    make_bad(tmp / "task" / "meta.json", kind, deep_json())
    return ["tasks", "--mcpmark", "task"]


def _replay_log(tmp: Path, kind: str) -> list[str]:
    make_bad(tmp / "recorded" / "events.jsonl", kind, deep_json())
    return ["run", "--task", TASK, "--model", "replay:recorded", "--quiet", "--out", "out"]


def _experiment_folder(tmp: Path, kind: str) -> list[str]:
    """An experiment's output folder is read back to resume it (its ``experiment.json``)."""
    (tmp / "script.json").write_text(json.dumps(["Done."]))
    make_bad(tmp / "out" / "experiment.json", kind, deep_json())
    model = f"scripted:{tmp / 'script.json'}"
    return ["experiment", "file_organisation", "--model", model, "--quiet", "--out", "out"]


COMMANDS: dict[str, Callable[[Path, str], list[str]]] = {
    "run --model scripted:F": _script_run,
    "panel F": _panel,
    "run --task-spec F": _spec_run,
    "tasks --task-spec F": _spec_tasks,
    "experiment F": _experiment,
    "a task spec's instruction_file": _instruction_file,
    "an MCPMark task's meta.json": _mcpmark_meta,
    "replay:DIR's log": _replay_log,
    "experiment --out DIR's experiment.json": _experiment_folder,
}

CASES = [
    *((name, kind) for name in COMMANDS for kind in ("fifo", "/dev/zero", "deep")),
    *(("run --model scripted:F", k) for k in ("bad utf-8", "directory", "oversized")),
    *(("panel F", k) for k in ("bad utf-8", "directory", "oversized")),
]


@pytest.mark.parametrize(("command", "kind"), CASES)
def test_a_bad_file_is_one_line_and_exit_2(tmp_path: Path, command: str, kind: str) -> None:
    if command == "a task spec's instruction_file" and kind == "deep":
        kind = "bad utf-8"  # an instruction is text: nothing nests in it
    argv = COMMANDS[command](tmp_path, kind)
    done = child(["-m", "controlscope.cli", *argv], cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "events.jsonl").exists()  # nothing ran


def test_a_device_named_directly_is_refused(tmp_path: Path) -> None:
    for argv in (
        ["run", "--task", TASK, "--model", "scripted:/dev/zero", "--quiet", "--out", "out"],
        ["panel", "/dev/zero", "--out", "out"],
        ["experiment", "/dev/zero", "--out", "out"],
    ):
        done = child(["-m", "controlscope.cli", *argv], cwd=tmp_path)
        assert done.returncode == 2, done.stderr[-2000:]
        assert done.stderr.strip().endswith(
            "/dev/zero is not a regular file (a character device); refusing to read it"
        )


# --- the same from Python ----------------------------------------------------------------------

_PYTHON_CALLERS = """
import json, sys
from pathlib import Path
fifo = sys.argv[1]
calls = {
    "read_toml": "from controlscope.core import read_toml as f; f(fifo)",
    "read_json": "from controlscope.core import read_json as f; f(fifo, 100)",
    "read_text": "from controlscope.core import read_text as f; f(fifo, 100)",
    "make_model": "from controlscope import make_model as f; f('scripted:' + fifo)",
    "load_config": "from controlscope.panel import load_config as f; f(fifo)",
    "load_experiment": "from controlscope.experiments import load_experiment as f; f(fifo)",
    "SpecEnvironment": "from controlscope.envs.external import SpecEnvironment as f; f(fifo)",
    "small_text": "from controlscope.envs.external._files import small_text as f; f(Path(fifo))",
    "file_digest": "from controlscope.envs.external._files import file_digest as f; f(Path(fifo))",
    "GameFile": "from controlscope.envs.alfworld._game import GameFile as f; f(Path(fifo))",
}
found = {}
for name, code in calls.items():
    try:
        exec(code)
        found[name] = "no error"
    except Exception as err:
        found[name] = [type(err).__name__, isinstance(err, ValueError), str(err)]
print(json.dumps(found))
"""


def test_python_callers_get_a_value_error_for_a_fifo(tmp_path: Path) -> None:
    """Each reader a Python caller reaches refuses a FIFO at once, with a ValueError naming it
    (the layer's own: ConfigError, TaskError, ExperimentError...)."""
    fifo = tmp_path / "named.toml"
    os.mkfifo(fifo)
    done = child(["-c", _PYTHON_CALLERS, str(fifo)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert len(found) == 10
    for name, outcome in found.items():
        assert outcome != "no error", name
        kind, is_value_error, message = outcome
        assert is_value_error, (name, kind)
        assert "not a regular file (a FIFO)" in message and "\n" not in message, (name, message)
    assert found["read_toml"][0] == "InputFileError"


@pytest.mark.parametrize(
    ("read", "text"),
    [(core.read_toml, deep_toml), (lambda p: core.read_json(p, 1 << 20), deep_json)],
    ids=["toml", "json"],
)
def test_nesting_is_bounded_whatever_the_parser_allows(
    tmp_path: Path, read: Callable[[Path], object], text: Callable[[int], str]
) -> None:
    """A file holds at most MAX_FILE_DEPTH containers nested in each other (a TOML file's table
    counts as one); deeper is refused, whether the parser would recurse out of its stack (5,000
    levels) or parse it (100 levels)."""
    path = tmp_path / "file"
    toml = text is deep_toml
    limit = core.MAX_FILE_DEPTH - (1 if toml else 0)  # arrays inside the file's own table
    path.write_text(text(limit))
    assert read(path)
    for depth in (limit + 1, 100, DEEP):
        path.write_text(text(depth))
        with pytest.raises(core.InputFileError, match=r"^\S+file: nested deeper than 64 levels$"):
            read(path)


def test_a_file_is_refused_when_over_its_ceiling_not_utf8_or_not_regular(tmp_path: Path) -> None:
    path = tmp_path / "panel.toml"
    path.write_text('env = "filesystem"\n')
    assert core.read_toml(path) == {"env": "filesystem"}
    with pytest.raises(core.InputFileError, match=r"panel\.toml is longer than 10 bytes$"):
        core.read_toml(path, max_bytes=10)
    with path.open("wb") as f:
        f.truncate(core.MAX_CONFIG_BYTES + 1)
    with pytest.raises(core.InputFileError, match="is longer than 1048576 bytes"):
        core.read_toml(path)
    path.write_bytes(b'env = "\xff"\n')
    with pytest.raises(core.InputFileError, match="cannot be read as UTF-8 text"):
        core.read_toml(path)
    with pytest.raises(core.InputFileError, match=r"is not a regular file \(a directory\)"):
        core.read_json(tmp_path, 100)
    with pytest.raises(core.InputFileError, match="cannot be read: No such file"):
        core.read_text(tmp_path / "absent", 100)
    with pytest.raises(FileNotFoundError):  # the bytes reader leaves OS errors to its caller
        core.read_regular(tmp_path / "absent", 100)


def test_the_log_reader_keeps_its_log_error(tmp_path: Path) -> None:
    """The trajectory store reads through the same reader and keeps its own error type."""
    os.mkfifo(tmp_path / "summary.json")
    with pytest.raises(LogError, match=r"not a regular file \(a FIFO\)"):
        read_summary(tmp_path)
    with pytest.raises(LogError, match="longer than 3 bytes"):
        (tmp_path / "small").write_text("four")
        read_regular(tmp_path / "small", 3)
    assert read_regular(tmp_path / "small", 4) == b"four"
