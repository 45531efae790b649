"""The driver of one block: the ``run`` message, then every message of the worker until ``end``.

The worker is untrusted: every message is checked against the driver's state (the block's
nonce, whether it is being cancelled, the known tools, the message shapes and bounds), and one
that does not fit raises :class:`KillWorker` with the block's end status and the reason. Every
wait for the worker and every tool call is charged to the session's
:class:`~controlscope.worker.ExecutionClock`; a wait that would overrun a budget kills the
worker. At a ``call`` message the driver builds the :class:`~controlscope.core.Boundary` (the
call's line, call site and literal slots derived from the controller's own parse of the block,
:mod:`._site`), asks the handler for the operation, has
:func:`~controlscope.worker._apply.apply_operation` decide the call, makes it, answers the
worker and reports the call. ``out`` messages carry printed output as it is written, so a
block killed later keeps what it printed.
"""

from __future__ import annotations

import ast
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from controlscope.core import (
    BlockResult,
    BlockStatus,
    Boundary,
    PrimitiveCall,
    Refusal,
    ToolCallTimeout,
    ToolParam,
    ToolResult,
    ToolServer,
    clip_text,
    data_problem,
)
from controlscope.worker import _runtime
from controlscope.worker._apply import Cancel, MakeCall, apply_operation
from controlscope.worker._channel import Channel, ChannelTimeout, ProtocolViolation, WorkerGone
from controlscope.worker._clock import BudgetKind, ExecutionClock
from controlscope.worker._site import BlockSource, SiteMismatch, resolve_site
from controlscope.worker._snapshot import WIRE_JSON
from controlscope.worker._types import BoundaryHandler, EndPlan, Limits


class StaleMessage(Exception):
    """A message arrived before the worker acknowledged the block's start: nothing of the block
    ran (the message is left over from an earlier block, or the worker died first)."""


class KillWorker(Exception):
    """The worker must be killed; ``status`` and ``reason`` describe the block's end."""

    def __init__(self, status: BlockStatus, reason: str) -> None:
        super().__init__(reason)
        self.status: BlockStatus = status
        self.reason = reason


@dataclass
class CallCount:
    """Primitive calls made in the task so far (all blocks), against the task's budget."""

    budget: int
    made: int = 0

    @property
    def spent(self) -> bool:
        """Whether no further call may be made."""
        return self.made >= self.budget


@dataclass
class Allowance:
    """The API requests a natural block may still make (paper A.2), shared by the block and
    its replacements unless a replacement renews it.

    Attributes:
        limit: requests per block; None: no allowance.
        used: requests made against it.
    """

    limit: int | None
    used: int = 0

    @property
    def spent(self) -> bool:
        """Whether no further request may be made."""
        return self.limit is not None and self.used >= self.limit

    @property
    def left(self) -> int | None:
        """Requests left (None: no allowance)."""
        return None if self.limit is None else max(0, self.limit - self.used)


@dataclass
class BlockState:
    """What the controller knows of the running block.

    Attributes:
        block_id: the block's id.
        code: its source as it stands (a ``patch_block_data`` rewrite replaces it).
        original_tree: the source as it started, parsed (empty when it does not parse).
        source: the controller's index of that source and its constants as they stand.
        seq: the session's running number of the block (the worker's constants-table name).
        fresh_worker: the block runs in a fresh worker (earlier variables are gone).
        started: wall clock at its start (seconds since the epoch).
        calls: primitive calls it made.
        output: the printed output kept so far, in pieces.
        output_chars: characters kept.
        dropped: characters not kept (beyond ``Limits.output_chars``).
        budget_hit: a call was refused because the task's call budget is spent.
        replacement: the code replacing the rest of the block once it is being cancelled.
        ended: why the plan ended at a boundary of this block (the handler raised
            :class:`~controlscope.worker._types.EndPlan`); the block is then being cancelled
            with nothing in its place.
        stopped: why the block alone was stopped (a quota rejection): it is being cancelled,
            and the blocks queued behind it still run.
        allowance: the requests the block could make when it started (None: no allowance).
        renewed: the block is a replacement that started a new allowance.
        refusal: what the controller refused the block, if anything.
    """

    block_id: str
    code: str
    original_tree: ast.Module
    seq: int
    source: BlockSource = field(init=False)
    fresh_worker: bool = False
    started: float = field(default_factory=time.time)
    calls: int = 0
    output: list[str] = field(default_factory=list)
    output_chars: int = 0
    dropped: int = 0
    budget_hit: bool = False
    replacement: str | None = None
    ended: str | None = None
    stopped: str | None = None
    allowance: int | None = None
    renewed: bool = False
    refusal: Refusal | None = None

    def __post_init__(self) -> None:
        self.source = BlockSource.parse(self.block_id, self.original_tree, self.code)

    @property
    def cancelled(self) -> bool:
        """Whether the block is being cancelled (its workflow was replaced, or the plan
        ended)."""
        return self.replacement is not None or self.ended is not None or self.stopped is not None


