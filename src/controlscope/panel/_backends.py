"""Where a panel's runs execute: a process pool on this machine (a process per run, or, for
a served model, many runs on threads of a few processes), or Ray tasks.

Both hand each run to the same :func:`~controlscope.panel._unit.execute`, which writes the run
directory, so the panel folder is the same whichever ran it. Ray workers must see the panel
folder at the same path (a shared filesystem on a cluster) and have controlscope installed.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Protocol

from controlscope._extras import require_extra
from controlscope.models import EndpointGate, GateStats, install_gate
from controlscope.panel._folder import RunRecord
from controlscope.panel._unit import RunJob, execute, serve_runs, start_pool_process


class Backend(Protocol):
    """Runs jobs; at most ``slots`` at a time are worth submitting."""

    slots: int
    connections: int | None
    """The served endpoint's requests in flight at most (None: not a served panel)."""

    def endpoint(self) -> GateStats | None:
        """The served endpoint's counts so far (None: not a served panel)."""
        ...

    def submit(self, job: RunJob) -> Any:
        """Start ``job``; return a handle."""
        ...

    def wait(self, handles: list[Any], timeout_s: float) -> list[tuple[Any, RunRecord | str]]:
        """The handles that finished within ``timeout_s``, each with its record, or with the
        reason it has none (the process running it died)."""
        ...

    def close(self, *, cancel: bool) -> None:
        """Release the backend; with ``cancel``, interrupt the running jobs (recorded as
        interrupted by the runs themselves) and drop the queued ones."""
        ...


def machine_cores() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def core_shares(workers: int, cores: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """Each pool process's own cores: ``cores`` cut into ``workers`` consecutive shares as
    even as can be (7 cores for 3 workers: 2, 2 and 3).

    Args:
        workers: pool processes.
        cores: the CPU numbers the panel's process may use.

    Returns:
        One tuple of CPU numbers per pool process; empty (the processes are not kept to
        cores) for a single worker, which may use every core, or for more workers than
        cores, which must share them.
    """
    ordered = sorted(cores)
    if workers < 2 or workers > len(ordered):
        return ()
    bounds = [len(ordered) * i // workers for i in range(workers + 1)]
    return tuple(tuple(ordered[bounds[i] : bounds[i + 1]]) for i in range(workers))


def _usable_cores() -> tuple[int, ...]:
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux: no affinity to set either
        return ()


def served_runs(connections: int) -> int:
    """Runs at a time that keep ``connections`` requests in flight: twice as many, since a
    run spends much of its life starting, executing and being graded, not waiting (a Keep run
    makes two requests in its life, a reviewing run one per boundary)."""
    return 2 * connections


_SETTLE_S = 10.0
"""Seconds the pool's own thread gets to collect its processes once every one has ended."""


class LocalBackend:
    """A process pool sized to the machine; each run isolated as a single run is (its own
    worker process, tool server and workspace).

    With at least as many cores as pool processes, each process and everything its runs start
    keep to a share of the cores of their own (:func:`core_shares`): a run is a chain of
    processes that wake one another at every primitive call (worker, controller, tool
    server), and two such chains left to migrate across the same cores stall each other.

    Args:
        workers: pool processes.
        threads: the embedded model's threads in each (None: its default).
        grace_s: seconds a cancelled pool's processes get to record their runs' ends
            after SIGTERM before they are killed (:meth:`close`).
    """

    connections: int | None = None

    def __init__(self, workers: int, threads: int | None = None, grace_s: float = 30.0) -> None:
        self.slots = workers
        self._grace_s = grace_s
        context = multiprocessing.get_context("spawn")
        shares = core_shares(workers, _usable_cores())
        self._pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=start_pool_process,
            initargs=(threads, shares, context.Value("i", 0) if shares else None),
        )

    def endpoint(self) -> None:
        """None: the pool's runs share no endpoint gate."""
        return None

    def submit(self, job: RunJob) -> Future[RunRecord]:
        """Queue ``job`` in the pool."""
        return self._pool.submit(execute, job)

    def wait(
        self, handles: list[Future[RunRecord]], timeout_s: float
    ) -> list[tuple[Future[RunRecord], RunRecord | str]]:
        """The futures done within ``timeout_s``."""
        done, _ = wait(handles, timeout=timeout_s, return_when=FIRST_COMPLETED)
        out: list[tuple[Future[RunRecord], RunRecord | str]] = []
        for future in done:
            try:
                out.append((future, future.result()))
            except BaseException as err:  # the pool process died, or the run was interrupted
                out.append((future, f"{type(err).__name__}: {err}"))
        return out

    def close(self, *, cancel: bool) -> None:
        """Shut the pool down; with ``cancel``, SIGTERM its processes first (their runs end
        recorded as interrupted), give them ``grace_s`` seconds to exit, then SIGKILL any
        that has not (a process that outlives SIGTERM would otherwise hold the shutdown
        forever)."""
        if not cancel:
            self._pool.shutdown(wait=True)
            return
        processes = list((getattr(self._pool, "_processes", None) or {}).values())
        manager = getattr(self._pool, "_executor_manager_thread", None)
        for process in processes:
            _send(process.pid, signal.SIGTERM)
        self._pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + self._grace_s
        while time.monotonic() < deadline and any(p.is_alive() for p in processes):
            time.sleep(0.1)
        for process in processes:
            if process.is_alive():
                _send(process.pid, signal.SIGKILL)
        if manager is not None:  # it joins the processes and settles their futures
            manager.join(timeout=_SETTLE_S)


def _send(pid: int | None, signum: int) -> None:
    """Signal a pool process that may have ended already."""
    if pid is not None:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)


