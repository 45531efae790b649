"""``controlscope setup``: the pinned MCP filesystem server installed with a real ``npm ci`` into
a temporary ``CONTROLSCOPE_HOME``, found there by an installation that is not a checkout, and
started; what is missing said in one line.

npm answers from its own cache here (``npm_config_offline``): the repository's ``npm ci`` has
put every pinned package there, so no registry is reached.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlscope.core import TaskError
from controlscope.envs.filesystem import _install, server
from controlscope.models import KNOWN_MODELS, weights_dir

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh ``CONTROLSCOPE_HOME``, seen by this package as an installation from a wheel
    (no checkout around it)."""
    folder = tmp_path / "home"
    monkeypatch.setenv("CONTROLSCOPE_HOME", str(folder))
    monkeypatch.setenv("npm_config_offline", "true")
    monkeypatch.delenv(server.NODE_MODULES_ENV, raising=False)
    monkeypatch.setattr(server, "_checkout_root", lambda: None)
    yield folder


def _setup(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlscope.cli", "setup", "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(SRC), **(env or {})},
        check=False,
    )


def test_setup_installs_the_pinned_server_where_an_installed_package_finds_and_starts_it(
    home: Path, tmp_path: Path
) -> None:
    with pytest.raises(TaskError) as missing:
        server.find_server_script()
    assert "controlscope setup" in str(missing.value) and "npm ci" not in str(missing.value)
    done = _setup()
    assert done.returncode == 0, done.stderr
    script = home / "mcp-servers" / "node_modules" / _install.SERVER_SCRIPT
    assert done.stdout.strip().splitlines()[-1] == f"MCP filesystem server: {script}"
    lock = json.loads((home / "mcp-servers" / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/@modelcontextprotocol/server-filesystem"]["version"]
    installed = json.loads((script.parents[1] / "package.json").read_text())["version"]
    assert installed == pinned
    assert server.find_server_script() == script.resolve()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "note.txt").write_text("hello from the cache\n")
    started = server.start_filesystem_server(workspace)
    try:
        names = {tool.name for tool in started.list_tools()}
        assert {"read_text_file", "write_file"} <= names
        root = started.agent_roots[0]
        answer = started.call("read_text_file", {"path": f"{root}/note.txt"})
        assert "hello from the cache" in answer.text
    finally:
        started.close()
    again = _setup()  # idempotent: the complete install of the same pin is kept
    assert again.returncode == 0 and again.stdout == done.stdout


def test_a_package_that_does_not_match_the_lock_files_hash_is_refused(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = _install._pin

    def tampered(name: str) -> bytes:
        data = real(name)
        if name != "package-lock.json":
            return data
        lock = json.loads(data)
        entry = lock["packages"]["node_modules/@modelcontextprotocol/server-filesystem"]
        entry["integrity"] = "sha512-" + "A" * 86 + "=="
        return json.dumps(lock).encode()

    monkeypatch.setattr(_install, "_pin", tampered)
    with pytest.raises(_install.SetupError, match="npm ci` failed") as caught:
        _install.install_server()
    assert "\n" not in str(caught.value)
    assert not (home / "mcp-servers").exists()
    assert list(home.iterdir()) == []  # no half-made install left beside it


def test_without_npm_or_node_setup_says_what_is_missing_in_one_line(
    home: Path, tmp_path: Path
) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    done = _setup(env={"PATH": str(bare), "CONTROLSCOPE_HOME": str(home)})
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Node.js (`node`) and npm not found on PATH" in lines[0]
    assert "controlscope setup" in lines[0]
    assert not home.exists()
    (bare / "node").symlink_to(shutil.which("node") or "node")  # Node.js alone: npm missing
    done = _setup(env={"PATH": str(bare), "CONTROLSCOPE_HOME": str(home)})
    assert done.returncode == 1 and "npm not found on PATH" in done.stderr
    assert "Node.js (`node`)" not in done.stderr


def test_setup_refuses_an_unknown_model_before_installing_anything(home: Path) -> None:
    done = _setup("--weights", "7b")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "controlscope setup: '7b' names no known embedded model (1.5b, 0.5b)"
    )
    assert not home.exists()


@pytest.mark.needs_weights
def test_setup_with_weights_fetches_them_as_model_pull_does(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 0.5B model's weights, already in this machine's cache, are linked (a hard link)
    into the new home: setup checks them against the published digest there and names them
    (no download)."""
    model = KNOWN_MODELS["0.5b"]
    monkeypatch.delenv("CONTROLSCOPE_HOME")
    cached = (weights_dir() / model.file_name).resolve()
    (home / "models").mkdir(parents=True)
    os.link(cached, home / "models" / model.file_name)
    done = _setup("--weights", "0.5b", env={"CONTROLSCOPE_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"weights: {home / 'models' / model.file_name}"


def test_a_home_that_cannot_be_a_folder_is_one_line(home: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder\n")
    (tmp_path / "loop").symlink_to("loop")
    for given in (tmp_path / "file" / "home", tmp_path / "loop"):
        done = _setup(env={"CONTROLSCOPE_HOME": str(given)})
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and len(lines) == 1, done.stderr
        assert lines[0].startswith(f"controlscope setup: cannot make {given}/: ")


def test_the_build_of_a_killed_setup_is_removed_by_the_next(home: Path) -> None:
    """A setup SIGKILLed while npm ci runs leaves its build folder beside the install; it is
    named with its owner, so the next setup removes it."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    setup = subprocess.Popen(
        [sys.executable, "-m", "controlscope.cli", "setup", "--quiet"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    npm = None
    try:
        deadline = time.monotonic() + 120
        while npm is None and time.monotonic() < deadline and setup.poll() is None:
            children = Path(f"/proc/{setup.pid}/task/{setup.pid}/children").read_text().split()
            npm = int(children[0]) if children else None
            time.sleep(0.05)
        assert npm is not None, "setup started no npm"
    finally:
        setup.kill()
        setup.wait()
    with contextlib.suppress(ProcessLookupError):
        os.kill(npm, signal.SIGKILL)  # orphaned: npm goes on without its parent
    left = [p.name for p in home.iterdir()]
    assert len(left) == 1 and left[0].startswith("mcp-servers-build-@"), left
    done = _setup()
    assert done.returncode == 0, done.stderr
    assert [p.name for p in home.iterdir()] == ["mcp-servers"]
