"""Third-party verifiers: a command run on a read-only copy of the final workspace, in the same
kind of sandbox as agent code (no network, time and memory limits); its exit status is the
verdict (paper section 4: "native file-target verifiers determine task success")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from controlscope.core import Check, TaskError, Verdict
from controlscope.envs._confine import CommandLimits, CommandOutcome, run_confined
from controlscope.envs.external._files import scratch_copy

__all__ = ["VERIFY_LIMITS", "confined_verdict", "outcome_check"]

VERIFY_LIMITS = CommandLimits(timeout_s=300.0, memory_mb=1024, output_mb=8, tmp_mb=64)
"""A verifier's limits unless its task says otherwise: MCPMark's 300 s, 1 GiB of address space,
8 MiB of output."""


def confined_verdict(
    task_id: str,
    name: str,
    command: Sequence[str],
    workspace: Path,
    *,
    limits: CommandLimits = VERIFY_LIMITS,
    ro_paths: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
) -> Verdict:
    """Run a verifier on a read-only copy of ``workspace``; never raises.

    Args:
        task_id: the task verified.
        name: the check's name (``verify.py``).
        command: the verifier's executable (absolute) and arguments; ``{workspace}`` names
            the copy as the verifier sees it.
        workspace: the final workspace (left untouched).
        limits: its time, memory and output limits.
        ro_paths: directories it must read (its interpreter's prefix, its files).
        env: variables it gets besides the sandbox's fixed few.

    Returns:
        One check: passed iff the verifier exited 0; the reason says how it ended and holds
        its output (bounded). A verifier that hangs, crashes, prints without end or cannot
        start fails, with the reason.
    """
    try:
        with scratch_copy(workspace) as copy:
            outcome = run_confined(
                command, workspace=copy, writable=False, limits=limits, ro_paths=ro_paths, env=env
            )
    except TaskError as err:
        why = f"the final workspace could not be copied for the verifier: {err}"
        return Verdict(task_id=task_id, checks=[Check(name=name, passed=False, reason=why)])
    return Verdict(task_id=task_id, checks=[outcome_check(name, outcome, limits)])


def outcome_check(name: str, outcome: CommandOutcome, limits: CommandLimits) -> Check:
    """A command's outcome as a check: passed iff it exited 0; the reason says how it ended
    (and when it ran without bubblewrap) and holds its output."""
    how = outcome.describe(limits)
    if not outcome.confined:
        how += " (not sandboxed: bubblewrap is unavailable)"
    output = outcome.output.strip()
    reason = f"{how}; its output:\n{output}" if output else f"{how}; no output"
    return Check(name=name, passed=outcome.ok, reason=reason)
