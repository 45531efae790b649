"""The apps' API layer: typed API specifications, their registry, errors, tokens and paging.

Every API of every app is one :class:`Api`: its app, name, description, typed parameters
(:class:`Param`), what it returns, whether it writes, whether it needs an access token, and its
implementation (a function of a :class:`Session` and the arguments). The registry
(:data:`APIS`) is the one source of truth: the MCP server builds its tools from it, the
documentation APIs describe it, and the environment's read and write tool sets come from it.

Conventions (as AppWorld's APIs have them, paper section 4 and appendix A.2):

- an app's APIs need an ``access_token`` from that app's ``login`` (the supervisor's and the
  documentation APIs need none); a missing, foreign or unknown token is a ``401`` error;
- listing APIs are paginated with ``page_index`` (from 0) and ``page_limit`` (default
  :data:`PAGE_LIMIT_DEFAULT`, at most :data:`PAGE_LIMIT_MAX`); they return a plain list and do
  not say whether more pages exist;
- errors are the app's own: an :class:`AppError` with an HTTP-like status and a message.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "APIS",
    "APPS",
    "PAGE_LIMIT_DEFAULT",
    "PAGE_LIMIT_MAX",
    "Api",
    "AppError",
    "Param",
    "Session",
    "api",
    "app",
    "page",
    "paging",
    "tool_name",
]

PAGE_LIMIT_DEFAULT = 5
"""Items a listing API returns when ``page_limit`` is not given (AppWorld's default)."""

PAGE_LIMIT_MAX = 20
"""The largest ``page_limit`` a listing API accepts."""

ParamType = Literal[
    "string", "integer", "number", "boolean", "string_list", "integer_list", "any", "json"
]
"""A parameter's type: JSON scalars, lists of strings or integers, any JSON scalar, or any JSON
value (``json``: what an adapted API's documentation does not narrow)."""


class AppError(Exception):
    """An app's own error: an HTTP-like status and a message (the agent sees both).

    Args:
        status: 400 bad request, 401 unauthorised, 403 forbidden, 404 not found, 409
            conflict, 422 invalid value.
        message: what went wrong, in the app's words.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Param:
    """One parameter of an API.

    Attributes:
        name: the argument's name.
        type: its type (:data:`ParamType`).
        description: what it means.
        required: whether it must be given.
        default: its value when not given (optional parameters only).
        minimum: the least value of a number.
        maximum: the greatest value of a number.
        choices: the values a string may take.
    """

    name: str
    type: ParamType
    description: str
    required: bool = True
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()

    def doc(self) -> dict[str, Any]:
        """The parameter as the documentation APIs show it."""
        out: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "required": self.required,
            "description": self.description,
        }
        if not self.required:
            out["default"] = self.default
        constraints = []
        if self.minimum is not None:
            constraints.append(f"value >= {self.minimum:g}")
        if self.maximum is not None:
            constraints.append(f"value <= {self.maximum:g}")
        if self.choices:
            constraints.append(f"one of {', '.join(self.choices)}")
        if constraints:
            out["constraints"] = constraints
        return out


TOKEN = Param("access_token", "string", "the access token from this app's login API")
PAGE_INDEX = Param(
    "page_index", "integer", "the page to show, from 0", required=False, default=0, minimum=0
)
PAGE_LIMIT = Param(
    "page_limit",
    "integer",
    f"the largest number of items on a page (at most {PAGE_LIMIT_MAX})",
    required=False,
    default=PAGE_LIMIT_DEFAULT,
    minimum=1,
    maximum=PAGE_LIMIT_MAX,
)

Implementation = Callable[..., Any]
"""An API's implementation: ``fn(session, **arguments)``; the session's ``user`` is the token's
owner for APIs that need a token."""


@dataclass(frozen=True)
class Api:
    """One API of one app.

    Attributes:
        app: the app's name (``music``).
        name: the API's name within the app (``show_playlist``).
        description: what it does.
        params: its parameters, ``access_token`` first when it needs one, paging last.
        returns: what it returns on success, in words.
        writes: whether it can change the app's state.
        token: whether it needs an access token.
        fn: the implementation.
    """

    app: str
    name: str
    description: str
    params: tuple[Param, ...]
    returns: str
    writes: bool
    token: bool
    fn: Implementation = field(compare=False, repr=False)

    @property
    def tool(self) -> str:
        """The API's tool name on the MCP server (``music__show_playlist``)."""
        return tool_name(self.app, self.name)

    def doc(self) -> dict[str, Any]:
        """The API's full specification, as ``api_docs.show_api_doc`` shows it."""
        return {
            "app_name": self.app,
            "api_name": self.name,
            "function": self.tool,
            "description": self.description,
            "parameters": [p.doc() for p in self.params],
            "returns": self.returns,
            "changes_state": self.writes,
        }


def tool_name(app_name: str, api_name: str) -> str:
    """The tool (and Python function) name of an API: ``{app}__{api}``."""
    return f"{app_name}__{api_name}"


APPS: dict[str, str] = {}
"""App name -> its description, in registration order."""

APIS: dict[str, Api] = {}
"""Tool name -> API, in registration order (the server lists tools in this order)."""


def app(name: str, description: str) -> None:
    """Register an app (before its APIs)."""
    APPS[name] = description


def api(
    app_name: str,
    name: str,
    description: str,
    params: Sequence[Param] = (),
    *,
    returns: str,
    writes: bool = False,
    token: bool = True,
    paged: bool = False,
) -> Callable[[Implementation], Implementation]:
    """Register the decorated function as an API of ``app_name``.

    Args:
        app_name: a registered app.
        name: the API's name in the app.
        description: what it does.
        params: its own parameters (``access_token`` and paging are added).
        returns: what it returns.
        writes: whether it changes state.
        token: whether it needs ``access_token`` (added as the first parameter).
        paged: whether it takes ``page_index`` and ``page_limit`` (added last).

    Raises:
        ValueError: an unknown app or a name registered twice.
    """
    if app_name not in APPS:
        raise ValueError(f"unknown app {app_name!r}")
    full = (*((TOKEN,) if token else ()), *params, *((PAGE_INDEX, PAGE_LIMIT) if paged else ()))

    def register(fn: Implementation) -> Implementation:
        spec = Api(app_name, name, description, full, returns, writes, token, fn)
        if spec.tool in APIS:
            raise ValueError(f"API {spec.tool} registered twice")
        APIS[spec.tool] = spec
        return fn

    return register


class Session:
    """One API call's view of the state: the database, the world's clock, the token's owner.

    Args:
        db: the open database (the server's one connection).
        app_name: the app whose API is called.
        user: the email of the token's owner; None for APIs without a token.
    """

    def __init__(self, db: sqlite3.Connection, app_name: str, user: str | None) -> None:
        self.db = db
        self.app = app_name
        self._user = user

    @property
    def user(self) -> str:
        """The token owner's email.

        Raises:
            AppError: the API needs no token (a bug in its implementation).
        """
        if self._user is None:
            raise AppError(500, "this API has no signed-in user")
        return self._user

    @property
    def now(self) -> str:
        """The world's clock (ISO 8601, seconds): fixed per world, so runs are deterministic."""
        return str(self.one("SELECT value FROM meta WHERE key = 'now'")[0])

    def one(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Row:
        """The first row of ``sql``.

        Raises:
            AppError: no row (500: a query that must find one).
        """
        row = self.db.execute(sql, tuple(args)).fetchone()
        if row is None:
            raise AppError(500, "internal state is missing")
        return row  # type: ignore[no-any-return]

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Every row of ``sql`` as a dict."""
        return [dict(r) for r in self.db.execute(sql, tuple(args)).fetchall()]

    def row(self, sql: str, args: Sequence[Any], what: str) -> dict[str, Any]:
        """The one row of ``sql``.

        Raises:
            AppError: 404 when there is none (``what`` names it).
        """
        found = self.db.execute(sql, tuple(args)).fetchone()
        if found is None:
            raise AppError(404, f"{what} does not exist")
        return dict(found)

    def write(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one write statement; the last inserted row id (the server commits after the
        call)."""
        cursor = self.db.execute(sql, tuple(args))
        return int(cursor.lastrowid or 0)


def access_token(secret: str, app_name: str, email: str) -> str:
    """The access token of ``email`` in ``app_name``: derived from the world's private secret,
    so the same world gives the same tokens (replays) and no token can be guessed."""
    digest = hashlib.sha256(f"{secret}|{app_name}|{email}".encode()).hexdigest()
    return digest[:32]


def token_owner(db: sqlite3.Connection, app_name: str, token: str) -> str:
    """The email whose ``app_name`` token ``token`` is.

    Raises:
        AppError: 401 for an empty, unknown or other app's token.
    """
    if not isinstance(token, str) or not token:
        raise AppError(401, f"an access token from {app_name}'s login API is required")
    secret = str(db.execute("SELECT value FROM meta WHERE key = 'secret'").fetchone()[0])
    for (email,) in db.execute("SELECT email FROM accounts WHERE app = ?", (app_name,)):
        if access_token(secret, app_name, str(email)) == token:
            return str(email)
    raise AppError(401, f"the access token is not valid for the {app_name} app")


def paging(page_index: int, page_limit: int) -> tuple[int, int]:
    """``(limit, offset)`` of a page.

    Raises:
        AppError: 422 for a page index below 0 or a limit outside 1..:data:`PAGE_LIMIT_MAX`.
    """
    if page_index < 0:
        raise AppError(422, "page_index must be 0 or more")
    if not 1 <= page_limit <= PAGE_LIMIT_MAX:
        raise AppError(422, f"page_limit must be between 1 and {PAGE_LIMIT_MAX}")
    return page_limit, page_index * page_limit


def page(items: Sequence[Any], page_index: int, page_limit: int) -> list[Any]:
    """One page of ``items`` (already filtered and ordered).

    Raises:
        AppError: bad paging values (see :func:`paging`).
    """
    limit, offset = paging(page_index, page_limit)
    return list(items[offset : offset + limit])
