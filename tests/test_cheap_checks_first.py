"""Every command checks its options (an output folder that cannot be made, above all) before it
builds a model, which for the embedded model means loading its weights; and a refusal that
quotes an endpoint's multi-line answer is still one line."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from controlscope.cli import _console
from controlscope.cli import main as cli

FIXTURE = Path(__file__).parent / "fixtures" / "main_job"
TASK = "file_context/file_splitting"


class Built(AssertionError):
    """A model was built before the options were checked."""


def _no_models(*args: Any, **kwargs: Any) -> Any:
    raise Built("a model was built before the output folder was checked")


@pytest.fixture
def afile(tmp_path: Path) -> Path:
    path = tmp_path / "afile"
    path.write_text("not a folder\n")
    return path


def _refused(capsys: pytest.CaptureFixture[str], code: int, *words: str) -> None:
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert all(w in err for w in words), err


def test_branch_without_a_model_checks_out_before_building_the_local_model(
    afile: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("controlscope.cli._branch.build_live", _no_models)
    code = cli(["branch", str(FIXTURE), "--at", "0", "--scope", "keep,full",
                "--out", str(afile / "b")])  # fmt: skip
    _refused(capsys, code, "not a directory")


def test_branch_into_a_folder_holding_branches_is_refused_before_building_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "branches.json").write_text("{}")
    monkeypatch.setattr("controlscope.cli._branch.build_live", _no_models)
    code = cli(["branch", str(FIXTURE), "--at", "0", "--scope", "keep",
                "--out", str(tmp_path / "b")])  # fmt: skip
    _refused(capsys, code, "already holds branches")


def test_replay_of_an_operation_checks_out_before_building_a_model(
    afile: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from controlscope.replay import Recording

    # the fixture's only review kept; any operation the retained endpoint replays will do
    monkeypatch.setattr(Recording, "operation", lambda self, i: SimpleNamespace(index=i))
    monkeypatch.setattr("controlscope.cli._replay.build_live", _no_models)
    code = cli(["replay", str(FIXTURE), "--operation", "0", "--endpoint", "retained",
                "--out", str(afile / "r")])  # fmt: skip
    _refused(capsys, code, "not a directory")


def test_run_checks_out_before_building_its_models(
    afile: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("controlscope.run._spec.build_models", _no_models)
    code = cli(["run", "--task", TASK, "--out", str(afile / "o"), "--quiet"])
    _refused(capsys, code, "not a directory")


@pytest.mark.parametrize("text", ["500: upstream\nerror body\r\nline 3", "a\u2028b\x85c"])
def test_a_refusal_quoting_a_multi_line_answer_is_one_line(text: str) -> None:
    stream = io.StringIO()
    console = Console(file=stream, width=400, soft_wrap=True)
    assert _console.fail(console, "run", f"the endpoint answered {text}", 3) == 3
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith(text[-1]), stream.getvalue()


@pytest.mark.parametrize(
    ("script", "words"),
    [
        ({"bogus": 1}, "keys bogus"),
        ([{"bogus": 1}], "answer 0 is not a model response: bogus: Extra inputs"),
        (["Done.", {}], "answer 1 is not a model response: an answer states its text"),
        ({"by": "sometimes", "answers": ["Done."]}, "keys answers, by"),
    ],
)
def test_a_scripted_model_file_of_another_format_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], script: object, words: str
) -> None:
    (tmp_path / "script.json").write_text(json.dumps(script))
    code = cli(["run", "--task", TASK, "--model", f"scripted:{tmp_path / 'script.json'}",
                "--out", str(tmp_path / "o"), "--quiet"])  # fmt: skip
    _refused(capsys, code, words)
    assert not (tmp_path / "o" / "events.jsonl").exists()


def test_a_scripted_file_by_request_or_turn_still_loads(tmp_path: Path) -> None:
    from controlscope.models import ScriptedModel

    for by in ("turn", "request"):
        path = tmp_path / f"{by}.json"
        path.write_text(json.dumps({"by": by, "answers": ["a", {"text": "b"}]}))
        assert ScriptedModel.from_file(path).remaining == 2
