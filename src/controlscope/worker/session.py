"""The controller side of the worker: runs a reply's blocks and drives every boundary.

:class:`WorkerSession` owns one worker process (one shared namespace for a trajectory), the
primitive-call count and the execution clock of a task. It is authoritative: the worker is
untrusted, every message it sends is checked against the session's own state machine, and a
message that does not fit (a call from a cancelled block, an unknown tool, a forged
"cancelled" ending, malformed or oversize data) kills the worker and ends the block ``killed``
with the reason. Forging a message gains nothing beyond what a proxy call gives: every call
still passes through the boundary, the budget and the handler.

Known limit: agent code runs in the same interpreter as the runtime and can patch it (e.g. the
runtime's class), so a call forged by a patched runtime right after a block (or a replacement)
has started is attributed to that block. It is still reviewed, budgeted and logged like any
call; messages before a block's ``started`` acknowledgement (nonce-checked) or from a block
known to be cancelled kill the worker instead.
"""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import os
import re
import secrets
import signal
import subprocess
import tempfile
import time
import warnings
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from pydantic import ValidationError

from controlscope.core import (
    BlockResult,
    BlockStatus,
    Boundary,
    CallSite,
    Keep,
    PatchArguments,
    PatchBlockData,
    PrimitiveCall,
    ReplaceBoundary,
    ReplaceWorkflow,
    ToolSchema,
    ToolServer,
    ToolServerError,
)
from controlscope.core import Operation as Decision
from controlscope.worker import _runtime
from controlscope.worker import _sandbox as sandbox
from controlscope.worker._channel import Channel, ChannelTimeout, ProtocolViolation, WorkerGone
from controlscope.worker._proxies import ProxySet, generate_proxies
from controlscope.worker._types import BoundaryHandler, Limits

log = logging.getLogger(__name__)

#: Seconds the worker may take to start and answer ``ready``.
START_TIMEOUT_S = 20.0
_STDERR_TAIL = 2000
#: Default seconds each side polls the channel before sleeping (see :class:`WorkerSession`);
#: measured with ``benchmarks/boundary_overhead.py``: a keep round trip takes about 0.04 ms with
#: these and 0.16 ms without.
CONTROLLER_SPIN_S = 150e-6
WORKER_SPIN_S = 200e-6
MAX_SPIN_S = 0.01
_JSON_SCALARS = (str, int, float, bool, type(None))
_REPLACEMENT_ID = re.compile(r"^(.*)\.r(\d+)$")
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


class WorkerStartError(RuntimeError):
    """The worker process could not be started or did not answer ``ready``."""


class _Stale(Exception):
    """Internal: a message arrived before the worker acknowledged the block's start."""


class _Kill(Exception):
    """Internal: the worker must be killed; ``status`` and ``reason`` describe the block's end."""

    def __init__(self, status: BlockStatus, reason: str) -> None:
        super().__init__(reason)
        self.status: BlockStatus = status
        self.reason = reason


@dataclass
class _Block:
    """Controller-side state of the running block."""

    block_id: str
    code: str
    original_tree: ast.Module
    seq: int
    started: float = field(default_factory=time.time)
    exec_s: float = 0.0
    calls: int = 0
    output: list[str] = field(default_factory=list)
    output_chars: int = 0
    dropped: int = 0
    budget_hit: bool = False
    cancelled: bool = False
    cancel_exec_s: float = 0.0
    replacement: str | None = None


def _rebound(variables: Any) -> dict[str, Any]:
    """A worker-sent variable snapshot, cut again when it exceeds twice the runtime's bound.

    The runtime bounds honest snapshots (``_runtime.snapshot``: about ``SCOPE_CHARS`` of
    JSON); a forged one could carry megabytes into every review prompt and the log.

    Raises:
        TypeError: the snapshot is not a JSON object.
    """
    if variables is None:
        return {}
    if not isinstance(variables, dict):
        raise TypeError("a variable snapshot must be a JSON object")
    if len(_ENCODER.encode(variables)) <= 2 * _runtime.SCOPE_CHARS:
        return variables
    return _runtime.snapshot(variables, set())


