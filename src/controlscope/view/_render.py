"""The viewer's HTML: Jinja2 templates (autoescaped: agent, model and environment text is
always escaped), one per page kind, and the links between pages, served or exported."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from pydantic import BaseModel

from controlscope.core import OPERATION_GROUPS, OPERATIONS, SCHEMA_VERSION
from controlscope.record import LogError, RunSummary, read_summary
from controlscope.view._branches import read_branches, side_by_side
from controlscope.view._folders import Target, ViewError, stamp, watched
from controlscope.view._panel import PanelPage, read_panel_page
from controlscope.view._text import shown
from controlscope.view._timeline import RunPage, read_run

FOLD_LINES = 24
"""Texts longer than this many lines are folded (shown whole once opened)."""

FOLD_CHARS = 2_000
"""Texts longer than this many characters are folded (shown whole once opened)."""

SERVED_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'self'; connect-src 'self'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)
"""The pages' content security policy when served: no inline script runs, whatever a page
holds; the one script is the viewer's own file (the live refresh)."""

EXPORTED_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'"
"""The policy of exported pages: no script at all."""


@dataclass(frozen=True)
class Links:
    """How a page links to the others.

    Attributes:
        exported: True for static files (relative links), False when served.
        up: the way from the page to the site's root ("" or ``../``) when exported.
        slugs: each run page's file name when exported, by run id (``runs/``).
        units: each unit page's file name when exported, by unit id (``units/``).
        cells: each table cell's page's file name when exported, by cell id (``cells/``).
    """

    exported: bool = False
    up: str = ""
    slugs: dict[str, str] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    cells: dict[str, str] = field(default_factory=dict)

    @property
    def home(self) -> str:
        """The folder's own page."""
        return f"{self.up}index.html" if self.exported else "/"

    def run(self, run_id: str | None, page: int = 1) -> str:
        """A run's page (``page`` of it); ``run_id`` None: the folder's own run."""
        if self.exported:
            name = "index.html" if run_id is None else f"runs/{self.slugs[run_id]}"
            return self.up + quote(paged(name, page))
        where = "/" if run_id is None else "/run/" + quote(run_id, safe="/")
        return where if page == 1 else f"{where}?page={page}"

    def has_run(self, run_id: str) -> bool:
        """Whether the run has a page to link to."""
        return run_id in self.slugs if self.exported else True

    def unit(self, unit: str) -> str:
        """A panel's unit's page: its runs side by side."""
        if self.exported:
            return f"{self.up}units/{quote(self.units[unit])}"
        return "/unit/" + quote(unit, safe="/")

    def cell(self, cell: str) -> str:
        """The page of the runs behind a cell of a panel's report."""
        if self.exported:
            return f"{self.up}cells/{quote(self.cells[cell])}"
        return "/cell/" + quote(cell, safe="/")

    @property
    def csp(self) -> str:
        """The page's content security policy."""
        return EXPORTED_CSP if self.exported else SERVED_CSP


def paged(name: str, page: int) -> str:
    """The file name of page ``page`` of a run whose first page is ``name`` (``x.html``,
    ``x-p2.html``...)."""
    return name if page == 1 else f"{name.removesuffix('.html')}-p{page}.html"


def _lines(text: str) -> int:
    return text.count("\n") + 1


def _is_large(text: str) -> bool:
    return len(text) > FOLD_CHARS or _lines(text) > FOLD_LINES


def _plain(value: object) -> object:
    """A pydantic model as JSON data; anything else JSON cannot hold as its text."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)


def _pretty(value: Any) -> str:
    """JSON for people: indented, Unicode kept (the template escapes it)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=_plain)


def group_counts(count: Callable[[str], int]) -> dict[str, int]:
    """The run tables' columns of realized operations (``patches``, ``replacements``: the
    operation kinds' groups, :data:`~controlscope.core.OPERATION_GROUPS`), each the sum of its
    kinds' counters as ``count`` reads them."""
    return {group: sum(count(c) for c in counters) for group, counters in OPERATION_GROUPS.items()}


def _summary_group_counts(summary: RunSummary) -> dict[str, int]:
    return group_counts(lambda counter: int(getattr(summary, counter)))


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("controlscope.view", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=shown,
    )
    env.filters.update(
        lines=_lines, is_large=_is_large, pretty=_pretty, group_counts=_summary_group_counts
    )
    env.globals.update(
        schema_version=SCHEMA_VERSION,
        counted=[op for op in OPERATIONS if op.counter is not None],
        groups=list(OPERATION_GROUPS),
    )
    return env


_ENV = _environment()


def render(template: str, links: Links, **context: Any) -> str:
    """Render one of the viewer's templates with the links of the page."""
    return _ENV.get_template(template).render(links=links, **context)


@dataclass(frozen=True)
class Live:
    """What a served page needs to refresh itself when its files change.

    Attributes:
        url: where the page asks for the current stamp.
        stamp: the stamp the page was rendered at.
    """

    url: str
    stamp: str


def live_of(
    target: Target, run_id: str | None, links: Links, unit: str | None = None
) -> Live | None:
    """The refresh of a served page (None when exported: static files do not refresh)."""
    if links.exported:
        return None
    if unit is not None:
        url = "/_stamp/unit/" + quote(unit, safe="/")
    else:
        url = "/_stamp" if run_id is None else "/_stamp/run/" + quote(run_id, safe="/")
    return Live(url, stamp(watched(target, run_id, unit)))


