"""The benchmark's check of the paper numbers in ``paper-vs-ours.md`` against the reading of
the paper (``benchmarks/_paper_check.py``, loaded from there)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from controlscope import experiments as ce
from controlscope.experiments import _write as ce_write

ROOT = Path(__file__).resolve().parents[1]

READING = """### A1. Table 1
- Keep succeeds on 13/20 tasks; continuous Full on 15/20 (2 wins, 0 losses).
- Paired TGC gain +0.60 pp, 95% CI [\u22122.38, 3.57]; actions 1,336.
- The rows, all on the same 20 tasks:
  - P2 fast automatic-tool: 13/11/13.
### A2. Another section
- 16 of something.
"""


def load() -> ModuleType:
    path = ROOT / "benchmarks" / "_paper_check.py"
    spec = importlib.util.spec_from_file_location("_paper_check", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_paper_check"] = module
    spec.loader.exec_module(module)
    return module


def test_paper_numbers_are_found_in_one_line_of_the_reading_or_named(tmp_path: Path) -> None:
    check = load()
    reading_file = tmp_path / "reading.md"
    reading_file.write_text(READING, encoding="utf-8")
    reading = check.reading_lines(reading_file)
    experiment = ce.load_experiment("table1_sustained")
    values = {
        t.name: [[ce.CellValue(text="0/1", n=1) for _ in row.cells] for row in t.rows]
        for t in experiment.tables
    }
    versus = tmp_path / "paper-vs-ours.md"
    versus.write_text(ce_write.paper_vs_ours(experiment, values), encoding="utf-8")
    tally = check.PaperTally()
    check.check_paper(versus, reading, tally, "table1_sustained")
    printed = [p for _, p in check.paper_values(versus)]
    assert tally.checked == sum(bool(check.numbers(p)) for p in printed) == experiment.paper_cells()
    wrong = "\n".join(tally.wrong)
    assert "'13/20'" not in wrong and "'15/20'" not in wrong and "'2/0'" not in wrong
    assert "table1_sustained: table1, P2 reasoning, draw 1, Full: '16/20'" in wrong
    assert "'4/1'" in wrong  # 4 and 1 are in no one line
    assert "'11/20'" not in wrong  # a nested line, out of its parent's 20
    assert check.numbers("20") <= reading[3] and "20" not in reading[6]  # a new section
    assert check.numbers("+0.60 [\u22122.38, 3.57]") <= reading[2]
    assert check.numbers("1,336") == {"1336"} and check.numbers("none") == frozenset()
    line = "| t | a \\| b | c | 13/20 | 20 | 0/1 | 1 | differ |  |"
    versus.write_text(
        "| table | row | column | paper | paper n | ours | our n | sizes | our 95% interval |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n" + line + "\n",
        encoding="utf-8",
    )
    assert check.paper_values(versus) == [("t, a | b, c", "13/20")]
