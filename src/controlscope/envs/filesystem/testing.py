"""Test helper: run a task's reference solution through the real npm filesystem server.

Used by every filesystem task's tests: a reference solution (a program using the tools, run
through the real server) must pass the verifier::

    verdict = run_reference(ENGLISH_TALENT, seed=3, params={"students": 25})
    assert verdict.success, verdict.checks
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controlscope.core import AnswerKey, ToolResult, ToolServer, Verdict
from controlscope.envs.filesystem.environment import make_task, prepare_workspace, spec_rng
from controlscope.envs.filesystem.registry import FsTaskSpec, ToolCaller
from controlscope.envs.filesystem.server import start_filesystem_server
from controlscope.envs.filesystem.workspace import Workspace

__all__ = ["ReferenceToolError", "run_reference", "solve_reference", "strict_caller"]


class ReferenceToolError(RuntimeError):
    """A reference solution's primitive call returned a tool error."""


def strict_caller(
    server: ToolServer, log: list[tuple[str, dict[str, Any]]] | None = None
) -> ToolCaller:
    """A :data:`ToolCaller` on ``server`` that raises :class:`ReferenceToolError` on tool errors.

    Args:
        server: a running tool server.
        log: when given, every call's ``(tool, arguments)`` is appended to it.
    """

    def call(tool: str, **arguments: Any) -> ToolResult:
        if log is not None:
            log.append((tool, dict(arguments)))
        result = server.call(tool, arguments)
        if result.is_error:
            raise ReferenceToolError(f"{tool}({arguments}) failed: {result.text}")
        return result

    return call


def solve_reference(
    spec: FsTaskSpec,
    seed: int,
    params: Mapping[str, Any] | None,
    workspace: Path,
    *,
    calls: list[tuple[str, dict[str, Any]]] | None = None,
) -> AnswerKey:
    """Generate ``spec``'s initial state in ``workspace`` and solve it with the reference through
    the real server, leaving the terminal state there (to alter it and verify again).

    Args:
        spec: the task (registered or not).
        seed: the generator seed.
        params: generator parameters overriding the defaults.
        workspace: an existing, empty directory; kept.
        calls: when given, receives every primitive call the reference made, in order.

    Returns:
        The answer key the generator returned.

    Raises:
        TaskError: bad parameters or seed, a non-empty workspace, or no server installed.
        ReferenceToolError: the reference solution made a call that failed.
    """
    task = make_task(spec, params)
    root = prepare_workspace(Path(workspace))
    key = spec.generate(spec_rng(seed), root, task.params)
    with start_filesystem_server(root, timeout_s=30) as server:
        spec.reference(strict_caller(server, calls))
    return key


def run_reference(
    spec: FsTaskSpec,
    seed: int = 0,
    params: Mapping[str, Any] | None = None,
    *,
    workspace: Path | None = None,
    calls: list[tuple[str, dict[str, Any]]] | None = None,
) -> Verdict:
    """Generate ``spec``'s initial state, solve it with its reference through the real server,
    and verify.

    Args:
        spec: the task (registered or not).
        seed: the generator seed.
        params: generator parameters overriding the defaults (validated as in the environment).
        workspace: an existing empty directory to use and keep (to inspect or alter the terminal
            state afterwards); a temporary workspace, removed afterwards, when ``None``.
        calls: when given, receives every primitive call the reference made, in order.

    Returns:
        The verifier's verdict on the terminal state.

    Raises:
        TaskError: bad parameters or seed, or the server is not installed.
        ReferenceToolError: the reference solution made a call that failed.
    """
    if workspace is not None:
        key = solve_reference(spec, seed, params, workspace, calls=calls)
        return Verdict(task_id=spec.id, checks=spec.verify(Path(workspace).resolve(), key))
    with Workspace(prefix=spec.name + "-") as ws:
        key = solve_reference(spec, seed, params, ws.path, calls=calls)
        return Verdict(task_id=spec.id, checks=spec.verify(ws.path, key))
