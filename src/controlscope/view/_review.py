"""The review page: a person decides at the boundaries a :class:`~controlscope.review.ReviewDesk`
holds (``controlscope run --reviewer human``).

Routes, added to the viewer's application when it is given a desk: ``/review`` (the
boundaries waiting, oldest first, and the one chosen with ``?t=TICKET``, else the oldest: the
public state a model reviewer gets and a decision for each granted operation kind),
``/_review/wait?v=N`` (answers when the desk changes from version ``N``, at most
:data:`WAIT_S` later: the page reloads itself when a boundary arrives), ``/_review/decide``
(POST, JSON ``{"ticket", "operation", "arguments"|"code", "reason"}`` with the desk's secret
in the ``X-Review-Key`` header) and ``/static/review.js``.

A run in another process posts to the same desk (``view._remote``).

The argument form is generated from the tool's input schema (one field per property; a
code-valued parameter is shown, not editable) and the page checks the values against the
schema's types, enumerations and bounds before anything is sent; the desk then validates the
decision as a model's. All agent and tool text is escaped by the viewer's templates.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from controlscope.core import code_parameters, operation_spec
from controlscope.review import PendingReview, ReviewDesk, render_view, rest_of_block
from controlscope.view._render import Links, render

WAIT_S = 20.0
"""The longest a ``/_review/wait`` request is held before it answers unchanged."""

MAX_DECISION_BYTES = 1_000_000
"""The largest decision body read (a replacement's code is at most 100,000 characters)."""

_STATUS = {"accepted": 200, "refused": 422, "not_pending": 409, "forbidden": 403}
_FIELD_KINDS = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}


@dataclass(frozen=True)
class FormField:
    """One argument of the pending call in the review form.

    Attributes:
        name: the parameter's name.
        kind: ``string``, ``integer``, ``number``, ``boolean`` or ``json`` (anything else,
            edited as JSON text).
        text: the current value as the field shows it (a string as itself, else JSON; empty
            when the call does not give it).
        given: whether the call gives this argument.
        code: a code-valued parameter (shown, not editable: paper section 3.1).
        schema: the property's schema, as JSON text (the page checks against it).
        description: the property's description.
    """

    name: str
    kind: str
    text: str
    given: bool
    code: bool
    schema: str
    description: str


def form_fields(pending: PendingReview) -> list[FormField]:
    """The argument form of a pending call: one field per property of the tool's input
    schema, then any argument the schema does not list (edited as JSON)."""
    tool = pending.state.tool_schema
    arguments = pending.state.boundary.arguments
    props = tool.input_schema.get("properties")
    properties: dict[str, Any] = dict(props) if isinstance(props, dict) else {}
    code = code_parameters(tool)
    fields = []
    for name in [*properties, *(n for n in arguments if n not in properties)]:
        schema = properties.get(name)
        schema = schema if isinstance(schema, dict) else {}
        kind = _FIELD_KINDS.get(str(schema.get("type")), "json")
        given, value = name in arguments, arguments.get(name)
        if not given:
            text = ""
        elif kind == "string" and isinstance(value, str):
            text = value
        else:
            text = json.dumps(value, ensure_ascii=False)
        fields.append(
            FormField(
                name=name,
                kind=kind,
                text=text,
                given=given,
                code=name in code,
                schema=json.dumps(schema, ensure_ascii=False),
                description=str(schema.get("description", "")),
            )
        )
    return fields


@dataclass(frozen=True)
class Choice:
    """One granted operation kind on the review page.

    Attributes:
        kind: the kind.
        payload: what it carries (``none``, ``arguments``, ``code``).
        description: what it does (its review tool's description).
        cancels: whether it cancels the pending call (a replacement).
        code: the code a ``code`` payload starts from: the rest of the block from the pending
            call's statement for a replacement, else the whole block.
    """

    kind: str
    payload: str
    description: str
    cancels: bool
    code: str


def choices(pending: PendingReview) -> list[Choice]:
    """The granted operation kinds as the review page offers them, smallest scope first."""
    boundary = pending.state.boundary
    found = []
    for kind in pending.granted.operations:
        spec = operation_spec(kind)
        code = rest_of_block(boundary.code, boundary.line) if spec.cancels else boundary.code
        found.append(Choice(kind, spec.payload, spec.description, spec.cancels, code))
    return found


