"""The viewer's HTML: Jinja2 templates (autoescaped: agent, model and environment text is
always escaped), one per page kind, and the links between pages, served or exported."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from pydantic import BaseModel

from controlscope.core import SCHEMA_VERSION
from controlscope.record import LogError, RunSummary, read_summary
from controlscope.view._branches import read_branches
from controlscope.view._folders import Target, stamp, watched
from controlscope.view._text import shown
from controlscope.view._timeline import read_run

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
        slugs: each run page's file name when exported, by run id.
    """

    exported: bool = False
    up: str = ""
    slugs: dict[str, str] = field(default_factory=dict)

    @property
    def home(self) -> str:
        """The folder's own page."""
        return f"{self.up}index.html" if self.exported else "/"

    def run(self, run_id: str) -> str:
        """A run's page."""
        if self.exported:
            return f"{self.up}runs/{quote(self.slugs[run_id])}"
        return "/run/" + quote(run_id, safe="/")

    @property
    def csp(self) -> str:
        """The page's content security policy."""
        return EXPORTED_CSP if self.exported else SERVED_CSP


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


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("controlscope.view", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=shown,
    )
    env.filters.update(lines=_lines, is_large=_is_large, pretty=_pretty)
    env.globals.update(schema_version=SCHEMA_VERSION)
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


def live_of(target: Target, run_id: str | None, links: Links) -> Live | None:
    """The refresh of a served page (None when exported: static files do not refresh)."""
    if links.exported:
        return None
    url = "/_stamp" if run_id is None else "/_stamp/run/" + quote(run_id, safe="/")
    return Live(url, stamp(watched(target, run_id)))


def render_target(target: Target, links: Links) -> str:
    """The page of the folder itself: a run, a branch set side by side, or a list of runs.

    A served page refreshes itself while it can change: a run without ``run_end``, a branch set
    with a branch still running, a folder of runs (runs may be added).
    """
    live = live_of(target, None, links)
    if target.kind == "run":
        run = read_run(target.path)
        return render("run.html", links, run=run, live=live if run.live else None, run_id=None)
    if target.kind == "branches":
        page = read_branches(target.path)
        done = bool(page.columns) and not any(c.page.live for c in page.columns)
        return render("branches.html", links, page=page, live=None if done else live)
    rows = [(run_id, _summary(run_dir)) for run_id, run_dir in target.runs.items()]
    return render("runs.html", links, target=target, rows=rows, live=live)


def render_run(target: Target, run_id: str, links: Links) -> str:
    """The page of one run of a set (``run_id`` must be one of ``target.runs``)."""
    run = read_run(target.runs[run_id])
    live = live_of(target, run_id, links) if run.live else None
    return render("run.html", links, run=run, live=live, run_id=run_id)


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
