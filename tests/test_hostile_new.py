"""Hostile inputs to what landed last: the Inspect export, tracing, the review desk, logged
continuations, and two leftovers (a source program with a UTF-8 BOM, a schedule naming one
behaviour twice)."""

from __future__ import annotations

import hashlib
import http.server
import shutil
import threading
from pathlib import Path
from typing import ClassVar

import pytest
from inspect_ai.log import read_eval_log

import controlscope as cs
from controlscope import panel as cp
from controlscope import view
from controlscope.cli import main as cli
from controlscope.core import OperationSet, RunStartEvent
from controlscope.export import ExportError, export_inspect
from controlscope.review import DeskAddress, RemoteDesk, ReviewDesk
from test_export_inspect import panel
from test_human_review import _state

FIXTURE = Path(__file__).parent / "fixtures" / "main_job"

__all__ = ["panel"]  # the scripted panel fixture, used by name


# --- export ------------------------------------------------------------------------------------


@pytest.mark.parametrize("own", ["summary.json", "command.json"])
def test_export_never_replaces_a_file_of_the_run_it_exports(
    tmp_path: Path, own: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    before = (run / own).read_bytes()
    assert cli(["export", str(run), "--format", "inspect", "--out", str(run / own)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not an earlier export" in err and "\n" not in err
    assert (run / own).read_bytes() == before
    # an earlier export inside the folder is replaced, as the docstring says
    again = run / "again.json"
    assert export_inspect(run, again) == again
    assert export_inspect(run, again) == again
    assert read_eval_log(str(again)).samples


def test_a_killed_run_exports_as_a_sample_with_an_error(tmp_path: Path) -> None:
    run = tmp_path / "killed"
    run.mkdir()
    lines = (FIXTURE / "events.jsonl").read_bytes().splitlines(keepends=True)
    cut = b"".join(lines[: len(lines) // 2]) + lines[len(lines) // 2][:40]  # a torn last line
    (run / "events.jsonl").write_bytes(cut)
    log = read_eval_log(str(export_inspect(run, tmp_path / "k.eval")))
    assert log.samples is not None
    error = log.samples[0].error
    assert error is not None and "no run_end" in error.message
    whole = read_eval_log(str(export_inspect(FIXTURE, tmp_path / "w.eval")))
    assert whole.samples is not None and whole.samples[0].error is None


# --- leftovers ---------------------------------------------------------------------------------


def test_a_source_program_with_a_utf8_bom_runs_as_python_runs_it(tmp_path: Path) -> None:
    from test_api import BROKEN
    from test_frozen_source import frozen_run

    source = tmp_path / "bom.py"
    source.write_bytes(b"\xef\xbb\xbf" + BROKEN.strip("\n").encode() + b"\n")
    result = frozen_run(tmp_path, source, planner_format="fenced")
    assert result.end_reason == "final_answer"
    assert result.summary.primitive_calls == 7  # the program ran, as without the mark
    start = cs.read_events(result.run_dir)[0]
    assert isinstance(start, RunStartEvent) and start.source_file is not None
    assert start.source_file.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()


# --- the review desk ---------------------------------------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A loopback 'proxy' that records every request and its headers, answering 502."""

    seen: ClassVar[list[dict[str, str]]] = []

    def _any(self) -> None:
        self.seen.append(dict(self.headers))
        self.send_response(502)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_CONNECT = _any

    def log_message(self, *args: object) -> None:
        pass


def test_the_desks_secret_never_goes_through_an_environment_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    _Recorder.seen.clear()
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.server_address[1]}")
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    desk = ReviewDesk()
    try:
        with view.ViewServer(tmp_path, desk=desk) as server:
            client = RemoteDesk(DeskAddress(server.url, desk.secret), retries=0)
            pending = client.post(_state("read_text_file", 1), OperationSet.of("arg"))
            assert [p.ticket for p in desk.pending()] == [pending.ticket]  # the desk has it
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert _Recorder.seen == []  # the proxy saw nothing, the secret least of all


def test_a_desk_address_does_not_show_its_secret() -> None:
    address = DeskAddress("http://127.0.0.1:1/", "s3cr3t-value")
    assert "s3cr3t-value" not in repr(address) and "s3cr3t-value" not in str(address)
    assert address.secret == "s3cr3t-value"


def test_a_panel_with_a_corrupt_and_an_empty_log_exports_its_other_runs(
    panel: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "panel"
    shutil.copytree(panel, copy)
    runs = cp.read_manifest(copy).plan.runs
    corrupt, empty = (cp.run_dir(copy, r.id) / "events.jsonl" for r in runs[:2])
    lines = corrupt.read_text().splitlines(keepends=True)
    corrupt.write_text("".join(lines[:3]) + "{garbage\n" + "".join(lines[3:]))
    empty.write_text("")
    out = tmp_path / "p.eval"
    capsys.readouterr()
    assert cli(["export", str(copy), "--format", "inspect", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"{len(runs) - 2} run(s)" in said and "2 not exported" in said
    log = read_eval_log(str(out))
    assert [s.id for s in log.samples or []] == [r.id for r in runs[2:]]
    left = log.eval.metadata["not_exported"]
    assert "unreadable event" in left[runs[0].id] and "run_start" in left[runs[1].id]
    # a lone run's unreadable log is still the export's error (nothing else to export)
    with pytest.raises(ExportError, match="cannot read the log"):
        export_inspect(corrupt.parent, tmp_path / "lone.eval")


# --- tracing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stated", ["abc", "inf", "nan", "-1", "0"])
def test_a_garbage_otlp_timeout_keeps_the_bounded_export_wait(
    stated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from controlscope.record import _tracing

    made: list[float | None] = []
    real_init = OTLPSpanExporter.__init__

    def init(self: OTLPSpanExporter, *args: object, **kwargs: object) -> None:
        made.append(kwargs.get("timeout"))  # type: ignore[arg-type]
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(OTLPSpanExporter, "__init__", init)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", stated)
    with pytest.warns(RuntimeWarning, match="not a positive number of seconds"):
        provider = _tracing._environment_provider()
    provider.shutdown()
    assert made == [_tracing.FLUSH_S]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2.5")  # a real number is the user's
    made.clear()
    _tracing._environment_provider().shutdown()
    assert made == [None]
