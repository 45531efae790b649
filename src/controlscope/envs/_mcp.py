"""A synchronous :class:`~controlscope.tools.ToolServer` on the official ``mcp`` SDK.

The controller is synchronous: it answers one boundary at a time. The SDK is asynchronous. An
:class:`McpToolServer` bridges the two with an ``anyio`` blocking portal
(``anyio.from_thread.start_blocking_portal``: an event loop on its own thread) in which one task
holds the client session for the server's whole life; :meth:`McpToolServer.call` starts a task
in the portal and waits for it with a timeout. Every primitive call the controller lets through
goes this way (paper section A.1: "the environment server receives a separate task workspace for
each branch"), so the hot path is one portal round trip.

The client never advertises MCP roots: the filesystem server would replace its allowed directories
(the task workspace) with them.

What comes back is bounded before it reaches a run (``controlscope.core``, "bounds"): a call's
arguments larger than the server's stdio transport accepts are a tool error and are never sent; a
result's text is cut at :data:`MAX_RESULT_CHARS`, and structured content that is not plain JSON
data within :data:`MAX_STRUCTURED_BYTES` is dropped (the text stays). Every call waits at most the
time it is given; a subprocess server runs in its own process group (:mod:`._stdio`), which is
killed whole on close.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import anyio
from anyio.from_thread import start_blocking_portal
from pydantic import ValidationError

from controlscope.core import (
    ToolAnnotations,
    ToolCallTimeout,
    ToolResult,
    ToolSchema,
    ToolServerError,
    clip_text,
    data_problem,
)

if TYPE_CHECKING:  # the SDK is imported when a server is connected, not with the package
    import mcp_types
    from mcp import Client
    from mcp.server import Server
    from mcp.server.mcpserver import MCPServer

__all__ = ["McpToolServer"]

_T = TypeVar("_T")

#: Bytes of the server's stderr quoted in a :class:`ToolServerError`.
_STDERR_TAIL_BYTES = 2000
#: Seconds that :meth:`McpToolServer.close` waits for the session to wind down.
_CLOSE_TIMEOUT_S = 10.0

MAX_ARGUMENT_BYTES = 8 * 1024 * 1024
"""The largest JSON encoding of one call's arguments sent to a server: the TypeScript SDK's stdio
transport (which the npm filesystem server uses) drops the connection when one message exceeds
its 10 MiB read buffer; the rest leaves room for the request's envelope."""

MAX_RESULT_CHARS = 1_000_000
"""Characters of a result's text kept (head and tail, the cut marked)."""

MAX_STRUCTURED_BYTES = 1024 * 1024
"""The largest JSON encoding of a result's structured content kept."""

#: Characters kept of the text a server reports about itself (names, versions, descriptions).
_INFO_CHARS = 200
_DESCRIPTION_CHARS = 4000

#: Exceptions of a broken connection (as opposed to a bad answer to one call).
_TRANSPORT_ERRORS = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
    OSError,
)


