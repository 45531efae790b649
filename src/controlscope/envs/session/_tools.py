"""The tools of an agent's session: upstream MCP servers and plain Python callables behind one
:class:`~controlscope.core.ToolServer`.

- An upstream server is started as a stdio subprocess (:class:`~controlscope.envs.McpToolServer`,
  its own process group, killed whole on close), confined to its workspace where its
  configuration names one (:func:`controlscope.envs._confine.start_confined_server`, the
  confinement of task specs' servers). One that fails to start is left out and
  named in :attr:`SessionTools.problems` (and in ``run_start``'s server record); one that dies
  later answers each of its calls with a tool error naming the failure, so agent code sees a
  ``ToolError`` and the session goes on.
- A Python callable runs in this (the controller's) process, never in the worker. Its input
  schema comes from its signature's type hints (pydantic's ``TypeAdapter``), its arguments are
  validated before it runs, and an exception, a value that is not plain JSON data or a call
  that does not return in time is a tool error with the reason.
- Tool names stay as their servers give them; a name that two sources give is namespaced
  ``server__tool`` in both (Python callables are the source ``python``).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pydantic import TypeAdapter, ValidationError, validate_call
from pydantic.errors import PydanticSchemaGenerationError

from controlscope.core import (
    ToolResult,
    ToolSchema,
    ToolServer,
    ToolServerError,
    clip_text,
    data_problem,
)
from controlscope.envs._confine import executable_paths, start_confined_server, which
from controlscope.envs._mcp import MAX_RESULT_CHARS, McpToolServer
from controlscope.envs.session._config import McpServer, ServerConfigError, first_line

__all__ = ["PYTHON_SOURCE", "PythonTool", "SessionTools", "start_session_tools"]

PYTHON_SOURCE = "python"
"""The source name of Python callables (their namespace when a name clashes)."""

_DESCRIPTION_CHARS = 4000


@dataclass(frozen=True)
class PythonTool:
    """A plain Python callable as a tool (run in the controller's process).

    Attributes:
        name: the tool's name (the function's ``__name__`` unless given).
        func: the callable.
        schema: its schema: the docstring as description, the input schema from the
            signature.
    """

    name: str
    func: Callable[..., Any]
    schema: ToolSchema
    checked: Callable[..., Any]
    """``func`` with its arguments validated against its signature first."""

    @classmethod
    def of(cls, func: Callable[..., Any], name: str | None = None) -> PythonTool:
        """The tool of ``func``.

        Raises:
            ServerConfigError: it is not callable, has no name, or its signature has no JSON
                schema (``*args``, a parameter type pydantic cannot describe).
        """
        if not callable(func):
            raise ServerConfigError(f"python tool {func!r} is not callable")
        tool_name = name or getattr(func, "__name__", "")
        if not tool_name or tool_name == "<lambda>" or "__" in tool_name:
            raise ServerConfigError(
                f"python tool {func!r} needs a name (a def, or name it), without '__'"
            )
        try:
            schema = TypeAdapter(cast("Any", func)).json_schema()
            checked = validate_call(func)
        except (PydanticSchemaGenerationError, TypeError, ValueError) as err:
            first = first_line(err)
            raise ServerConfigError(
                f"python tool {tool_name!r}: its signature has no JSON schema: {first}"
            ) from None
        description = clip_text(inspect.getdoc(func) or "", _DESCRIPTION_CHARS)
        return cls(
            name=tool_name,
            func=func,
            schema=ToolSchema(name=tool_name, description=description, input_schema=schema),
            checked=checked,
        )

    def call(self, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        """Call the function with ``arguments`` (validated against its signature), on a
        helper thread waited for at most ``timeout_s``.

        Returns:
            Its value as the observation: a string as it is, anything else as JSON (a mapping
            also as structured content); a tool error for invalid arguments, an exception, a
            value that is not plain JSON data, or no return within ``timeout_s`` (the call
            then goes on in the background and its value is dropped).
        """
        start = time.perf_counter()
        outcome: list[tuple[bool, Any]] = []
        done = threading.Event()

        def target() -> None:
            try:
                outcome.append((True, self.checked(**arguments)))
            except BaseException as err:  # reported as the tool's error, never lost
                outcome.append((False, err))
            finally:
                done.set()

        threading.Thread(target=target, name=f"python-tool:{self.name}", daemon=True).start()
        if not done.wait(timeout_s):
            result = ToolResult(
                text=f"{self.name} did not return within {timeout_s:g} s", is_error=True
            )
        else:
            ok, value = outcome[0]
            result = _observation(self.name, value) if ok else _failure(self.name, value)
        return result.model_copy(update={"elapsed_ms": (time.perf_counter() - start) * 1000})


def _failure(name: str, err: BaseException) -> ToolResult:
    """The tool error of a call that raised."""
    if isinstance(err, ValidationError):
        lines = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()]
        return ToolResult(text=f"invalid arguments for {name}: {'; '.join(lines)}", is_error=True)
    return ToolResult(
        text=clip_text(f"{name} raised {type(err).__name__}: {err}", MAX_RESULT_CHARS),
        is_error=True,
    )


def _observation(name: str, value: Any) -> ToolResult:
    """A returned value as the observation, or the tool error saying why it cannot be one."""
    if isinstance(value, str):
        problem = data_problem(value)
        if problem is None:
            return ToolResult(text=clip_text(value, MAX_RESULT_CHARS))
    else:
        problem = data_problem(value)
    if problem is not None:
        return ToolResult(
            text=f"{name} returned a {type(value).__name__} that is not JSON data: {problem}",
            is_error=True,
        )
    text = json.dumps(value, ensure_ascii=False)
    structured = dict(value) if isinstance(value, dict) else None
    return ToolResult(text=clip_text(text, MAX_RESULT_CHARS), structured=structured)


@dataclass(frozen=True)
class _Route:
    """Where a tool the agent names is served: its source and its name there."""

    source: str
    name: str


class SessionTools:
    """Upstream servers and Python tools behind one tool server (implements
    :class:`~controlscope.core.ToolServer`); build it with :func:`start_session_tools`.

    Attributes:
        agent_roots: none (the tools name their own paths).
        server_info: what ``run_start`` records of the sources: ``server:NAME`` -> the
            server's name and version, ``failed:NAME`` -> why it did not start,
            ``python`` -> the Python tools' names.
        problems: one line per upstream server that did not start.
        timeout_s: the longest one call of a Python tool is waited for.
    """

    def __init__(
        self,
        servers: Mapping[str, ToolServer],
        python: Sequence[PythonTool],
        *,
        failed: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self._servers = dict(servers)
        self._python = {tool.name: tool for tool in python}
        self.problems = tuple(f"server {name!r}: {why}" for name, why in (failed or {}).items())
        self.timeout_s = timeout_s
        self.agent_roots: tuple[str, ...] = ()
        self.server_info = _info(self._servers, self._python, failed or {})
        self._schemas, self._routes = _namespaced(self._servers, list(self._python.values()))
        self._closed = False

    def list_tools(self) -> list[ToolSchema]:
        """Every source's tools, in the order the sources were given."""
        return list(self._schemas)

    def call(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        """Make one call on the source that serves ``name``.

        Returns:
            The observation; a tool error for an unknown tool, and for an upstream server
            that failed (it died, broke the protocol or did not answer in time: the reason
            in the text).
        """
        route = self._routes.get(name)
        if route is None:
            return ToolResult(text=f"unknown tool {name!r}", is_error=True)
        wait_s = self.timeout_s if timeout_s is None else min(timeout_s, self.timeout_s)
        if route.source == PYTHON_SOURCE and route.name in self._python:
            return self._python[route.name].call(arguments, wait_s)
        server = self._servers[route.source]
        try:
            return server.call(route.name, arguments, timeout_s=timeout_s)
        except ToolServerError as err:
            why = first_line(err)
            text = f"the MCP server {route.source!r} failed: {why}"
            return ToolResult(text=clip_text(text, 4000), is_error=True)

    def close(self) -> None:
        """Stop every upstream server (their process groups killed); safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for server in self._servers.values():
            with contextlib.suppress(Exception):
                server.close()


def _namespaced(
    servers: Mapping[str, ToolServer], python: Sequence[PythonTool]
) -> tuple[list[ToolSchema], dict[str, _Route]]:
    """Each source's tools under the names agent code uses: its own, or ``source__tool``
    where two sources give one name."""
    listed: list[tuple[str, ToolSchema]] = [
        (source, tool) for source, server in servers.items() for tool in server.list_tools()
    ]
    listed += [(PYTHON_SOURCE, tool.schema) for tool in python]
    sources_of: dict[str, set[str]] = {}
    for source, tool in listed:
        sources_of.setdefault(tool.name, set()).add(source)
    schemas: list[ToolSchema] = []
    routes: dict[str, _Route] = {}
    for source, tool in listed:
        original = exposed = tool.name
        if len(sources_of[tool.name]) > 1:
            exposed = f"{source}__{tool.name}"
            tool = tool.model_copy(
                update={"name": exposed, "description": f"[{source}] {tool.description}"}
            )
        if exposed in routes:
            raise ServerConfigError(f"tool {exposed!r} is given twice by {source!r}")
        routes[exposed] = _Route(source, original)
        schemas.append(tool)
    return schemas, routes


def _info(
    servers: Mapping[str, ToolServer], python: Mapping[str, PythonTool], failed: Mapping[str, str]
) -> dict[str, str]:
    """What ``run_start`` records of the session's sources."""
    info: dict[str, str] = {}
    for name, server in servers.items():
        reported = server.server_info
        words = (reported.get("name"), reported.get("version"))
        info[f"server:{name}"] = " ".join(w for w in words if w)
    for name, why in failed.items():
        info[f"failed:{name}"] = clip_text(why, 2000)
    if python:
        info[PYTHON_SOURCE] = ", ".join(python)
    return info


def _start_server(name: str, config: McpServer, timeout_s: float) -> McpToolServer:
    """Start one upstream server, confined to its workspace when it names one.

    Raises:
        ToolServerError: it did not start (its command not found, its workspace missing).
    """
    if config.workspace is None:
        return McpToolServer.stdio(
            config.command,
            list(config.args),
            cwd=config.cwd,
            env=config.env,
            timeout_s=timeout_s,
            label=f"server {name}",
        )
    command = which(config.command)
    workspace = Path(config.workspace)
    if command is None:
        raise ToolServerError(f"server {name}: {config.command!r} is no executable")
    if not workspace.is_dir():
        raise ToolServerError(f"server {name}: its workspace {workspace} is no directory")
    named = [Path(a) for a in config.args if os.path.isabs(a) and Path(a).exists()]
    return start_confined_server(
        command,
        list(config.args),
        workspace,
        ro_paths=[*executable_paths(command), *named, *(Path(r) for r in config.read)],
        env=config.env,
        network=config.network,
        timeout_s=timeout_s,
    )


def start_session_tools(
    servers: Mapping[str, McpServer],
    python: Sequence[PythonTool],
    *,
    timeout_s: float = 60.0,
) -> SessionTools:
    """Start every upstream server and list its tools; put them behind one tool server.

    Args:
        servers: the upstream servers by name.
        python: the Python tools.
        timeout_s: how long a server may take to start and each call to answer.

    Returns:
        The session's tools; a server that did not start (or could not list its tools) is
        left out and named in :attr:`SessionTools.problems`.

    Raises:
        ServerConfigError: two Python tools of one name.
    """
    names = [tool.name for tool in python]
    if len(set(names)) != len(names):
        raise ServerConfigError(f"two python tools share a name: {sorted(names)}")
    started: dict[str, ToolServer] = {}
    failed: dict[str, str] = {}
    for name, config in servers.items():
        try:
            server = _start_server(name, config, timeout_s)
        except ToolServerError as err:
            failed[name] = first_line(err)
            continue
        try:
            server.list_tools()
        except ToolServerError as err:
            server.close()
            failed[name] = first_line(err)
            continue
        started[name] = server
    try:
        return SessionTools(started, python, failed=failed, timeout_s=timeout_s)
    except ServerConfigError:
        for held in started.values():
            held.close()
        raise
