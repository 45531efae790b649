"""The reviewed executor: another agent framework's code blocks run under review.

:class:`Executor` holds one isolated worker and the session's tools for the lifetime of an
agent session; :meth:`Executor.execute` runs one block under the reviewer, scope, schedule and
view of the run settings (:class:`~controlscope.core.RunSettings`, the same defaults as
``controlscope run``), keeps the namespace between blocks and returns an
:class:`~controlscope.executor.Execution`. The session is an ordinary run directory (a
``run_start``, the blocks, a ``run_end`` when it is closed): ``controlscope view``,
``controlscope replay`` and ``python -m controlscope.record`` read it.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import secrets
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from pydantic import TypeAdapter, ValidationError

from controlscope.core import (
    EVENTS_FILE,
    MAX_CODE_CHARS,
    HumanChannel,
    ProviderError,
    RunSettings,
    Scope,
    Seed,
    ToolSchema,
    shadowing_warning,
)
from controlscope.envs.session import (
    SESSION_TASK,
    PythonTool,
    ServerConfigError,
    SessionEnvironment,
    SessionRecord,
    SessionTools,
    first_line,
    parse_mcp_servers,
    start_session_tools,
)
from controlscope.executor._execution import Execution, execution_of
from controlscope.executor._reviewer import GuardedReviewer
from controlscope.executor._session import SessionThread
from controlscope.models import WeightsError
from controlscope.planner import render_signatures
from controlscope.review import HumanReviewer, ModelReviewer, ReviewDesk, Reviewer
from controlscope.run import SpecError, build_models, settings_condition

if TYPE_CHECKING:
    from controlscope.view import ViewServer

DEFAULT_GOAL = "Run the agent's code blocks; each one serves the user's request."
"""What a reviewer is told the session is for when the executor is given no goal."""

CLOSE_GRACE_S = 30.0
"""Seconds :meth:`Executor.close` waits for the run to record its end before it kills the
worker (a block still running), and again after."""

SIGTERM_GRACE_S = 1.0
"""Seconds a block still running is given to end on SIGTERM before its worker is killed (a
process manager sends SIGKILL soon after SIGTERM: ``docker stop`` 10 s later; the run's end
must be recorded before)."""

_POLL_S = 0.25


class ExecutorError(ValueError):
    """An executor that cannot start: bad settings, servers or tools (one line; every process
    started for it is stopped)."""


class ExecutorClosed(RuntimeError):
    """:meth:`Executor.execute` after the executor was closed or its session ended."""


class Executor:
    """Runs an agent's code blocks in one isolated worker, reviewed at every tool call.

    Args:
        servers: upstream MCP servers: an ``mcpServers`` JSON file, or a mapping of names to
            servers (``{"files": {"command": "npx", "args": [...]}}``, a command line, or
            ``[command, *args]``; the ``mcpServers`` key may wrap it). Each is started as a
            stdio subprocess; one that does not start is left out and named in
            :attr:`problems`. A tool name two sources give is namespaced ``server__tool``.
        tools: plain Python callables with type hints; they run in this process, never in the
            worker (input schema from the signature; an exception or a value that is not JSON
            data is a tool error with the reason); MCP annotations declared with
            :func:`~controlscope.executor.tool_annotations`.
        settings: every run setting (scope, schedule, view, reviewer model, budgets,
            isolation...); None: ``RunSettings()``, the defaults of ``controlscope run``.
        reviewer: a reviewer of your own in place of the one the settings name; one that
            raises is a recorded ``malformed`` fallback (Keep).
        desk: with the settings' ``reviewer`` ``human`` (``human:browser``) and no
            ``reviewer``: the review desk the person decides at, which several executors may
            share (serve it with ``view.ViewServer(folder, desk=desk)``: its review page lists
            the boundaries waiting, oldest first). None: the executor serves its own review
            page on loopback (:attr:`review_url`).
        goal: what the session is for (the reviewer's goal).
        out: the run directory (None: ``runs/session-TIME-PID-RANDOM``); it must not hold a
            run.
        seed: the worker's seed (its ``random`` module at every block).
        timeout_s: how long an upstream server may take to start, and one tool call.

    Attributes:
        settings: the run settings.
        run_dir: the session's run directory.
        tools: the tools as agent code calls them.
        problems: one line per upstream server that did not start.
        warnings: what the session's ``run_start`` warns of (tools named like Python
            builtins).
        closed: whether the executor was closed or its session ended.
        review_url: the address of the executor's own review page, with the session's secret
            (a person reviewing in the browser, no ``desk`` given); else None.

    Raises:
        ExecutorError: bad servers or tools, settings the run refuses (a bare ``once``, a
            ``fenced`` planner format), a model that cannot be built, an ``out`` that is empty,
            holds a run or cannot be written, a ``timeout_s`` not above 0, a ``seed`` outside
            ``0`` to ``MAX_SEED``, a ``goal`` that is not text, ``settings`` that are not
            ``RunSettings`` or hold a value out of its range, or a session that did not start
            (the reason in one line, before anything starts where it can be known then).

    Example::

        with Executor(servers={"fs": ["npx", "-y", "@modelcontextprotocol/server-filesystem",
                                      "/tmp/x"]},
                      settings=RunSettings(scope="arg", reviewer_model="openai:gpt-4o")) as ex:
            print(ex.signatures())
            run = ex.execute("print(list_directory(path='/tmp/x'))")
            print(run.output, [d.operation.kind for d in run.decisions])
    """

    def __init__(
        self,
        *,
        servers: str | Path | Mapping[str, Any] | None = None,
        tools: Iterable[Callable[..., Any]] = (),
        settings: RunSettings | None = None,
        reviewer: Reviewer | None = None,
        goal: str = DEFAULT_GOAL,
        out: str | Path | None = None,
        seed: int = 0,
        timeout_s: float = 60.0,
        desk: ReviewDesk | None = None,
    ) -> None:
        _check_arguments(settings, goal, seed, timeout_s)
        self.settings = settings or RunSettings()
        self.run_dir = _fresh_out(out)
        upstream = _parsed_servers(servers)
        python = [_python_tool(func) for func in tools]
        _check_settings(self.settings)
        person = _person(self.settings, reviewer, desk, self.run_dir)
        try:
            session_tools = start_session_tools(upstream, python, timeout_s=timeout_s)
        except ServerConfigError as err:
            raise ExecutorError(str(err)) from None
        self._tools = session_tools
        try:
            self._session = _start(self, session_tools, upstream, goal, reviewer or person, seed)
        except BaseException:
            session_tools.close()
            raise
        self._page: ViewServer | None = None
        if person is not None and person.channel == "browser" and desk is None:
            try:
                self._page = _review_page(self._session, person.desk, self.run_dir)
            except ExecutorError:
                session_tools.close()
                raise
        self.review_url = self._page.review_url if self._page is not None else None
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, _shutdown, self._session)
        _LIVE.add(self._session)
        _watch_sigterm()

    # -- what the session offers ------------------------------------------------------------

    @property
    def tools(self) -> list[ToolSchema]:
        """The tools as agent code calls them (names namespaced where two sources clash)."""
        return self._tools.list_tools()

    @property
    def problems(self) -> tuple[str, ...]:
        """One line per upstream server that did not start (also in ``run_start``)."""
        return self._tools.problems

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the session's ``run_start`` warns of: tools named like Python builtins
        (``print``, ``open``...), which replace them in the agent's code
        (:func:`~controlscope.core.shadowing_warning`); empty when nothing."""
        warning = shadowing_warning(self.tools)
        return (warning,) if warning is not None else ()

    @property
    def closed(self) -> bool:
        """Whether :meth:`execute` would raise :class:`ExecutorClosed` (the executor was
        closed, or its session ended)."""
        return self._closed or self._session.ended

    def signatures(self) -> str:
        """The tools' signatures as the planner's system prompt shows them
        (:func:`~controlscope.planner.render_signatures`), for another framework's prompt."""
        return render_signatures(self.tools)

    # -- running blocks --------------------------------------------------------------------

    def execute(self, code: str) -> Execution:
        """Run one block in the session's namespace, reviewed at every tool call.

        Args:
            code: the block's Python source.

        Returns:
            What it printed, its error, every primitive call with its final arguments and
            observation, and every review decision.

        Raises:
            ExecutorClosed: the executor was closed, or its session ended (a budget, its
                wall-clock ceiling: the reason is named).
            TypeError: ``code`` is not a string.
            ValueError: ``code`` is longer than :data:`~controlscope.core.MAX_CODE_CHARS`
                (the most a reviewer's replacement may carry; a longer block cannot be
                recorded, and would end the session).
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        if len(code) > MAX_CODE_CHARS:
            raise ValueError(f"a block is at most {MAX_CODE_CHARS:,} characters, not {len(code):,}")
        with self._lock:
            self._check_open()
            session = self._session
            session.take()  # what was written between blocks
            session.inbox.put(code)
            signal_ = None
            while signal_ is None:
                signal_ = session.wait(_POLL_S)
            ended = None if signal_ == "ready" else session.end_reason()[0]
            return execution_of(session.take(), ended)

    async def aexecute(self, code: str) -> Execution:
        """:meth:`execute` for async frameworks (on a worker thread of anyio's). Cancelling it
        stops the wait, not the block: the block runs on in the session (an MCP client that
        disconnects mid-block cancels it; :meth:`close` then stops the block within
        :data:`CLOSE_GRACE_S`)."""
        return await anyio.to_thread.run_sync(self.execute, code, abandon_on_cancel=True)

    def _check_open(self) -> None:
        if self._closed:
            raise ExecutorClosed(f"the executor is closed (its run: {self.run_dir})")
        if self._session.ended:
            reason, detail = self._session.end_reason()
            why = _one_line(detail)
            raise ExecutorClosed(f"the session ended ({reason}: {why}); its run: {self.run_dir}")

    # -- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        """End the session: its run records its end and summary, the worker and every upstream
        server are stopped. Safe to call twice; also done at interpreter exit and on SIGTERM."""
        self._closed = True
        self._finalizer()
        if self._page is not None:
            self._page.stop()

    async def aclose(self) -> None:
        """:meth:`close` for async frameworks."""
        await anyio.to_thread.run_sync(self.close)

    def __enter__(self) -> Executor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Executor:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _fresh_out(out: str | Path | None) -> Path:
    """The run directory: the one given (without a run in it) or a new one under ``runs``."""
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return Path("runs") / f"session-{stamp}-{os.getpid()}-{secrets.token_hex(3)}"
    if not str(out).strip():
        raise ExecutorError("out is empty; name the session's run directory")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ExecutorError(f"out {path} exists and is not a directory")
    if (path / EVENTS_FILE).exists():
        raise ExecutorError(f"{path} already holds a recorded run; choose a new out directory")
    return path


def _parsed_servers(servers: str | Path | Mapping[str, Any] | None) -> dict[str, Any]:
    if servers is None:
        return {}
    try:
        return parse_mcp_servers(servers)
    except ServerConfigError as err:
        raise ExecutorError(str(err)) from None


def _python_tool(func: Callable[..., Any]) -> PythonTool:
    try:
        return PythonTool.of(func)
    except ServerConfigError as err:
        raise ExecutorError(str(err)) from None


_SEED: TypeAdapter[int] = TypeAdapter(Seed)


def _check_arguments(settings: object, goal: object, seed: object, timeout_s: object) -> None:
    """Refuse, in one line, arguments of the wrong kind or out of their range: a ``seed``
    outside :data:`~controlscope.core.Seed`, a ``goal`` that is not text, ``settings`` that
    are not :class:`~controlscope.core.RunSettings` or hold a value the schema refuses (one
    set past its checks, e.g. by ``model_copy(update=...)``), a ``timeout_s`` not above 0."""
    if not (isinstance(timeout_s, int | float) and 0 < timeout_s < math.inf):
        raise ExecutorError(f"timeout_s is a number of seconds above 0, not {timeout_s!r}")
    if not isinstance(goal, str):
        raise ExecutorError(f"goal is text (what the session is for), not {type(goal).__name__}")
    try:
        _SEED.validate_python(seed)
    except ValidationError as err:
        raise ExecutorError(_argument_problem("seed", err)) from None
    if settings is None:
        return
    if not isinstance(settings, RunSettings):
        raise ExecutorError(f"settings is a RunSettings, not {type(settings).__name__}")
    given = {name: getattr(settings, name) for name in settings.model_fields_set}
    try:
        type(settings).model_validate(given)
    except ValidationError as err:
        raise ExecutorError(_argument_problem("settings", err)) from None


def _argument_problem(argument: str, err: ValidationError) -> str:
    """The first problem of ``err`` in one line: ``ARGUMENT.FIELD: problem (got VALUE)``."""
    first = err.errors()[0]
    where = ".".join([argument, *(str(part) for part in first["loc"])])
    message = first["msg"].removeprefix("Value error, ")
    got = repr(first.get("input"))
    got = got if len(got) <= 80 else got[:77] + "..."
    return f"{where}: {message} (got {got})"


def _check_settings(settings: RunSettings) -> None:
    """Settings a session cannot run with (its blocks are ``execute_python`` calls)."""
    if settings.stated().get("planner_format", "tools") != "tools":
        raise ExecutorError(
            "a session's blocks are execute_python calls: planner_format is tools, not fenced"
        )


def _person(
    settings: RunSettings, reviewer: Reviewer | None, desk: ReviewDesk | None, run_dir: Path
) -> HumanReviewer | None:
    """The person who reviews: when the settings name one (``reviewer`` ``human``,
    ``human:browser``, ``human:terminal``), the session has reviews, and no reviewer is given.

    Raises:
        ExecutorError: a desk given where no person reviews in the browser.
    """
    reviews = settings.schedule != "never" and settings.scope != Scope.KEEP
    channel: HumanChannel = "terminal" if settings.reviewer == "human:terminal" else "browser"
    if reviewer is not None or settings.reviewer == "model" or not reviews:
        person = None
    else:
        person = HumanReviewer(
            channel, desk=desk, timeout_s=settings.review_timeout_s, label=run_dir.name
        )
    if desk is not None and (person is None or channel != "browser"):
        raise ExecutorError(
            "desk is where a person reviews in the browser: it needs the setting reviewer "
            "human (or human:browser), a schedule and a scope that review, and no reviewer"
        )
    return person


def _review_page(session: SessionThread, desk: ReviewDesk, run_dir: Path) -> ViewServer:
    """The session's own review page, served on loopback.

    Raises:
        ExecutorError: it cannot listen (the session is ended first).
    """
    from controlscope.view import ViewError, ViewServer  # the web stack, for a person only

    try:
        return ViewServer(run_dir, desk=desk).start()
    except ViewError as err:
        _shutdown(session)
        raise ExecutorError(f"the review page cannot be served: {err}") from None


def _start(
    executor: Executor,
    tools: SessionTools,
    upstream: Mapping[str, Any],
    goal: str,
    reviewer: Reviewer | None,
    seed: int,
) -> SessionThread:
    """Record the session's tools, resolve its condition and reviewer, start its run and wait
    until it waits for the first block.

    Raises:
        ExecutorError: the models or the condition cannot be built, or the run ended before
            its first block (the reason named).
    """
    settings, run_dir = executor.settings, executor.run_dir
    record = SessionRecord(
        goal=goal or DEFAULT_GOAL,
        tools=tuple(tools.list_tools()),
        servers={name: server.command_line() for name, server in upstream.items()},
        problems=tools.problems,
    )
    try:
        record.write(run_dir)
    except OSError as err:
        raise ExecutorError(f"cannot write the run directory {run_dir}: {err.strerror}") from None
    env = SessionEnvironment(run_dir, tools=tools)
    task = env.task(SESSION_TASK)
    reviews = settings.schedule != "never" and settings.scope != Scope.KEEP
    session = SessionThread(tools)
    try:
        models = build_models(
            planner=settings.model,
            reviewer=settings.reviewer_model,
            base_url=settings.base_url,
            need_reviewer=reviewer is None and reviews,
            planner_model=session.planner,
        )
        condition = settings_condition(settings, task, replace(models, planner_format="tools"))
    except (SpecError, ValueError, FileNotFoundError, ProviderError, WeightsError) as err:
        raise ExecutorError(first_line(err)) from None
    chosen: Reviewer | None = GuardedReviewer(reviewer) if reviewer is not None else None
    if chosen is None and models.reviewer is not None:
        chosen = ModelReviewer(models.reviewer)
    session.start(env, task, reviewer=chosen, condition=condition, out_dir=run_dir, seed=seed)
    if session.wait() != "ready":
        reason, detail = session.end_reason()
        raise ExecutorError(f"the session did not start ({reason}): {_one_line(detail)}")
    return session


def _one_line(detail: str) -> str:
    """Why a session ended, in one line: a traceback's last line (the error), else the first."""
    lines = [line for line in detail.strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback"):
        return lines[-1]
    return first_line(detail) if lines else detail


# -- ending every session: close, interpreter exit, SIGTERM ---------------------------------

_LIVE: set[SessionThread] = set()
"""The sessions not closed yet (what SIGTERM closes)."""

_SIGTERM: list[Any] = []
"""The SIGTERM handler in force before ours (set once ours is installed)."""


def _shutdown(session: SessionThread, grace_s: float = CLOSE_GRACE_S) -> None:
    """End ``session``: ask its run to end, wait for it (``grace_s``: a block still running
    is given that long to end), kill what is left, and wait (bounded) for the end recorded."""
    _LIVE.discard(session)
    if session.ended:
        return
    session.inbox.put(None)
    session.finished.wait(grace_s)
    if not session.finished.is_set():  # a block still running: its worker is killed
        session.kill()
        session.finished.wait(CLOSE_GRACE_S)
    session.kill()


def _watch_sigterm() -> None:
    """Install (once, from the main thread) a SIGTERM handler that closes every live session
    and then does what the handler before it did (the default: the process ends)."""
    if _SIGTERM or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous in (signal.SIG_IGN, None):
        return
    _SIGTERM.append(previous)
    signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    for session in list(_LIVE):  # a running block is killed, not waited on: a process
        _shutdown(session, SIGTERM_GRACE_S)  # manager's SIGKILL follows within seconds
    previous = _SIGTERM[0]
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


@atexit.register
def _close_all() -> None:
    for session in list(_LIVE):
        with contextlib.suppress(Exception):
            _shutdown(session)
