"""Output that explains itself, on a real panel where reviews happened: whole runs (no branch
point) of Keep, Arg and Full whose reviewer proposes a replacement that does not compile at
its first review and keeps afterwards. Arg refuses it as out of scope, Full as a syntax error;
both run it as Keep, so every call trace is the same. The report says so per condition and
ends with the viewer's command; the unit page shows each run's first decision.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
from matplotlib.text import Text

from controlscope import panel as cp
from controlscope import view
from controlscope.analysis import effort_chart, report, tokens_chart
from controlscope.cli import main as cli
from test_panel import write_config
from test_replay import KEEP
from test_view import get

BAD_REPLACE = json.dumps(
    {"reason": "rewrite it", "operation": "replace_workflow", "code": "def broken(:\n    pass"}
)
"""A replacement whose code does not compile."""


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("whole")
    config = write_config(tmp, start="whole")
    (tmp / "reviewer.json").write_text(json.dumps([BAD_REPLACE, *[KEEP] * 12]))
    assert cli(["panel", str(config), "--out", str(tmp / "pa`nel $x"), "--quiet"]) == 0
    return tmp / "pa`nel $x"


def test_the_report_says_what_the_reviewers_did_and_ends_with_the_viewer(
    whole: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert cli(["report", str(whole), "--out", str(tmp_path / "r"), "--resamples", "50"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    lines = {line.strip().split(":")[0]: line.strip() for line in printed}
    assert "granted Keep, no reviewer asked (1 run)" in lines["keep"]
    assert "refused and run as Keep (out_of_scope 1)" in lines["arg"], lines["arg"]
    assert "refused and run as Keep (syntax_error 1)" in lines["full"], lines["full"]
    assert "proposed 1 change, 0 realized" in lines["full"]
    assert re.search(r"the reviewer chose Keep \d+ times?", lines["arg"])
    assert printed[-1] == f"open the viewer on it: controlscope view '{whole}'"
    document = (tmp_path / "r" / "report.md").read_text()
    assert "1 paired unit;" in document and "resampling categories" in document
    assert "## What the reviewers did" in document
    assert document.rstrip().endswith(f"controlscope view '{whole}'\n```")
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["viewer"] == f"controlscope view '{whole}'" and len(data["reviewers"]) == 3
    built = report(whole, write=False, resamples=50)
    assert built.tables["resources"]["draw"].tolist() == [0, 0, 0]  # as in the run ids


def test_the_unit_page_shows_each_runs_first_decision(whole: Path) -> None:
    unit = next(iter(cp.read_manifest(whole).plan.units))
    with view.ViewServer(whole) as server:
        status, html = get(server.url + "unit/" + unit)
    assert status == 200
    decisions = html.split('<tr class="decision">')[1].split("</tr>")[0]
    assert "no boundary reached" not in decisions
    assert "first decision that proposed a change" in decisions
    assert "fallback: out_of_scope" in decisions and "fallback: syntax_error" in decisions
    assert "call traces are the same in every run" in html
    assert "first differ" not in html


def texts(fig: Any) -> list[str]:
    """Every text a figure shows: its title, axis labels, legend, ticks and notes."""
    found = [t.get_text() for t in fig.findobj(Text)]
    return [t for t in found if t]


def test_the_figures_stand_alone_with_a_title_n_and_a_note_when_flat(whole: Path) -> None:
    built = report(whole, write=False, resamples=50)
    runs = built.runs
    effort = texts(effort_chart(runs, built.draws, 100))
    assert "Units completed within k primitive calls (n = 1 per condition)" in effort
    assert {"keep (n=1)", "arg (n=1)", "full (n=1)"} <= set(effort)
    assert "primitive calls (k)" in effort
    assert any(t.startswith("Every line is flat at 0%") for t in effort), effort
    tokens = texts(tokens_chart(runs, built.draws))
    assert any(t.startswith("Logged output tokens per condition (3 runs") for t in tokens)
    assert "logged output tokens" in tokens and "full\n(n=1)" in tokens
    succeeded = runs.assign(success=runs["scope"] == "full")
    assert not any(t.startswith("Every line") for t in texts(effort_chart(succeeded, 1, 100)))


def test_the_panel_page_shows_the_figures_and_what_the_reviewers_did(whole: Path) -> None:
    with view.ViewServer(whole) as server:
        status, html = get(server.url)
    assert status == 200
    figures = re.findall(r'<img src="data:image/png;base64,([^"]+)" alt="(\w+) figure"', html)
    assert [name for _, name in figures] == ["effort", "tokens"]
    assert all(base64.b64decode(data)[:4] == b"\x89PNG" for data, _ in figures)
    assert "1 paired unit, 1 compared" in html
    reviewers = html.split('id="panel-reviewers">')[1].split("</ul>")[0]
    assert "refused and run as Keep (syntax_error 1)" in reviewers
