"""A task spec: any MCP server's tasks, described in a TOML file.

::

    [server]                        # an MCP server speaking stdio
    command = "node"                # on PATH, or a path (relative: to this file's folder)
    args = ["{spec_dir}/server/index.js", "{workspace}"]
    env = { LOG_LEVEL = "warn" }
    paths = ["{spec_dir}/server"]   # what it reads besides the system and its interpreter
    network = false                 # true: it needs the network (granted by --allow-network)
    timeout_s = 60                  # start-up and each call

    [state]                         # a directory copied into the workspace, a set-up command,
    directory = "state"             # or neither (an empty workspace)
    # command = ["{python}", "make_state.py", "{workspace}"]

    [tools]                         # for the schedules (the paper's local rule, appendix B)
    read = ["read_text_file", "list_directory"]
    write = ["write_file", "create_directory"]

    [verifier]                      # run on a read-only copy of the final workspace; exit 0 passes
    command = ["{python}", "{spec_dir}/verify.py"]
    timeout_s = 300
    memory_mb = 1024

    [planner]                       # optional
    note = "..."                    # for a server without files: how the tools reach it
    example = "..."                 # a worked example for the planner's prompt

    [[tasks]]                       # one or more; each may have its own state and verifier
    id = "notes/summary"
    category = "notes"
    instruction = "Summarise ..."   # or instruction_file = "summary.md"

The server may instead be named as most MCP clients name one, the ``mcpServers`` format: a
table ``[mcpServers.NAME]`` (``command``, ``args``, ``env``) or ``mcpServers = "servers.json"``
(a JSON file ``{"mcpServers": {NAME: {...}}}``, relative to this file's folder), one server;
``[server]`` then gives only ``paths``, ``network`` and ``timeout_s``.

Placeholders in commands, arguments, paths and environment values: ``{spec_dir}`` (this file's
folder), ``{workspace}`` (the workspace as the process sees it: ``/workspace`` under bubblewrap)
and ``{python}`` (the interpreter agent code runs on; set-up and verifier commands see its
standard library).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from controlscope.core import TaskError, name_problem, read_toml
from controlscope.envs._confine import MAX_LIMIT, MAX_TIMEOUT_S
from controlscope.envs.external._files import MAX_TEXT_BYTES
from controlscope.envs.session import ServerConfigError, parse_mcp_servers

__all__ = [
    "CommandSpec",
    "PlannerSpec",
    "ServerSpec",
    "StateSpec",
    "TaskEntry",
    "TaskSpec",
    "ToolsSpec",
    "load_task_spec",
]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _variables(env: dict[str, str]) -> dict[str, str]:
    for name, value in env.items():
        if not _VARIABLE.fullmatch(name):
            raise ValueError(f"{name!r} is not a variable name (letters, digits, _)")
        if "\0" in value:
            raise ValueError(f"the value of {name} holds a NUL character")
    return env


class ServerSpec(_Section):
    """The MCP server (stdio): command, arguments, environment, what it reads, network, and
    the seconds allowed for start-up and each call."""

    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    paths: list[str] = Field(default_factory=list)
    network: bool = False
    timeout_s: float = Field(default=60.0, gt=0.0, le=MAX_TIMEOUT_S)

    _check = field_validator("timeout_s")(_finite)
    _env = field_validator("env")(_variables)


class CommandSpec(_Section):
    """A set-up or verifier command, run confined: its argument list, environment, what it
    reads besides the system and its interpreter, and its limits."""

    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    paths: list[str] = Field(default_factory=list)
    timeout_s: float = Field(default=300.0, gt=0.0, le=MAX_TIMEOUT_S)
    memory_mb: int = Field(default=1024, ge=64, le=MAX_LIMIT)
    output_mb: int = Field(default=8, ge=1, le=MAX_LIMIT)

    _check = field_validator("timeout_s")(_finite)
    _env = field_validator("env")(_variables)


class StateSpec(_Section):
    """How a run's initial state is made: a directory copied, a set-up command run in the
    (writable) workspace, or neither (an empty workspace)."""

    directory: str | None = None
    command: list[str] | None = Field(default=None, min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    paths: list[str] = Field(default_factory=list)
    timeout_s: float = Field(default=300.0, gt=0.0, le=MAX_TIMEOUT_S)
    memory_mb: int = Field(default=1024, ge=64, le=MAX_LIMIT)

    _check = field_validator("timeout_s")(_finite)
    _env = field_validator("env")(_variables)

    @model_validator(mode="after")
    def _one_way(self) -> StateSpec:
        if self.directory is not None and self.command is not None:
            raise ValueError("give directory or command, not both")
        return self


class ToolsSpec(_Section):
    """Which of the server's tools return information and which change its state."""

    read: list[str] = Field(default_factory=list)
    write: list[str] = Field(default_factory=list)


class PlannerSpec(_Section):
    """What the planner's prompt says: how the tools reach the environment (None: files through
    the tools, in the allowed directory), and a worked example."""

    note: str | None = None
    example: str = ""


