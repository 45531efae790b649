"""Test helper: run an agent program against an instance through the real apps MCP server.

The program runs in this process (not in the isolated worker) with the same proxy functions
the worker gets (generated from the server's tool schemas, :mod:`controlscope.worker`); every
call goes through the MCP server (its stdio process, or the same server in memory) to the
instance's own database copy, and the native evaluator judges the result::

    outcome = run_program("total_received_from/1", solution)
    assert outcome.verdict.success, outcome.verdict.checks

The full path (planner, worker, boundaries, reviews) is ``controlscope.run_task``; this helper
is for checking templates: every reference solution passes its evaluator, wrong ones fail
with the right reason.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Literal

from controlscope._leftovers import temp_dir
from controlscope.core import ToolServer, Verdict
from controlscope.envs._mcp import McpToolServer
from controlscope.envs.apps._schema import connect
from controlscope.envs.apps.environment import AppsEnvironment
from controlscope.envs.apps.server import DB_FILE, build_server
from controlscope.worker import generate_proxies

__all__ = ["ProgramOutcome", "ProgramToolError", "run_program"]


class ProgramToolError(Exception):
    """An API call of the program returned an error (what ``ToolError`` is in the worker)."""


@dataclass
class ProgramOutcome:
    """What running a program did.

    Attributes:
        verdict: the native evaluator's verdict on the terminal state.
        calls: the API calls made, as ``(tool, arguments, is_error)``.
        error: the program's traceback when it raised, else None.
        call_ms: each call's round trip through the server, in milliseconds.
    """

    verdict: Verdict
    calls: list[tuple[str, dict[str, Any], bool]] = field(default_factory=list)
    error: str | None = None
    call_ms: list[float] = field(default_factory=list)


def _namespace(server: ToolServer, outcome: ProgramOutcome) -> dict[str, Any]:
    """A fresh namespace holding the proxies, calling ``server``."""

    def call(tool: str, arguments: dict[str, Any]) -> str:
        start = time.perf_counter()
        result = server.call(tool, arguments)
        outcome.call_ms.append((time.perf_counter() - start) * 1000)
        outcome.calls.append((tool, arguments, result.is_error))
        if result.is_error:
            raise ProgramToolError(result.text)
        return result.text

    namespace: dict[str, Any] = {"_cs_call": call, "ToolError": ProgramToolError}
    exec(generate_proxies(server.list_tools()).source, namespace)
    return namespace


def run_program(
    task_id: str, code: str, *, transport: Literal["stdio", "memory"] = "memory"
) -> ProgramOutcome:
    """Run ``code`` on a fresh copy of ``task_id``'s world and judge the result.

    Args:
        task_id: an apps task (``template/n``).
        code: the agent program (Python using the API functions).
        transport: ``stdio`` starts the server process the environment starts; ``memory``
            serves the same server in this process (faster, the same MCP protocol).

    Returns:
        The verdict, the calls made and the program's error, if any.

    Raises:
        TaskError: unknown task.
        ToolServerError: the server did not start.
    """
    env = AppsEnvironment()
    task = env.task(task_id)
    with temp_dir("cs-apps-") as workspace:
        key = env.setup(task, 0, workspace)
        with contextlib.ExitStack() as stack:
            if transport == "stdio":
                server: McpToolServer = stack.enter_context(env.start_server(workspace))
            else:
                db = stack.enter_context(contextlib.closing(connect(str(workspace / DB_FILE))))
                server = stack.enter_context(McpToolServer.in_memory(build_server(db)))
            outcome = ProgramOutcome(verdict=Verdict(task_id=task_id, checks=[]))
            namespace = _namespace(server, outcome)
            try:
                exec(compile(code, f"<{task_id}>", "exec"), namespace)
            except Exception:
                outcome.error = traceback.format_exc(limit=-3)
        outcome.verdict = env.verify(task, workspace, key)
        return outcome
