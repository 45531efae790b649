"""The in-sandbox program of the worker: runs agent blocks and pauses at every primitive call.

STANDARD LIBRARY ONLY. The controller starts a bare interpreter (``-S -s -P``, a controlled
environment) and hands it this module's compiled code over the channel; the worker never sees
the repository or site-packages.
The controller also imports this module for the pure helpers it shares with the runtime
(:func:`slot_positions`, :func:`slot_values`, :func:`structure_key`, the wire format), so both
sides number a block's constants identically.

Wire format: each message is a 4-byte big-endian length followed by that many bytes of compact
UTF-8 JSON (an object whose ``"t"`` field names its type). Messages, worker to controller:
``ready``, ``call`` (a boundary: tool, arguments, line, call site, variables, output delta,
literal-argument slots) and ``end`` (status, output delta, error). Controller to worker:
``init``, ``run``, and the answer to a ``call``: ``res`` (observation text, optionally the patched
block code whose constants take effect), ``err`` (tool error), ``budget`` (call budget exhausted)
or ``cancel`` (replace_workflow: unwind the block). Paper section A.1 (the worker exposes the
pending call, its arguments, JSON-serialisable variables and printed output).

The worker is untrusted: agent code can reach everything in this interpreter, including the
channel. The controller therefore treats every message as a claim and checks it against its own
state machine (see ``session.py``).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import gc
import io
import json
import linecache
import math
import os
import signal
import struct
import sys
import threading
import traceback
from typing import Any

RUNTIME_FILENAME = "<controlscope-runtime>"
PROXY_FILENAME = "<controlscope-proxies>"
BLOCK_FILENAME_PREFIX = "<block "
CONST_TABLE_PREFIX = "__cs_k"
HEADER = struct.Struct(">I")
#: Largest message either side accepts (a call's arguments included), in bytes.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
_ModuleType = type(sys)
# Taken now, before agent code can rebind the modules' attributes.
_getframe, _gettrace, _settrace, _setprofile = (
    sys._getframe,
    sys.gettrace,
    sys.settrace,
    sys.setprofile,
)
_signal, _setitimer, _sigmask = signal.signal, signal.setitimer, signal.pthread_sigmask
_getsignal, _gc_callbacks = signal.getsignal, gc.callbacks
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)

#: Snapshot bounds: characters of one string, items of one container, JSON characters of one
#: value, JSON characters of all variables of one scope.
STR_CHARS = 1000
CONTAINER_ITEMS = 50
VALUE_CHARS = 2000
SCOPE_CHARS = 30_000
MAX_DEPTH = 4


class ToolError(Exception):
    """A primitive call came back as a tool error; the message is the server's text."""


class BudgetExhausted(Exception):
    """The task's primitive-call budget is spent; no further call is made."""


class _Cancelled(BaseException):
    """Unwinds a block whose continuation was replaced (replace_workflow)."""


# --------------------------------------------------------------------------------------------
# Constants table (patch_block_data, the paper's "coordinated data edit")


