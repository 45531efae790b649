"""The derived cost and workload cells (paper 5.2, 6.1, 7): a ratio and a relative change of
two conditions' totals, the share of a gap held by the largest units, and the units where one
condition logs more than another."""

from __future__ import annotations

from pathlib import Path

import pytest

import controlscope as cs
from controlscope import experiments as ce
from controlscope.analysis import report
from controlscope.panel.testing import SyntheticRun, write_synthetic_panel

KEEP_OUT = [100, 100, 100, 100, 100]
ARG_OUT = [1000, 900, 100, 100, 100]
FULL_OUT = [150, 120, 90, 200, 100]


def panel(folder: Path, keep: list[int] = KEEP_OUT) -> cs.Report:
    runs = []
    for i, outputs in enumerate(zip(keep, ARG_OUT, FULL_OUT, strict=True)):
        for scope, out in zip(("keep", "arg", "full"), outputs, strict=True):
            runs.append(
                SyntheticRun(
                    unit=f"t{i}", category=f"c{i % 2}", scope=scope, success=True,
                    output_tokens=out,
                )
            )  # fmt: skip
    write_synthetic_panel(folder, runs)
    return report(folder, write=False)


def value(reports: dict[str, cs.Report], **cell: object) -> ce.CellValue:
    column = "planner_logical_output"
    return ce.cell_value(ce.Cell(panel="p", column=column, **cell), reports)  # type: ignore[arg-type]


def test_derived_cells_divide_the_totals_the_paper_divides(tmp_path: Path) -> None:
    reports = {"p": panel(tmp_path / "p"), "q": panel(tmp_path / "q", [50] * 5)}
    ratio = value(reports, metric="ratio", scope="full", versus="keep")  # 660 / 500
    assert ratio.text == "1.3x" and ratio.value == pytest.approx(1.32) and ratio.n == 5
    change = value(reports, metric="change", scope="full", versus="arg")  # 660 / 2200 - 1
    assert change.text == "-70.0%" and change.value == pytest.approx(-0.7)
    # Arg minus Full per unit: 850, 780, 10, -100, 0 (1,540); the two largest hold 1,630
    share = value(reports, metric="gap_share", scope="full", versus="arg", k=2)
    assert share.text == "105.8%" and share.value == pytest.approx(1630 / 1540)
    more = value(reports, metric="units_more", scope="full", versus="keep")
    assert more.text == "3/5" and more.n == 5
    # across panels: p's Full against q's Keep (250 in all)
    across = value(reports, metric="ratio", scope="full", versus="keep", versus_panel="q")
    assert across.text == "2.6x"


def test_an_undefined_derived_cell_is_na_with_its_reason(tmp_path: Path) -> None:
    reports = {"p": panel(tmp_path / "p", [0] * 5)}
    zero = value(reports, metric="ratio", scope="full", versus="keep")
    assert zero.text == "n/a" and "total of planner_logical_output is 0" in zero.note
    none = value(reports, metric="gap_share", scope="arg", versus="full", k=2)
    assert none.text == "n/a" and "not below the baseline" in none.note
    with pytest.raises(ValueError, match="gap_share needs k"):
        ce.Cell(panel="p", metric="gap_share", column="x", versus="arg")


def test_the_papers_derived_cells_are_configured() -> None:
    cells = {
        (t.name, c.metric, c.paper)
        for name in ("table7_alfworld", "table3_students", "protection_five_calls")
        for t in ce.load_experiment(name).tables
        for r in t.rows
        for c in r.cells
        if c.metric in ("ratio", "change", "gap_share", "units_more")
    }
    papers = {paper for _, _, paper in cells}
    assert {"29.7x", "34.5% lower", "98.3% in two heating tasks", "60/87"} <= papers
    assert {"23.4% fewer", "81.1% fewer", "-19.4%"} <= papers
