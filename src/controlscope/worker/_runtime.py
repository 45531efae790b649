"""The in-sandbox program of the worker: runs agent blocks and pauses at every primitive call.

STANDARD LIBRARY ONLY. The controller starts a bare interpreter (``-S -s -P``, a controlled
environment) and hands it the runtime bundle over the channel: the compiled code of
``core/_block_data``, ``_snapshot``, ``_hardening`` and this module, run in that order in one
``__main__`` namespace (hence the guarded imports below); the worker never sees the repository
or site-packages. The controller imports these modules for the pure helpers it shares with the
runtime (:func:`slot_positions`, :func:`slot_values`, :func:`structure_key`, :func:`snapshot`,
the wire format), so both sides number a block's constants identically.

Wire format: each message is a 4-byte big-endian length followed by that many bytes of compact
UTF-8 JSON (an object whose ``"t"`` field names its type); the very first frame the controller
sends is the runtime itself (a marshalled code object read by the bootstrap). Messages, worker to
controller: ``ready`` (whether the seccomp filter is in force and forks are supervised),
``started`` (echoes the ``run`` message's nonce before anything else of the block), ``out``
(printed output as it is written, so that it survives a block killed later),
``call`` (a boundary: tool, arguments, variables, output delta, and claims on where the call is
made: the block, the span of its frame's current instruction, whether the proxy was called
directly, line, function, class, literal-argument slots) and ``end`` (status, output delta,
error). Controller to worker: ``init`` (proxies, limits, the seed each block's ``random`` is
seeded from with the block's id, the descriptor of the socket the fork listener is handed over
on), ``run``, and the answer to a ``call``: ``res`` (observation
text) or ``err`` (tool error), either with the patched block code whose constants take effect,
``budget`` (call budget exhausted) or ``cancel`` (replace_workflow: unwind the block). At a
boundary the controller may first send ``fork`` (any number of times): the worker answers
``forking`` (the descriptor numbers the child's channel is to have), forks (the controller's
fork supervisor lets that one fork through, see ``_fork.py``) and each side says ``forked``
on its own channel; both then wait for the answer to the same call. Paper
section A.1 (the worker exposes the pending call, its arguments, JSON-serialisable variables and
printed output).

The worker is untrusted: agent code can reach everything in this interpreter, including the
channel. The controller therefore treats every message as a claim and checks it against its own
state machine (see ``_driver.py``) and the block sources it sent (``_site.py``).
"""

from __future__ import annotations

import ast
import builtins
import json
import linecache
import opcode
import os
import random
import select
import signal
import struct
import sys
import threading
import time
import traceback
from typing import Any

RUNTIME_FILENAME = "<controlscope-runtime>"
PROXY_FILENAME = "<controlscope-proxies>"
BLOCK_FILENAME_PREFIX = "<block "
CONST_TABLE_PREFIX = "__cs_k"
HEADER = struct.Struct(">I")
#: Largest message either side accepts (a call's arguments included), in bytes.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024

#: Instructions that call a callable (3.11 to 3.13), and the cache entries that follow one.
_CALL_OPS = frozenset(
    opcode.opmap[name] for name in ("CALL", "CALL_KW", "CALL_FUNCTION_EX") if name in opcode.opmap
)
_CACHE_OP = opcode.opmap.get("CACHE", -1)
_FunctionType = type(lambda: None)

if __name__ != "__main__":  # imported by the controller; in the worker the bundle defines these
    from controlscope.core import (
        constants_in_order,
        literal_arguments,
        slot_positions,
        slot_values,
        structure_key,
        transform_block,
    )
    from controlscope.worker._hardening import (
        _apply_rlimits,
        _apply_seccomp,
        _confine_fork,
        _drop_capabilities,
        _getframe,
        _gettrace,
        _Hooks,
        _refuse_audit_hooks,
        _setitimer,
        _setprofile,
        _settrace,
        _sigmask,
        _signal,
        _SignalGate,
        seccomp_program,
    )
    from controlscope.worker._snapshot import (
        SCOPE_CHARS,
        WIRE_JSON,
        _Capture,
        _clean,
        snapshot,
    )

