"""The viewer's web application (Starlette): the folder's page, its runs' pages (by page of a
long log), a panel's units and the runs behind its report's cells, the stamp a live page polls,
and the refresh script. Every page is rendered inside a guard: whatever fails
becomes a page that says what is wrong, never a server traceback; and at most
:data:`MAX_RENDERS` pages are built at once, so memory stays bounded however many requests
come (a run's page is bounded by :data:`controlscope.view._timeline.PAGE_EVENTS` and
:data:`controlscope.view._timeline.PAGE_BYTES`)."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from controlscope.review import ReviewDesk
from controlscope.view._folders import Target, ViewError, find_target, stamp, watched
from controlscope.view._panel import read_panel_page
from controlscope.view._remote import remote_routes
from controlscope.view._render import (
    SERVED_CSP,
    Links,
    render_cell,
    render_error,
    render_run,
    render_target,
    render_unit,
)
from controlscope.view._review import review_routes, with_banner

_HEADERS = {
    "Content-Security-Policy": SERVED_CSP + "; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_LINKS = Links()

MAX_RENDERS = 2
"""The most pages built at the same time; other requests wait."""

RENDER_WAIT_S = 60.0
"""How long a request waits for its turn to be built before a page says the viewer is busy."""

_RENDERS = threading.BoundedSemaphore(MAX_RENDERS)


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=_HEADERS)


def _error(title: str, message: str, status: int) -> HTMLResponse:
    return _html(render_error(_LINKS, title, message), status)


def _guarded(render: Callable[[], str]) -> HTMLResponse:
    """``render()`` as a page, once one of the :data:`MAX_RENDERS` turns is free; any failure
    as a page naming it."""
    if not _RENDERS.acquire(timeout=RENDER_WAIT_S):
        message = f"other pages have been built for {RENDER_WAIT_S:g} s; reload in a moment"
        return _error("The viewer is busy", message, 503)
    try:
        return _html(render())
    except ViewError as err:  # a page of the folder that does not exist (past a run's last)
        return _error("No such page", str(err), 404)
    except Exception as err:  # the page must say what failed, whatever it was
        message = f"the viewer could not show this page: {type(err).__name__}: {err}"
        return _error("This page cannot be shown", message, 500)
    finally:
        _RENDERS.release()


class _Pages:
    """The request handlers of one folder's viewer; what the folder is, is looked at again on
    every request (a run started after the server shows up)."""

    def __init__(self, root: Path, desk: ReviewDesk | None = None) -> None:
        self.root = root
        self.desk = desk

    def home(self, request: Request) -> Response:
        try:
            found = find_target(self.root)
        except ViewError as err:
            return _error("Nothing to show here", str(err), 200)
        number = _page_number(request)
        if number is None:
            return _error("No such page", "a page number is a whole number from 1", 404)
        return _guarded(lambda: with_banner(render_target(found, _LINKS, number), self.desk))

    def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        found = self._found()
        if isinstance(found, Response):
            return found
        if run_id not in found.runs:  # only the folder's own runs are ever read
            return _error("No such run", f"{self.root} has no run {run_id!r}", 404)
        number = _page_number(request)
        if number is None:
            return _error("No such page", "a page number is a whole number from 1", 404)
        return _guarded(lambda: with_banner(render_run(found, run_id, _LINKS, number), self.desk))

    def unit(self, request: Request) -> Response:
        unit = request.path_params["unit"]
        found = self._found()
        if isinstance(found, Response):
            return found
        if unit not in found.units:
            return _error("No such unit", f"{self.root} has no paired unit {unit!r}", 404)
        return _guarded(lambda: render_unit(found, unit, _LINKS))

    def cell(self, request: Request) -> Response:
        cell = request.path_params["cell"]
        found = self._found()
        if isinstance(found, Response):
            return found
        if found.kind != "panel":
            return _error("No such page", f"{self.root} is not a panel", 404)

        def page() -> str:
            panel = read_panel_page(found)
            if cell not in panel.cells:
                raise ViewError(f"the panel's report has no cell {cell!r} (any more)")
            return render_cell(panel, found, cell, _LINKS)

        return _guarded(page)

    def _found(self) -> Target | Response:
        try:
            return find_target(self.root)
        except ViewError as err:
            return _error("Nothing to show here", str(err), 404)

    def stamp(self, request: Request) -> Response:
        run_id = request.path_params.get("run_id")
        unit = request.path_params.get("unit")
        try:
            found = find_target(self.root)
        except ViewError:
            return PlainTextResponse("-", headers=_HEADERS)
        paths = watched(
            found,
            run_id if run_id in found.runs else None,
            unit if unit in found.units else None,
        )
        return PlainTextResponse(stamp(paths), headers=_HEADERS)

    def script(self, request: Request) -> Response:
        text = files("controlscope.view").joinpath("static/live.js").read_text("utf-8")
        return Response(text, media_type="text/javascript", headers=_HEADERS)

    def missing(self, request: Request, exc: Exception) -> Response:
        return _error("No such page", f"nothing at {request.url.path}", 404)


def _page_number(request: Request) -> int | None:
    """The ``page`` asked for (1 when none is); None when it is not a whole number from 1."""
    text = request.query_params.get("page", "1")
    if not text.isascii() or not text.isdigit() or len(text) > 9 or int(text) < 1:
        return None
    return int(text)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine's loopback: ``127.0.0.0/8``, ``::1`` or ``localhost``.

    Args:
        host: an address (an IPv6 one bracketed or not) or a host name.

    Returns:
        True for a loopback address or ``localhost``; False for any other address or name.
    """
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower() == "localhost"