class TaskEntry(_Section):
    """One task: its id (a path of names, :func:`~controlscope.core.name_problem`: panels keep
    its runs in folders named by it), category, instruction (or the file holding it), whether
    its instruction lets Python compute, and its own state or verifier."""

    id: str = Field(min_length=1)
    category: str = "spec"
    instruction: str | None = None
    instruction_file: str | None = None
    python_allowed: bool = True
    state: StateSpec | None = None
    verifier: CommandSpec | None = None

    @field_validator("id")
    @classmethod
    def _a_name(cls, value: str) -> str:
        problem = name_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _one_instruction(self) -> TaskEntry:
        if (self.instruction is None) == (self.instruction_file is None):
            raise ValueError(f"task {self.id!r}: give instruction or instruction_file (one)")
        if self.instruction is not None and not self.instruction.strip():
            raise ValueError(f"task {self.id!r}: the instruction is empty")
        if self.instruction is not None and len(self.instruction.encode()) > MAX_TEXT_BYTES:
            raise ValueError(
                f"task {self.id!r}: the instruction is longer than {MAX_TEXT_BYTES} bytes"
            )
        return self


class TaskSpec(_Section):
    """A task spec file (see the module docstring)."""

    server: ServerSpec
    state: StateSpec = Field(default_factory=StateSpec)
    tools: ToolsSpec = Field(default_factory=ToolsSpec)
    verifier: CommandSpec | None = None
    planner: PlannerSpec = Field(default_factory=PlannerSpec)
    tasks: list[TaskEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _coherent(self) -> TaskSpec:
        ids = [t.id for t in self.tasks]
        if len(set(ids)) != len(ids):
            raise ValueError("two tasks have the same id")
        for t in self.tasks:
            if t.verifier is None and self.verifier is None:
                raise ValueError(f"task {t.id!r} has no verifier (give [verifier] or its own)")
        return self


def load_task_spec(path: Path) -> TaskSpec:
    """Read and check a task spec file (nothing runs, no command is looked up).

    Raises:
        TaskError: the file is missing or not TOML, or a key is unknown, missing or wrong (one
            line naming the key).
    """
    try:
        data = read_toml(path)
    except ValueError as err:
        raise TaskError(f"task spec {err}") from None
    try:
        data = _mcp_servers(data, path.parent)
    except ServerConfigError as err:
        raise TaskError(f"task spec {path}: {err}") from None
    try:
        return TaskSpec.model_validate(data)
    except ValidationError as err:
        raise TaskError(f"task spec {path}: {_problem(err)}") from None


_FROM_MCP = ("command", "args", "env")
"""The ``[server]`` keys an ``mcpServers`` entry gives."""


def _mcp_servers(data: dict[str, Any], spec_dir: Path) -> dict[str, Any]:
    """The spec's data with a server named in the ``mcpServers`` format (most MCP clients'
    configuration: ``[mcpServers.NAME]`` tables with ``command``, ``args``, ``env``, or
    ``mcpServers = "servers.json"``, a JSON file of that format relative to the spec's folder)
    turned into the ``[server]`` section's command, arguments and environment; ``[server]``
    may still give ``paths``, ``network`` and ``timeout_s``.

    Raises:
        ServerConfigError: not exactly one server, an entry the format refuses, one that sets
            what a task spec confines itself (``cwd``, ``workspace``, ``read``), or a command
            given both there and in ``[server]`` (one line).
    """
    if "mcpServers" not in data:
        return data
    given = data["mcpServers"]
    servers = parse_mcp_servers(
        spec_dir / given if isinstance(given, str) else {"mcpServers": given}, source="mcpServers"
    )
    if len(servers) != 1:
        raise ServerConfigError(
            f"mcpServers: name one server, not {len(servers)} (a spec runs one)"
        )
    ((name, server),) = servers.items()
    if server.cwd is not None or server.workspace is not None or server.read:
        raise ServerConfigError(
            f"mcpServers.{name}: cwd, workspace and read are the spec's own "
            "([server] paths; the workspace is {workspace})"
        )
    section = dict(data.get("server") or {})
    clash = sorted(set(_FROM_MCP) & set(section))
    if clash:
        raise ServerConfigError(f"[server] {', '.join(clash)}: given in mcpServers too; give one")
    section |= {"command": server.command, "args": list(server.args), "env": dict(server.env)}
    if server.network:
        section.setdefault("network", True)
    rest = {k: v for k, v in data.items() if k != "mcpServers"}
    return rest | {"server": section}


def _problem(err: ValidationError) -> str:
    """The first problems of a validation error, one line: ``KEY: problem``."""
    parts = []
    for e in err.errors()[:3]:
        where = ".".join(str(p) for p in e["loc"]) or "file"
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            message = "unknown key"
        parts.append(f"{where}: {message}")
    return "; ".join(parts)