__all__ = [
    "SCOPE_CHARS",
    "BudgetExhausted",
    "Runtime",
    "ToolError",
    "constants_in_order",
    "seccomp_program",
    "slot_positions",
    "slot_values",
    "snapshot",
    "structure_key",
    "transform_block",
]


class ToolError(Exception):
    """A primitive call came back as a tool error; the message is the server's text."""


class BudgetExhausted(Exception):
    """The task's primitive-call budget is spent; no further call is made."""


class _Cancelled(BaseException):
    """Unwinds a block whose continuation was replaced (replace_workflow)."""


# --------------------------------------------------------------------------------------------
# The runtime proper


class Runtime:
    """One worker's state: the channel, the shared namespace and the running block."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd, self.wfd = rfd, wfd
        os.set_blocking(rfd, False)
        self._poll = select.poll()
        self._poll.register(rfd, select.POLLIN)
        self.spin_s = 0.0
        self.buf = bytearray()
        self.ns: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        self.proxy_code: Any = None
        self.proxy_names: list[str] = []
        self.proxy_codes: dict[int, str] = {}
        self.tool_params: dict[str, list[list[str]]] = {}
        self.seed = 0
        self.seccomp = False
        self.hidden: set[str] = set()
        self.capture = _Capture(20_000)
        self.main_ident = threading.get_ident()
        self.running = False
        self.cancelled = False
        self.seq = 0
        self.block_file = ""
        self.table: list[Any] = []
        self.positions: list[int] = []
        self.calls_by_file: dict[str, dict[tuple[int, int, int, int], dict[str, Any]]] = {}
        self.block_calls = 0
        self.flushing = False
        self.drop_announced = False
        self._devnull = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
        self.signals = _SignalGate()
        self.saved_hooks: _Hooks | None = None
        self._code_tables: dict[Any, tuple[list[Any], bytes]] = {}

    # -- framing ---------------------------------------------------------------------------
    @staticmethod
    def encode(msg: dict[str, Any]) -> bytes:
        """One framed message. Raises TypeError/ValueError for data JSON cannot carry."""
        raw = WIRE_JSON.encode(
            msg
        ).encode()  # UnicodeEncodeError (a ValueError) for lone surrogates
        return HEADER.pack(len(raw)) + raw

    def write(self, frame: bytes) -> None:
        """Write a framed message to the controller (blocking)."""
        view = memoryview(frame)
        while view:
            n = os.write(self.wfd, view)
            view = view[n:]

    def send(self, msg: dict[str, Any]) -> None:
        """Encode and write one message."""
        self.write(self.encode(msg))

    def recv(self) -> dict[str, Any]:
        """Read the controller's next message; exit quietly when the controller is gone."""
        buf = self.buf
        while True:
            if len(buf) >= 4:
                (n,) = HEADER.unpack_from(buf)
                if len(buf) >= 4 + n:
                    data = bytes(buf[4 : 4 + n])
                    del buf[: 4 + n]
                    msg = json.loads(data)
                    if type(msg) is not dict:
                        raise ValueError("bad message")
                    return msg
            buf += self._read()

    def _read(self) -> bytes:
        """The next bytes from the controller: polled for ``spin_s`` seconds (yielding the CPU
        between tries), then waited for. Exits quietly when the controller is gone."""
        spin_until = time.perf_counter() + self.spin_s
        while True:
            try:
                chunk = os.read(self.rfd, 1 << 20)
            except BlockingIOError:
                if time.perf_counter() < spin_until:
                    os.sched_yield()
                else:
                    self._poll.poll()  # poll, not select: the fd may be above FD_SETSIZE
                continue
            if not chunk:
                os._exit(0)  # the controller went away
            return chunk

    # -- setup -----------------------------------------------------------------------------
    def init(self, msg: dict[str, Any]) -> None:
        """Set up from the ``init`` message: proxies, limits, capabilities, seccomp; ``ready``."""
        self.capture = _Capture(int(msg["output_chars"]))
        self.capture.sink = self._flush_output
        self.spin_s = float(msg.get("spin_s", 0.0))
        self.seed = int(msg.get("seed", 0))
        self.tool_params = {k: [list(p) for p in v] for k, v in msg["params"].items()}
        self.proxy_code = compile(msg["proxies"], PROXY_FILENAME, "exec")
        self.proxy_names = list(msg["names"])
        self.hidden = {*self.proxy_names, "ToolError", "BudgetExhausted"}
        functions = self._fresh_names()  # the proxies' code objects are the same in every block
        # by identity: code objects compare equal by content, which agent code can imitate
        self.proxy_codes = {id(functions[n].__code__): msg["tools"][n] for n in self.proxy_names}
        _apply_rlimits(msg["limits"])
        _drop_capabilities()
        vars(builtins).update(exit=sys.exit, quit=sys.exit)  # as the site module would (-S)
        self.saved_hooks = _Hooks()
        sys.addaudithook(_refuse_audit_hooks)
        handoff = msg.get("fork_fd")
        handoff = None if handoff is None else int(handoff)
        if msg.get("seccomp", True):
            seccomp, forks = _apply_seccomp(handoff)
        else:
            seccomp = forks = False
            if handoff is not None:
                os.close(handoff)  # the controller then knows: no supervised forks
        self.seccomp = seccomp
        sys.stdout = sys.stderr = self._devnull
        self.send({"t": "ready", "seccomp": seccomp, "fork": forks, "pid": os.getpid()})

    def serve(self) -> None:
        """Answer ``init``, then run each ``run`` message's block until the channel closes."""
        self.init(self.recv())
        while True:
            msg = self.recv()
            kind = msg.get("t")
            self._reap()
            if kind == "run":
                self.send({"t": "started", "nonce": msg["nonce"]})
                self.run_block(int(msg["seq"]), str(msg["id"]), str(msg["code"]))
            elif kind == "exit":
                return
            else:
                os._exit(3)

    # -- blocks ----------------------------------------------------------------------------
    def run_block(self, seq: int, block_id: str, code: str) -> None:
        """Compile the block (constants as table lookups), run it in the shared namespace with
        output captured, and send its ``end`` message."""
        self.seq, self.cancelled, self.block_calls = seq, False, 0
        self.block_file = f"{BLOCK_FILENAME_PREFIX}{block_id}>"
        self.capture.reset()
        self.drop_announced = False
        table_name = f"{CONST_TABLE_PREFIX}{seq}__"
        try:
            tree = ast.parse(code, self.block_file)
            self.positions = slot_positions(tree)
            tree, values, calls = transform_block(tree, table_name)
            self.calls_by_file[self.block_file] = calls
            compiled = compile(tree, self.block_file, "exec")
            self._index_code(compiled)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            text = "".join(traceback.format_exception_only(type(exc), exc))
            self.send(
                {"t": "end", "status": "error", "out": "", "dropped": 0, "error": _clean(text)}
            )
            return
        self.table = values
        linecache.cache[self.block_file] = (len(code), None, code.splitlines(True), self.block_file)
        self.ns[table_name] = self.table
        self.ns.update(self._fresh_names())  # pristine proxies in every block
        if self.saved_hooks is not None:
            self.saved_hooks.restore()  # nothing an earlier block installed may fire in this one
        # The same numbers in every replay of this block: seeded from the run and the block.
        random.seed(f"{self.seed}:{block_id}")
        status, error = "completed", None
        sys.stdout = sys.stderr = self.capture
        self.running = True
        try:
            exec(compiled, self.ns)
        except SystemExit as exc:  # sys.exit()/exit(): ends the block, not the worker
            if exc.code not in (None, 0):
                status, error = "error", self._format(exc)
        except BaseException as exc:
            if not self.cancelled:
                status, error = "error", self._format(exc)
        finally:
            self.running = False
            self._disarm()
            sys.stdout = sys.stderr = self._devnull
        if self.cancelled:
            status, error = "cancelled", None
        self.send(
            {
                "t": "end",
                "status": status,
                "out": self.capture.delta(),
                "dropped": self.capture.dropped,
                "error": None if error is None else _clean(error),
            }
        )

    def _fresh_names(self) -> dict[str, Any]:
        """New proxy functions (whatever agent code did to earlier ones) and the exceptions."""
        scope: dict[str, Any] = {"_cs_call": self.call}
        exec(self.proxy_code, scope)
        names = {name: scope[name] for name in self.proxy_names}
        names["ToolError"] = ToolError
        names["BudgetExhausted"] = BudgetExhausted
        return names

    def _format(self, exc: BaseException) -> str:
        try:
            if isinstance(exc, SystemExit):
                return f"SystemExit: agent code called sys.exit({exc.code!r}); the block ended"
            frames = [
                fs
                for fs in traceback.extract_tb(exc.__traceback__)
                if fs.filename not in (RUNTIME_FILENAME, PROXY_FILENAME)
            ]
            lines = ["Traceback (most recent call last):\n"]
            lines += traceback.format_list(frames)
            lines += traceback.format_exception_only(type(exc), exc)
            return "".join(lines)
        except BaseException:
            return f"{type(exc).__name__}: <unprintable>"

    # -- the boundary ----------------------------------------------------------------------
    def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """Called by every proxy: send the boundary and block until the controller answers."""
        if threading.get_ident() != self.main_ident:
            raise RuntimeError("tool proxies can only be called from the block's main thread")
        if self.cancelled:
            raise _Cancelled()
        if not self.running:
            raise RuntimeError("tool proxies can only be called while a block runs")
        out, mark = self.capture.pending()
        message = {
            "t": "call",
            "tool": tool,
            "args": arguments,
            **self._call_site(_getframe(1), tool),
            "mv": snapshot(self.ns, self.hidden),
            "out": out,
            "dropped": self.capture.dropped,
        }
        try:
            frame = self.encode(message)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{tool}: arguments must be JSON data (str, numbers...): {exc}"
            ) from None
        if len(frame) > MAX_MESSAGE_BYTES:
            raise ValueError(
                f"{tool}: arguments too large ({len(frame)} bytes; at most {MAX_MESSAGE_BYTES})"
            )
        self.capture.commit(mark)
        # No signal handler may interrupt the wait: a raise there would leave this call's answer
        # in the pipe for the next call.
        self.signals.block()
        try:
            self.write(frame)
            msg = self.recv()
            while msg.get("t") == "fork":  # the controller branches here, then answers
                self._fork(str(msg["nonce"]))
                msg = self.recv()
        finally:
            self.signals.restore()
        return self._answer(msg)

    def _fork(self, nonce: str) -> None:
        """Fork this worker, paused at a boundary, for the controller: announce the numbers
        the child's channel will have (the controller's fork supervisor installs its ends
        there, then lets the fork go on), then report on each side's channel (``forked``).
        The child goes on waiting for the answer to the same call, on its new channel."""
        self._reap()
        numbers = [os.open(os.devnull, os.O_RDONLY) for _ in range(2)]
        self.send({"t": "forking", "nonce": nonce, "fds": numbers})
        error = ""
        state = random.getstate()  # ``random`` reseeds itself in a forked child
        try:
            pid = os.fork()
        except OSError as exc:
            pid = -1
            error = f"{type(exc).__name__}: {exc}"
        if pid != 0:
            for fd in numbers:
                os.close(fd)
            done = {"pid": pid} if pid > 0 else {"error": error}
            self.send({"t": "forked", "nonce": nonce, **done})
            return
        if self.seccomp and not _confine_fork():
            os._exit(70)  # never run on as "the worker itself" (the controller sees no fork)
        random.setstate(state)
        os.close(self.rfd)
        os.close(self.wfd)
        self.rfd, self.wfd = numbers
        os.set_blocking(self.rfd, False)
        self._poll = select.poll()
        self._poll.register(self.rfd, select.POLLIN)
        self.buf.clear()
        self.send({"t": "forked", "nonce": nonce, "pid": 0})

    @staticmethod
    def _reap() -> None:
        """Collect the forked children that have ended (the controller kills branches)."""
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass

    def _call_site(self, proxy_frame: Any, tool: str) -> dict[str, Any]:
        """The ``call`` message's claims on where the call is made (the controller checks
        them against its own parse of the block's source).

        ``site``: the block whose code makes the call (the nearest block frame: the running
        block, or an earlier block whose function it calls); ``pos``: the span of that frame's
        current instruction; ``line``, ``fn``, ``cls``, ``lv``: its line, function, class and
        locals; ``direct``: the frame called the proxy itself, through a plain name bound to
        it (not through a builtin, a wrapper or another callable); ``lits``: for a direct call
        in the running block, the slots of its plain-literal arguments by parameter name.
        """
        direct = self.proxy_codes.get(id(proxy_frame.f_code)) == tool
        caller = proxy_frame.f_back if direct else proxy_frame  # else _cs_call was called itself
        site_frame: Any = caller
        while site_frame is not None and not site_frame.f_code.co_filename.startswith(
            BLOCK_FILENAME_PREFIX
        ):
            site_frame = site_frame.f_back
        out: dict[str, Any] = dict.fromkeys(("site", "pos", "fn", "cls"))
        out.update(line=0, lv={}, lits={}, direct=False)
        if site_frame is None:
            return out
        code = site_frame.f_code
        pos, op = self._instruction(site_frame)
        call = self.calls_by_file.get(code.co_filename, {}).get(pos) if pos else None
        direct = (
            direct
            and site_frame is caller
            and op in _CALL_OPS
            and call is not None
            and self._bound_to(site_frame, call["fn"], proxy_frame.f_code)
        )
        if direct and call is not None and code.co_filename == self.block_file:
            out["lits"] = literal_arguments(call, self.tool_params.get(tool, []))
        out.update(site=code.co_filename[len(BLOCK_FILENAME_PREFIX) : -1], direct=direct)
        out.update(pos=list(pos) if pos else None, line=pos[0] if pos else 0)
        if code.co_flags & 0x1:  # CO_OPTIMIZED: a function frame
            parts = code.co_qualname.split(".")
            out["fn"] = parts[-1]
            if len(parts) >= 2 and parts[-2] != "<locals>":
                out["cls"] = parts[-2]
            out["lv"] = snapshot(site_frame.f_locals, self.hidden)
        elif code.co_name != "<module>":
            out["cls"] = code.co_name
        return out

    def _index_code(self, code: Any) -> None:
        """Keep the instruction positions and bytes of a block's code and of every function
        in it, so that a boundary looks them up without allocating (an agent's gc callback
        then has no reason to run inside the runtime's bookkeeping)."""
        self._code_tables[code] = (list(code.co_positions()), code.co_code)
        for const in code.co_consts:
            if type(const) is type(code):
                self._index_code(const)

    def _instruction(self, frame: Any) -> tuple[tuple[int, int, int, int] | None, int]:
        """The span and opcode of a frame's current instruction (a call's cache entries count
        as the call); the span is None when the compiler gave it no full position."""
        code = frame.f_code
        tables = self._code_tables.get(code)
        if tables is None:  # code compiled elsewhere (exec of a string naming a block)
            tables = self._code_tables[code] = (list(code.co_positions()), code.co_code)
        positions, raw = tables
        i = frame.f_lasti
        while i > 0 and raw[i] == _CACHE_OP:
            i -= 2
        pos = positions[frame.f_lasti // 2] if 0 <= frame.f_lasti // 2 < len(positions) else None
        if pos is None or None in pos:
            return None, raw[i] if 0 <= i < len(raw) else -1
        return (pos[0], pos[1], pos[2], pos[3]), raw[i]

    @staticmethod
    def _bound_to(frame: Any, name: str | None, proxy_code: Any) -> bool:
        """Whether ``name`` in ``frame`` (locals, then globals, then builtins) is a proxy
        function with ``proxy_code``: the callee of the frame's current call is the proxy."""
        if name is None:
            return False
        missing = object()
        value = missing
        for scope in (frame.f_locals, frame.f_globals, frame.f_builtins):
            if type(scope) is dict and dict.__contains__(scope, name):
                value = dict.__getitem__(scope, name)
                break
        return type(value) is _FunctionType and value.__code__ is proxy_code

    def _answer(self, msg: dict[str, Any]) -> Any:
        """Act on the controller's answer to a call: the observation, or the exception agent
        code sees; a patched block's constants first take effect."""
        kind = msg.get("t")
        if "code" in msg and kind in ("res", "err"):  # patch_block_data, whatever the call gave
            self._patch_constants(str(msg["code"]))
        if kind == "res":
            return str(msg["text"])
        if kind == "err":
            raise ToolError(str(msg["msg"]))
        if kind == "budget":
            raise BudgetExhausted(str(msg["msg"]))
        if kind == "cancel":
            self._arm()
            raise _Cancelled()
        os._exit(3)

    def _flush_output(self) -> None:
        """Send the output printed since the last message (an ``out`` message), so that what
        a block prints survives its end by timeout or kill; the first time output is dropped
        (the bound) is announced too. Not re-entered (a signal handler printing during a send
        waits for the next write) and never interrupted by a signal handler."""
        if self.flushing or not self.running:
            return
        text, mark = self.capture.pending()
        announce = self.capture.dropped > 0 and not self.drop_announced
        if not text and not announce:
            return
        self.flushing = True
        self.signals.block()
        try:
            self.send({"t": "out", "out": text, "dropped": self.capture.dropped})
            self.capture.commit(mark)
            self.drop_announced = self.drop_announced or announce
        finally:
            self.signals.restore()
            self.flushing = False

    def _patch_constants(self, code: str) -> None:
        values = slot_values(ast.parse(code), self.positions)
        if len(values) != len(self.table):
            os._exit(3)
        self.table[:] = values
        linecache.cache[self.block_file] = (len(code), None, code.splitlines(True), self.block_file)

    # -- cancellation: an exception the agent code cannot keep -------------------------------
    @staticmethod
    def _is_agent_frame(frame: Any) -> bool:
        """Block code (any block: a cancelled block may call functions of earlier ones)."""
        return str.startswith(frame.f_code.co_filename, BLOCK_FILENAME_PREFIX)

    def _tracer(self, frame: Any, event: str, arg: Any) -> Any:
        if (
            event in ("line", "call")
            and self.cancelled
            and self.running
            and self._is_agent_frame(frame)
        ):
            raise _Cancelled()  # CPython disarms tracing here; the profiler and timer re-arm it
        return self._tracer

    def _profiler(self, frame: Any, event: str, arg: Any) -> None:
        if self.cancelled and self.running and _gettrace() is None:
            self._retrace(frame)

    def _retrace(self, frame: Any) -> None:
        _settrace(self._tracer)
        while frame is not None:
            if self._is_agent_frame(frame):
                frame.f_trace = self._tracer
                frame.f_trace_lines = True
            frame = frame.f_back

    def _alarm(self, signum: int, frame: Any) -> None:
        if self.cancelled and self.running:
            self._retrace(frame)
            if frame is not None and self._is_agent_frame(frame):
                raise _Cancelled()

    def _arm(self) -> None:
        """Start unwinding: every later line, call or timer tick of agent code raises."""
        self.cancelled = True
        _sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})  # in case agent code blocked it
        self._retrace(_getframe(1))
        _setprofile(self._profiler)
        _signal(signal.SIGALRM, self._alarm)
        _setitimer(signal.ITIMER_REAL, 0.005, 0.005)

    def _disarm(self) -> None:
        if not self.cancelled:
            return
        _setitimer(signal.ITIMER_REAL, 0)
        _signal(signal.SIGALRM, signal.SIG_IGN)
        _setprofile(None)
        _settrace(None)


def main(argv: list[str]) -> None:
    """Entry point inside the worker: ``argv`` is ``[read_fd, write_fd]``."""
    Runtime(int(argv[0]), int(argv[1])).serve()


if __name__ == "__main__" and len(sys.argv) >= 3 and sys.argv[0] == "-c":
    main(sys.argv[1:3])
    os._exit(0)