class ReviewPages:
    """The review page's request handlers for one desk.

    Args:
        desk: the desk whose boundaries the page shows and decides.
        links: how the page links to the viewer's others.
        headers: the headers of every answer (the viewer's content security policy...).
    """

    def __init__(self, desk: ReviewDesk, links: Links, headers: dict[str, str]) -> None:
        self.desk = desk
        self.links = links
        self.headers = headers

    def page(self, request: Request) -> Response:
        """The review page (``?t=TICKET`` chooses a waiting boundary)."""
        waiting = self.desk.pending()
        chosen = self.desk.get(request.query_params.get("t", ""))
        if chosen is None and waiting:
            chosen = waiting[0]
        context: dict[str, Any] = {"waiting": waiting, "chosen": chosen, "desk": self.desk}
        if chosen is not None:
            state, granted = chosen.state, chosen.granted
            context.update(
                fields=form_fields(chosen),
                choices=choices(chosen),
                notes=state.operation_notes(granted),
                shown=render_view(state, "with_feedback", granted, mode="json")[-1].content,
                lines=state.boundary.code.splitlines(),
            )
        text = render("review.html", self.links, live=None, **context)
        return HTMLResponse(text, headers=self.headers)

    async def wait(self, request: Request) -> Response:
        """Answer with the desk's version once it differs from ``?v=`` (or after
        :data:`WAIT_S`)."""
        seen = request.query_params.get("v", "")
        loop = asyncio.get_running_loop()
        until = loop.time() + WAIT_S
        while str(self.desk.version) == seen and loop.time() < until and not self.desk.closed:
            await asyncio.sleep(0.05)
        return PlainTextResponse(str(self.desk.version), headers=self.headers)

    async def decide(self, request: Request) -> Response:
        """Hand a decision to the desk; JSON ``{"answer", "detail"}`` with status 200
        (accepted), 422 (refused: the reason), 409 (not pending), 403 (no secret) or 400
        (not a decision)."""
        try:
            decision = json.loads(await bounded_body(request, MAX_DECISION_BYTES))
            if not isinstance(decision, dict):
                raise ValueError("a decision is a JSON object")
            ticket, kind = decision.pop("ticket", ""), decision.pop("operation", "")
            if not isinstance(ticket, str) or not isinstance(kind, str):
                raise ValueError("'ticket' and 'operation' are strings")
        except RecursionError:
            failed = {"answer": "malformed", "detail": "a decision nested too deeply to parse"}
            return JSONResponse(failed, status_code=400, headers=self.headers)
        except ValueError as err:  # JSONDecodeError too
            failed = {"answer": "malformed", "detail": str(err)}
            return JSONResponse(failed, status_code=400, headers=self.headers)
        secret = request.headers.get("x-review-key", "")
        answer = await asyncio.to_thread(self.desk.decide, ticket, secret, kind, decision)
        return JSONResponse(
            {"answer": answer.answer, "detail": answer.detail},
            status_code=_STATUS[answer.answer],
            headers=self.headers,
        )

    def script(self, request: Request) -> Response:
        """The review page's script (a file: the pages' policy runs no inline script)."""
        text = files("controlscope.view").joinpath("static/review.js").read_text("utf-8")
        return Response(text, media_type="text/javascript", headers=self.headers)


async def bounded_body(request: Request, limit: int) -> bytes:
    """The request's body, read no further than ``limit`` bytes.

    Raises:
        ValueError: the body (as declared, or as it arrives) is over ``limit`` bytes.
    """
    refusal = f"a decision is at most {limit:,} bytes"
    declared = request.headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > limit:
        raise ValueError(refusal)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ValueError(refusal)
    return bytes(body)


def with_banner(page: str, desk: ReviewDesk | None) -> str:
    """A run's or folder's page with, at its top, a link to the review page when boundaries
    wait for a decision (the live page reloads when the log changes, so it appears when a
    boundary arrives); the page itself when no desk or nothing waits."""
    waiting = len(desk.pending()) if desk is not None else 0
    if not waiting:
        return page
    what = "a boundary waits" if waiting == 1 else f"{waiting} boundaries wait"
    banner = (
        f'<p class="live" id="review-banner">{what} for your decision: '
        '<a href="/review">the review page</a></p>\n'
    )
    return page.replace("<main>\n", "<main>\n" + banner, 1)


def review_routes(desk: ReviewDesk, links: Links, headers: dict[str, str]) -> list[Route]:
    """The review page's routes for ``desk`` (see the module docstring)."""
    pages = ReviewPages(desk, links, headers)
    return [
        Route("/review", pages.page),
        Route("/_review/wait", pages.wait),
        Route("/_review/decide", pages.decide, methods=["POST"]),
        Route("/static/review.js", pages.script),
    ]