class ServedBackend:
    """Runs against a served model: many runs in flight in a few processes, a thread each,
    their requests bounded by one :class:`~controlscope.models.EndpointGate` shared by the
    processes (``connections`` in flight at most, rate-limit pauses shared).

    A run that waits for its endpoint costs a thread and its open connection, not a process;
    each run keeps its own worker process, tool server and workspace, as in
    :class:`LocalBackend`. Runs go to the process with the fewest running.

    Args:
        runs: runs at a time (:attr:`slots`).
        processes: processes they run in (at most ``runs``).
        connections: the endpoint's requests in flight at most.
        grace_s: seconds a cancelled backend's processes get to record their runs' ends after
            SIGTERM before they are killed (:meth:`close`).

    Attributes:
        gate: the endpoint's gate (its counts are the panel's requests).
    """

    def __init__(self, runs: int, processes: int, connections: int, grace_s: float = 30.0) -> None:
        context = multiprocessing.get_context("spawn")
        self.slots = runs
        self.connections: int | None = connections
        count = max(1, min(processes, runs))
        self.gate = EndpointGate(connections, context, members=count)
        self._grace_s = grace_s
        self._done: Any = context.Queue()
        self._queues: list[Any] = []
        self._processes: list[Any] = []
        for member in range(count):
            jobs = context.Queue()
            process = context.Process(
                target=serve_runs, args=(jobs, self._done, self.gate, member), daemon=False
            )
            process.start()
            self._queues.append(jobs)
            self._processes.append(process)
        self._where: dict[int, int] = {}
        self._reclaimed: set[int] = set()
        self._next = 0

    def endpoint(self) -> GateStats:
        """The gate's counts (every process's requests)."""
        return self.gate.stats()

    def submit(self, job: RunJob) -> int:
        """Hand ``job`` to the living process with the fewest runs; its handle is a number.

        Raises:
            RuntimeError: every process of the backend has ended.
        """
        load = [0] * len(self._processes)
        for index in self._where.values():
            load[index] += 1
        living = [i for i, process in enumerate(self._processes) if process.is_alive()]
        if not living:
            raise RuntimeError("every process of the panel's served backend has ended")
        index = min(living, key=lambda i: (load[i], i))
        self._next += 1
        self._where[self._next] = index
        self._queues[index].put((self._next, job))
        return self._next

    def wait(self, handles: list[int], timeout_s: float) -> list[tuple[int, RunRecord | str]]:
        """The runs that finished within ``timeout_s``; a run whose process died is handed
        back with the reason."""
        out: list[tuple[int, RunRecord | str]] = []
        try:
            out.append(self._done.get(timeout=timeout_s))
            while True:
                out.append(self._done.get_nowait())
        except queue.Empty:
            pass
        for key, _ in out:
            self._where.pop(key, None)
        for key, index in list(self._where.items()):
            process = self._processes[index]
            if key in handles and not process.is_alive():
                del self._where[key]
                out.append((key, f"process {process.pid} ended with status {process.exitcode}"))
        for index, process in enumerate(self._processes):
            if index not in self._reclaimed and not process.is_alive():
                self._reclaimed.add(index)  # what it held would be lost to the others
                self.gate.reclaim(index)
        return [(key, outcome) for key, outcome in out if key in handles]

    def close(self, *, cancel: bool) -> None:
        """End the processes once their runs have ended; with ``cancel``, SIGTERM them first
        (their runs end recorded as interrupted), give them ``grace_s`` seconds, then
        SIGKILL any left."""
        if not cancel:
            for jobs in self._queues:
                jobs.put(None)
            for process in self._processes:
                process.join()
            return
        for process in self._processes:
            _send(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self._grace_s
        while time.monotonic() < deadline and any(p.is_alive() for p in self._processes):
            time.sleep(0.1)
        for process in self._processes:
            if process.is_alive():
                _send(process.pid, signal.SIGKILL)
            process.join(_SETTLE_S)


class RayBackend:
    """Each run a Ray task declaring ``cpus_per_run`` CPUs; ``ray.init()`` connects to the
    cluster ``RAY_ADDRESS`` names, or starts a local instance (shut down by :meth:`close`).

    For served models (``connections`` given) runs go to actors instead, one per
    ``cpus_per_run`` CPUs (at most one per connection), each running many runs at once on
    threads with its share of the endpoint's ``connections`` (:class:`RunActor`).

    Raises:
        MissingExtra: Ray is not installed (the message names ``pip install
            'controlscope[ray]'``).
    """

    def __init__(self, cpus_per_run: float, connections: int | None = None) -> None:
        require_extra("ray", "ray", "the panel's ray backend")
        import ray

        self._ray = ray
        self._owned = not ray.is_initialized()
        if self._owned:
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        total = float(resources.get("CPU", 1.0))
        self.slots = max(1, int(total // cpus_per_run))
        self._remote = ray.remote(num_cpus=cpus_per_run, max_retries=0)(execute)
        self._actors: list[Any] = []
        self._turn = 0
        self.connections = connections
        self._counts = ActorCounts(ray)
        if connections is not None:
            self._served(cpus_per_run, connections)

    def _served(self, cpus_per_run: float, connections: int) -> None:
        """Actors that each run many runs at once on threads, their requests through a gate of
        their own: ``connections`` shared out between them (one actor per ``cpus_per_run``
        CPUs, at most one per connection)."""
        actors = max(1, min(self.slots, connections))
        share = [connections // actors + (i < connections % actors) for i in range(actors)]
        runs = [served_runs(n) for n in share]
        remote: Any = self._ray.remote  # its stubs do not list the actors' options
        groups = {_COUNTS: 1}  # its counts are asked for while every run thread is busy
        actor = remote(num_cpus=cpus_per_run, max_restarts=0, concurrency_groups=groups)(RunActor)
        self._actors = [
            actor.options(max_concurrency=n).remote(c) for n, c in zip(runs, share, strict=True)
        ]
        self.slots = sum(runs)

    def endpoint(self) -> GateStats | None:
        """The actors' gates' counts gathered (:class:`ActorCounts`); None when the runs are
        not served."""
        if not self._actors:
            return None
        return self._counts.gather(self._actors)

    def submit(self, job: RunJob) -> Any:
        """Start ``job`` as a Ray task, or on the next actor for a served model."""
        if not self._actors:
            return self._remote.remote(job)
        self._turn += 1
        return self._actors[self._turn % len(self._actors)].run.remote(job)

    def wait(self, handles: list[Any], timeout_s: float) -> list[tuple[Any, RunRecord | str]]:
        """The tasks done within ``timeout_s``."""
        ready, _ = self._ray.wait(handles, num_returns=1, timeout=timeout_s)
        out: list[tuple[Any, RunRecord | str]] = []
        for ref in ready:
            try:
                out.append((ref, self._ray.get(ref)))
            except Exception as err:  # the worker died or the task was cancelled
                out.append((ref, f"{type(err).__name__}: {err}"))
        return out

    def close(self, *, cancel: bool) -> None:
        """Shut down the local instance this backend started (a cluster is left running, its
        actors ended)."""
        for actor in self._actors:
            with contextlib.suppress(Exception):
                self._ray.kill(actor)
        if self._owned:
            self._ray.shutdown()


_COUNTS = "counts"
"""The Ray concurrency group of :meth:`RunActor.stats`: asked while every run thread is busy."""

_ASK_S = 2.0
"""Seconds one gathering of the actors' counts waits for their answers."""


class RunActor:
    """A Ray actor running many runs of a served model at once (one thread each, Ray's
    ``max_concurrency``), their requests through an endpoint gate of its own.

    Args:
        connections: its share of the endpoint's connections.
    """

    def __init__(self, connections: int) -> None:
        self._gate = EndpointGate(connections)
        install_gate(self._gate)

    def run(self, job: RunJob) -> RunRecord:
        """Execute one run (:func:`~controlscope.panel._unit.execute`)."""
        return execute(job)

    def stats(self) -> GateStats:
        """Its gate's counts (asked in the ``counts`` concurrency group, beside the runs)."""
        return self._gate.stats()


class ActorCounts:
    """The endpoint's counts over the :class:`RunActor` s of a Ray panel, each of which
    counts its own share of the connections.

    Requests, seconds waited on answers, for connections and on rate limits, and rate-limit
    answers are summed over the actors (each actor's pool is paused by the rate limits it
    receives, so their paused seconds add up per actor); requests in flight are the sum
    of the actors' latest, and the most in flight at once the largest such sum seen, or
    one actor's own peak if larger. An actor that does not answer within :data:`_ASK_S`
    seconds, or has died, counts what it last answered (an unanswered question is not
    asked again until it is answered).

    Args:
        ray: the ``ray`` module.
    """

    def __init__(self, ray: Any) -> None:
        self._ray = ray
        self._last: dict[int, GateStats] = {}
        self._asked: dict[int, Any] = {}
        self._peak = 0

    def gather(self, actors: list[Any]) -> GateStats:
        """Ask every actor for its counts (at most :data:`_ASK_S` seconds) and sum them."""
        for index, actor in enumerate(actors):
            if index not in self._asked:
                ask = actor.stats.options(concurrency_group=_COUNTS)
                self._asked[index] = ask.remote()
        pending = list(self._asked.values())
        ready, _ = self._ray.wait(pending, num_returns=len(pending), timeout=_ASK_S)
        answered = set(ready)
        for index, ref in list(self._asked.items()):
            if ref not in answered:
                continue
            del self._asked[index]
            with contextlib.suppress(Exception):  # a dead actor keeps its last counts
                self._last[index] = self._ray.get(ref)
        return self._sum(list(self._last.values()))

    def _sum(self, counts: list[GateStats]) -> GateStats:
        inflight = sum(c.inflight for c in counts)
        self._peak = max(self._peak, inflight, *(c.peak for c in counts))
        return GateStats(
            inflight=inflight,
            peak=self._peak,
            requests=sum(c.requests for c in counts),
            busy_s=sum(c.busy_s for c in counts),
            queued_s=sum(c.queued_s for c in counts),
            rate_limited_s=sum(c.rate_limited_s for c in counts),
            rate_limits=sum(c.rate_limits for c in counts),
        )
