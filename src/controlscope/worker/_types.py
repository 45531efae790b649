"""The worker's own settings and the controller callbacks it drives."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, model_validator

from controlscope.core import BlockResult, Boundary, Operation, PrimitiveCall

MIN_ADDRESS_SPACE_MB = 64
"""The smallest address space a worker is started with (the interpreter and its runtime)."""


class Limits(BaseModel):
    """Budgets the worker enforces with the controller (paper section 4, table 5).

    The three time budgets count execution seconds on the session's
    :class:`~controlscope.worker.ExecutionClock`: time the worker runs or is waited for, and
    time the tool server takes; review time (the handler deciding at a boundary) is never
    charged. Unknown fields are refused.

    Attributes:
        block_exec_s: execution seconds one block may take; beyond them the worker is killed
            and the block ends ``timeout``.
        task_exec_s: execution seconds of the whole task (all blocks of the session); a block
            that would exceed them is killed (``timeout``), and once they are spent no further
            block runs.
        primitive_calls: primitive calls per task; further calls raise ``BudgetExhausted``.
        output_chars: captured printed output kept per block (and of a block's error text).
        memory_mb: the worker's whole memory in MiB: its address space (the rlimit is what is
            left after the next two) plus its private ``/tmp`` and ``/dev/shm``, the only
            memory-backed files it can write (bwrap isolation; ``memfd_create`` and System V
            shared memory are refused by its seccomp filter).
        cpu_s: CPU-seconds limit of the worker process.
        processes: process-count limit inside the sandbox.
        file_size_mb: largest file the worker may write (in its private /tmp).
        cancel_grace_s: execution seconds a replaced block may take to unwind (counted from
            the cancellation) before the worker is killed (the replacement then runs in a
            fresh worker).
        tmp_mb: size of the worker's private ``/tmp`` (bwrap isolation), part of ``memory_mb``.
        shm_mb: size of the worker's private ``/dev/shm`` (bwrap isolation; the rest of
            ``/dev`` is read-only), part of ``memory_mb``.
        open_files: descriptors the worker may hold open (which also bounds the kernel memory
            of its pipes).
        argument_bytes: the largest JSON encoding of one call's arguments; a larger call is a
            tool error in agent code and never reaches its boundary (the default is what the
            MCP filesystem server's stdio transport accepts).
        block_requests: primitive calls one natural block may make (paper A.2: 250); a call
            beyond it is refused before its boundary (a quota rejection) and the block is
            stopped (it unwinds; blocks queued behind it still run); None: no allowance.
        renew_allowance: a replacement starts a new allowance (the V1 protocol) instead of
            sharing what is left of its block's (V2).
        runtime_guard: refuse, before it runs, a block that reaches for the runtime's private
            state (the V2 protocol's private-runtime guard, :mod:`._guard`).
        address_space_mb: the worker's address-space rlimit, ``memory_mb`` less ``tmp_mb``
            and ``shm_mb`` (read-only).

    Raises:
        pydantic.ValidationError: ``memory_mb`` leaves less than
            :data:`MIN_ADDRESS_SPACE_MB` of address space.
    """

    model_config = ConfigDict(extra="forbid")

    block_exec_s: float = 300.0
    task_exec_s: float = 1800.0
    primitive_calls: int = 100
    output_chars: int = 20_000
    memory_mb: int = 2048
    cpu_s: int = 600
    processes: int = 64
    file_size_mb: int = 16
    cancel_grace_s: float = 2.0
    tmp_mb: int = 256
    shm_mb: int = 8
    open_files: int = 256
    argument_bytes: int = 8 * 1024 * 1024
    block_requests: int | None = None
    renew_allowance: bool = False
    runtime_guard: bool = False

    @model_validator(mode="after")
    def _room_for_the_interpreter(self) -> Limits:
        if self.address_space_mb < MIN_ADDRESS_SPACE_MB:
            raise ValueError(
                f"memory_mb={self.memory_mb} leaves {self.address_space_mb} MiB of address space "
                f"after tmp_mb={self.tmp_mb} and shm_mb={self.shm_mb}; the interpreter needs at "
                f"least {MIN_ADDRESS_SPACE_MB}"
            )
        return self

    @property
    def address_space_mb(self) -> int:
        """The worker's address-space rlimit: ``memory_mb`` less its memory-backed files."""
        return self.memory_mb - self.tmp_mb - self.shm_mb


class EndPlan(Exception):
    """Raised by :meth:`BoundaryHandler.on_boundary` to end the plan at this boundary: the
    pending call is not made, the block unwinds as a replaced block does (agent code cannot
    swallow it) with nothing in its place, it ends ``cancelled`` with ``reason`` as its error,
    and the blocks queued behind it get receipts (paper section 4: an ALFWorld fast review
    that falls back is a plan error handled by ordinary recovery).

    Args:
        reason: why the plan ended (the block's error and the queued blocks' receipts).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BoundaryHandler(Protocol):
    """The controller-side callbacks a worker session drives while blocks run.

    The session calls them in order: ``on_block_start``, then for each primitive call
    ``on_boundary`` (which returns the realized operation) and, when the call is made,
    ``on_call``; finally ``on_block_end``.
    """

    def on_block_start(self, block_id: str, code: str, replaces: str | None) -> None:
        """A block (or a replacement for block ``replaces``) starts."""
        ...

    def on_boundary(self, boundary: Boundary) -> Operation:
        """Decide the pending call; the returned operation is executed as given (already
        validated against the granted scope). Raise :class:`EndPlan` to end the plan here."""
        ...

    def on_call(self, call: PrimitiveCall) -> None:
        """A primitive call was made on the environment server."""
        ...

    def on_block_end(self, result: BlockResult) -> None:
        """A block ended (including cancellation receipts for queued blocks)."""
        ...
