"""The Inspect export pauses Python's cycle collector while it builds and writes the log (the
samples hold no cycles, and the collector's passes over millions of live objects cost a sixth
of a panel's export), and always turns it back on: after a log written and after bad input."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import inspect_ai.log
import pytest
from inspect_ai.log import read_eval_log

from controlscope.export import ExportError, export_inspect

FIXTURE = Path(__file__).parent / "fixtures" / "main_job"


@pytest.fixture
def collector_on() -> Iterator[None]:
    """The collector enabled for the test, left as it was found."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_the_collector_is_paused_while_writing_and_on_again_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collector_on: None
) -> None:
    seen: list[bool] = []
    write = inspect_ai.log.write_eval_log

    def watched(log: Any, location: str) -> Any:
        seen.append(gc.isenabled())
        return write(log, location)

    monkeypatch.setattr(inspect_ai.log, "write_eval_log", watched)
    out = export_inspect(FIXTURE, tmp_path / "run.eval")
    assert seen == [False]
    assert gc.isenabled()
    assert len(read_eval_log(str(out)).samples or []) == 1


def test_the_collector_is_on_again_after_bad_input(tmp_path: Path, collector_on: None) -> None:
    with pytest.raises(ExportError):
        export_inspect(tmp_path, tmp_path / "nothing.eval")  # neither a run nor a panel
    assert gc.isenabled()
    (tmp_path / "run.eval").mkdir()
    with pytest.raises(ExportError):
        export_inspect(FIXTURE, tmp_path / "run.eval")  # a directory in the log's place
    assert gc.isenabled()
