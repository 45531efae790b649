"""The controller side of the worker: runs a reply's blocks and drives every boundary.

:class:`WorkerSession` is composed of the process owner (:mod:`._process`), the task's execution
clock (:mod:`._clock`), the per-block driver (:mod:`._driver`) and the application of operations
(:mod:`._apply`). It is authoritative: the worker is untrusted, every message it sends is checked
against the driver's state machine, and a message that does not fit (a call from a cancelled
block, an unknown tool, a forged "cancelled" ending, malformed or oversize data) kills the worker
and ends the block ``killed`` with the reason. Forging a message gains nothing beyond what a
proxy call gives: every call still passes through the boundary, the budget and the handler.

Known limit: agent code runs in the same interpreter as the runtime and can patch it (e.g. the
runtime's class), so a call forged by a patched runtime right after a block (or a replacement)
has started is attributed to that block. It is still reviewed, budgeted and logged like any
call; messages before a block's ``started`` acknowledgement (nonce-checked) or from a block
known to be cancelled kill the worker instead.
"""

from __future__ import annotations

import ast
import contextlib
import logging
import time
import warnings
from collections import deque
from collections.abc import Sequence
from types import TracebackType
from typing import Literal

from controlscope.core import (
    BlockId,
    BlockResult,
    Deadline,
    Isolation,
    Refusal,
    ReplaceBoundary,
    ToolParam,
    ToolSchema,
    ToolServer,
    ToolServerError,
    tool_params,
)
from controlscope.worker import _sandbox
from controlscope.worker._clock import ExecutionClock
from controlscope.worker._driver import (
    Allowance,
    BlockDriver,
    BlockState,
    CallCount,
    KillWorker,
    StaleMessage,
    block_result,
)
from controlscope.worker._fork import OpenFiles
from controlscope.worker._guard import private_runtime_problem
from controlscope.worker._process import (
    CONTROLLER_SPIN_S,
    WORKER_SPIN_S,
    ForkError,
    WorkerProcess,
    WorkerStartError,
)
from controlscope.worker._proxies import ProxySet, generate_proxies
from controlscope.worker._site import BlockSource
from controlscope.worker._types import BoundaryHandler, Limits

log = logging.getLogger(__name__)

_Queued = tuple[str, str, str | None]  # (block_id, code, id of the block it replaces)


def replacement_id(old_id: str) -> str:
    """The id of the block replacing ``old_id``: ``"3"`` -> ``"3.r1"``, ``"3.r1"`` -> ``"3.r2"``
    (:meth:`BlockId.next_replacement`).

    Args:
        old_id: the replaced block's id.

    Returns:
        The replacement's id.

    Raises:
        ValueError: a text no block is named by (:meth:`BlockId.parse`).
    """
    return str(BlockId.parse(old_id).next_replacement())


def _parse(code: str) -> ast.Module:
    """The block's tree; an empty one when it does not parse (the worker reports the error)."""
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ast.Module(body=[], type_ignores=[])


