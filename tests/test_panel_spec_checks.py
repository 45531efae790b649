"""A panel's whole-file problems refused when its spec is built, before anything runs (a
protocol contradicted by a stated setting, a cache file that cannot be one); its progress line
ends with a line break; and a finished panel leaves its cache file alone, without SQLite's
``-wal`` and ``-shm`` files."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from controlscope import panel as cp
from controlscope.cli import main as cli
from test_api import BROKEN, TASK
from test_panel import write_config


def _refused(capsys: pytest.CaptureFixture[str], code: int, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "Traceback" not in err and all(w in err for w in words), err
    return err


def test_a_protocol_contradicted_in_the_file_is_refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(cp.ConfigError, match="v1 app protocol has lattice"):
        cp.parse_config({"tasks": [TASK], "app_protocol": "v1", "lattice": "v2"})
    with pytest.raises(cp.ConfigError, match="replace_boundary"):
        cp.parse_config({"tasks": [TASK], "app_protocol": "v2", "replace_boundary": "reply"})
    config = write_config(tmp_path, app_protocol="v1", lattice="v2")
    out = tmp_path / "panel"
    err = _refused(capsys, cli(["panel", str(config), "--out", str(out), "--quiet"]), "lattice")
    assert "{" not in err  # the file's contents are not dumped into the line
    assert not out.exists()


@pytest.mark.parametrize("name", ["/", ".", "afile/cache.sqlite", "notsqlite"])
def test_a_cache_file_that_cannot_be_one_is_refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    (tmp_path / "afile").write_text("a file\n")
    (tmp_path / "notsqlite").write_text("not a database\n" * 100)
    config = write_config(tmp_path)
    with config.open("a") as file:
        file.write(f"cache_file = {json.dumps(name if name == '/' else '../' + name)}\n")
    out = tmp_path / "panel"
    code = cli(["panel", str(config), "--out", str(out), "--quiet"])
    _refused(capsys, code, "execution.cache_file")
    assert not (out / cp.RUNS_DIR).exists()


def test_the_progress_line_ends_with_a_line_break_off_a_terminal() -> None:
    stream = io.StringIO()
    with cp.PanelProgress(Console(file=stream, force_terminal=False)) as progress:
        progress(cp.PanelStatus(total=3))
    assert stream.getvalue().endswith("runs 0/3  running 0  failed 0\n"), stream.getvalue()
    quiet = io.StringIO()
    with cp.PanelProgress(Console(file=quiet, force_terminal=False)):
        pass  # refused before the first status: nothing of the progress shows
    assert quiet.getvalue() == ""


def test_a_failed_panel_command_prints_its_error_on_a_line_of_its_own(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = write_config(tmp_path, tasks=["no_such/task"])  # refused while progress shows
    done = subprocess.run(
        [sys.executable, "-m", "controlscope.cli", "panel", str(config), "--out", "p"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2 and "no_such/task" in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("controlscope panel: "), done.stderr


def test_a_finished_panel_leaves_no_wal_or_shm_files(tmp_path: Path) -> None:
    config = write_config(tmp_path, program=BROKEN, scopes=["keep", "full"])
    out = tmp_path / "panel"
    assert cli(["panel", str(config), "--out", str(out), "--quiet"]) == 0
    assert (out / "cache.sqlite").is_file()
    left = sorted(p.name for p in out.iterdir() if p.name.startswith("cache.sqlite-"))
    assert not left


def test_a_panel_out_that_cannot_be_a_folder_is_refused_before_any_model_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_models(config: object) -> None:
        raise AssertionError("a model was built before the panel folder was checked")

    monkeypatch.setattr("controlscope.panel._plan._check_models", no_models)
    (tmp_path / "afile").write_text("a file\n")
    config = write_config(tmp_path)
    for out in (tmp_path / "afile", tmp_path / "afile" / "panel"):
        code = cli(["panel", str(config), "--out", str(out), "--quiet"])
        _refused(capsys, code, "not a directory")
