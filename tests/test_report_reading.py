"""What the report reads of a panel folder, and that reading less leaves its numbers as they were.

A finished run's record names its log by SHA-256 and by the log file's fingerprint: a log whose
file is unchanged is checked without reading it, one changed in any way is hashed and, if its
bytes differ, counted as corrupt. The report's tables are compared with those the report
wrote before it read less (``tests/fixtures/report_numbers``, written by that version on the
same synthetic panel) and its intervals with the estimator computed here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from controlscope import panel as cp
from controlscope.analysis import report
from controlscope.panel import _folder
from controlscope.panel.testing import SyntheticRun, write_synthetic_panel

NUMBERS = Path(__file__).parent / "fixtures" / "report_numbers"
TABLES = ("successes", "table1", "paired", "resources", "goals", "goal_gains")


def small_panel(folder: Path) -> list[SyntheticRun]:
    """36 units (3 categories, 12 templates of 3, 2 source programs) under Keep, Arg and
    Full, with a log per run named by its record as a panel's run does."""
    runs = []
    for t in range(12):
        for i in range(3):
            for j, scope in enumerate(("keep", "arg", "full")):
                calls = 5 + (t * 5 + i * 13 + j * 29) % 60
                runs.append(
                    SyntheticRun(
                        unit=f"t{t:02d}/i{i}",
                        category=f"c{t % 3}",
                        template=f"t{t:02d}",
                        scope=scope,
                        success=(t * 7 + i * 3 + j * 5) % 11 < 6,
                        calls=calls,
                        output_tokens=40 * calls,
                        source_program=t % 2,
                    )
                )
    write_synthetic_panel(folder, runs)
    for run in runs:
        name = "keep" if run.scope == "keep" else f"{run.scope}-d0"
        directory = cp.run_dir(folder, f"{run.unit}/{name}")
        (directory / "events.jsonl").write_text(f'{{"run": "{run.unit}/{name}"}}\n' * run.calls)
        identity = cp.log_identity(directory)
        assert identity is not None
        record = cp.read_record(directory).model_copy(
            update={"log_sha256": identity.sha256, "log_fingerprint": identity.fingerprint}
        )
        _folder.write_record(directory, record)
    return runs


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The run folders whose log is hashed from now on (by the panel's one hashing function)."""
    seen: list[Path] = []
    real = _folder.log_sha256

    def counting(directory: Path) -> str | None:
        seen.append(directory)
        return real(directory)

    monkeypatch.setattr(_folder, "log_sha256", counting)
    return seen


def test_the_reports_numbers_are_those_it_gave_before(tmp_path: Path) -> None:
    small_panel(tmp_path / "panel")
    built = report(tmp_path / "panel", out=tmp_path / "report", resamples=2_000, seed=3)
    assert built.problems == []
    for name in TABLES:
        found = pd.read_csv(tmp_path / "report" / f"{name}.csv")
        expected = pd.read_csv(NUMBERS / f"{name}.csv")
        pd.testing.assert_frame_equal(found, expected, check_exact=True)


def test_every_interval_is_the_estimator_with_its_own_generator(tmp_path: Path) -> None:
    """Each interval is the percentile interval of the pooled ratio over resamples drawn by a
    generator seeded for that comparison alone, as if no other comparison had been drawn."""
    small_panel(tmp_path / "panel")
    built = report(tmp_path / "panel", write=False, resamples=1_500, seed=5, cluster="category")
    runs = built.runs
    keep = runs[runs["scope"] == "keep"].set_index("unit")
    checked = 0
    for row in built.tables["paired"].itertuples():
        b, a = row.comparison.split("-")
        chosen = (
            keep if row.source == "all" else keep[keep["source_program"] == int(row.source[1]) - 1]
        )
        units = chosen.index
        ya = _success(runs, a, units)
        yb = _success(runs, b, units)
        low, high = _interval(yb - ya, chosen["category"].to_numpy(), 1_500, 5)
        assert (row.ci_low_pp, row.ci_high_pp) == (round(100 * low, 1), round(100 * high, 1))
        checked += 1
    assert checked == 9  # P1, P2 and all, three comparisons each


def _success(runs: pd.DataFrame, scope: str, units: pd.Index) -> np.ndarray:
    chosen = runs[runs["scope"] == scope].set_index("unit")
    return chosen["success"].reindex(units).astype(int).to_numpy()


def _interval(
    values: np.ndarray, labels: np.ndarray, resamples: int, seed: int
) -> tuple[float, float]:
    names = sorted(set(labels))
    rng = np.random.default_rng(seed)
    ratios = []
    for row in rng.multinomial(len(names), [1 / len(names)] * len(names), size=resamples):
        total = sum(n * values[labels == c].sum() for n, c in zip(row, names, strict=True))
        size = sum(n * (labels == c).sum() for n, c in zip(row, names, strict=True))
        ratios.append(total / size)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(low), float(high)


def test_an_unchanged_log_is_not_read_to_check_it(tmp_path: Path, hashed: list[Path]) -> None:
    runs = small_panel(tmp_path / "panel")
    built = report(tmp_path / "panel", write=False, resamples=100)
    assert built.problems == [] and len(built.runs) == len(runs)
    assert hashed == []


def test_a_changed_log_is_hashed_and_a_different_one_counted_corrupt(
    tmp_path: Path, hashed: list[Path]
) -> None:
    """Touched (same bytes, new times), copied back in place (same bytes, a new file): read
    and accepted. Rewritten with other bytes of the same size, its times set back: corrupt."""
    folder = tmp_path / "panel"
    small_panel(folder)
    touched = cp.run_dir(folder, "t00/i0/keep")
    os.utime(touched / "events.jsonl")
    copied = cp.run_dir(folder, "t01/i0/arg-d0")
    data = (copied / "events.jsonl").read_bytes()
    (copied / "events.jsonl").unlink()
    (copied / "events.jsonl").write_bytes(data)
    forged = cp.run_dir(folder, "t02/i1/full-d0")
    log = forged / "events.jsonl"
    before = log.stat()
    log.write_bytes(log.read_bytes().replace(b"t02", b"t99"))
    os.utime(log, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert log.stat().st_size == before.st_size
    problems = report(folder, write=False, resamples=100).problems
    assert sorted(hashed) == sorted([touched, copied, forged])
    assert (
        problems
        == [
            "t02/i1/full-d0: corrupt run folder, counted as missing: its events.jsonl is not the "
            f"log its record names (SHA-256 {cp.log_identity(forged).sha256[:12]}..., recorded "  # type: ignore[union-attr]
            f"{cp.read_record(forged).log_sha256[:12]}...) (resuming the panel runs it again)"  # type: ignore[index]
        ]
    )


def test_a_record_without_a_fingerprint_has_its_log_hashed(
    tmp_path: Path, hashed: list[Path]
) -> None:
    """A record written before fingerprints were kept: its log is read and checked."""
    folder = tmp_path / "panel"
    small_panel(folder)
    directory = cp.run_dir(folder, "t03/i2/arg-d0")
    record = cp.read_record(directory)
    _folder.write_record(directory, record.model_copy(update={"log_fingerprint": None}))
    assert report(folder, write=False, resamples=100).problems == []
    assert hashed == [directory]


def test_the_report_command_imports_no_other_verb(tmp_path: Path) -> None:
    """``controlscope report`` imports its own verb's module, not every verb's (the
    experiments, the viewer, the MCP server)."""
    small_panel(tmp_path / "panel")
    code = (
        "import sys\nfrom controlscope.cli import main\n"
        f"assert main(['report', {str(tmp_path / 'panel')!r}, '--resamples', '100']) == 0\n"
        "print(sorted(m for m in sys.modules if m.startswith('controlscope.cli.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert (
        done.stdout.strip().splitlines()[-1]
        == "['controlscope.cli._console', 'controlscope.cli._report']"
    )