def constants_in_order(tree: ast.AST) -> list[ast.Constant]:
    """Every constant node of a tree, in a fixed depth-first source order."""
    out: list[ast.Constant] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Constant):
            out.append(node)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _literal_only_ids(tree: ast.AST) -> set[int]:
    """Ids of constants that must stay literal: format specs, match patterns and docstrings."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            skip.update(id(n) for n in ast.walk(node.format_spec) if isinstance(n, ast.Constant))
        elif isinstance(node, ast.MatchValue | ast.MatchSingleton):
            skip.update(id(n) for n in ast.walk(node) if isinstance(n, ast.Constant))
        elif isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                skip.add(id(body[0].value))
    return skip


def slot_positions(tree: ast.AST) -> list[int]:
    """Which constants of :func:`constants_in_order` are slots of the block's constants table.

    Every literal constant is a slot, f-string text parts included, except the text of
    f-string format specs (``f"{x:.2f}"``: formatting, not data), constants inside ``match``
    patterns and docstrings (they must stay literal for the compiler or keep their meaning).

    Args:
        tree: the block as it started (parsed).

    Returns:
        Indices into ``constants_in_order(tree)``; slot ``i`` is the ``result[i]``-th constant.
    """
    skip = _literal_only_ids(tree)
    return [i for i, n in enumerate(constants_in_order(tree)) if id(n) not in skip]


def slot_values(tree: ast.AST, positions: list[int]) -> list[Any]:
    """The table values a rewrite of the block gives (same structure as the original).

    Raises:
        ValueError: the rewrite has fewer constants than ``positions`` needs.
    """
    constants = constants_in_order(tree)
    if positions and positions[-1] >= len(constants):
        raise ValueError("the rewrite has fewer constants than the block")
    return [constants[i].value for i in positions]


def structure_key(tree: ast.AST) -> str:
    """The tree's dump with every constant blanked: equal keys mean "same syntax tree except for
    constant values" (paper section A.2, coordinated data edit)."""

    def blank(node: Any) -> Any:
        if isinstance(node, ast.Constant):
            return "<const>"
        if isinstance(node, ast.AST):
            return [type(node).__name__] + [
                (f, blank(getattr(node, f, None))) for f in node._fields
            ]
        if isinstance(node, list):
            return [blank(v) for v in node]
        return node

    return repr(blank(tree))