class WorkerSession:
    """Runs agent blocks in an isolated worker and pauses at every primitive call.

    One session serves one trajectory (one task, or one branch): blocks share one namespace
    (module variables persist across blocks and replies) until the worker is killed (timeout,
    protocol violation, death), after which the next block starts a fresh worker and its result
    says so (``fresh_worker``). Paper section 3 and A.1.

    Budgets (:class:`Limits`): ``block_exec_s`` and ``task_exec_s`` count execution seconds on
    the session's :attr:`clock` (worker time and tool-call time; review time in the handler is
    never charged) and kill the worker when exceeded (status ``timeout``); ``primitive_calls``
    counts calls made on the server, a call beyond it raises ``BudgetExhausted`` in agent code
    and ends the block ``budget_exhausted``; printed output is kept up to ``output_chars`` per
    block, truncation marked; memory, CPU seconds, processes, file size and ``/tmp`` size are
    rlimits/tmpfs options of the worker process.

    Not thread-safe: drive one session from one thread at a time. Under bwrap the sandbox dies
    with the thread that started it (``--die-with-parent`` follows the spawning thread), so
    start sessions from a thread that outlives them.

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
        deadline: the run's wall-clock ceiling: no wait for the worker or a tool call outlives
            it (the block then ends ``timeout``).
        seed: what the worker's ``random`` module is seeded from at every block start (with
            the block's id), so that a replay draws the same numbers (paper A.4); a branch
            passes its own.

    Attributes:
        isolation: the isolation really in force: ``bwrap`` or ``none``.
        seccomp: whether the running worker installed its seccomp filter.
        forks: whether the running worker can be forked at a boundary (:meth:`fork`).
        clock: the task's execution clock: the one account of its execution-seconds budget.
        calls_made: primitive calls made so far in this task (all blocks).
        task_exec_s: execution seconds spent so far in this task (review time excluded).
        tool_schemas: the tools' schemas, as listed by the server.
        pid: the worker's process id as the controller sees it (bwrap's, under bwrap).

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
        deadline: Deadline | None = None,
        seed: int = 0,
    ) -> None:
        self._tools = tools
        self._seed = seed
        self._limits = limits or Limits()
        resolved = _sandbox.resolve_isolation(isolation)
        self._process = WorkerProcess(
            resolved, self._limits, spin_s=spin_s, worker_spin_s=worker_spin_s
        )
        if resolved == "none":
            msg = (
                "controlscope worker runs WITHOUT isolation (no bwrap): agent code can read and "
                "write this machine's files; only rlimits and the seccomp filter apply"
            )
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
            log.warning(msg)
        self._clock = ExecutionClock.from_limits(self._limits, deadline)
        self._calls = CallCount(budget=self._limits.primitive_calls)
        self._allowance = Allowance(self._limits.block_requests)
        self._schemas: list[ToolSchema] | None = None
        self._proxies: ProxySet | None = None
        self._signatures: dict[str, list[ToolParam]] = {}
        self._sources: dict[str, BlockSource] = {}
        self._seq = 0
        self._namespace_lost = False
        self._closed = False
        self._driver: BlockDriver | None = None

    # -- properties --------------------------------------------------------------------------
    @property
    def isolation(self) -> Isolation:
        """The isolation really in force: ``bwrap`` or ``none``."""
        return self._process.isolation

    @property
    def seccomp(self) -> bool:
        """Whether the running worker installed its seccomp allow-list (no processes, threads,
        exec, sockets, memfds, signals to other processes, namespaces or mounts; see
        ``_hardening.seccomp_program``)."""
        return self._process.seccomp

    @property
    def clock(self) -> ExecutionClock:
        """The task's execution clock: the one account of its execution-seconds budget."""
        return self._clock

    @property
    def calls_made(self) -> int:
        """Primitive calls made so far in this task (all blocks)."""
        return self._calls.made

    @property
    def task_exec_s(self) -> float:
        """Execution seconds spent so far in this task (review time excluded)."""
        return self._clock.task_s

    @property
    def tool_schemas(self) -> list[ToolSchema]:
        """The tools' schemas, as listed by the server."""
        if self._schemas is None:
            self._schemas = self._tools.list_tools()
        return self._schemas

    def memory_mb(self) -> float | None:
        """The worker's memory as ``Limits.memory_mb`` bounds it, in MiB (peak resident memory
        plus its memory-backed files); None when no worker runs or ``/proc`` cannot tell."""
        return self._process.memory_mb()

    @property
    def pid(self) -> int | None:
        """The worker's process id as the controller sees it (bwrap's, under bwrap)."""
        return self._process.pid

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
        if self._process.running:
            return
        if self._proxies is None:
            self._proxies = generate_proxies(self.tool_schemas)
            self._signatures = {s.name: tool_params(s) for s in self.tool_schemas}
        self._process.start(self._proxies, seed=self._seed)

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
        """Kill the worker; the namespace of the blocks run so far is then lost."""
        self._sources.clear()
        if self._process.kill():
            self._namespace_lost = self._seq > 0

    # -- forks (branches that start without re-running their prefix) -------------------------
    @property
    def forks(self) -> bool:
        """Whether the running worker can be forked at a boundary (:meth:`fork`)."""
        return self._process.forks

    def fork(self, timeout_s: float = 10.0, files: OpenFiles | None = None) -> WorkerProcess:
        """Fork the worker paused at the current boundary (from the handler's
        ``on_boundary``): the child waits for the answer to the same call, in the same
        sandbox, with the same namespace, its open files where ``files`` (:meth:`open_files`
        at the boundary) has them (see :meth:`WorkerProcess.fork`).

        Raises:
            ForkError: the worker cannot be forked here, or the fork failed.
        """
        if self._driver is None:
            raise ForkError("no block is running: a worker is forked at a boundary")
        return self._process.fork(timeout_s, files)

    def open_files(self) -> OpenFiles:
        """The regular files agent code holds open in the worker, with their flags and
        positions (see :meth:`WorkerProcess.open_files`)."""
        return self._process.open_files()

    def scratch_dirs(self) -> list[str]:
        """The directories besides the workspace that agent code writes and the worker's forks
        share (see :meth:`WorkerProcess.scratch_dirs`): a branch by fork puts them back as
        they were at the boundary before the next branch.

        Raises:
            ForkError: the worker's interpreter cannot be found.
        """
        return self._process.scratch_dirs()

    def take_over(self, child: WorkerProcess, tools: ToolServer) -> None:
        """Go on with ``child`` (a fork of this session's worker, made by :meth:`fork`) and
        ``tools`` in place of the worker and the tool server, from the boundary the block is
        paused at: in a controller process forked at that boundary (a branch by fork), whose
        worker and server belong to the controller it was forked from (forgotten here, not
        killed or closed).

        Args:
            child: the forked worker, waiting for the answer to the pending call.
            tools: the branch's tool server (on the branch's copy of the workspace).

        Raises:
            RuntimeError: no block is paused at a boundary.
        """
        driver = self._driver
        if driver is None:
            raise RuntimeError("no block is paused at a boundary")
        self._process.abandon()
        self._process, self._tools = child, tools
        driver.channel, driver.tools, driver.death_reason = (
            child.channel,
            tools,
            child.death_reason,
        )

    # -- running blocks ----------------------------------------------------------------------
    def run_reply(
        self,
        blocks: Sequence[tuple[str, str]],
        handler: BoundaryHandler,
        *,
        replace_boundary: ReplaceBoundary = "reply",
    ) -> list[BlockResult]:
        """Run one reply's blocks in order, driving ``handler`` at every boundary.

        At every primitive call the handler's operation is executed (see
        :func:`~controlscope.worker._apply.apply_operation`): ``keep`` makes the call;
        ``patch_arguments`` merges new values into the pending call's arguments first;
        ``patch_block_data`` makes the rewrite's constants take effect for the rest of the block;
        a tool error raises ``ToolError`` in agent code. A ``replace_workflow`` operation cancels
        the pending call and unwinds the block (status ``cancelled``, ``replaced_by`` set); the
        replacement then runs in the same namespace as block ``f"{old_id}.r{n}"`` (see
        :func:`replacement_id`). With ``replace_boundary="reply"`` the blocks queued behind it
        get cancellation receipts and do not run; with ``"block"`` they run after the
        replacement (paper section A.1). A handler that raises ``EndPlan`` at a boundary ends
        the plan there: the block unwinds (status ``cancelled``, the reason as its error) and
        every block queued behind it gets a receipt.

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
                the block's structure (it must validate operations first), or an unknown
                ``replace_boundary``.
            WorkerStartError: the worker could not be started.
        """
        if replace_boundary not in ("reply", "block"):
            raise ValueError(
                f"replace_boundary must be 'reply' or 'block', not {replace_boundary!r}"
            )
        queue: deque[_Queued] = deque((b, c, None) for b, c in blocks)
        results: list[BlockResult] = []
        while queue:
            block_id, code, replaces = queue.popleft()
            result, replacement, ended = self._run_block(block_id, code, replaces, handler)
            results.append(result)
            handler.on_block_end(result)
            if ended:
                receipts = _end_queued(queue, block_id)
                for receipt in receipts:
                    handler.on_block_end(receipt)
                return results + receipts
            new_id = result.replaced_by
            if new_id is None or replacement is None:
                continue
            if replace_boundary == "reply":
                receipts = _cancel_queued(queue, block_id, new_id)
                for receipt in receipts:
                    handler.on_block_end(receipt)
                results += receipts
            queue.appendleft((new_id, replacement, block_id))
        return results

    def _run_block(
        self, block_id: str, code: str, replaces: str | None, handler: BoundaryHandler
    ) -> tuple[BlockResult, str | None, bool]:
        """Run one block; return its result, the replacement code when it was replaced, and
        whether the plan ended in it (:class:`~controlscope.worker._types.EndPlan`)."""
        handler.on_block_start(block_id, code, replaces)
        if self._clock.task_spent:
            budget = self._limits.task_exec_s
            error = f"not run: the task's execution budget of {budget:g} s is spent"
            return BlockResult(block_id=block_id, status="timeout", error=error), None, False
        renewed = self._start_allowance(replaces)
        guarded = self._guard(block_id, code, renewed)
        if guarded is not None:
            return guarded, None, False
        tree = _parse(code)
        if self._process.exited():
            log.warning("the worker died between blocks: %s", self._process.death_reason())
            self._kill()  # e.g. a timer signal set by an earlier block ended the process
        fresh = not self._process.running and self._namespace_lost
        blk = BlockState(block_id=block_id, code=code, original_tree=tree, seq=0)
        blk.allowance, blk.renewed = self._allowance.left, renewed
        self._begin(blk, fresh)
        try:
            result = self._drive(blk, handler)
        except KillWorker as k:
            self._kill()
            result = block_result(blk, k.status, k.reason, self._clock.block_s)
        except BaseException as exc:
            self._kill()
            handler.on_block_end(block_result(blk, "killed", _failure(exc), self._clock.block_s))
            raise
        finally:
            self._driver = None
        if blk.replacement is not None:
            result = result.model_copy(update={"replaced_by": replacement_id(block_id)})
        return result, blk.replacement, blk.ended is not None

    def _start_allowance(self, replaces: str | None) -> bool:
        """Start a natural block's allowance of requests, or a replacement's (paper A.2: a
        new one when replacements renew it, else what is left of its block's); whether a
        replacement renewed it."""
        if replaces is None or self._limits.renew_allowance:
            self._allowance.used = 0
            return replaces is not None and self._limits.block_requests is not None
        return False

    def _guard(self, block_id: str, code: str, renewed: bool) -> BlockResult | None:
        """The result of a block the private-runtime guard refuses (it does not run), or
        None when there is no guard or the block passes it (paper A.2)."""
        if not self._limits.runtime_guard:
            return None
        problem = private_runtime_problem(code)
        if problem is None:
            return None
        detail = (
            f"refused by the private-runtime guard: {problem}; reach the environment only "
            "through its tool functions"
        )
        return BlockResult(
            block_id=block_id,
            status="error",
            error=detail,
            allowance=self._allowance.left,
            allowance_renewed=renewed,
            refusal=Refusal(kind="private_runtime", detail=problem),
        )

    def _begin(self, blk: BlockState, fresh: bool) -> None:
        """(Re)start the block's accounts: its number, wall start and execution seconds."""
        self._seq += 1
        blk.seq = self._seq
        blk.fresh_worker = fresh
        blk.started = time.time()
        self._clock.start_block()

    def _drive(self, blk: BlockState, handler: BoundaryHandler) -> BlockResult:
        """Drive the block in the worker (started if needed).

        A stale message before the block started means nothing of it ran (e.g. a forged "end"
        left over from an earlier block): the block runs again once, in a fresh worker.
        """
        self.start()
        self._namespace_lost = False
        try:
            return self._driver_for(blk).run(handler)
        except StaleMessage as stale:
            log.warning("worker killed before block %s: %s", blk.block_id, stale)
        self._kill()
        self.start()
        self._namespace_lost = False
        self._begin(blk, fresh=True)
        try:
            return self._driver_for(blk).run(handler)
        except StaleMessage as stale:
            raise KillWorker("killed", f"a fresh worker failed too: {stale}") from None

    def _driver_for(self, blk: BlockState) -> BlockDriver:
        self._sources[blk.block_id] = blk.source  # its functions may make calls in later blocks
        self._driver = BlockDriver(
            blk=blk,
            channel=self._process.channel,
            clock=self._clock,
            calls=self._calls,
            tools=self._tools,
            signatures=self._signatures,
            blocks=self._sources,
            limits=self._limits,
            death_reason=self._process.death_reason,
            allowance=self._allowance,
        )
        return self._driver


