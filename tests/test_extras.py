"""A request that needs an optional extra this installation lacks (``local``, ``ray``,
``alfworld``) is one line naming the ``pip install`` to run, exit status 2. The extra is made
missing in a subprocess: an import hook there refuses its package, as an installation without
it would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

_HIDE = """
import importlib.abc, sys

class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == {module!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Hide())
from controlscope.cli import main
sys.exit(main({argv!r}))
"""


def _without(module: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    script = _HIDE.format(module=module, argv=argv)
    data = cwd / "alfworld-data"  # the games' folders are there: only the engine is missing
    for cohort in ("valid_seen", "valid_unseen"):
        (data / "json_2.1.1" / cohort).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(SRC), "ALFWORLD_DATA": str(data)}
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
        check=False,
    )


def _panel(tmp_path: Path, backend: str, model: str) -> str:
    config = tmp_path / "panel.toml"
    config.write_text(
        'tasks = ["student_database/english_talent"]\nseeds = [0]\nscopes = ["keep"]\n'
        f'[planner]\nmodel = "{model}"\n[execution]\nbackend = "{backend}"\n'
    )
    return str(config)


@pytest.mark.parametrize(
    ("extra", "module", "argv"),
    [
        (
            "local",
            "llama_cpp",
            ["run", "--task", "student_database/english_talent", "--model", "local"],
        ),
        ("local", "llama_cpp", ["panel", "PANEL:local:scripted"]),
        ("ray", "ray", ["panel", "PANEL:ray:scripted"]),
        ("alfworld", "alfworld", ["tasks", "--env", "alfworld"]),
    ],
)
def test_a_missing_extra_names_the_pip_install_in_one_line_exit_2(
    tmp_path: Path, extra: str, module: str, argv: list[str]
) -> None:
    script = tmp_path / "answers.json"
    script.write_text('["done"]')
    argv = list(argv)
    if argv[0] == "run":
        argv += ["--out", str(tmp_path / "run")]
    if argv[0] == "panel":
        _, backend, kind = argv[1].split(":")
        model = "local" if extra == "local" else f"{kind}:{script}"
        argv = ["panel", _panel(tmp_path, backend, model), "--out", str(tmp_path / "panel")]
    done = _without(module, argv, tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, done.stderr
    assert f"pip install 'controlscope[{extra}]'" in lines[0], lines[0]
    assert "Traceback" not in done.stderr
