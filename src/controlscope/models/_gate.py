"""One served endpoint's gate, shared by every run of a panel: at most ``connections`` requests
in flight at once, a pause that a rate limit asks for holding all of them, and the counts a
panel's progress shows.

A panel that runs many runs against one endpoint makes one :class:`EndpointGate` and hands it
to every process its runs execute in (its state is shared memory and a semaphore of a
``multiprocessing`` context, so processes started from that context share it); each process
installs it (:func:`install_gate`), and every :class:`~controlscope.models.OpenAIModel` attempt
in that process passes through it (:meth:`EndpointGate.slot`): it waits while the endpoint's
pause lasts, then for a free connection, and holds the connection until its answer is read. An
answer ``429`` with ``Retry-After`` pauses the whole pool (:meth:`EndpointGate.pause`), not only
the attempt that received it: the endpoint asked its client to slow down, and every run is that
client. Without an installed gate (a single run) nothing waits.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["EndpointGate", "GateStats", "current_gate", "install_gate"]

_INFLIGHT, _PEAK, _REQUESTS, _BUSY, _QUEUED, _PAUSED, _UNTIL, _LIMITS = range(8)

_POLL_S = 0.25
"""Seconds one wait for a connection blocks before it looks at its cancellation again."""


@dataclass(frozen=True)
class GateStats:
    """What an endpoint's gate has seen.

    Attributes:
        inflight: requests in flight now.
        peak: the most requests in flight at once.
        requests: requests answered or failed so far (attempts, retries included).
        busy_s: seconds requests spent at the endpoint, summed over requests (time the runs
            waited on the endpoint's answers).
        queued_s: seconds attempts waited for a free connection, summed over attempts.
        rate_limited_s: wall seconds the pool was paused by rate limits (overlapping pauses
            counted once).
        rate_limits: rate-limit answers that paused the pool.
    """

    inflight: int = 0
    peak: int = 0
    requests: int = 0
    busy_s: float = 0.0
    queued_s: float = 0.0
    rate_limited_s: float = 0.0
    rate_limits: int = 0


class EndpointGate:
    """At most ``connections`` requests at once to one endpoint, from every process that
    installs this gate (see the module docstring).

    Args:
        connections: the most requests in flight at once (at least 1).
        context: the ``multiprocessing`` context the sharing processes are started from
            (None: the default one).
        members: the processes sharing it, each of which :meth:`join` s as its own member,
            so that the connections a member holds when it dies can be given back
            (:meth:`reclaim`).

    Raises:
        ValueError: ``connections`` or ``members`` below 1.
    """

    def __init__(self, connections: int, context: Any = None, members: int = 1) -> None:
        if connections < 1 or members < 1:
            raise ValueError(
                f"a gate takes at least 1 connection and 1 member, not {connections} and {members}"
            )
        ctx = context or multiprocessing.get_context()
        self.connections = connections
        self._slots = ctx.BoundedSemaphore(connections)
        self._state: Any = ctx.Array("d", 8)
        self._held: Any = ctx.Array("i", members, lock=False)  # guarded by the state's lock
        self._member = 0

    def join(self, member: int) -> None:
        """Count this process's connections as member ``member``'s (0 to ``members`` - 1)."""
        self._member = member

    def reclaim(self, member: int) -> int:
        """Give back the connections member ``member`` held when it died (its process can no
        longer release them); returns how many."""
        with self._state.get_lock():
            held = int(self._held[member])
            self._held[member] = 0
            self._state[_INFLIGHT] -= held
        for _ in range(held):
            self._slots.release()
        return held

    def stats(self) -> GateStats:
        """The counts so far (see :class:`GateStats`)."""
        with self._state.get_lock():
            s = list(self._state)
        return GateStats(
            inflight=int(s[_INFLIGHT]),
            peak=int(s[_PEAK]),
            requests=int(s[_REQUESTS]),
            busy_s=s[_BUSY],
            queued_s=s[_QUEUED],
            rate_limited_s=s[_PAUSED],
            rate_limits=int(s[_LIMITS]),
        )

    def paused_for(self) -> float:
        """Seconds the endpoint's pause still lasts (0 when there is none)."""
        until: float = self._state[_UNTIL]
        return max(0.0, until - time.monotonic())

    def pause(self, seconds: float) -> None:
        """Hold every new request for ``seconds`` from now (an endpoint's ``Retry-After``);
        a pause already lasting longer is kept.

        Args:
            seconds: the pause; at most 0 does nothing.
        """
        if seconds <= 0:
            return
        now = time.monotonic()
        with self._state.get_lock():
            until = self._state[_UNTIL]
            if now + seconds > until:
                self._state[_PAUSED] += now + seconds - max(until, now)
                self._state[_UNTIL] = now + seconds
            self._state[_LIMITS] += 1

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one connection for the attempt inside: wait while the endpoint is paused,
        then for a free connection (cancellable, e.g. by the call's deadline)."""
        import anyio

        queued = time.monotonic()
        while True:
            await anyio.sleep(self.paused_for())
            with anyio.CancelScope(shield=True):  # a connection taken is never lost
                got = await anyio.to_thread.run_sync(self._slots.acquire, True, _POLL_S)
            if got and self.paused_for() <= 0:
                break
            if got:  # a rate limit came while this attempt waited: it waits again
                self._slots.release()
            await anyio.lowlevel.checkpoint()
        started = time.monotonic()
        self._add(queued=started - queued, inflight=1)
        try:
            yield
        finally:
            self._add(busy=time.monotonic() - started, inflight=-1)
            self._slots.release()

    def _add(self, *, inflight: int, queued: float = 0.0, busy: float = 0.0) -> None:
        with self._state.get_lock():
            s = self._state
            self._held[self._member] += inflight
            s[_INFLIGHT] += inflight
            s[_PEAK] = max(s[_PEAK], s[_INFLIGHT])
            s[_QUEUED] += queued
            if inflight < 0:
                s[_REQUESTS] += 1
                s[_BUSY] += busy


_INSTALLED: list[EndpointGate] = []


def install_gate(gate: EndpointGate | None) -> None:
    """Make ``gate`` this process's endpoint gate (None: none, requests are not gated).

    Every :class:`~controlscope.models.OpenAIModel` in the process sends its attempts through
    it; a panel installs one per process, for the endpoint its runs share.
    """
    _INSTALLED[:] = [gate] if gate is not None else []


def current_gate() -> EndpointGate | None:
    """This process's endpoint gate, or None."""
    return _INSTALLED[0] if _INSTALLED else None
