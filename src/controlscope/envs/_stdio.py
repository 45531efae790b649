"""The stdio transport of our MCP client: a server process in its own process group.

The SDK's ``stdio_client`` leaves two faults open for a run that must end cleanly: a server that
writes bytes that are not UTF-8 on its stdout stops the reader without closing the session, so
every call waits its whole timeout; and on close it kills the server's process tree only while the
server itself is alive, so a grandchild of a server that already exited stays behind. This
transport speaks the same newline-delimited JSON-RPC (the MCP stdio transport) and instead:

- starts the server as the leader of a new process group, and on close (after the grace period
  the MCP shutdown sequence gives) kills the whole group, whatever is left of it;
- has the server killed when this process dies, ``SIGKILL`` included (``PR_SET_PDEATHSIG``,
  :func:`~controlscope._proc.die_with_parent`): a server that hangs in a call reads no more
  and would never see its stdin end. The signal follows the thread that started the server,
  which is the event loop's thread of the server's connection
  (:class:`~controlscope.envs.McpToolServer`'s portal): it lives until the connection is
  closed and the server stopped;
- treats every transport failure (bytes that are not UTF-8, a line that is not a JSON-RPC
  message, a line longer than :data:`MAX_LINE_BYTES`, a broken pipe, the server's exit while
  a process it started keeps its stdout open) as the end of the
  connection: ``on_failure`` is told why, the read stream ends, and every pending request fails
  at once with the SDK's ``CONNECTION_CLOSED`` error;
- answers a response it cannot parse but whose request id it can read (a result nested deeper
  than the SDK's parser goes) with a JSON-RPC error for that request, so the call becomes a
  tool error instead of waiting forever.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import IO, TYPE_CHECKING, Any

import anyio
from anyio._core._eventloop import get_async_backend
from anyio.abc import ByteReceiveStream, Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from controlscope._proc import die_with_parent, kill_below, reap_orphans

if TYPE_CHECKING:  # the SDK is imported when a server is started, not with the package
    import mcp_types
    from mcp.shared.message import SessionMessage

MAX_LINE_BYTES = 64 * 1024 * 1024
"""The longest line the server may write (one JSON-RPC message); a longer one is a failure."""

#: Seconds the server gets to exit after its stdin closes (the MCP shutdown sequence), and to
#: be reaped after its group is killed.
EXIT_GRACE_S = 2.0

if TYPE_CHECKING:
    Streams = tuple[MemoryObjectReceiveStream[Any], MemoryObjectSendStream[SessionMessage]]


class TransportFailure(Exception):
    """The server broke the stdio transport (why, in words)."""


@asynccontextmanager
async def process_group_transport(
    command: str,
    args: Sequence[str],
    *,
    cwd: str | None,
    env: Mapping[str, str] | None,
    errlog: IO[str],
    on_failure: Callable[[str], None],
) -> AsyncIterator[Streams]:
    """Start ``command args...`` in a new process group and connect to it over stdin/stdout.

    Args:
        command: the executable.
        args: its arguments.
        cwd: the server's working directory (None: ours).
        env: extra environment variables, merged over the SDK's safe default environment.
        errlog: the file the server's stderr goes to.
        on_failure: called once with the reason when the transport fails.

    Yields:
        The read and write streams ``mcp.Client`` expects of a transport.

    Raises:
        OSError: the command cannot be started.
    """
    from mcp.client.stdio import get_default_environment
    from mcp.shared.message import SessionMessage

    # anyio.open_process passes no preexec_fn; its backend's open_process hands any other
    # keyword to the event loop's subprocess_exec, which starts the process on this thread
    process = await get_async_backend().open_process(
        [command, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errlog,
        cwd=cwd,
        env={**get_default_environment(), **(env or {})},
        start_new_session=True,
        preexec_fn=die_with_parent(),
    )
    to_client, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, from_client = anyio.create_memory_object_stream[SessionMessage](0)
    failed: list[str] = []

    def fail(reason: str) -> None:
        if not failed:
            failed.append(reason)
            on_failure(reason)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_server, process, to_client, fail)
            tg.start_soon(_write_server, process, from_client, fail)
            tg.start_soon(_watch_exit, process, to_client, fail)
            try:
                yield read_stream, write_stream
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)
            for stream in (read_stream, write_stream, to_client, from_client):
                await stream.aclose()


async def _read_server(
    process: Process,
    to_client: MemoryObjectSendStream[Any],
    fail: Callable[[str], None],
) -> None:
    """Forward the server's messages to the session until stdout ends or breaks the rules."""
    from mcp.shared.message import SessionMessage

    assert process.stdout is not None
    async with to_client:
        try:
            async for line in _lines(process.stdout):
                message = _parse(line)
                if isinstance(message, SessionMessage):
                    await to_client.send(message)
                else:  # an answer we cannot read: fail just that request
                    await to_client.send(SessionMessage(message.error))
        except TransportFailure as failure:
            fail(str(failure))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return
        else:
            fail("the server closed its stdout")