def _failure(exc: BaseException) -> str:
    """The reason a block is reported ``killed`` when the controller side failed."""
    if isinstance(exc, ToolServerError):
        return f"the tool server failed: {exc}"
    if isinstance(exc, WorkerStartError):
        return str(exc)
    return f"controller failure: {type(exc).__name__}: {exc}"


def _end_queued(queue: deque[_Queued], ended: str) -> list[BlockResult]:
    """Empty ``queue``, one receipt per block in it: the plan ended in block ``ended``."""
    receipts: list[BlockResult] = []
    while queue:
        q_id, _code, _ = queue.popleft()
        error = f"not run: the plan ended in block {ended}"
        receipts.append(BlockResult(block_id=q_id, status="cancelled", error=error))
    return receipts


def _cancel_queued(queue: deque[_Queued], replaced: str, new_id: str) -> list[BlockResult]:
    """Empty ``queue``, one cancellation receipt per block in it (``replace_boundary="reply"``)."""
    receipts: list[BlockResult] = []
    while queue:
        q_id, _code, _ = queue.popleft()
        error = f"not run: queued behind block {replaced}, whose workflow was replaced by block"
        receipts.append(
            BlockResult(
                block_id=q_id,
                status="cancelled",
                error=f"{error} {new_id}",
                replaced_by=new_id,
            )
        )
    return receipts