class McpToolServer:
    """One running MCP server, used synchronously (implements :class:`ToolServer`).

    Build it with :meth:`stdio` (a subprocess, e.g. the npm filesystem server) or
    :meth:`in_memory` (an in-process ``MCPServer``, for tests). The session lives on a dedicated
    portal thread; :meth:`close` stops it and the server (safe to call twice). Also a context
    manager.

    Errors: a tool error (bad path, bad arguments, an exception in the tool, a JSON-RPC error the
    server returned for the call, arguments too large to send, an answer the client refuses) is a
    :class:`ToolResult` with ``is_error`` set. A call without an answer in time raises
    :class:`~controlscope.core.ToolCallTimeout`. A transport failure, a dead server or a closed
    client raise :class:`ToolServerError` whose message ends with the tail of the server's stderr
    when there is one; after a transport failure every call fails at once.
    """

    def __init__(
        self,
        target: Any,
        *,
        timeout_s: float = 60.0,
        label: str = "mcp server",
        stderr_file: IO[str] | None = None,
        failures: list[str] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        """Connect to ``target`` and wait until the session is initialised.

        Prefer the :meth:`stdio` and :meth:`in_memory` constructors.

        Args:
            target: what ``mcp.Client`` accepts: a transport (async context manager yielding
                streams), an ``MCPServer`` or low-level ``Server``.
            timeout_s: seconds allowed for start-up and for each call.
            label: a name for error messages.
            stderr_file: the file the server's stderr goes to (read back for error messages);
                closed by :meth:`close`.
            failures: where the transport reports its failures (the session is dead from the
                first one on).
            on_close: called once the server process is stopped (by :meth:`close`, or when it
                did not start), e.g. to remove what its starter made for it.

        Raises:
            ToolServerError: the server did not start or the handshake failed within
                ``timeout_s``.
        """
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self._timeout_s = float(timeout_s)
        self._label = label
        self.agent_roots: tuple[str, ...] = ()
        """The directories as agent code must name them (set by the environment that started
        the server, e.g. ``("/workspace",)``); empty when they are the host paths."""
        self._stderr_file = stderr_file
        self._failures = failures if failures is not None else []
        self.max_argument_bytes = MAX_ARGUMENT_BYTES
        """The largest JSON encoding of one call's arguments this server is sent."""
        self.server_info: dict[str, str] = {}
        """The server's name and version as it reported them in ``initialize``."""
        self._tools: list[ToolSchema] | None = None
        self._client: Client | None = None
        self._closed = False
        self._dead: str | None = None
        self._ready = threading.Event()
        self._stop: anyio.Event | None = None
        self._start_error: BaseException | None = None
        self._exit = contextlib.ExitStack()
        if on_close is not None:
            self._exit.callback(on_close)  # after the portal's exit: the server is stopped
        self._portal = self._exit.enter_context(start_blocking_portal(name=f"mcp-client:{label}"))
        self._main = self._portal.start_task_soon(self._hold_session, target)
        if not self._ready.wait(self._timeout_s):
            tail = self._stderr_tail()
            self._shutdown()
            raise ToolServerError(f"{label}: no session within {self._timeout_s:g} s{tail}")
        if self._start_error is not None or self._client is None:
            error = self._start_error
            tail = self._stderr_tail()
            self._shutdown()
            raise ToolServerError(f"{label}: could not start: {_describe(error)}{tail}") from error

    # ----------------------------------------------------------------------------- constructors

    @classmethod
    def python_module(
        cls, module: str, workspace: str | os.PathLike[str], *, timeout_s: float
    ) -> McpToolServer:
        """Start ``MODULE``'s ``main`` on ``WORKSPACE`` (what ``python -m MODULE WORKSPACE``
        does) with this interpreter and this controlscope (an environment's own Python server:
        ALFWorld's, the apps'), in ``workspace``; agent code gets no file roots from it. The
        module is imported, not run as ``__main__``: a package that imports its server module
        would otherwise execute it twice (and Python warns so on the server's stderr).

        Raises:
            ToolServerError: the server did not start.
        """
        package_root = Path(__file__).resolve().parents[2]  # the folder holding controlscope
        workspace_dir = Path(workspace).resolve()
        server = cls.stdio(
            sys.executable,
            ["-c", f"import sys; from {module} import main; sys.exit(main())", str(workspace_dir)],
            cwd=workspace,
            env={"PYTHONPATH": str(package_root)},
            timeout_s=timeout_s,
        )
        server.agent_roots = ()
        return server

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
        stderr_path: str | os.PathLike[str] | None = None,
        label: str | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> McpToolServer:
        """Start ``command args...`` as a subprocess (in its own process group) and connect over
        stdin/stdout.

        Args:
            command: the executable (e.g. ``node``).
            args: its arguments.
            cwd: working directory of the server process.
            env: extra environment variables, merged over the SDK's safe default environment.
            timeout_s: seconds allowed for start-up and for each call.
            stderr_path: a file that receives the server's stderr (appended); an anonymous
                temporary file when ``None``. Either way it is quoted in error messages.
            label: the server's name in error messages, which agent code may see (default:
                the command line). A confined server passes its command as it runs inside,
                without the sandbox's options and host paths, which differ between branches.
            on_close: called once the server process is stopped.

        Returns:
            A connected server.

        Raises:
            ToolServerError: the command cannot be run or does not complete the handshake.
        """
        stderr_file: IO[str]
        if stderr_path is None:
            stderr_file = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        else:
            stderr_file = open(stderr_path, "a+", encoding="utf-8", errors="replace")  # noqa: SIM115
        if label is None:
            label = f"{Path(command).name} {' '.join(args)}".strip()
        failures: list[str] = []
        from controlscope.envs._stdio import process_group_transport

        transport = process_group_transport(
            command,
            list(args),
            cwd=None if cwd is None else str(cwd),
            env=env,
            errlog=stderr_file,
            on_failure=failures.append,
        )
        return cls(
            transport,
            timeout_s=timeout_s,
            label=label,
            stderr_file=stderr_file,
            failures=failures,
            on_close=on_close,
        )

    @classmethod
    def in_memory(
        cls, server: MCPServer | Server[Any], *, timeout_s: float = 60.0
    ) -> McpToolServer:
        """Connect to an in-process server (tests).

        Args:
            server: an ``mcp.server.mcpserver.MCPServer`` or low-level ``Server``.
            timeout_s: seconds allowed for start-up and for each call.

        Returns:
            A connected server.
        """
        name = getattr(server, "name", None) or type(server).__name__
        return cls(server, timeout_s=timeout_s, label=f"in-memory {name}")

    # ----------------------------------------------------------------------------- the loop

    async def _hold_session(self, target: Any) -> None:
        """The portal task that owns the session: open it, wait for :meth:`close`, close it."""
        self._stop = anyio.Event()
        from mcp import Client

        try:
            # mode="legacy": the initialize handshake, which the npm server speaks; no probe
            # round trip at start-up. No list_roots_callback: roots are never advertised.
            client = Client(target, mode="legacy", cache=None, read_timeout_seconds=self._timeout_s)
            async with client:
                self._client = client
                self.server_info = _server_info(client)
                self._ready.set()
                await self._stop.wait()
        except BaseException as error:  # reported to the caller, never lost
            if not self._ready.is_set():
                self._start_error = error
            else:
                self._dead = _describe(error)
            if isinstance(error, anyio.get_cancelled_exc_class()):
                raise
        finally:
            self._client = None
            self._ready.set()

    def _submit(
        self,
        func: Callable[..., Awaitable[_T]],
        *args: Any,
        what: str,
        timeout_s: float | None = None,
    ) -> _T:
        """Run ``func(*args)`` in the portal and wait for it (a little longer than the SDK's
        own read timeout, which answers first).

        Raises:
            ToolCallTimeout: no answer within ``timeout_s`` (default: the server's timeout).
            ToolServerError: closed server, ended or failed session, or cancelled.
        """
        if self._closed:
            raise ToolServerError(f"{self._label}: {what} on a closed server")
        self._check_alive(what)
        wait_s = self._timeout_s if timeout_s is None else timeout_s
        future = self._portal.start_task_soon(func, *args)
        try:
            return future.result(wait_s + 1.0)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ToolCallTimeout(
                f"{self._label}: {what} got no answer within {wait_s:g} s{self._stderr_tail()}"
            ) from None
        except concurrent.futures.CancelledError:
            raise ToolServerError(
                f"{self._label}: {what} was cancelled (the server stopped){self._stderr_tail()}"
            ) from None

    def _check_alive(self, what: str) -> None:
        """Raise :class:`ToolServerError` when the session ended or its transport failed."""
        dead = self._dead or (self._failures[0] if self._failures else None)
        if dead is not None or self._main.done():
            raise ToolServerError(
                f"{self._label}: the session ended ({dead or 'its task exited'}); "
                f"{what} cannot be made{self._stderr_tail()}"
            )

    def _session_client(self) -> Client:
        client = self._client
        if client is None:
            raise ToolServerError(f"{self._label}: the session is closed")
        return client

    # ----------------------------------------------------------------------------- ToolServer

    def list_tools(self) -> list[ToolSchema]:
        """Return the server's tools in the server's order (fetched once, then cached).

        Returns:
            One :class:`ToolSchema` per tool; ``code_params`` is empty (MCP has no notion of it).

        Raises:
            ToolServerError: transport failure, a dead server, or tools MCP does not allow
                (a malformed annotation: a hint that is no boolean), the field named.
        """
        if self._tools is None:
            self._tools = self._submit(self._list_tools, what="tools/list")
        return list(self._tools)

    async def _list_tools(self) -> list[ToolSchema]:
        from mcp.shared.exceptions import MCPError

        client = self._session_client()
        tools: list[ToolSchema] = []
        cursor: str | None = None
        try:
            while True:
                page = await client.list_tools(cursor=cursor)
                tools.extend(_tool_schema(t) for t in page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    return tools
        except MCPError as error:
            raise ToolServerError(f"{self._label}: tools/list failed: {error.message}") from error
        except ValidationError as error:  # e.g. a hint that is no boolean: the SDK refuses it
            first = error.errors()[0]
            where = clip_text(".".join(str(p) for p in first["loc"]), 200)
            raise ToolServerError(
                f"{self._label}: tools/list answered tools MCP does not allow "
                f"({where}: {first['msg']})"
            ) from None

    def call(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        """Make one primitive call and wait for its result.

        Args:
            name: the tool's name.
            arguments: its arguments (JSON-serialisable).
            timeout_s: seconds to wait for the answer (at most the server's own timeout);
                None: the server's timeout.

        Returns:
            The observation: text content joined with newlines, ``is_error``, structured content,
            and ``elapsed_ms`` (wall time seen by the caller, milliseconds). Arguments larger
            than :attr:`max_argument_bytes`, a JSON-RPC error about the call and an answer the
            client cannot accept (e.g. structured content that breaks the tool's own output
            schema) are tool errors.

        Raises:
            ToolCallTimeout: no answer in time (the server may still be working on it).
            ToolServerError: transport failure, dead server, or a closed client.
        """
        start = time.perf_counter()
        too_large = self._oversize(name, arguments)
        if too_large is not None:
            return ToolResult(text=too_large, is_error=True)
        wait_s = self._timeout_s if timeout_s is None else max(0.0, min(timeout_s, self._timeout_s))
        what = f"call of {name!r}"
        result = self._submit(self._call, name, arguments, wait_s, what=what, timeout_s=wait_s)
        return result.model_copy(update={"elapsed_ms": (time.perf_counter() - start) * 1000.0})

    def _oversize(self, name: str, arguments: dict[str, Any]) -> str | None:
        """The tool error for arguments too large to send, or None."""
        try:
            size = len(json.dumps(arguments, ensure_ascii=False).encode("utf-8"))
        except (TypeError, ValueError, RecursionError):
            return None  # the SDK reports what cannot be serialised
        if size <= self.max_argument_bytes:
            return None
        return (
            f"the arguments of {name!r} are {size} bytes of JSON; this server accepts at most "
            f"{self.max_argument_bytes} bytes per call (write large data in several calls)"
        )

    async def _call(self, name: str, arguments: dict[str, Any], wait_s: float) -> ToolResult:
        from mcp.shared.exceptions import MCPError
        from mcp_types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT

        client = self._session_client()
        try:
            raw = await client.call_tool(name, arguments, read_timeout_seconds=wait_s)
        except MCPError as error:
            if error.code == REQUEST_TIMEOUT:
                raise ToolCallTimeout(
                    f"{self._label}: call of {name!r} got no answer within {wait_s:g} s"
                ) from error
            if error.code == CONNECTION_CLOSED:
                raise self._broken(name, error.message) from error
            # A JSON-RPC error about this call (unknown tool, invalid params): a tool error.
            return ToolResult(text=f"MCP error {error.code}: {error.message}", is_error=True)
        except ValueError as error:  # arguments that cannot be serialised (pydantic raises it)
            return ToolResult(text=f"arguments of {name!r} cannot be sent: {error}", is_error=True)
        except _TRANSPORT_ERRORS as error:
            raise self._broken(name, _describe(error)) from error
        except Exception as error:  # the client refused the answer: the call failed, not the server
            why = _clean(_describe(error), _DESCRIPTION_CHARS)
            return ToolResult(
                text=f"the server's answer to {name!r} is invalid: {why}", is_error=True
            )
        return _to_result(raw)

    def _broken(self, name: str, message: str) -> ToolServerError:
        """The error of a call whose connection broke (the session is dead from now on)."""
        reason = self._failures[0] if self._failures else message
        self._dead = self._dead or reason
        return ToolServerError(
            f"{self._label}: call of {name!r} failed: {reason}{self._stderr_tail()}"
        )

    def close(self) -> None:
        """Stop the session and the server process; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._shutdown()

    def _shutdown(self) -> None:
        # A live session ends through its stop event (a clean exit of the client's context);
        # a session still starting is cancelled. Either way the SDK stops the server process.
        # Whatever is left after the grace period is cancelled with the portal.
        stop = self._stop
        with contextlib.suppress(RuntimeError):
            if self._client is not None and stop is not None:
                self._portal.call(stop.set)
            else:
                self._main.cancel()
        concurrent.futures.wait([self._main], timeout=_CLOSE_TIMEOUT_S)
        with contextlib.suppress(RuntimeError):
            self._portal.call(self._portal.stop, True)
        self._exit.close()  # stops the portal's event loop and joins its thread
        if self._stderr_file is not None:
            with contextlib.suppress(OSError):
                self._stderr_file.close()

    def __enter__(self) -> McpToolServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------- diagnostics

    def stderr_text(self) -> str:
        """Return what the server wrote to stderr so far ("" for in-memory servers)."""
        f = self._stderr_file
        if f is None or f.closed:
            return ""
        with contextlib.suppress(OSError, ValueError):
            # pread leaves the file offset alone: the server process shares it.
            fd = f.fileno()
            data = os.pread(fd, os.fstat(fd).st_size, 0)
            return data.decode("utf-8", errors="replace")
        return ""

    def _stderr_tail(self) -> str:
        text = self.stderr_text().strip()
        if not text:
            return ""
        return f"\n--- server stderr (tail) ---\n{text[-_STDERR_TAIL_BYTES:]}"


def _describe(error: BaseException | None) -> str:
    """One line for an exception, unwrapping single-member exception groups."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if error is None:
        return "unknown error"
    from mcp.shared.exceptions import MCPError

    if isinstance(error, MCPError):
        return f"MCP error {error.code}: {error.message}"
    return f"{type(error).__name__}: {error}"


def _to_result(raw: mcp_types.CallToolResult) -> ToolResult:
    """Map an SDK result to a bounded :class:`ToolResult` (text parts joined with newlines)."""
    import mcp_types

    parts: list[str] = []
    for item in raw.content:
        if isinstance(item, mcp_types.TextContent):
            parts.append(item.text)
        else:
            mime = getattr(item, "mime_type", None) or getattr(item, "mimeType", None)
            parts.append(f"[{item.type} content{f' ({mime})' if mime else ''}]")
    return ToolResult(
        text=_clean("\n".join(parts), MAX_RESULT_CHARS),
        is_error=bool(raw.is_error),
        structured=_bounded_structure(raw.structured_content),
    )


def _bounded_structure(structured: object) -> dict[str, Any] | None:
    """Structured content when it is plain JSON data within :data:`MAX_STRUCTURED_BYTES`."""
    if not isinstance(structured, dict) or data_problem(structured) is not None:
        return None
    if len(json.dumps(structured, ensure_ascii=False).encode("utf-8")) > MAX_STRUCTURED_BYTES:
        return None
    return dict(structured)


def _clean(text: str, max_chars: int) -> str:
    """Server text made recordable: lone surrogates escaped, cut at ``max_chars``."""
    if data_problem(text) is not None:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return clip_text(text, max_chars)


def _tool_schema(tool: mcp_types.Tool) -> ToolSchema:
    """A tool as the server lists it, its text made recordable, its schema plain data and its
    annotations (MCP's hints: read-only, destructive, idempotent, open world) kept."""
    schema = dict(tool.input_schema)
    hints = tool.annotations
    return ToolSchema(
        name=tool.name,
        description=_clean(tool.description or "", _DESCRIPTION_CHARS),
        input_schema=schema if data_problem(schema) is None else {"type": "object"},
        annotations=None if hints is None else ToolAnnotations.model_validate(hints.model_dump()),
    )


def _server_info(client: Client) -> dict[str, str]:
    """The server's name and version from ``initialize`` (empty when it gave none)."""
    info = client.server_info
    if info is None:
        return {}
    return {
        "name": _clean(str(info.name), _INFO_CHARS),
        "version": _clean(str(info.version), _INFO_CHARS),
    }