class _LoopbackOnly:
    """ASGI middleware: a request whose ``Host`` header names anything but this machine's
    loopback gets a page saying so (status 403), and nothing else."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = Headers(scope=scope).get("host", "")
            try:
                host = urlsplit("//" + header).hostname or ""
            except ValueError:  # not a host (a bracket left open...)
                host = ""
            if not is_loopback(host):
                message = (
                    f"this viewer listens on loopback and answers requests to 127.0.0.1 or "
                    f"localhost only; this one was sent to {header!r} (a page of another site "
                    f"must not read the runs). To serve other names, start it with --host "
                    f"0.0.0.0 (then anyone who reaches this machine can read them)"
                )
                await _error("Not served to this address", message, 403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(
    path: str | Path, loopback_only: bool = True, desk: ReviewDesk | None = None
) -> Starlette:
    """The viewer's application for the folder ``path`` (a run, a branch set, a panel or a
    folder of runs).

    Routes: ``/`` (the folder's page), ``/run/ID`` (a run of the folder, by its id; no other
    path is ever read), both with ``?page=N`` for a long run's later pages; for a panel
    ``/unit/UNIT`` (a unit's runs side by side) and ``/cell/TABLE/ROW/COLUMN`` (the runs behind
    a cell of its report); ``/_stamp``, ``/_stamp/run/ID`` and ``/_stamp/unit/UNIT`` (a text
    that changes when the page's files change), ``/static/live.js`` (the live refresh); with a
    desk, the review page's routes (``/review``...: :mod:`controlscope.view._review`) and
    those runs of other processes post to (``/_review/post``...: :mod:`controlscope.view._remote`).

    Args:
        path: the folder to show.
        loopback_only: answer only requests whose ``Host`` header names this machine's
            loopback (:func:`is_loopback`); any other gets a page saying why (status 403), so a
            page of another site whose name was made to resolve here (DNS rebinding) reads
            nothing. False (a server beyond loopback) answers any name.
        desk: the boundaries a person decides at (``controlscope run --reviewer human``);
            None: no review page.

    Returns:
        The ASGI application.
    """
    pages = _Pages(Path(path), desk)
    routes = [
        Route("/", pages.home),
        Route("/run/{run_id:path}", pages.run),
        Route("/unit/{unit:path}", pages.unit),
        Route("/cell/{cell:path}", pages.cell),
        Route("/_stamp", pages.stamp),
        Route("/_stamp/run/{run_id:path}", pages.stamp),
        Route("/_stamp/unit/{unit:path}", pages.stamp),
        Route("/static/live.js", pages.script),
    ]
    if desk is not None:
        routes += review_routes(desk, _LINKS, _HEADERS) + remote_routes(desk, _HEADERS)
    return Starlette(
        routes=routes,
        middleware=[Middleware(_LoopbackOnly)] if loopback_only else [],
        exception_handlers={404: pages.missing, 405: pages.missing},
    )