class _Unreadable:
    """A response whose request id could be read but not its body."""

    def __init__(self, error: mcp_types.JSONRPCError) -> None:
        self.error = error


async def _lines(stdout: ByteReceiveStream) -> AsyncIterator[bytes]:
    """The server's stdout, line by line (without the newline), each at most
    :data:`MAX_LINE_BYTES` long.

    Raises:
        TransportFailure: a longer line.
    """
    buffer = bytearray()
    while True:
        try:
            chunk = await stdout.receive()
        except anyio.EndOfStream:
            return
        start = len(buffer)
        buffer += chunk
        cut = buffer.find(b"\n", start)
        while cut >= 0:
            line = bytes(buffer[:cut])
            del buffer[: cut + 1]
            if line.strip():
                yield line
            cut = buffer.find(b"\n")
        if len(buffer) > MAX_LINE_BYTES:
            raise TransportFailure(f"the server wrote a line longer than {MAX_LINE_BYTES} bytes")


def _parse(line: bytes) -> SessionMessage | _Unreadable:
    """One line as a JSON-RPC message.

    Raises:
        TransportFailure: not UTF-8, or not a JSON-RPC message (and no response whose request
            id can be read).
    """
    import mcp_types
    from mcp.shared.message import SessionMessage
    from mcp_types.jsonrpc import INTERNAL_ERROR

    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TransportFailure(f"the server wrote bytes that are not UTF-8 ({err})") from None
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError as err:
        ident = _response_id(text)
        if ident is None:
            raise TransportFailure(
                f"the server wrote a line that is not a JSON-RPC message: {str(err)[:300]}"
            ) from None
        error = mcp_types.ErrorData(
            code=INTERNAL_ERROR,
            message=f"the server's answer cannot be read: {str(err).splitlines()[0][:300]}",
        )
        return _Unreadable(mcp_types.JSONRPCError(jsonrpc="2.0", id=ident, error=error))
    return SessionMessage(message)


def _response_id(text: str) -> int | str | None:
    """The id of the JSON-RPC response ``text`` holds, if it is one whose id can be read."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not ("result" in data or "error" in data):
        return None
    ident = data.get("id")
    return ident if isinstance(ident, int | str) and not isinstance(ident, bool) else None


async def _watch_exit(
    process: Process, to_client: MemoryObjectSendStream[Any], fail: Callable[[str], None]
) -> None:
    """End the connection when the server exits, even if a process it left behind still holds
    its stdout open (no end of file would ever come)."""
    code = await process.wait()
    fail(f"the server exited with status {code}")
    to_client.close()


async def _write_server(
    process: Process,
    from_client: MemoryObjectReceiveStream[SessionMessage],
    fail: Callable[[str], None],
) -> None:
    """Send the session's messages to the server's stdin, one line each."""
    assert process.stdin is not None
    async with from_client:
        try:
            async for item in from_client:
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send(data.encode("utf-8") + b"\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as err:
            fail(f"the server's stdin is closed ({type(err).__name__})")


async def _stop(process: Process) -> None:
    """Close stdin, give the server :data:`EXIT_GRACE_S` to exit, then kill its whole group."""
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    with anyio.move_on_after(EXIT_GRACE_S):
        await process.wait()
    # Its children first (a sandbox's init, reaped by bwrap): none is orphaned.
    below = kill_below(process.pid) if process.returncode is None else []
    kill_group(process.pid)
    with anyio.move_on_after(EXIT_GRACE_S):
        await process.wait()
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    with anyio.move_on_after(EXIT_GRACE_S):
        await process.aclose()
    reap_orphans(below)  # those handed to this process (a sandbox's init on every bwrap exit)


def kill_group(pgid: int) -> None:
    """SIGKILL every process left in the process group ``pgid`` (none left is fine)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