def block_result(
    blk: BlockState, status: BlockStatus, error: str | None, exec_s: float
) -> BlockResult:
    """The result of a block that ends with ``status`` and ``error``.

    A block being cancelled ends ``cancelled`` whatever else ended it (the other reason is
    kept in ``error``). Output beyond the bound is marked.

    Args:
        blk: the block.
        status: how it ended.
        error: the traceback or reason, if any.
        exec_s: the execution seconds it took (the clock's ``block_s``).

    Returns:
        The :class:`BlockResult` (``replaced_by`` is the session's to set).
    """
    output = "".join(blk.output)
    if blk.dropped:
        output += f"\n…[output truncated: {blk.dropped} more characters were not kept]"
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
        exec_s=exec_s,
        fresh_worker=blk.fresh_worker,
        allowance=blk.allowance,
        allowance_renewed=blk.renewed,
        refusal=blk.refusal,
    )


def _rebound(variables: Any) -> dict[str, Any]:
    """A worker-sent variable snapshot, cut again when it exceeds twice the runtime's bound.

    The runtime bounds honest snapshots (``_runtime.snapshot``: about ``SCOPE_CHARS`` of
    JSON, four levels deep); a forged one could carry megabytes, or nesting the log cannot
    hold, into every review prompt and the log.

    Raises:
        TypeError: the snapshot is not a JSON object.
    """
    if variables is None:
        return {}
    if not isinstance(variables, dict):
        raise TypeError("a variable snapshot must be a JSON object")
    if (
        data_problem(variables) is None
        and len(WIRE_JSON.encode(variables)) <= 2 * _runtime.SCOPE_CHARS
    ):
        return variables
    return _runtime.snapshot(variables, set())


def read_call(
    msg: dict[str, Any],
    blk: BlockState,
    call_index: int,
    *,
    blocks: Mapping[str, BlockSource],
    params: list[ToolParam],
) -> Boundary:
    """The boundary of a ``call`` message.

    The arguments and variables are the worker's (shown to the reviewer as such); the line,
    call site and literal slots are derived from the controller's own parse of the block whose
    code makes the call (:func:`~controlscope.worker._site.resolve_site`), and the worker's
    claims about them must agree; the controller adds what it knows itself (block id, call
    indices, output so far, current code).

    Args:
        msg: the ``call`` message (its tool already checked).
        blk: the running block.
        call_index: the call's index in the task.
        blocks: the sources of the blocks this worker ran, by id.
        params: the tool's parameters in positional order.

    Raises:
        KillWorker: a malformed message or a claim that disagrees (status ``killed``).
    """
    try:
        arguments = msg["args"]
        if not isinstance(arguments, dict):
            raise TypeError("args")
        site = resolve_site(
            msg, blocks=blocks, running=blk.block_id, params=params, arguments=arguments
        )
        return Boundary(
            block_id=blk.block_id,
            call_index=call_index,
            block_call_index=blk.calls,
            tool=msg["tool"],
            arguments=arguments,
            line=site.line,
            call_site=site.call_site,
            # re-bounded here: the worker's own bounds are a claim, not a guarantee
            module_vars=_rebound(msg.get("mv")),
            local_vars=_rebound(msg.get("lv")),
            output="".join(blk.output),
            code=blk.code,
            literal_slots=site.literal_slots,
            params_refusal=site.refusal,
            source_line=site.source_line,
        )
    except SiteMismatch as exc:
        raise KillWorker("killed", f"protocol violation: {exc}") from None
    except (ValidationError, TypeError, KeyError) as exc:
        raise KillWorker("killed", f"protocol violation: malformed boundary: {exc!r}") from None


