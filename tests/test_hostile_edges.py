"""What a careless user or script hands the command line, refused in one line with exit status 2
and no traceback: a loop of symbolic links wherever a path is named (a task spec, a cache, an
output folder, a panel's model file), an output folder under something that is not a folder,
an unrecognized argument holding terminal escapes and line breaks, a scripted model's answer
that is not a response; and an endpoint's answer nested too deeply to parse, a provider error."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

TASK = "file_context/file_splitting"
SCRIPT = ["```python\nprint(list_directory(path='.'))\n```", "Done."]


def controlscope(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlscope.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def refused(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit status 2 and one line on stderr holding ``words``, no traceback; the line."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder with a scripted model, a self-loop ``loop``, a two-link loop ``la`` <-> ``lb``
    and a plain file ``afile``."""
    (tmp_path / "script.json").write_text(json.dumps(SCRIPT))
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "la").symlink_to("lb")
    (tmp_path / "lb").symlink_to("la")
    (tmp_path / "afile").write_text("not a folder\n")
    return tmp_path


def _run(*extra: str) -> list[str]:
    return ["run", "--task", TASK, "--model", "scripted:script.json", "--schedule", "never",
            "--planner-format", "fenced", "--quiet", *extra]  # fmt: skip


def _panel_file(folder: Path, model: str) -> str:
    (folder / "panel.toml").write_text(
        f'tasks = ["{TASK}"]\nscopes = ["keep"]\nschedule = "never"\n'
        f'[planner]\nmodel = "{model}"\nformat = "fenced"\n'
    )
    return "panel.toml"


LOOPS: dict[str, Callable[[Path], list[str]]] = {
    "run --task-spec LOOP": lambda f: ["run", "--task-spec", "loop", "--out", "o"],
    "tasks --task-spec LOOP": lambda f: ["tasks", "--task-spec", "la"],
    "run --cache LOOP": lambda f: _run("--cache", "la", "--out", "o"),
    "run --cache LOOP/file": lambda f: _run("--cache", "loop/cache.sqlite", "--out", "o"),
    "panel --out LOOP": lambda f: [
        "panel",
        _panel_file(f, "scripted:script.json"),
        "--out",
        "loop",
    ],
    "panel --out LOOP/sub": lambda f: [
        "panel",
        _panel_file(f, "scripted:script.json"),
        "--out",
        "la/x",
    ],
    "a panel's model scripted:LOOP": lambda f: [
        "panel",
        _panel_file(f, "scripted:loop"),
        "--out",
        "o",
    ],
}


@pytest.mark.parametrize("case", sorted(LOOPS))
def test_a_loop_of_links_is_refused_in_one_line(folder: Path, case: str) -> None:
    """``Path.resolve`` raises RuntimeError on a loop (Python 3.11): the path is taken as named
    and whatever opens it refuses it."""
    done = controlscope(folder, *LOOPS[case](folder))
    refused(done)
    assert not (folder / "o" / "events.jsonl").exists()  # nothing ran


@pytest.mark.parametrize(
    ("verb", "out", "words"),
    [
        ("replay", "loop", ("out loop exists and is not a directory",)),
        ("replay", "afile/sub", ("out afile/sub cannot be made: afile is not a directory",)),
        ("branch", "la", ("la", "cannot be made: la is not a directory")),
        ("branch", "afile/b", ("cannot be made: afile is not a directory",)),
    ],
)
def test_a_replay_or_branch_out_that_cannot_be_a_folder_is_refused(
    folder: Path, verb: str, out: str, words: tuple[str, ...]
) -> None:
    recorded = controlscope(folder, *_run("--out", "rec"))
    assert recorded.returncode == 0, recorded.stderr
    extra = ["--at", "0", "--scope", "keep"] if verb == "branch" else []
    extra += ["--model", "scripted:script.json"]
    refused(controlscope(folder, verb, "rec", *extra, "--out", out), *words)


def test_an_unrecognized_argument_is_printed_inert_on_one_line(tmp_path: Path) -> None:
    done = controlscope(tmp_path, "run", "--out", "o", "--task", TASK, "\x1b[31mred\nFAKE: ok")
    line = refused(done, "unrecognized arguments")
    assert "\x1b" not in done.stderr and "\\x1b[31mred\\nFAKE: ok" in line


def test_a_scripted_answer_that_is_no_response_is_named_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "script.json").write_text(json.dumps(["ok", {"text": 5, "tool_calls": "x"}]))
    done = controlscope(tmp_path, *_run("--out", "o"))
    refused(done, "script.json: answer 1 is not a model response: text: Input should be")


DEEP = 100_000
_HEAD = "HTTP/1.1 200 OK\r\ncontent-type: {}\r\nconnection: close\r\n\r\n"
DEEP_ANSWERS = {
    "whole": _HEAD.format("application/json").encode() + b"[" * DEEP + b"]" * DEEP,
    "streamed": _HEAD.format("text/event-stream").encode()
    + b"data: "
    + b"[" * DEEP
    + b"]" * DEEP
    + b"\n\n",
}


def _read_request(conn: socket.socket) -> None:
    """Read one request whole (its headers, then its Content-Length of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(1 << 16)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length:"))
    while len(body) < length:
        body += conn.recv(1 << 16)


@pytest.mark.parametrize("how", sorted(DEEP_ANSWERS))
def test_an_answer_nested_too_deeply_is_a_provider_error(how: str) -> None:
    """An endpoint's answer of JSON nested 100,000 deep (whole or as a streamed event) is a
    malformed answer, a provider error the run records, not a RecursionError that ends it."""
    from controlscope.core import Message, ModelRequest, ProviderError
    from controlscope.models import OpenAIModel

    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    _read_request(conn)
                    conn.sendall(DEEP_ANSWERS[how])

    threading.Thread(target=answer, daemon=True).start()
    port = listener.getsockname()[1]
    model = OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1)
    request = ModelRequest(messages=(Message(role="user", content="hi"),), max_tokens=8)
    try:
        with pytest.raises(ProviderError, match="nested too deeply") as caught:
            model.complete(request)
    finally:
        model.close()
        listener.close()
    assert caught.value.kind == "other"
