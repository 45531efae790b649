"""The viewer's web application (Starlette): the folder's page, its runs' pages, the stamp a
live page polls, and the refresh script. Every page is rendered inside a guard: whatever fails
becomes a page that says what is wrong, never a server traceback."""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from controlscope.view._folders import Target, ViewError, find_target, stamp, watched
from controlscope.view._render import (
    SERVED_CSP,
    Links,
    render_error,
    render_run,
    render_target,
)

_HEADERS = {
    "Content-Security-Policy": SERVED_CSP + "; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_LINKS = Links()


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=_HEADERS)


def _guarded(render: Callable[[], str]) -> HTMLResponse:
    """``render()`` as a page; any failure as a page naming it."""
    try:
        return _html(render())
    except Exception as err:  # the page must say what failed, whatever it was
        message = f"the viewer could not show this page: {type(err).__name__}: {err}"
        return _html(render_error(_LINKS, "This page cannot be shown", message), 500)


def build_app(path: str | Path) -> Starlette:
    """The viewer's application for the folder ``path`` (a run, a branch set or a folder of
    runs; what it is is looked at again on every request, so a run started after the server
    shows up).

    Routes: ``/`` (the folder's page), ``/run/ID`` (a run of the folder, by its id; no other
    path is ever read), ``/_stamp`` and ``/_stamp/run/ID`` (a text that changes when the page's
    files change), ``/static/live.js`` (the live refresh).

    Args:
        path: the folder to show.

    Returns:
        The ASGI application.
    """
    root = Path(path)

    def target() -> Target:
        return find_target(root)

    def home(request: Request) -> Response:
        try:
            found = target()
        except ViewError as err:
            return _html(render_error(_LINKS, "Nothing to show here", str(err)))
        return _guarded(lambda: render_target(found, _LINKS))

    def run(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            found = target()
        except ViewError as err:
            return _html(render_error(_LINKS, "Nothing to show here", str(err)), 404)
        if run_id not in found.runs:
            message = f"{root} has no run {run_id!r}"
            return _html(render_error(_LINKS, "No such run", message), 404)
        return _guarded(lambda: render_run(found, run_id, _LINKS))

    def stamp_of(request: Request) -> Response:
        run_id = request.path_params.get("run_id")
        try:
            found = target()
            files_ = watched(found, run_id if run_id in found.runs else None)
        except ViewError:
            return PlainTextResponse("-", headers=_HEADERS)
        return PlainTextResponse(stamp(files_), headers=_HEADERS)

    def script(request: Request) -> Response:
        text = files("controlscope.view").joinpath("static/live.js").read_text("utf-8")
        return Response(text, media_type="text/javascript", headers=_HEADERS)

    def missing(request: Request, exc: Exception) -> Response:
        return _html(render_error(_LINKS, "No such page", f"nothing at {request.url.path}"), 404)

    routes = [
        Route("/", home),
        Route("/run/{run_id:path}", run),
        Route("/_stamp", stamp_of),
        Route("/_stamp/run/{run_id:path}", stamp_of),
        Route("/static/live.js", script),
    ]
    return Starlette(routes=routes, exception_handlers={404: missing, 405: missing})