def render_target(target: Target, links: Links, page: int = 1) -> str:
    """The page of the folder itself: a run (page ``page`` of it), a branch set side by side,
    a panel, or a list of runs.

    A served page refreshes itself while it can change: a run without ``run_end``, a branch set
    with a branch still running, a panel with runs not finished, a folder of runs (runs may be
    added).

    Raises:
        ViewError: ``page`` is past the run's last page.
    """
    live = live_of(target, None, links)
    if target.kind == "run":
        return render_run_page(read_run(target.path, page), None, links, live)
    if target.kind == "branches":
        found = read_branches(target.path)
        done = bool(found.columns) and not any(c.page.live for c in found.columns)
        return render("branches.html", links, page=found, live=None if done else live)
    if target.kind == "panel":
        return render_panel(read_panel_page(target), target, links, live)
    rows = [(run_id, _summary(run_dir)) for run_id, run_dir in target.runs.items()]
    return render("runs.html", links, target=target, rows=rows, live=live)


def render_panel(panel: PanelPage, target: Target, links: Links, live: Live | None) -> str:
    """A panel's page from its page model (refreshing, when served, until it is complete)."""
    rows = []
    if panel.report is None:  # the runs found, to read them all the same
        rows = [(run_id, _summary(run_dir)) for run_id, run_dir in target.runs.items()]
    return render(
        "panel.html",
        links,
        panel=panel,
        target=target,
        rows=rows,
        live=None if panel.complete else live,
    )


def render_run(target: Target, run_id: str, links: Links, page: int = 1) -> str:
    """Page ``page`` of one run of a set (``run_id`` must be one of ``target.runs``).

    Raises:
        ViewError: ``page`` is past the run's last page.
    """
    run = read_run(target.runs[run_id], page)
    live = live_of(target, run_id, links) if run.live else None
    return render_run_page(run, run_id, links, live)


def render_run_page(run: RunPage, run_id: str | None, links: Links, live: Live | None) -> str:
    """A page of a run already read (``run_id`` None: the folder's own run).

    Raises:
        ViewError: the page is past the run's last page.
    """
    if run.number > run.pages:
        raise ViewError(f"the run has {run.pages} pages; there is no page {run.number}")
    return render(
        "run.html", links, run=run, live=live if run.live else None, run_id=run_id, pager=pager(run)
    )


def render_unit(target: Target, unit: str, links: Links) -> str:
    """A panel's unit: its runs side by side from their shared prefix (``unit`` must be one of
    ``target.units``)."""
    ids = target.units[unit]
    runs = {i: target.runs[i] for i in ids if i in target.runs}
    page = side_by_side(runs, folder=target.path, labels={i: i.rsplit("/", 1)[-1] for i in ids})
    absent = [i for i in ids if i not in target.runs]
    done = bool(page.columns) and not any(c.page.live for c in page.columns)
    live = None if done else live_of(target, None, links, unit)
    return render("unit.html", links, page=page, unit=unit, absent=absent, live=live)


def render_cell(panel: PanelPage, target: Target, cell: str, links: Links) -> str:
    """The runs behind one cell of a panel's report (``cell`` must be in ``panel.cells``)."""
    found = panel.cells[cell]
    assert panel.report is not None
    runs = panel.report.runs.set_index("id")
    rows = [(run_id, _run_row(dict(runs.loc[run_id].items()))) for run_id in found.runs]
    return render("cell.html", links, cell=found, rows=rows, target=target, panel=panel, live=None)


def _run_row(row: dict[Any, Any]) -> dict[str, Any]:
    """A run's row of a panel's run table as the cell's page shows it."""

    def plain(value: Any) -> Any:
        value = value.item() if hasattr(value, "item") else value
        return None if isinstance(value, float) and value != value else value  # NaN: none

    fallbacks = sum(int(v) for k, v in row.items() if str(k).startswith("fallback_"))
    shown = {k: plain(row.get(k)) for k in ("scope", "draw", "status", "success", "end_reason")}
    shown.update({k: int(row.get(k) or 0) for k in ("primitive_calls", "reviews")})
    shown.update(group_counts(lambda counter: int(row.get(counter) or 0)))
    shown["fallbacks"] = fallbacks
    return shown


@dataclass(frozen=True)
class PageLink:
    """One entry of a run's list of pages.

    Attributes:
        number: the page's number (None: a gap in the list).
        call_index: the call index of its first boundary.
        current: whether it is the page shown.
    """

    number: int | None
    call_index: int | None = None
    current: bool = False


PAGER_WIDTH = 5
"""How many pages either side of the current one the list of pages names (and the first and
the last): a run of thousands of pages lists about a dozen."""


def pager(run: RunPage) -> list[PageLink]:
    """The list of a run's pages shown on each of them (empty for a run of one page)."""
    if run.pages < 2:
        return []
    links: list[PageLink] = []
    for span in run.spans:
        n = span.number
        if n in (1, run.pages) or abs(n - run.number) <= PAGER_WIDTH:
            links.append(PageLink(n, span.call_index, n == run.number))
        elif links and links[-1].number is not None:
            links.append(PageLink(None))
    return links


def render_error(links: Links, title: str, message: str) -> str:
    """A page that says what is wrong, and nothing else."""
    return render("error.html", links, title=title, message=message, live=None)


def _summary(run_dir: Path) -> RunSummary | str:
    """A run's ``summary.json``, or why there is none (still running, killed, unreadable)."""
    try:
        return read_summary(run_dir)
    except FileNotFoundError:
        return "no summary yet (running, or killed)"
    except (LogError, ValueError, OSError) as err:
        return f"unreadable summary: {type(err).__name__}"
