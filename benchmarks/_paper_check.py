"""Every paper number an experiment prints in ``paper-vs-ours.md`` checked against the reading
of the paper the experiments were built from (``paper-experiments.md``, read where it lies at
run time, never copied into the repository).

A paper value is checked when it holds a number: it is found when one line of the reading,
with the lines it nests under, holds every number of the value (``13/20``: 13 and 20;
``+0.60 [-2.38, 3.57]``: 0.60, 2.38 and 3.57), numbers compared as written without signs or
thousands separators (the reading writes a minus as U+2212, a count as ``1,336``). A value
without a number (``none``) is not checked. This proves each printed number is the paper's as
the reading reports it, not what it measures (a small count such as ``1`` is found nearly
anywhere).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
"""A number as the paper writes it: digits, thousands separators, decimals."""

CELL_SPLIT = re.compile(r"(?<!\\)\|")
"""A Markdown table's column separator (an escaped ``\\|`` is part of a cell)."""


@dataclass
class PaperTally:
    """What a check of paper numbers found.

    Attributes:
        checked: paper values holding a number, checked.
        wrong: those no line of the reading holds, one line each.
    """

    checked: int = 0
    wrong: list[str] = field(default_factory=list)


def numbers(text: str) -> frozenset[str]:
    """The numbers in ``text``, without thousands separators (``1,336`` is ``1336``)."""
    return frozenset(m.strip(",").replace(",", "") for m in NUMBER.findall(text))


def reading_lines(path: Path) -> list[frozenset[str]]:
    """The numbers of each line of the reading at ``path``, with those of the lines it nests
    under (a nested bullet's ``13/11/13`` counts out of its parent's "the same 20 tasks").

    Raises:
        OSError: it cannot be read.
    """
    found: list[frozenset[str]] = []
    parents: list[tuple[int, frozenset[str]]] = []  # (indent, numbers) of the open lines
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if line.startswith("#"):
            parents = []
        while parents and parents[-1][0] >= indent:
            parents.pop()
        mine = numbers(line)
        found.append(mine.union(*(p for _, p in parents)))
        if not line.startswith("#"):
            parents.append((indent, mine))
    return found


def paper_values(paper_vs_ours: Path) -> list[tuple[str, str]]:
    """Each row of ``paper-vs-ours.md``: (``table, row, column``, the paper's value)."""
    lines = paper_vs_ours.read_text(encoding="utf-8").splitlines()
    header = next((line for line in lines if line.startswith("| table |")), None)
    if header is None:
        return []
    names = [c.strip() for c in CELL_SPLIT.split(header)[1:-1]]
    at = names.index("paper")
    found = []
    for line in lines[lines.index(header) + 2 :]:
        if not line.startswith("| "):
            break
        cells = [c.strip().replace("\\|", "|") for c in CELL_SPLIT.split(line)[1:-1]]
        found.append((", ".join(cells[:3]), cells[at]))
    return found


def check_paper(
    paper_vs_ours: Path, reading: list[frozenset[str]], tally: PaperTally, name: str
) -> None:
    """Check every paper value of experiment ``name``'s ``paper_vs_ours`` against
    ``reading`` into ``tally``."""
    for where, value in paper_values(paper_vs_ours):
        wanted = numbers(value)
        if not wanted:
            continue
        tally.checked += 1
        if not any(wanted <= line for line in reading):
            tally.wrong.append(f"{name}: {where}: {value!r}")