@dataclass
class BlockDriver:
    """Drives one block in a started worker until it ends.

    Attributes:
        blk: the block.
        channel: the worker's channel.
        clock: the session's execution clock (its block count restarted for this block).
        calls: the task's primitive-call count, advanced by every call made.
        tools: the tool server every call is made on.
        signatures: the tools the worker may call, each with its parameters in positional
            order.
        blocks: the sources of the blocks this worker ran, by id.
        limits: the session's budgets (output bound, call budget, the time budgets' values
            for messages).
        death_reason: says why the worker is gone, once its channel closed.
        allowance: the requests the running natural block may still make (paper A.2).
    """

    blk: BlockState
    channel: Channel
    clock: ExecutionClock
    calls: CallCount
    tools: ToolServer
    signatures: Mapping[str, list[ToolParam]]
    blocks: Mapping[str, BlockSource]
    limits: Limits
    death_reason: Callable[[], str]
    allowance: Allowance = field(default_factory=lambda: Allowance(None))

    def run(self, handler: BoundaryHandler) -> BlockResult:
        """Run the block, driving ``handler`` at every boundary.

        Returns:
            The block's result when it ended on its own (``completed``, ``error``,
            ``cancelled``, ``budget_exhausted``).

        Raises:
            StaleMessage: the worker did not acknowledge the block first; nothing of it ran.
            KillWorker: the worker must be killed (timeout, protocol violation, death).
            ValueError: the handler's ``patch_block_data`` changes the block's structure.
            ToolServerError: the tool server failed.
        """
        self._start()
        while True:
            msg = self._recv()
            kind = msg.get("t")
            if kind == "out":
                self._add_output(msg.get("out"), msg.get("dropped"))
            elif kind == "call":
                self._on_call(msg, handler)
            elif kind == "end":
                return self._on_end(msg)
            else:
                raise KillWorker("killed", f"protocol violation: unexpected message {kind!r}")

    def _start(self) -> None:
        """Send ``run`` and check that the first answer is ``started`` with the run's nonce."""
        blk = self.blk
        nonce = secrets.token_hex(16)
        run = {"t": "run", "seq": blk.seq, "id": blk.block_id, "code": blk.code, "nonce": nonce}
        try:
            self._send(run)
            first = self._recv()
        except KillWorker as k:
            if k.status == "killed":  # died before the block started: nothing of it ran
                raise StaleMessage(k.reason) from None
            raise
        if first.get("t") != "started" or first.get("nonce") != nonce:
            raise StaleMessage(f"a {first.get('t')!r} message arrived before the block started")

    # -- the channel, on the clock -----------------------------------------------------------
    def _recv(self) -> dict[str, Any]:
        """Receive the worker's next message, charging the wait to the execution clock."""
        budget, kind = self.clock.remaining()
        try:
            with self.clock.running():
                return self.channel.recv(max(budget, 0.0))
        except ChannelTimeout:
            raise self._over_budget(kind) from None
        except WorkerGone:
            pass  # reported below: waiting for the dead worker's exit status is not execution
        except ProtocolViolation as exc:
            raise KillWorker("killed", f"protocol violation: {exc}") from None
        raise KillWorker("killed", self.death_reason())

    def _send(self, msg: dict[str, Any]) -> None:
        """Send the worker a message; a worker that does not read it within the block's
        remaining budget is killed like one that computes too long (the wait is charged)."""
        budget, kind = self.clock.remaining()
        try:
            with self.clock.running():
                self.channel.send(msg, timeout=max(budget, 0.0))
            return
        except WorkerGone:
            pass  # reported below (see _recv)
        except ChannelTimeout:
            raise self._over_budget(kind) from None
        raise KillWorker("killed", self.death_reason())

    def _over_budget(self, kind: BudgetKind) -> KillWorker:
        lim = self.limits
        if kind == "wall":
            return KillWorker(
                "timeout",
                "the run's wall-clock ceiling was reached; the worker was killed",
            )
        if kind == "cancel":
            after = (
                "the next block runs in a fresh worker"
                if self.blk.ended is not None or self.blk.stopped is not None
                else "the replacement runs in a fresh worker"
            )
            return KillWorker(
                "cancelled",
                f"the cancelled block did not unwind within {lim.cancel_grace_s:g} s; the "
                f"worker was killed and {after}",
            )
        what = (
            f"the block's wall-clock budget of {lim.block_exec_s:g} s"
            if kind == "block"
            else f"the task's execution budget of {lim.task_exec_s:g} s"
        )
        return KillWorker(
            "timeout",
            f"{what} was exceeded (review time excluded); the worker was killed and the "
            "next block starts in a fresh worker",
        )

    # -- messages ----------------------------------------------------------------------------
    def _add_output(self, text: Any, dropped: Any) -> None:
        """Keep a message's output delta up to the block's bound; count what is not kept."""
        if not isinstance(text, str) or not isinstance(dropped, int):
            raise KillWorker("killed", "protocol violation: malformed output fields")
        blk = self.blk
        room = self.limits.output_chars - blk.output_chars
        if len(text) > room:
            blk.dropped += len(text) - max(room, 0)
            text = text[: max(room, 0)]
        blk.output.append(text)
        blk.output_chars += len(text)
        blk.dropped = max(blk.dropped, dropped)

    def _on_end(self, msg: dict[str, Any]) -> BlockResult:
        status = msg.get("status")
        error = msg.get("error")
        if status not in ("completed", "error", "cancelled") or not (
            error is None or isinstance(error, str)
        ):
            raise KillWorker("killed", "protocol violation: malformed block end")
        if error is not None:  # agent-controlled text (an exception's message): bounded like output
            error = clip_text(error, self.limits.output_chars)
        self._add_output(msg.get("out", ""), msg.get("dropped", 0))
        blk = self.blk
        if blk.cancelled:
            return block_result(blk, "cancelled", blk.ended or blk.stopped, self.clock.block_s)
        if status == "cancelled":
            raise KillWorker("killed", "protocol violation: a block claimed cancellation unasked")
        if blk.budget_hit:
            note = f"the task's budget of {self.limits.primitive_calls} primitive calls is spent"
            error = f"{note}\n{error}" if error else note
            return block_result(blk, "budget_exhausted", error, self.clock.block_s)
        end: BlockStatus = "completed" if status == "completed" else "error"
        return block_result(blk, end, error, self.clock.block_s)

    def _on_call(self, msg: dict[str, Any], handler: BoundaryHandler) -> None:
        blk = self.blk
        if blk.cancelled:
            raise KillWorker(
                "killed", "protocol violation: a primitive call from a cancelled block"
            )
        tool = msg.get("tool")
        if not isinstance(tool, str) or tool not in self.signatures:
            raise KillWorker("killed", f"protocol violation: call to unknown tool {tool!r}")
        self._add_output(msg.get("out", ""), msg.get("dropped", 0))
        if self.calls.spent:
            blk.budget_hit = True
            budget = self.limits.primitive_calls
            note = (
                f"the task's budget of {budget} primitive calls is spent; no further call is made"
            )
            self._send({"t": "budget", "msg": note})
            return
        if self.allowance.spent:
            self._quota_rejection(tool)
            return
        refused = self._refused_arguments(tool, msg.get("args"))
        if refused is not None:  # a tool error the agent sees; nothing reaches the boundary
            self._send({"t": "err", "msg": refused})
            return
        params = self.signatures[tool]
        boundary = read_call(msg, blk, self.calls.made, blocks=self.blocks, params=params)
        try:
            operation = handler.on_boundary(boundary)
        except EndPlan as end:
            blk.ended = end.reason
            self.clock.start_cancel()
            self._send({"t": "cancel"})
            return
        applied = apply_operation(
            boundary, operation, original_tree=blk.original_tree, params=params
        )
        if isinstance(applied, Cancel):
            blk.replacement = applied.replacement
            self.clock.start_cancel()
            self._send(applied.message)
            return
        if applied.patched:
            blk.source.patch(applied.code)
        blk.code = applied.code
        self._make_call(tool, applied, handler)

    def _quota_rejection(self, tool: str) -> None:
        """Refuse a request over the block's allowance (paper A.2): it is not made and never
        reaches a boundary; the block is stopped (it unwinds like a replaced block, with
        nothing in its place) and the refusal is recorded in its result."""
        blk = self.blk
        limit = self.allowance.limit
        detail = (
            f"quota rejection: this block's allowance of {limit} API requests is spent; the "
            f"request to {tool} was refused and the block was stopped"
        )
        blk.refusal = Refusal(kind="quota", detail=detail, tool=tool)
        blk.stopped = detail
        self.clock.start_cancel()
        self._send({"t": "cancel"})

    def _refused_arguments(self, tool: str, arguments: Any) -> str | None:
        """Why a call's arguments are refused before its boundary (None: they are not): data
        the log cannot hold, or more than the environment accepts (``Limits.argument_bytes``).
        Arguments that are not an object at all are a malformed message (see :func:`read_call`).
        """
        if not isinstance(arguments, dict):
            return None
        problem = data_problem(arguments)
        if problem is not None:
            return f"{tool}: arguments must be plain JSON data: {problem}"
        size = len(WIRE_JSON.encode(arguments).encode("utf-8"))
        if size > self.limits.argument_bytes:
            return (
                f"{tool}: the arguments are {size} bytes of JSON; the environment accepts at most "
                f"{self.limits.argument_bytes} bytes per call (write large data in parts)"
            )
        return None

    def _make_call(self, tool: str, applied: MakeCall, handler: BoundaryHandler) -> None:
        """Make the decided call, answer the worker, report the call to the handler.

        The call may take what is left of the block's execution budget (or of the run's
        wall-clock ceiling); a call that outlives it is recorded with the timeout as its
        result and the worker is killed like a block that computes too long. A call that the
        server's own timeout ends is a tool error the agent sees.
        """
        budget, kind = self.clock.remaining()
        if budget <= 0:
            raise self._over_budget(kind)
        started = time.time()
        t0 = time.perf_counter()
        over_budget = False
        try:
            result = self.tools.call(tool, applied.arguments, timeout_s=budget)
        except ToolCallTimeout as exc:
            over_budget = time.perf_counter() - t0 >= budget
            result = ToolResult(text=f"no answer: {exc}", is_error=True)
        finally:
            elapsed = time.perf_counter() - t0
            self.clock.charge(elapsed)
        call = PrimitiveCall(
            block_id=self.blk.block_id,
            call_index=self.calls.made,
            tool=tool,
            arguments=applied.arguments,
            result=result,
            started_at=started,
            elapsed_ms=elapsed * 1000,
            operation=applied.operation,
            requested=applied.requested,
            notice=applied.notice,
        )
        self.calls.made += 1
        self.allowance.used += 1
        self.blk.calls += 1
        try:
            if over_budget:
                raise self._over_budget(kind)
            self._send(applied.reply(result))  # first, so the worker runs on while it is logged
        finally:
            handler.on_call(call)  # the call was made: it is reported whatever happens next