def replacement_id(old_id: str) -> str:
    """The id of the block replacing ``old_id``: ``"3"`` -> ``"3.r1"``, ``"3.r1"`` -> ``"3.r2"``."""
    m = _REPLACEMENT_ID.match(old_id)
    if m:
        return f"{m.group(1)}.r{int(m.group(2)) + 1}"
    return f"{old_id}.r1"


class WorkerSession:
    """Runs agent blocks in an isolated worker and pauses at every primitive call.

    One session serves one trajectory (one task, or one branch): blocks share one namespace
    (module variables persist across blocks and replies) until the worker is killed (timeout,
    protocol violation, death), after which the next block starts a fresh worker and its result
    says so (``fresh_worker``). Paper section 3 and A.1.

    Budgets (:class:`Limits`): ``block_exec_s`` and ``task_exec_s`` count execution seconds
    (worker time and tool-call time; review time in the handler is excluded) and kill the
    worker when exceeded (status ``timeout``); ``primitive_calls`` counts calls made on the
    server, a call beyond it raises ``BudgetExhausted`` in agent code and ends the block
    ``budget_exhausted``; printed output is kept up to ``output_chars`` per block, truncation
    marked; memory, CPU seconds, processes, file size and ``/tmp`` size are rlimits/tmpfs
    options of the worker process.

    Not thread-safe: drive one session from one thread at a time. Under
    bwrap the sandbox dies with the thread that started it (``--die-with-parent`` follows the
    spawning thread), so start sessions from a thread that outlives them.

    Args:
        tools: the environment's tool server; proxies are generated from its schemas (listed
            at :meth:`start`) and every call the controller lets through is made with
            :meth:`ToolServer.call`.
        limits: budgets (block and task execution seconds, primitive calls, output, rlimits).
        isolation: ``"auto"`` (bwrap when it works, else ``none`` with a loud warning),
            ``"bwrap"`` (required; :class:`RuntimeError` otherwise) or ``"none"``.
        spin_s: seconds the controller polls the channel (yielding the CPU between tries)
            before it sleeps, after each message it sends the worker. Agent code between two
            calls usually answers within this time, so the boundary costs no wake-up (tens of
            microseconds on a virtual machine); 0 always sleeps.
        worker_spin_s: the same for the worker waiting for the controller's answer.

    Raises:
        RuntimeError: ``isolation="bwrap"`` and bwrap is unavailable.
        ValueError: an unknown isolation request, or a spin time outside [0, MAX_SPIN_S].
    """

    def __init__(
        self,
        tools: ToolServer,
        limits: Limits | None = None,
        *,
        isolation: Literal["auto", "bwrap", "none"] = "auto",
        spin_s: float = CONTROLLER_SPIN_S,
        worker_spin_s: float = WORKER_SPIN_S,
    ) -> None:
        if not (0 <= spin_s <= MAX_SPIN_S and 0 <= worker_spin_s <= MAX_SPIN_S):  # refuses NaN
            raise ValueError(
                f"spin times must lie in [0, {MAX_SPIN_S:g}] seconds, not {spin_s}, "
                f"{worker_spin_s} (a longer spin only burns CPU, e.g. during every review)"
            )
        self._spin_s = spin_s
        self._worker_spin_s = worker_spin_s
        self._tools = tools
        self._limits = limits or Limits()
        self._isolation = sandbox.resolve_isolation(isolation)
        if self._isolation == "none":
            msg = (
                "controlscope worker runs WITHOUT isolation (no bwrap): agent code can read and "
                "write this machine's files; only rlimits and the seccomp filter apply"
            )
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
            log.warning(msg)
        self._schemas: list[ToolSchema] | None = None
        self._proxies: ProxySet | None = None
        self._tool_names: frozenset[str] = frozenset()
        self._proc: subprocess.Popen[bytes] | None = None
        self._chan: Channel | None = None
        self._stderr: Any = None
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self._seccomp = False
        self._calls = 0
        self._task_exec_s = 0.0
        self._seq = 0
        self._namespace_lost = False
        self._closed = False
        self._pending_replacement: str | None = None

    # -- properties --------------------------------------------------------------------------
    @property
    def isolation(self) -> Literal["bwrap", "none"]:
        """The isolation really in force: ``bwrap`` or ``none``."""
        return self._isolation

    @property
    def seccomp(self) -> bool:
        """Whether the running worker installed its seccomp filter (no processes, threads, exec,
        network sockets, namespaces or mounts; see ``_runtime.seccomp_program``)."""
        return self._seccomp

    @property
    def calls_made(self) -> int:
        """Primitive calls made so far in this task (all blocks)."""
        return self._calls

    @property
    def task_exec_s(self) -> float:
        """Execution seconds spent so far in this task (review time excluded)."""
        return self._task_exec_s

    @property
    def tool_schemas(self) -> list[ToolSchema]:
        """The tools' schemas, as listed by the server."""
        if self._schemas is None:
            self._schemas = self._tools.list_tools()
        return self._schemas

    @property
    def pid(self) -> int | None:
        """The worker's process id as the controller sees it (bwrap's, under bwrap)."""
        return self._proc.pid if self._proc is not None else None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker if it is not running (also done lazily by :meth:`run_reply`).

        Raises:
            WorkerStartError: the process did not start or did not answer in time.
            RuntimeError: the session was closed.
            ValueError: two tools map to the same proxy name.
            ToolServerError: listing the tools failed.
        """
        if self._closed:
            raise RuntimeError("the worker session is closed")
        if self._proc is not None:
            return
        if self._proxies is None:
            self._proxies = generate_proxies(self.tool_schemas)
            self._tool_names = frozenset(s.name for s in self.tool_schemas)
        c_r, p_w = os.pipe()  # controller -> worker
        p_r, c_w = os.pipe()  # worker -> controller
        cwd = "/"
        if self._isolation == "none":
            self._tmpdir = tempfile.TemporaryDirectory(prefix="controlscope-worker-")
            cwd = self._tmpdir.name
        env = dict(sandbox.WORKER_ENV)
        if self._tmpdir is not None:
            env["HOME"] = env["TMPDIR"] = self._tmpdir.name
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        try:
            self._proc = subprocess.Popen(
                sandbox.worker_command(self._isolation, c_r, c_w, self._limits.tmp_mb),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                pass_fds=(c_r, c_w),
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            for fd in (c_r, c_w, p_r, p_w):
                os.close(fd)
            self._kill()  # releases the stderr file and the temporary directory
            raise WorkerStartError(f"cannot start the worker: {exc}") from exc
        finally:
            if self._proc is not None:
                os.close(c_r)
                os.close(c_w)
        self._chan = Channel(p_r, p_w, spin_s=self._spin_s)
        lim = self._limits
        try:
            self._chan.send_raw(sandbox.runtime_frame())
            self._chan.send(
                {
                    "t": "init",
                    "proxies": self._proxies.source,
                    "names": list(self._proxies.params),
                    "params": {self._proxies.tools[k]: v for k, v in self._proxies.params.items()},
                    "output_chars": lim.output_chars,
                    "spin_s": self._worker_spin_s,
                    "limits": {
                        "memory_mb": lim.memory_mb,
                        "cpu_s": lim.cpu_s,
                        "processes": lim.processes,
                        "file_size_mb": lim.file_size_mb,
                    },
                }
            )
            ready = self._chan.recv(START_TIMEOUT_S)
        except (ChannelTimeout, WorkerGone, ProtocolViolation) as exc:
            detail = self._stderr_tail()
            self._kill()
            raise WorkerStartError(f"the worker did not start: {exc}; {detail}") from exc
        if ready.get("t") != "ready":
            self._kill()
            raise WorkerStartError(f"the worker answered {ready.get('t')!r} instead of ready")
        self._seccomp = bool(ready.get("seccomp"))
        if not self._seccomp:
            log.warning("worker runs without its seccomp filter (unsupported machine)")

    def close(self) -> None:
        """Kill the worker and release its resources; idempotent."""
        self._kill()
        self._closed = True

    def __enter__(self) -> WorkerSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._kill()

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            self._namespace_lost = self._seq > 0
        if self._chan is not None:
            self._chan.close()
            self._chan = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - _STDERR_TAIL))
            text = self._stderr.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f"worker stderr: {text}" if text else ""

    def _death_reason(self) -> str:
        proc = self._proc
        if proc is None:
            return "the worker is gone"
        try:
            code = proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return "the worker closed its channel"
        signum = -code if code < 0 else code - 128 if code > 128 else 0
        try:
            name = signal.Signals(signum).name if signum else ""
        except ValueError:
            name = f"signal {signum}"
        hint = {"SIGXCPU": " (CPU-seconds limit)", "SIGXFSZ": " (file-size limit)"}.get(name, "")
        if code < 0:
            reason = f"the worker died from {name}{hint}"
        else:
            reason = f"the worker exited with code {code}"
            if name:
                reason += f" ({name}{hint})"
        tail = self._stderr_tail()
        return f"{reason}; {tail}" if tail else reason

    # -- running blocks ----------------------------------------------------------------------
    def run_reply(
        self,
        blocks: Sequence[tuple[str, str]],
        handler: BoundaryHandler,
        *,
        replace_boundary: ReplaceBoundary = "reply",
    ) -> list[BlockResult]:
        """Run one reply's blocks in order, driving ``handler`` at every boundary.

        At every primitive call the handler's decision is executed: ``keep`` makes the call;
        ``patch_arguments`` merges new values into the pending call's arguments first;
        ``patch_block_data`` makes the rewrite's constants take effect for the rest of the block
        (see :meth:`_apply_block_data` for the exact semantics); a tool error raises
        ``ToolError`` in agent code. A ``replace_workflow`` decision cancels the pending call
        and unwinds the block (status
        ``cancelled``, ``replaced_by`` set); the replacement then runs in the same namespace as
        block ``f"{old_id}.r{n}"`` (see :func:`replacement_id`). With
        ``replace_boundary="reply"`` the blocks queued behind it get cancellation receipts and
        do not run; with ``"block"`` they run after the replacement (paper section A.1).

        Args:
            blocks: ``(block_id, code)`` pairs in reply order.
            handler: the controller callbacks (block start, boundary, call, block end).
            replace_boundary: what a replacement replaces.

        Returns:
            One result per block in event order: each block, its replacements, and receipts.

        Raises:
            ToolServerError: the environment server failed (the running block is reported
                ``killed`` to ``handler.on_block_end`` first; the worker is killed).
            ValueError: the handler returned a ``patch_block_data`` whose code does not keep
                the block's structure (it must validate operations first).
            WorkerStartError: the worker could not be started.
        """
        if replace_boundary not in ("reply", "block"):
            raise ValueError(
                f"replace_boundary must be 'reply' or 'block', not {replace_boundary!r}"
            )
        queue: deque[tuple[str, str, str | None]] = deque((b, c, None) for b, c in blocks)
        results: list[BlockResult] = []
        while queue:
            block_id, code, replaces = queue.popleft()
            result = self._run_block(block_id, code, replaces, handler)
            results.append(result)
            handler.on_block_end(result)
            new_id = result.replaced_by
            if new_id is None:
                continue
            replacement = self._pending_replacement
            self._pending_replacement = None
            if replace_boundary == "reply":
                while queue:
                    q_id, _q_code, _ = queue.popleft()
                    receipt = BlockResult(
                        block_id=q_id,
                        status="cancelled",
                        error=(
                            f"not run: queued behind block {block_id}, whose workflow was "
                            f"replaced by block {new_id}"
                        ),
                        replaced_by=new_id,
                    )
                    results.append(receipt)
                    handler.on_block_end(receipt)
            queue.appendleft((new_id, replacement or "", block_id))
        return results

    def _run_block(
        self, block_id: str, code: str, replaces: str | None, handler: BoundaryHandler
    ) -> BlockResult:
        handler.on_block_start(block_id, code, replaces)
        lim = self._limits
        if self._task_exec_s >= lim.task_exec_s:
            return BlockResult(
                block_id=block_id,
                status="timeout",
                error=(f"not run: the task's execution budget of {lim.task_exec_s:g} s is spent"),
            )
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = ast.Module(body=[], type_ignores=[])  # the worker reports the syntax error
        if self._proc is not None and self._proc.poll() is not None:
            log.warning("the worker died between blocks: %s", self._death_reason())
            self._kill()  # e.g. a timer signal set by an earlier block ended the process
        fresh = self._proc is None and self._namespace_lost
        self._seq += 1
        blk = _Block(block_id=block_id, code=code, original_tree=tree, seq=self._seq)
        try:
            self.start()
            self._namespace_lost = False
            try:
                result = self._drive(blk, handler)
            except _Stale as stale:
                # Left over from an earlier block (e.g. a forged "end"): nothing of this block
                # ran, so it runs again, in a fresh worker.
                log.warning("worker killed before block %s: %s", block_id, stale)
                self._kill()
                fresh = True
                self.start()
                self._namespace_lost = False
                self._seq += 1
                blk = _Block(block_id=block_id, code=code, original_tree=tree, seq=self._seq)
                try:
                    result = self._drive(blk, handler)
                except _Stale as again:
                    raise _Kill("killed", f"a fresh worker failed too: {again}") from None
        except _Kill as k:
            self._kill()
            result = self._result(blk, k.status, k.reason)
        except BaseException as exc:
            self._kill()
            reason = f"controller failure: {type(exc).__name__}: {exc}"
            if isinstance(exc, ToolServerError):
                reason = f"the tool server failed: {exc}"
            elif isinstance(exc, WorkerStartError):
                reason = str(exc)
            result = self._result(blk, "killed", reason)
            handler.on_block_end(result.model_copy(update={"fresh_worker": fresh}))
            raise
        if fresh:
            result = result.model_copy(update={"fresh_worker": True})
        if blk.replacement is not None:
            self._pending_replacement = blk.replacement
            result = result.model_copy(update={"replaced_by": replacement_id(block_id)})
        return result

    def _result(
        self, blk: _Block, status: BlockStatus, error: str | None, extra_dropped: int = 0
    ) -> BlockResult:
        output = "".join(blk.output)
        dropped = max(blk.dropped, extra_dropped)
        if dropped:
            output += f"\n…[output truncated: {dropped} more characters were not kept]"
        if blk.cancelled and status != "cancelled":
            error = f"{error}; the block was being cancelled" if error else None
            status = "cancelled"
        return BlockResult(
            block_id=blk.block_id,
            status=status,
            output=output,
            error=error,
            calls=blk.calls,
            wall_s=time.time() - blk.started,
            exec_s=blk.exec_s,
        )

    def _add_output(self, blk: _Block, text: Any, dropped: Any) -> None:
        if not isinstance(text, str) or not isinstance(dropped, int):
            raise _Kill("killed", "protocol violation: malformed output fields")
        room = self._limits.output_chars - blk.output_chars
        if len(text) > room:
            blk.dropped += len(text) - max(room, 0)
            text = text[: max(room, 0)]
        blk.output.append(text)
        blk.output_chars += len(text)
        blk.dropped = max(blk.dropped, dropped)

    def _budget(self, blk: _Block) -> tuple[float, Literal["cancel", "block", "task"]]:
        """Seconds of execution the block has left, and which budget binds."""
        lim = self._limits
        if blk.cancelled:
            return lim.cancel_grace_s - blk.cancel_exec_s, "cancel"
        block_left = lim.block_exec_s - blk.exec_s
        task_left = lim.task_exec_s - self._task_exec_s
        return min(block_left, task_left), ("block" if block_left <= task_left else "task")

    def _charge(self, blk: _Block, seconds: float) -> None:
        """Charge worker-facing time (waiting for or writing to the worker) to the clocks."""
        blk.exec_s += seconds
        self._task_exec_s += seconds
        if blk.cancelled:
            blk.cancel_exec_s += seconds

    def _over_budget(self, kind: str) -> _Kill:
        lim = self._limits
        if kind == "cancel":
            return _Kill(
                "cancelled",
                f"the replaced block did not unwind within {lim.cancel_grace_s:g} s; the "
                "worker was killed and the replacement runs in a fresh worker",
            )
        what = (
            f"the block's wall-clock budget of {lim.block_exec_s:g} s"
            if kind == "block"
            else f"the task's execution budget of {lim.task_exec_s:g} s"
        )
        return _Kill(
            "timeout",
            f"{what} was exceeded (review time excluded); the worker was killed and the "
            "next block starts in a fresh worker",
        )

    def _recv(self, blk: _Block) -> dict[str, Any]:
        """Receive the worker's next message, charging the wait to the execution clocks."""
        assert self._chan is not None
        budget, kind = self._budget(blk)
        t0 = time.perf_counter()
        try:
            return self._chan.recv(max(budget, 0.0))
        except ChannelTimeout:
            raise self._over_budget(kind) from None
        except WorkerGone:
            pass  # reported below: waiting for the dead worker's exit status is not execution
        except ProtocolViolation as exc:
            raise _Kill("killed", f"protocol violation: {exc}") from None
        finally:
            self._charge(blk, time.perf_counter() - t0)
        raise _Kill("killed", self._death_reason())

    def _send(self, blk: _Block, msg: dict[str, Any]) -> None:
        """Send the worker a message; a worker that does not read it within the block's
        remaining budget is killed like one that computes too long (the wait is charged)."""
        assert self._chan is not None
        budget, kind = self._budget(blk)
        t0 = time.perf_counter()
        try:
            self._chan.send(msg, timeout=max(budget, 0.0))
            return
        except WorkerGone:
            pass  # reported below (see _recv)
        except ChannelTimeout:
            raise self._over_budget(kind) from None
        finally:
            self._charge(blk, time.perf_counter() - t0)
        raise _Kill("killed", self._death_reason())

    def _drive(self, blk: _Block, handler: BoundaryHandler) -> BlockResult:
        nonce = secrets.token_hex(16)
        try:
            self._send(
                blk,
                {"t": "run", "seq": blk.seq, "id": blk.block_id, "code": blk.code, "nonce": nonce},
            )
            first = self._recv(blk)
        except _Kill as k:
            if k.status == "killed":  # died before the block started: nothing of it ran
                raise _Stale(k.reason) from None
            raise
        if first.get("t") != "started" or first.get("nonce") != nonce:
            raise _Stale(f"a {first.get('t')!r} message arrived before the block started")
        while True:
            msg = self._recv(blk)
            kind = msg.get("t")
            if kind == "call":
                self._on_call(blk, msg, handler)
            elif kind == "end":
                return self._on_end(blk, msg)
            else:
                raise _Kill("killed", f"protocol violation: unexpected message {kind!r}")

    def _on_end(self, blk: _Block, msg: dict[str, Any]) -> BlockResult:
        status = msg.get("status")
        error = msg.get("error")
        if status not in ("completed", "error", "cancelled") or not (
            error is None or isinstance(error, str)
        ):
            raise _Kill("killed", "protocol violation: malformed block end")
        self._add_output(blk, msg.get("out", ""), msg.get("dropped", 0))
        if blk.cancelled:
            return self._result(blk, "cancelled", None)
        if status == "cancelled":
            raise _Kill("killed", "protocol violation: a block claimed cancellation unasked")
        if blk.budget_hit:
            budget_note = (
                f"the task's budget of {self._limits.primitive_calls} primitive calls is spent"
            )
            return self._result(
                blk, "budget_exhausted", f"{budget_note}\n{error}" if error else budget_note
            )
        return self._result(blk, "completed" if status == "completed" else "error", error)

    def _on_call(self, blk: _Block, msg: dict[str, Any], handler: BoundaryHandler) -> None:
        if blk.cancelled:
            raise _Kill("killed", "protocol violation: a primitive call from a cancelled block")
        tool = msg.get("tool")
        if tool not in self._tool_names:
            raise _Kill("killed", f"protocol violation: call to unknown tool {tool!r}")
        self._add_output(blk, msg.get("out", ""), msg.get("dropped", 0))
        if self._calls >= self._limits.primitive_calls:
            blk.budget_hit = True
            self._send(
                blk,
                {
                    "t": "budget",
                    "msg": f"the task's budget of {self._limits.primitive_calls} primitive calls "
                    "is spent; no further call is made",
                },
            )
            return
        try:
            site = msg.get("site")
            lits = msg.get("lits") or {}
            if not isinstance(lits, dict):
                raise TypeError("lits")
            boundary = Boundary(
                block_id=blk.block_id,
                call_index=self._calls,
                block_call_index=blk.calls,
                tool=tool,
                arguments=msg["args"],
                line=msg["line"],
                call_site=CallSite(
                    module=f"block_{site if isinstance(site, str) else blk.block_id}",
                    function=msg.get("fn"),
                    class_name=msg.get("cls"),
                ),
                # re-bounded here: the worker's own bounds are a claim, not a guarantee
                module_vars=_rebound(msg.get("mv")),
                local_vars=_rebound(msg.get("lv")),
                output="".join(blk.output),
                code=blk.code,
            )
        except (ValidationError, TypeError, KeyError) as exc:
            raise _Kill("killed", f"protocol violation: malformed boundary: {exc!r}") from None
        decision: Decision = handler.on_boundary(boundary)
        arguments = dict(boundary.arguments)
        reply: dict[str, Any] = {}
        if isinstance(decision, Keep):
            pass
        elif isinstance(decision, PatchArguments):
            arguments.update(decision.arguments)
        elif isinstance(decision, PatchBlockData):
            arguments.update(self._apply_block_data(blk, decision.code, lits))
            reply["code"] = decision.code
        elif isinstance(decision, ReplaceWorkflow):
            blk.cancelled = True
            blk.replacement = decision.code
            self._send(blk, {"t": "cancel"})
            return
        else:
            raise TypeError(f"unknown decision {decision!r}")
        call = self._call_tool(blk, tool, arguments)
        result = call.result
        if result.is_error:
            reply = {"t": "err", "msg": result.text}
        else:
            reply.update({"t": "res", "text": result.text})
        try:
            self._send(blk, reply)  # first, so the worker runs on while the call is logged
        finally:
            handler.on_call(call)  # the call was made: it is reported whatever happens next

    def _apply_block_data(self, blk: _Block, code: str, lits: dict[str, Any]) -> dict[str, Any]:
        """Check a Params rewrite and return the pending call's re-evaluated literal arguments.

        Semantics: the rewrite must have the block's syntax tree except constant values. From
        the pending call on, every evaluation of a literal of this block (later statements, loop
        iterations, functions the block defines, even when called later) yields the rewrite's
        value; values already computed and stored (variables, default arguments, earlier
        calls) keep theirs. The pending call's arguments that are plain literals at its call
        site take the new values; other arguments are unchanged.
        """
        try:
            new_tree = ast.parse(code)
        except SyntaxError as exc:
            raise ValueError(f"patch_block_data code does not parse: {exc}") from None
        if _runtime.structure_key(new_tree) != _runtime.structure_key(blk.original_tree):
            raise ValueError("patch_block_data code changes the block's structure")
        values = _runtime.slot_values(new_tree, _runtime.slot_positions(blk.original_tree))
        blk.code = code
        out: dict[str, Any] = {}
        for name, slot in lits.items():
            if isinstance(slot, int) and 0 <= slot < len(values):
                value = values[slot]
                if isinstance(value, _JSON_SCALARS):
                    out[name] = value
        return out

    def _call_tool(self, blk: _Block, tool: str, arguments: dict[str, Any]) -> PrimitiveCall:
        started = time.time()
        t0 = time.perf_counter()
        result = self._tools.call(tool, arguments)
        elapsed = time.perf_counter() - t0
        blk.exec_s += elapsed
        self._task_exec_s += elapsed
        call = PrimitiveCall(
            block_id=blk.block_id,
            call_index=self._calls,
            tool=tool,
            arguments=arguments,
            result=result,
            started_at=started,
            elapsed_ms=elapsed * 1000,
        )
        self._calls += 1
        blk.calls += 1
        return call