def transform_block(
    tree: ast.Module, table: str
) -> tuple[ast.Module, list[Any], dict[tuple[int, int, int, int], dict[str, Any]]]:
    """Rewrite each tabulated constant into ``table[i]`` and index calls' literal arguments.

    Args:
        tree: the parsed block (modified in place).
        table: the module-level name of the block's constants list.

    Returns:
        ``(tree, values, call_literals)``: the rewritten tree, the initial table values, and for
        each call expression (keyed by its ``(line, end_line, col, end_col)`` span) the slots of
        its plain-literal arguments: ``{"pos": {index: slot}, "kw": {name: slot}}``.
    """
    constants = constants_in_order(tree)
    slots = [constants[i] for i in slot_positions(tree)]
    slot_of = {id(n): i for i, n in enumerate(slots)}
    call_literals: dict[tuple[int, int, int, int], dict[str, Any]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or node.end_lineno is None:
            continue
        pos: dict[int, int] = {}
        for i, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                break
            if isinstance(arg, ast.Constant) and id(arg) in slot_of:
                pos[i] = slot_of[id(arg)]
        kw = {
            k.arg: slot_of[id(k.value)]
            for k in node.keywords
            if k.arg is not None and isinstance(k.value, ast.Constant) and id(k.value) in slot_of
        }
        if pos or kw:
            key = (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset or 0)
            call_literals[key] = {"pos": pos, "kw": kw}

    def lookup(i: int, node: ast.AST) -> ast.expr:
        new = ast.Subscript(
            value=ast.Name(id=table, ctx=ast.Load()),
            slice=ast.Constant(value=i),
            ctx=ast.Load(),
        )
        return ast.copy_location(new, node)

    class _Rewrite(ast.NodeTransformer):
        def visit_Constant(self, node: ast.Constant) -> ast.AST:
            i = slot_of.get(id(node))
            return node if i is None else lookup(i, node)

        def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
            # f-string text becomes a replacement field formatting the table's value
            values: list[ast.expr] = []
            for v in node.values:
                i = slot_of.get(id(v)) if isinstance(v, ast.Constant) else None
                if i is None:
                    values.append(self.visit(v))
                else:
                    field = ast.FormattedValue(value=lookup(i, v), conversion=-1, format_spec=None)
                    values.append(ast.copy_location(field, v))
            node.values = values
            return node

    values = [n.value for n in slots]
    new_tree = _Rewrite().visit(tree)
    ast.fix_missing_locations(new_tree)
    return new_tree, values, call_literals


# --------------------------------------------------------------------------------------------
# Snapshots of variables


def _jsonable(value: Any, depth: int) -> Any:
    t = type(value)
    if value is None or t is bool or t is int:
        return value
    if t is float:
        return value if math.isfinite(value) else repr(value)
    if issubclass(t, str):
        s = _clean(str.__getitem__(value, slice(0, STR_CHARS)))
        n = str.__len__(value)
        return s if n <= STR_CHARS else f"{s}…[+{n - STR_CHARS} chars]"
    if depth >= MAX_DEPTH:
        return f"<{t.__name__}>"
    if issubclass(t, list | tuple):
        seq = (
            list.__getitem__(value, slice(0, CONTAINER_ITEMS))
            if issubclass(t, list)
            else (tuple.__getitem__(value, slice(0, CONTAINER_ITEMS)))
        )
        n = list.__len__(value) if issubclass(t, list) else tuple.__len__(value)
        out = [_jsonable(v, depth + 1) for v in seq]
        if n > CONTAINER_ITEMS:
            out.append(f"…[+{n - CONTAINER_ITEMS} items]")
        return out
    if issubclass(t, dict):
        d: dict[str, Any] = {}
        n = dict.__len__(value)
        for i, (k, v) in enumerate(dict.items(value)):
            if i >= CONTAINER_ITEMS:
                d["…"] = f"+{n - CONTAINER_ITEMS} items"
                break
            tk = type(k)
            if tk is str:
                key = k
            elif k is None or tk in (bool, int, float):
                key = json.dumps(k)
            else:
                return f"<{t.__name__}>"
            d[key] = _jsonable(v, depth + 1)
        return d
    return f"<{t.__name__}>"


def snapshot(variables: dict[str, Any], hidden: set[str]) -> dict[str, Any]:
    """JSON-serialisable view of a scope's variables, bounded (paper section A.1).

    Names starting with ``__``, modules, and the names in ``hidden`` (proxies, the agent-facing
    exception classes) are left out. A value is shown as JSON with strings cut at
    :data:`STR_CHARS` and containers at :data:`CONTAINER_ITEMS`; a value whose JSON exceeds
    :data:`VALUE_CHARS` becomes its truncated JSON text; other objects appear as
    ``"<TypeName>"``. Once the scope's JSON exceeds :data:`SCOPE_CHARS`, the remaining names are
    summarised under the key ``"…"``.
    """
    out: dict[str, Any] = {}
    total = 0
    names = [k for k in dict.keys(variables) if type(k) is str]
    for i, name in enumerate(names):
        if name.startswith("__") or name in hidden:
            continue
        value = dict.get(variables, name)
        if issubclass(type(value), _ModuleType):
            continue
        try:
            shown = _jsonable(value, 0)
            t = type(shown)
            if t is str:  # already bounded by STR_CHARS < VALUE_CHARS
                size = len(shown) + 2
            elif shown is None or t is bool or t is int or t is float:
                size = len(repr(shown))
            else:
                text = _ENCODER.encode(shown)
                size = len(text)
                if size > VALUE_CHARS:
                    shown = text[:VALUE_CHARS] + f"…[+{size - VALUE_CHARS} chars]"
                    size = len(shown) + 2
        except Exception:  # a pathological object: show its type only
            shown = f"<{type(value).__name__}>"
            size = len(shown)
        total += size + len(name) + 4
        if total > SCOPE_CHARS:
            out["…"] = f"{len(names) - i} more variables omitted (snapshot bound)"
            break
        out[name] = shown
    return out


# --------------------------------------------------------------------------------------------
# Output capture


class _Capture(io.TextIOBase):
    """A bounded text sink for agent ``print``: keeps the first ``limit`` characters per block."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.kept = 0
        self.dropped = 0
        self.sent = 0

    def reset(self) -> None:
        self.parts, self.kept, self.dropped, self.sent = [], 0, 0, 0

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def write(self, s: str) -> int:
        if type(s) is not str:
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        room = self.limit - self.kept
        if room >= len(s):
            self.parts.append(s)
            self.kept += len(s)
        else:
            if room > 0:
                self.parts.append(s[:room])
                self.kept += room
            self.dropped += len(s) - max(room, 0)
        return len(s)

    def pending(self) -> tuple[str, int]:
        """The output not yet sent and the mark to :meth:`commit` once it has been."""
        return _clean("".join(self.parts[self.sent :])), len(self.parts)

    def commit(self, mark: int) -> None:
        self.sent = mark

    def delta(self) -> str:
        text, mark = self.pending()
        self.commit(mark)
        return text


def _clean(text: str) -> str:
    """``text`` made encodable: lone surrogates become visible ``\\udcff``-style escapes."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


# --------------------------------------------------------------------------------------------
# Sandbox hardening applied in-process before agent code runs


def _apply_rlimits(limits: dict[str, int]) -> None:
    import resource

    mb = 1024 * 1024
    wanted = {
        resource.RLIMIT_AS: limits["memory_mb"] * mb,
        resource.RLIMIT_CPU: limits["cpu_s"],
        resource.RLIMIT_NPROC: limits["processes"],
        resource.RLIMIT_FSIZE: limits["file_size_mb"] * mb,
        resource.RLIMIT_CORE: 0,
    }
    for which, value in wanted.items():
        _soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


_SECCOMP_ARCH: dict[str, dict[str, Any]] = {
    "x86_64": {
        "arch": 0xC000003E,
        "x32": True,
        # fork vfork execve execveat tkill ptrace process_vm_readv/writev pidfd_* | unshare
        # setns mount umount2 pivot_root chroot new-mount-API | bpf perf_event_open userfaultfd
        # keyctl add_key request_key io_uring_* | modules kexec reboot swap acct syslog quotactl
        # sethostname setdomainname iopl ioperm | name_to_handle_at open_by_handle_at
        "deny": (
            *(57, 58, 59, 322, 200, 101, 310, 311, 424, 434, 438),
            *(272, 308, 165, 166, 155, 161, 428, 429, 430, 431, 432, 433, 442),
            *(321, 298, 323, 250, 248, 249, 425, 426, 427),
            *(175, 313, 176, 246, 320, 169, 167, 168, 163, 103, 179, 170, 171, 172, 173),
            *(303, 304),
        ),
        "clone": 56,
        "clone3": 435,
        "socket": 41,
        "kill": 62,
        "tgkill": 234,
    },
    "aarch64": {
        "arch": 0xC00000B7,
        "x32": False,
        "deny": (
            *(221, 281, 130, 117, 270, 271, 424, 434, 438),
            *(97, 268, 40, 39, 41, 51, 428, 429, 430, 431, 432, 433, 442),
            *(280, 241, 282, 219, 217, 218, 425, 426, 427),
            *(105, 273, 106, 104, 294, 142, 224, 225, 89, 116, 60, 161, 162),
            *(264, 265),
        ),
        "clone": 220,
        "clone3": 435,
        "socket": 198,
        "kill": 129,
        "tgkill": 131,
    },
}


def seccomp_program(machine: str, pid: int, pgid: int | None = None) -> bytes | None:
    """A classic-BPF seccomp filter for the worker process ``pid``.

    No new processes and no new threads: ``clone`` fails with ``EPERM`` (``clone3`` answers
    ``ENOSYS`` so the C library falls back to ``clone``), so ``threading.Thread.start()`` raises
    ``RuntimeError``. A thread would outlive its block and could forge messages while a later
    block (or a replacement) runs; with the main thread alone, the runtime decides when agent
    code runs. Also denied with ``EPERM``: ``fork``/``vfork``/``execve``/``execveat``,
    ``socket`` outside ``AF_UNIX``, ``ptrace`` and
    cross-process memory access, pidfds, ``tkill``, new namespaces and mounts, BPF, perf,
    userfaultfd, keyrings, io_uring, kernel modules, kexec, reboot, swap, accounting, syslog,
    quotas, host names, port I/O, file handles, and ``kill``/``tgkill`` aimed at any process
    but the worker itself (``pid``) or its own process group (``pgid``, default ``pid``). A
    syscall of a foreign ABI kills the process. Returns None for an unsupported machine.
    """
    spec = _SECCOMP_ARCH.get(machine)
    if spec is None:
        return None
    allow, eperm, enosys, kill = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38, 0x80000000
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    own_group = (1 << 32) - (pgid or pid)  # -pgid as the low 32 bits of the argument
    # Jumps are ("J", op, k, true_label, false_label), resolved after layout; None = next.
    body: list[Any] = [
        (ld, 0, 0, 4),
        ("J", jeq, spec["arch"], None, "KILL"),
        (ld, 0, 0, 0),
    ]
    if spec["x32"]:
        body.append(("J", jge, 0x40000000, "EPERM", None))
    for nr in spec["deny"]:
        body.append(("J", jeq, nr, "EPERM", None))
    body.append(("J", jeq, spec["clone3"], "ENOSYS", None))
    body.append(("J", jeq, spec["clone"], "EPERM", None))
    body.append(("J", jeq, spec["socket"], "SOCKET", None))
    body.append(("J", jeq, spec["kill"], "KILLSYS", None))
    body.append(("J", jeq, spec["tgkill"], "TGKILL", None))
    body.append((ret, 0, 0, allow))
    labels: dict[str, int] = {}
    tail: list[Any] = []  # every jump goes forward, as classic BPF requires

    def label(name: str) -> None:
        labels[name] = len(body) + len(tail)

    label("KILL")
    tail.append((ret, 0, 0, kill))
    label("ENOSYS")
    tail.append((ret, 0, 0, enosys))
    label("SOCKET")
    tail.append((ld, 0, 0, 16))
    tail.append(("J", jeq, 1, "ALLOW", "EPERM"))
    label("KILLSYS")
    tail.append((ld, 0, 0, 16))
    tail.append(("J", jeq, 0, "ALLOW", None))
    tail.append(("J", jeq, own_group, "ALLOW", None))
    tail.append(("J", jeq, pid, "ALLOW", "EPERM"))
    label("TGKILL")
    tail.append((ld, 0, 0, 16))
    tail.append(("J", jeq, pid, "ALLOW", "EPERM"))
    label("EPERM")
    tail.append((ret, 0, 0, eperm))
    label("ALLOW")
    tail.append((ret, 0, 0, allow))
    out = []
    for i, ins in enumerate(body + tail):
        if ins[0] == "J":
            _, op, k, t_label, f_label = ins
            jt = 0 if t_label is None else labels[t_label] - (i + 1)
            jf = 0 if f_label is None else labels[f_label] - (i + 1)
            out.append(struct.pack("<HBBI", op, jt, jf, k))
        else:
            op, jt, jf, k = ins
            out.append(struct.pack("<HBBI", op, jt, jf, k))
    return b"".join(out)


def _drop_capabilities() -> bool:
    """Empty the effective, permitted and inheritable capability sets (a root worker keeps uid
    0 but can no longer raise rlimits or bypass permission checks). True on success."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # two __user_cap_data_struct, all zero
    return bool(libc.capset(header, data) == 0)


def _apply_seccomp() -> bool:
    program = seccomp_program(os.uname().machine, os.getpid(), os.getpgid(0))
    if program is None:
        return False
    import ctypes

    class _Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _Fprog(len(program) // 8, ctypes.cast(buf, ctypes.c_char_p))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return bool(libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0)  # PR_SET_SECCOMP, FILTER


def _refuse_audit_hooks(event: str, args: tuple[Any, ...]) -> None:
    """The runtime's audit hook: agent code may not add audit hooks of its own (one would run
    inside later blocks, e.g. at the runtime's ``exec`` of a replacement)."""
    if event == "sys.addaudithook":
        raise RuntimeError("audit hooks are not available in the controlscope worker")


class _Hooks:
    """Interpreter-wide hooks as they were before agent code ran, restored before every block.

    A block (say, one being replaced) must leave nothing that runs later on its own: signal
    handlers and interval timers, the signal mask, ``gc`` callbacks, trace/profile functions,
    ``sys`` display/except/unraisable hooks, and rebound builtins are all reset.
    """

    def __init__(self) -> None:
        self.handlers: dict[int, Any] = {}
        for sig in signal.valid_signals():
            if sig in (signal.SIGKILL, signal.SIGSTOP):
                continue
            handler = signal.getsignal(sig)
            self.handlers[sig] = signal.SIG_DFL if handler is None else handler
        # The cancellation timer may leave a SIGALRM in flight: never let it end the process.
        self.handlers[signal.SIGALRM] = signal.SIG_IGN
        self.builtins = dict(builtins.__dict__)

    def restore(self) -> None:
        for timer in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
            _setitimer(timer, 0)
        _sigmask(signal.SIG_SETMASK, set())
        for sig, handler in self.handlers.items():
            current = _getsignal(sig)
            if current is not handler and current is not None:
                with contextlib.suppress(OSError, ValueError):
                    _signal(sig, handler)
        _gc_callbacks.clear()
        _settrace(None)
        _setprofile(None)
        sys.displayhook = sys.__displayhook__
        sys.excepthook = sys.__excepthook__
        sys.unraisablehook = sys.__unraisablehook__
        sys.breakpointhook = sys.__breakpointhook__
        current_builtins = builtins.__dict__
        for name, value in self.builtins.items():
            if current_builtins.get(name) is not value:
                current_builtins[name] = value


class _SignalGate:
    """Blocks every signal around a boundary wait (``pthread_sigmask`` through ctypes: the
    ``signal`` module's version costs ~100 us per pair, this one ~3 us)."""

    def __init__(self) -> None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            self._full = ctypes.create_string_buffer(256)
            self._old = ctypes.create_string_buffer(256)
            libc.sigfillset(self._full)
            self._mask: Any = libc.pthread_sigmask
        except (ImportError, OSError, AttributeError):
            self._mask = None
            self._saved: Any = None

    def block(self) -> None:
        if self._mask is not None:
            self._mask(0, self._full, self._old)  # SIG_BLOCK
        else:
            self._saved = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())

    def restore(self) -> None:
        if self._mask is not None:
            self._mask(2, self._old, None)  # SIG_SETMASK
        else:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._saved)


