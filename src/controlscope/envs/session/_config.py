"""Upstream MCP servers as a user names them: stdio commands, or the ``mcpServers`` JSON format
that Claude Desktop, Cursor and most MCP clients read.

The format (one file, or the same mapping in Python)::

    {"mcpServers": {"files": {"command": "npx",
                              "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp/x"],
                              "env": {"KEY": "value"}, "cwd": "/tmp"}}}

Each server is started as a stdio subprocess. Three keys of our own confine one where the user
asks, as the filesystem server is confined: ``workspace`` (the one directory it may write, seen
inside as ``/workspace``; ``{workspace}`` in its arguments and environment names it), ``read``
(further directories it reads: its code) and ``network`` (keep the host's network). An entry
is also accepted as a command line
(``"node server.js /tmp/x"``, split as a shell would) or a list ``[command, *args]``. Anything
else is refused with one line naming the server and the field: an unknown field (a remote
server's ``url`` among them: only stdio servers are started), a missing or empty command.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from controlscope.core import MAX_CONFIG_BYTES, InputFileError, read_json

__all__ = [
    "McpServer",
    "ServerConfigError",
    "first_line",
    "load_mcp_servers",
    "parse_mcp_servers",
]


def first_line(err: BaseException | str) -> str:
    """The first non-blank line of an error's message (its type's name when it has none): a
    failure told in one line."""
    text = str(err).strip()
    if not text:
        return type(err).__name__ if isinstance(err, BaseException) else "unknown error"
    return text.splitlines()[0]


class ServerConfigError(ValueError):
    """An upstream server's configuration that cannot be used (one line: which server, what)."""


class McpServer(BaseModel):
    """One upstream MCP server started as a stdio subprocess (an ``mcpServers`` entry).

    Attributes:
        command: the executable (looked up on ``PATH``).
        args: its arguments.
        env: extra environment variables for it (merged over the MCP SDK's safe default
            environment; never written to a run directory).
        cwd: its working directory (None: ours; a confined server's is its workspace).
        type: the transport; ``stdio`` is the only one.
        workspace: confine the server to this directory (bubblewrap: read-write there, seen
            as ``/workspace``; the system and ``read`` read-only; no network unless
            ``network``); None: not confined.
        read: directories a confined server reads besides its executable's (its code).
        network: a confined server keeps the host's network.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    cwd: str | None = None
    type: Literal["stdio"] = "stdio"
    workspace: str | None = None
    read: tuple[str, ...] = ()
    network: bool = False

    @field_validator("command")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty; name the server's executable")
        return value

    @classmethod
    def of(cls, entry: McpServer | str | Sequence[str] | Mapping[str, Any]) -> McpServer:
        """The server an entry names: a server, a command line, ``[command, *args]`` or an
        ``mcpServers`` entry.

        Raises:
            pydantic.ValidationError: an entry of the wrong shape.
            ValueError: an empty command line.
        """
        if isinstance(entry, McpServer):
            return entry
        if isinstance(entry, str):
            words = shlex.split(entry)
            if not words:
                raise ValueError("an empty command line")
            return cls(command=words[0], args=tuple(words[1:]))
        if isinstance(entry, Mapping):
            return cls.model_validate(dict(entry))
        words = [str(w) for w in entry]
        if not words:
            raise ValueError("an empty command")
        return cls(command=words[0], args=tuple(words[1:]))

    def command_line(self) -> str:
        """The command and its arguments as one line, and where it is confined (recorded;
        the environment is not)."""
        line = shlex.join([self.command, *self.args])
        return line if self.workspace is None else f"{line} (confined to {self.workspace})"


ServersGiven = str | Path | Mapping[str, Any]
"""Upstream servers as a caller gives them: an ``mcpServers`` file, or a mapping (with or
without the ``mcpServers`` key) of names to entries (:meth:`McpServer.of`)."""


def load_mcp_servers(path: str | Path) -> dict[str, McpServer]:
    """The servers of an ``mcpServers`` JSON file (read as every user file is: regular file,
    bounded size).

    Raises:
        ServerConfigError: the file cannot be read, is not JSON, or an entry is refused (one
            line).
    """
    try:
        data = read_json(path, MAX_CONFIG_BYTES)
    except InputFileError as err:
        raise ServerConfigError(str(err)) from None
    return parse_mcp_servers(data, source=str(path))


def parse_mcp_servers(data: Any, *, source: str = "mcp servers") -> dict[str, McpServer]:
    """The servers ``data`` names: ``{"mcpServers": {NAME: ENTRY}}`` or ``{NAME: ENTRY}``; a
    path is read with :func:`load_mcp_servers`.

    Args:
        data: the configuration.
        source: what to call it in errors (a file's path).

    Returns:
        Server name -> server, in the given order.

    Raises:
        ServerConfigError: one line naming the server and the problem: not a mapping, a
            blank name, an unknown field (``url``: only stdio servers), a missing or empty
            command.
    """
    if isinstance(data, str | Path):
        return load_mcp_servers(data)
    if isinstance(data, Mapping) and "mcpServers" in data:
        extra = sorted(set(data) - {"mcpServers"})
        if extra:
            raise ServerConfigError(f"{source}: unknown key(s) {extra} beside mcpServers")
        data = data["mcpServers"]
    if not isinstance(data, Mapping):
        raise ServerConfigError(f"{source}: mcpServers must map server names to servers")
    servers: dict[str, McpServer] = {}
    for name, entry in data.items():
        if not isinstance(name, str) or not name.strip() or "__" in name:
            raise ServerConfigError(f"{source}: {name!r} is no server name (no blank, no '__')")
        servers[name] = _entry(source, name, entry)
    return servers


def _entry(source: str, name: str, entry: Any) -> McpServer:
    """One server, or one line saying what is wrong with it."""
    try:
        return McpServer.of(entry)
    except ValidationError as err:
        errors = err.errors()  # an unknown field says most (a remote server's url)
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        where = ".".join(str(p) for p in first["loc"]) or "entry"
        if first["type"] == "extra_forbidden":
            hint = " (only stdio servers are started: give command and args)"
            why = f"unknown field {where!r}{hint if where == 'url' else ''}"
        elif first["type"] == "missing":
            why = f"no {where!r}"
        else:
            why = f"{where}: {first['msg']}"
        raise ServerConfigError(f"{source}: server {name!r}: {why}") from None
    except (TypeError, ValueError) as err:
        raise ServerConfigError(f"{source}: server {name!r}: {err}") from None