# --------------------------------------------------------------------------------------------
# The runtime proper


class Runtime:
    """One worker's state: the channel, the shared namespace and the running block."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd, self.wfd = rfd, wfd
        self.buf = bytearray()
        self.ns: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        self.proxy_code: Any = None
        self.proxy_names: list[str] = []
        self.tool_params: dict[str, list[str]] = {}
        self.hidden: set[str] = set()
        self.capture = _Capture(20_000)
        self.main_ident = threading.get_ident()
        self.running = False
        self.cancelled = False
        self.seq = 0
        self.block_file = ""
        self.table: list[Any] = []
        self.positions: list[int] = []
        self.call_literals: dict[tuple[int, int, int, int], dict[str, Any]] = {}
        self.block_calls = 0
        self._devnull = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
        self.signals = _SignalGate()
        self.saved_hooks: _Hooks | None = None
        self._positions: dict[Any, list[Any]] = {}

    # -- framing ---------------------------------------------------------------------------
    @staticmethod
    def encode(msg: dict[str, Any]) -> bytes:
        """One framed message. Raises TypeError/ValueError for data JSON cannot carry."""
        raw = _ENCODER.encode(msg).encode()  # UnicodeEncodeError (a ValueError) for lone surrogates
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
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                os._exit(0)  # the controller went away
            buf += chunk

    # -- setup -----------------------------------------------------------------------------
    def init(self, msg: dict[str, Any]) -> None:
        """Set up from the ``init`` message: proxies, limits, capabilities, seccomp; ``ready``."""
        self.capture = _Capture(int(msg["output_chars"]))
        self.tool_params = {k: list(v) for k, v in msg["params"].items()}
        self.proxy_code = compile(msg["proxies"], PROXY_FILENAME, "exec")
        self.proxy_names = list(msg["names"])
        self.hidden = {*self.proxy_names, "ToolError", "BudgetExhausted"}
        _apply_rlimits(msg["limits"])
        _drop_capabilities()
        self.saved_hooks = _Hooks()
        sys.addaudithook(_refuse_audit_hooks)
        seccomp = _apply_seccomp() if msg.get("seccomp", True) else False
        sys.stdout = sys.stderr = self._devnull
        self.send({"t": "ready", "seccomp": seccomp, "pid": os.getpid()})

    def serve(self) -> None:
        """Answer ``init``, then run each ``run`` message's block until the channel closes."""
        self.init(self.recv())
        while True:
            msg = self.recv()
            kind = msg.get("t")
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
        table_name = f"{CONST_TABLE_PREFIX}{seq}__"
        try:
            tree = ast.parse(code, self.block_file)
            self.positions = slot_positions(tree)
            tree, values, self.call_literals = transform_block(tree, table_name)
            compiled = compile(tree, self.block_file, "exec")
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
        status, error = "completed", None
        sys.stdout = sys.stderr = self.capture
        self.running = True
        try:
            exec(compiled, self.ns)
        except BaseException as exc:
            if self.cancelled:
                status = "cancelled"
            else:
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
        scope: dict[str, Any] = {"_cs_call": self.call, "_MISSING": _MISSING}
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
        caller = _getframe(2)
        lits: dict[str, int] = {}
        site_frame: Any = caller
        while site_frame is not None and not site_frame.f_code.co_filename.startswith(
            BLOCK_FILENAME_PREFIX
        ):
            site_frame = site_frame.f_back
        if caller.f_code.co_filename == self.block_file:
            lits = self._literal_slots(caller, tool)
        line, function, class_name, local_vars = 0, None, None, {}
        if site_frame is not None:
            line = site_frame.f_lineno or 0
            code = site_frame.f_code
            if code.co_flags & 0x1:  # CO_OPTIMIZED: a function frame
                parts = code.co_qualname.split(".")
                function = parts[-1]
                if len(parts) >= 2 and parts[-2] != "<locals>":
                    class_name = parts[-2]
                local_vars = snapshot(site_frame.f_locals, self.hidden)
            elif code.co_name != "<module>":
                class_name = code.co_name
        out, mark = self.capture.pending()
        try:
            frame = self.encode(
                {
                    "t": "call",
                    "tool": tool,
                    "args": arguments,
                    "line": line,
                    "fn": function,
                    "cls": class_name,
                    "mv": snapshot(self.ns, self.hidden),
                    "lv": local_vars,
                    "out": out,
                    "dropped": self.capture.dropped,
                    "lits": lits,
                }
            )
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
        finally:
            self.signals.restore()
        kind = msg.get("t")
        if kind == "res":
            if "code" in msg:
                self._patch_constants(str(msg["code"]))
            return str(msg["text"])
        if kind == "err":
            raise ToolError(str(msg["msg"]))
        if kind == "budget":
            raise BudgetExhausted(str(msg["msg"]))
        if kind == "cancel":
            self._arm()
            raise _Cancelled()
        os._exit(3)

    def _literal_slots(self, frame: Any, tool: str) -> dict[str, int]:
        code = frame.f_code
        table = self._positions.get(code)
        if table is None:
            table = self._positions[code] = list(code.co_positions())
        try:
            positions = table[frame.f_lasti // 2]
        except IndexError:
            return {}
        info = self.call_literals.get(tuple(positions))
        if info is None:
            return {}
        params = self.tool_params.get(tool, [])
        out = {params[i]: s for i, s in info["pos"].items() if i < len(params)}
        out.update({k: s for k, s in info["kw"].items()})
        return out

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


class _Missing:
    """Marks an optional tool parameter the agent did not pass (left out of the call)."""

    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def main(argv: list[str]) -> None:
    """Entry point inside the worker: ``argv`` is ``[read_fd, write_fd]``."""
    Runtime(int(argv[0]), int(argv[1])).serve()


if __name__ == "__main__" and len(sys.argv) >= 3 and sys.argv[0] == "-c":
    main(sys.argv[1:3])
    os._exit(0)
