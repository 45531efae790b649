"""WorkerSession against an in-process fake ToolServer: boundaries, operations, budgets, protocol.

The worker itself is real (a sandboxed subprocess); only the environment server is a fake that
records the calls it receives.
"""

from __future__ import annotations

import inspect
import itertools
import os
import resource
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controlscope.core import (
    BlockResult,
    Boundary,
    Keep,
    PatchArguments,
    PatchBlockData,
    PrimitiveCall,
    ReplaceWorkflow,
    ToolResult,
    ToolSchema,
    ToolServer,
    ToolServerError,
)
from controlscope.core import Operation as Decision
from controlscope.worker import (
    Limits,
    WorkerSession,
    generate_proxies,
    isolation_available,
    replacement_id,
)
from controlscope.worker._runtime import (
    seccomp_program,
    slot_positions,
    slot_values,
    transform_block,
)

READ = ToolSchema(
    name="read_text_file",
    description="Read a text file.",
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "head": {"type": "integer"},
            "encoding": {"type": "string", "default": "utf-8"},
        },
        "required": ["path"],
    },
)
NOOP = ToolSchema(name="noop", input_schema={"type": "object", "properties": {}})


class FakeServer:
    """A ToolServer whose files are a dict; records every call it receives."""

    agent_roots: tuple[str, ...] = ()
    server_info: dict[str, str] = {}  # noqa: RUF012 - a read-only class default

    def __init__(self, files: dict[str, str] | None = None, fail: bool = False) -> None:
        self.files = files if files is not None else {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail

    def list_tools(self) -> list[ToolSchema]:
        return [READ, NOOP]

    def call(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        if self.fail:
            raise ToolServerError("server died")
        self.calls.append((name, dict(arguments)))
        if name == "noop":
            return ToolResult(text="")
        path = arguments["path"]
        if path not in self.files:
            return ToolResult(text=f"ENOENT: {path}", is_error=True)
        return ToolResult(text=self.files[path])

    def close(self) -> None:
        pass


class Recorder:
    """A BoundaryHandler that records events and decides with a function of the boundary."""

    def __init__(self, decide: Callable[[Boundary], Decision] | None = None) -> None:
        self.decide = decide or (lambda b: Keep())
        self.starts: list[tuple[str, str, str | None]] = []
        self.boundaries: list[Boundary] = []
        self.calls: list[PrimitiveCall] = []
        self.ends: list[BlockResult] = []

    def on_block_start(self, block_id: str, code: str, replaces: str | None) -> None:
        self.starts.append((block_id, code, replaces))

    def on_boundary(self, boundary: Boundary) -> Decision:
        self.boundaries.append(boundary)
        return self.decide(boundary)

    def on_call(self, call: PrimitiveCall) -> None:
        self.calls.append(call)

    def on_block_end(self, result: BlockResult) -> None:
        self.ends.append(result)


FILES = {f"f{i}.txt": f"content {i}" for i in range(10)}


@pytest.fixture
def server() -> FakeServer:
    return FakeServer(dict(FILES))


@pytest.fixture
def session(server: FakeServer) -> Iterator[WorkerSession]:
    with WorkerSession(server, Limits(block_exec_s=10)) as s:
        yield s


def run1(session: WorkerSession, code: str, handler: Recorder | None = None) -> BlockResult:
    results = session.run_reply([("b1", code)], handler or Recorder())
    assert len(results) == 1
    return results[0]


# ---------------------------------------------------------------------------------------------
# proxies and constants (no worker)


def test_fake_server_is_a_toolserver(server: FakeServer) -> None:
    assert isinstance(server, ToolServer)


def test_generated_proxies_have_schema_signatures() -> None:
    weird = ToolSchema(
        name="list-dir",
        description="List.",
        input_schema={
            "type": "object",
            "properties": {"from": {"type": "string"}, "n": {"type": "integer", "default": 3}},
            "required": ["from"],
        },
    )
    proxies = generate_proxies([READ, weird])
    calls: list[tuple[str, dict[str, Any]]] = []
    scope: dict[str, Any] = {"_cs_call": lambda t, a: calls.append((t, a)), "_MISSING": object()}
    exec(proxies.source, scope)
    read = scope["read_text_file"]
    assert list(inspect.signature(read).parameters) == ["path", "head", "encoding"]
    assert read.__doc__ == "Read a text file."
    read("a", 3)
    read(path="b")
    scope["list_dir"]("x")
    assert calls == [
        ("read_text_file", {"path": "a", "head": 3, "encoding": "utf-8"}),
        ("read_text_file", {"path": "b", "encoding": "utf-8"}),
        ("list-dir", {"from": "x", "n": 3}),
    ]
    assert proxies.params["list_dir"] == ["from", "n"]
    with pytest.raises(TypeError):
        read()


def test_replacement_ids() -> None:
    assert replacement_id("3") == "3.r1"
    assert replacement_id("3.r1") == "3.r2"
    assert replacement_id("call_ab.r9") == "call_ab.r10"


def test_slot_values_follow_structure() -> None:
    import ast

    old = ast.parse('"""doc"""\nx = f"a{1:>3}b"\ny = [2, "s"]\n')
    new = ast.parse('"""doc2"""\nx = f"c{5:>3}d"\ny = [3, "t"]\n')
    pos = slot_positions(old)
    assert slot_values(old, pos) == ["a", 1, "b", 2, "s"]
    assert slot_values(new, pos) == ["c", 5, "d", 3, "t"]


def test_fstring_text_is_data() -> None:
    import ast

    src = 'd = "dir"\nx = 3.14159\nout = f"{d}/report.txt {x:.2f}"\n'
    tree, values, _ = transform_block(ast.parse(src), "K")
    assert values == ["dir", 3.14159, "/report.txt "]
    ns: dict[str, Any] = {"K": values}
    exec(compile(tree, "<t>", "exec"), ns)
    assert ns["out"] == "dir/report.txt 3.14"
    values[2] = "/summary.txt "
    exec(compile(tree, "<t>", "exec"), ns)
    assert ns["out"] == "dir/summary.txt 3.14"


def test_seccomp_program_is_well_formed() -> None:
    prog = seccomp_program("x86_64", 1234)
    assert prog is not None and len(prog) % 8 == 0
    assert seccomp_program("sparc", 1234) is None


# ---------------------------------------------------------------------------------------------
# keep, observations, boundaries


def test_start_is_isolated(server: FakeServer) -> None:
    """How fast a worker starts is measured by ``benchmarks/boundary_overhead.py``."""
    assert isolation_available(), "bwrap should work on this machine"
    s = WorkerSession(server)
    s.start()
    try:
        assert s.isolation == "bwrap"
        assert s.seccomp
    finally:
        s.close()
        s.close()  # idempotent


def test_keep_runs_to_the_end_with_boundaries(session: WorkerSession, server: FakeServer) -> None:
    code = (
        "total = 0\n"
        "texts = []\n"
        "for i in range(3):\n"
        "    texts.append(read_text_file(f'f{i}.txt'))\n"
        "class Reader:\n"
        "    def go(self, p):\n"
        "        return read_text_file(path=p, head=1)\n"
        "print(Reader().go('f5.txt'))\n"
        "print(texts)\n"
    )
    rec = Recorder()
    result = run1(session, code, rec)
    assert result.status == "completed", result.error
    assert result.calls == 4 and session.calls_made == 4
    assert "content 5" in result.output and "content 2" in result.output
    assert [b.call_index for b in rec.boundaries] == [0, 1, 2, 3]
    first, last = rec.boundaries[0], rec.boundaries[3]
    assert first.tool == "read_text_file"
    assert first.arguments == {"path": "f0.txt", "encoding": "utf-8"}
    assert first.line == 4 and first.call_site.at_module_level
    assert first.module_vars["total"] == 0 and first.module_vars["i"] == 0
    assert "read_text_file" not in first.module_vars
    assert last.line == 7
    assert last.call_site.function == "go" and last.call_site.class_name == "Reader"
    assert last.local_vars["p"] == "f5.txt" and last.local_vars["self"] == "<Reader>"
    assert last.module_vars["texts"] == ["content 0", "content 1", "content 2"]
    assert last.module_vars["Reader"] == "<type>"
    assert last.code == code
    assert [c.arguments["path"] for c in rec.calls] == ["f0.txt", "f1.txt", "f2.txt", "f5.txt"]
    assert rec.calls[3].arguments == {"path": "f5.txt", "head": 1, "encoding": "utf-8"}
    assert [r.block_id for r in rec.ends] == ["b1"]


@pytest.mark.parametrize(
    ("spin_s", "worker_spin_s"), [(0.0, 0.0), (0.01, 0.0), (0.0, 0.01), (1e-4, 1e-4)]
)
def test_spin_settings_do_not_change_what_runs(
    server: FakeServer, spin_s: float, worker_spin_s: float
) -> None:
    """Answers slower than the spin (a 20 ms review) and faster ones reach the right call."""

    def slow_review(b: Boundary) -> Decision:
        if b.block_call_index % 2:
            time.sleep(0.02)
        return Keep()

    rec = Recorder(slow_review)
    with WorkerSession(server, spin_s=spin_s, worker_spin_s=worker_spin_s) as s:
        code = "got = [read_text_file(f'f{i}.txt') for i in range(6)]\nprint(got)\n"
        result = run1(s, code, rec)
        assert result.status == "completed", result.error
        assert result.output.strip() == str([f"content {i}" for i in range(6)])
        later = run1(s, "print(len(got))\n")  # the worker waits for the next block, then runs it
        assert later.output == "6\n"
    assert [c.result.text for c in rec.calls] == [f"content {i}" for i in range(6)]


def test_channel_fds_above_fd_setsize(server: FakeServer) -> None:
    """A controller with many open files (a panel) hands the worker fds above 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        # a property of the machine, not a missing fixture: fds above FD_SETSIZE cannot exist
        pytest.skip(f"this machine's hard open-file limit ({hard}) is below the 1200 fds needed")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    fillers = []
    try:
        while not fillers or fillers[-1] < 1100:
            fillers.append(os.open(os.devnull, os.O_RDONLY))
        with WorkerSession(server, worker_spin_s=0.0, spin_s=0.0) as s:
            result = run1(s, "print(read_text_file('f1.txt'))\n")
            assert result.status == "completed", result.error
            assert result.output == "content 1\n"
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class SlowServer(FakeServer):
    """Every call takes ``delay_s`` seconds (charged to the block's execution clock)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(dict(FILES))
        self.delay_s = delay_s

    def call(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        time.sleep(self.delay_s)
        return super().call(name, arguments)


def test_block_budget_ends_a_block_whose_next_call_is_already_waiting() -> None:
    """The worker's next call is in the pipe before the controller looks (the controller was
    busy logging the last one): a spent budget still ends the block there."""

    class SlowLogging(Recorder):
        def on_call(self, call: PrimitiveCall) -> None:
            super().on_call(call)
            time.sleep(0.02)  # review and logging time is not charged to the block

    with WorkerSession(SlowServer(0.25), Limits(block_exec_s=0.6)) as s:
        result = run1(s, "for i in range(12):\n    noop()\n", SlowLogging())
    assert result.status == "timeout", (result.status, result.calls)
    assert result.calls <= 3 and "wall-clock budget" in (result.error or "")


def test_negative_spin_is_refused(server: FakeServer) -> None:
    with pytest.raises(ValueError, match="spin"):
        WorkerSession(server, spin_s=-1.0)
    with pytest.raises(ValueError, match="spin"):
        WorkerSession(server, worker_spin_s=float("nan"))
    with pytest.raises(ValueError, match="burns CPU"):
        WorkerSession(server, worker_spin_s=5.0)


def test_output_so_far_is_in_the_boundary(session: WorkerSession) -> None:
    rec = Recorder()
    run1(session, "print('before')\nnoop()\nprint('after')\nnoop()\n", rec)
    assert rec.boundaries[0].output == "before\n"
    assert rec.boundaries[1].output == "before\nafter\n"


def test_tool_error_raises_in_agent_code(session: WorkerSession) -> None:
    code = "try:\n    read_text_file('missing')\nexcept ToolError as e:\n    print('E', e)\n"
    result = run1(session, code)
    assert result.status == "completed"
    assert "E ENOENT: missing" in result.output
    uncaught = run1(session, "read_text_file('missing')\n")
    assert uncaught.status == "error"
    assert "ToolError: ENOENT: missing" in (uncaught.error or "")
    assert "<controlscope" not in (uncaught.error or "")


def test_namespace_persists_across_blocks_and_replies(session: WorkerSession) -> None:
    session.run_reply(
        [
            (
                "a",
                "x = 41\ndef inc(v):\n    return v + 1\n"
                "def reader(p):\n    return read_text_file(p)\n",
            ),
            ("b", "y = inc(x)"),
        ],
        Recorder(),
    )
    rec = Recorder()
    result = run1(session, "print(y, x)\nprint(reader('f4.txt'))", rec)
    assert result.output == "42 41\ncontent 4\n"
    # the call is made by a helper defined in block "a": its call site is there
    site = rec.boundaries[0].call_site
    assert (site.module, site.function, rec.boundaries[0].line) == ("block_a", "reader", 5)
    assert rec.boundaries[0].block_id == "b1"


def test_snapshot_bounds_and_types(session: WorkerSession) -> None:
    code = (
        "import json\n"
        "big = 'x' * 5000\n"
        "many = list(range(500))\n"
        "nested = {'a': {'b': {'c': {'d': {'e': 1}}}}, 3: None}\n"
        "obj = object()\n"
        "noop()\n"
    )
    rec = Recorder()
    run1(session, code, rec)
    mv = rec.boundaries[0].module_vars
    assert "json" not in mv
    assert len(mv["big"]) < 1100 and mv["big"].startswith("xxx") and "+4000 chars" in mv["big"]
    assert len(mv["many"]) == 51 and mv["many"][-1] == "…[+450 items]"
    assert mv["nested"]["3"] is None and mv["nested"]["a"]["b"]["c"]["d"] == "<dict>"
    assert mv["obj"] == "<object>"


def test_errors_syntax_and_exit_are_contained(session: WorkerSession) -> None:
    results = session.run_reply(
        [
            ("e", "1/0"),
            ("s", "def (:"),
            ("x", "import sys\nsys.exit(3)"),
            ("ok", "print('alive')\nexit()\nprint('not reached')"),
        ],
        Recorder(),
    )
    assert [r.status for r in results] == ["error", "error", "error", "completed"]
    assert "ZeroDivisionError" in (results[0].error or "")
    assert "SyntaxError" in (results[1].error or "")
    assert "sys.exit(3)" in (results[2].error or "")
    assert results[3].output == "alive\n"


# ---------------------------------------------------------------------------------------------
# patches


def test_patch_arguments_changes_the_call(session: WorkerSession, server: FakeServer) -> None:
    def decide(b: Boundary) -> Decision:
        if b.block_call_index == 1:
            return PatchArguments(arguments={"path": "f9.txt"})
        return Keep()

    result = run1(
        session, "for i in range(3):\n    print(read_text_file(f'f{i}.txt'))\n", Recorder(decide)
    )
    assert result.output.split("\n")[:3] == ["content 0", "content 9", "content 2"]
    assert [a["path"] for _, a in server.calls] == ["f0.txt", "f9.txt", "f2.txt"]


def test_patch_block_data_changes_the_rest_of_the_block(
    session: WorkerSession, server: FakeServer
) -> None:
    code = (
        "def helper():\n"
        "    return read_text_file('f3.txt')\n"
        "a = read_text_file('f1.txt')\n"
        "for n in range(2):\n"
        "    b = read_text_file('f2.txt')\n"
        "c = helper()\n"
        "label = 'old'\n"
        "print(a, b, c, label)\n"
    )
    new = code.replace("'f1.txt'", "'f6.txt'").replace("'f2.txt'", "'f7.txt'")
    new = new.replace("'f3.txt'", "'f8.txt'").replace("'old'", "'new'")

    def decide(b: Boundary) -> Decision:
        if b.block_call_index == 0:
            return PatchBlockData(code=new)
        return Keep()

    rec = Recorder(decide)
    result = run1(session, code, rec)
    assert result.status == "completed", result.error
    assert [a["path"] for _, a in server.calls] == ["f6.txt", "f7.txt", "f7.txt", "f8.txt"]
    assert result.output == "content 6 content 7 content 8 new\n"
    assert rec.boundaries[1].code == new  # later boundaries show the patched block


def test_patch_block_data_takes_effect_when_the_pending_call_fails(
    session: WorkerSession, server: FakeServer
) -> None:
    """The rewrite's constants hold for the rest of the block whatever the patched call gave:
    a tool error does not leave the worker on the old constants while boundaries show the new."""
    code = (
        "try:\n"
        "    read_text_file('missing.txt')\n"
        "except ToolError:\n"
        "    pass\n"
        "print(read_text_file('f1.txt'), 'old')\n"
    )
    new = code.replace("'missing.txt'", "'gone.txt'").replace("'f1.txt'", "'f2.txt'")
    new = new.replace("'old'", "'new'")
    rec = Recorder(lambda b: PatchBlockData(code=new) if b.block_call_index == 0 else Keep())
    result = run1(session, code, rec)
    assert result.status == "completed", result.error
    assert [a["path"] for _, a in server.calls] == ["gone.txt", "f2.txt"]
    assert result.output == "content 2 new\n"
    assert rec.boundaries[1].code == new


def test_patch_block_data_with_other_structure_is_refused(session: WorkerSession) -> None:
    rec = Recorder(lambda b: PatchBlockData(code="x = read_text_file('f1.txt') + 'extra'\n"))
    with pytest.raises(ValueError, match="structure"):
        run1(session, "x = read_text_file('f1.txt')\n", rec)
    assert rec.ends[-1].status == "killed"
    assert run1(session, "print('next')").fresh_worker


# ---------------------------------------------------------------------------------------------
# replacement


CATCHERS = {
    "except_exception": (
        "for p in ['f1.txt', 'f2.txt', 'f3.txt']:\n"
        "    try:\n"
        "        read_text_file(p)\n"
        "    except Exception:\n"
        "        print('swallowed')\n"
        "print('old block continues')\n"
    ),
    "bare_except": (
        "for p in ['f1.txt', 'f2.txt', 'f3.txt']:\n"
        "    try:\n"
        "        read_text_file(p)\n"
        "    except:\n"
        "        print('swallowed')\n"
        "print('old block continues')\n"
    ),
    "base_exception_loop": (
        "n = 0\n"
        "while n < 5:\n"
        "    try:\n"
        "        try:\n"
        "            read_text_file('f1.txt')\n"
        "        except BaseException:\n"
        "            n += 1\n"
        "    except BaseException:\n"
        "        n += 1\n"
        "        read_text_file('f4.txt')\n"
        "print('old block continues')\n"
    ),
    "spin_after_catch": (
        "try:\n"
        "    try:\n"
        "        read_text_file('f1.txt')\n"
        "    except BaseException:\n"
        "        pass\n"
        "except BaseException:\n"
        "    pass\n"
        "while True:\n"
        "    pass\n"
    ),
    "patched_hooks_and_blocked_alarm": (
        "import signal, sys\n"
        "sys.settrace = sys.setprofile = signal.signal = signal.setitimer = lambda *a: None\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\n"
        "try:\n"
        "    try:\n"
        "        read_text_file('f1.txt')\n"
        "    except BaseException:\n"
        "        pass\n"
        "except BaseException:\n"
        "    pass\n"
        "while True:\n"
        "    pass\n"
    ),
    "finally_calls": (
        "try:\n    read_text_file('f1.txt')\nfinally:\n    read_text_file('f5.txt')\n"
    ),
}


@pytest.mark.parametrize("name", sorted(CATCHERS))
def test_replacement_cannot_be_swallowed(name: str, server: FakeServer) -> None:
    limits = Limits(block_exec_s=10)
    with WorkerSession(server, limits) as session:
        session.run_reply([("setup", "keep_me = 'v'")], Recorder())
        rec = Recorder(
            lambda b: (
                ReplaceWorkflow(code="print('new code', keep_me)") if b.block_id == "b1" else Keep()
            )
        )
        t0 = time.perf_counter()
        results = session.run_reply([("b1", CATCHERS[name])], rec)
        elapsed = time.perf_counter() - t0
    assert [r.block_id for r in results] == ["b1", "b1.r1"]
    old, new = results
    assert old.status == "cancelled" and old.replaced_by == "b1.r1"
    assert "old block continues" not in old.output
    assert old.error is None, old.error  # unwound without killing the worker
    assert new.status == "completed" and new.output == "new code v\n"
    assert not new.fresh_worker
    assert server.calls == []  # the pending call and everything after it never reached the server
    assert len(rec.boundaries) == 1
    assert elapsed < limits.block_exec_s  # the old block did not run on until its budget ended


def test_replacement_at_second_call_with_queued_blocks(
    session: WorkerSession, server: FakeServer
) -> None:
    def decide(b: Boundary) -> Decision:
        if b.block_id == "b1" and b.block_call_index == 1:
            return ReplaceWorkflow(code="print('replacement sees', first)\nnoop()\n")
        return Keep()

    rec = Recorder(decide)
    code = (
        "first = read_text_file('f1.txt')\nsecond = read_text_file('f2.txt')\nprint('unreached')\n"
    )
    results = session.run_reply([("b1", code), ("b2", "print('queued ran')")], rec)
    assert [(r.block_id, r.status) for r in results] == [
        ("b1", "cancelled"),
        ("b2", "cancelled"),
        ("b1.r1", "completed"),
    ]
    assert results[1].replaced_by == "b1.r1" and "not run" in (results[1].error or "")
    assert results[2].output == "replacement sees content 1\n"
    assert [c.tool for c in rec.calls] == ["read_text_file", "noop"]
    assert rec.starts[-1] == ("b1.r1", "print('replacement sees', first)\nnoop()\n", "b1")
    assert [r.block_id for r in rec.ends] == ["b1", "b2", "b1.r1"]
    assert rec.boundaries[-1].block_id == "b1.r1"  # the replacement's boundaries are reviewed


def test_block_replacement_boundary_runs_queued_blocks(session: WorkerSession) -> None:
    def decide(b: Boundary) -> Decision:
        return ReplaceWorkflow(code="print('r')") if b.block_id == "b1" else Keep()

    results = session.run_reply(
        [("b1", "noop()"), ("b2", "print('queued ran')")],
        Recorder(decide),
        replace_boundary="block",
    )
    assert [(r.block_id, r.status, r.output) for r in results] == [
        ("b1", "cancelled", ""),
        ("b1.r1", "completed", "r\n"),
        ("b2", "completed", "queued ran\n"),
    ]


def test_unwind_grace_kills_a_block_that_keeps_swallowing(server: FakeServer) -> None:
    code = (
        "import time\n"
        "while True:\n"
        "    try:\n"
        "        try:\n"
        "            noop()\n"
        "        except BaseException:\n"
        "            pass\n"
        "    except BaseException:\n"
        "        pass\n"
    )
    rec = Recorder(
        lambda b: ReplaceWorkflow(code="print('fresh')") if b.block_id == "b1" else Keep()
    )
    with WorkerSession(server, Limits(cancel_grace_s=0.5)) as session:
        results = session.run_reply([("b1", code)], rec)
    assert results[0].status == "cancelled"
    assert results[1].status == "completed" and results[1].output == "fresh\n"
    if results[0].error is not None:  # the swallowing loop was killed: the namespace is new
        assert "did not unwind" in results[0].error
        assert results[1].fresh_worker
    assert len(rec.boundaries) == 1 and server.calls == []


# ---------------------------------------------------------------------------------------------
# budgets


def test_call_budget(server: FakeServer) -> None:
    with WorkerSession(server, Limits(primitive_calls=3)) as session:
        code = (
            "got = []\n"
            "for i in range(5):\n"
            "    try:\n"
            "        got.append(read_text_file(f'f{i}.txt'))\n"
            "    except BudgetExhausted as e:\n"
            "        print('budget:', e)\n"
            "        break\n"
        )
        rec = Recorder()
        result = run1(session, code, rec)
        assert result.status == "budget_exhausted"
        assert result.calls == 3 and session.calls_made == 3 and len(server.calls) == 3
        assert "budget: the task's budget of 3 primitive calls" in result.output
        assert len(rec.boundaries) == 3
        again = run1(session, "noop()")
        assert again.status == "budget_exhausted" and "BudgetExhausted" in (again.error or "")


def test_block_wall_timeout_kills_and_next_block_is_fresh(server: FakeServer) -> None:
    with WorkerSession(server, Limits(block_exec_s=0.5)) as session:
        results = session.run_reply(
            [
                ("a", "x = 1"),
                ("loop", "while True:\n    pass"),
                ("after", "print(globals().get('x'))"),
            ],
            Recorder(),
        )
    assert [r.status for r in results] == ["completed", "timeout", "completed"]
    assert "0.5 s" in (results[1].error or "")
    assert results[1].exec_s >= 0.5
    assert results[2].fresh_worker and results[2].output == "None\n"
    assert "fresh worker" in results[2].receipt()


def test_review_time_is_not_execution_time(server: FakeServer) -> None:
    def slow_review(b: Boundary) -> Decision:
        time.sleep(0.6)
        return Keep()

    with WorkerSession(server, Limits(block_exec_s=1.0)) as session:
        result = run1(session, "noop()\nnoop()\n", Recorder(slow_review))
    assert result.status == "completed"  # 1.2 s of review, yet within a 1 s execution budget
    assert result.wall_s - result.exec_s >= 1.2 - 0.01  # both reviews left out
    # one clock: the session's task account is the block's, review time left out of both
    assert session.clock.task_s == session.task_exec_s == result.exec_s
    assert not session.clock.task_spent


def test_task_budget_stops_later_blocks(server: FakeServer) -> None:
    with WorkerSession(server, Limits(task_exec_s=0.4, block_exec_s=5)) as session:
        results = session.run_reply(
            [("a", "import time\ntime.sleep(0.6)"), ("b", "print('no')")], Recorder()
        )
        assert session.clock.task_spent and session.clock.task_s >= 0.4
    assert [r.status for r in results] == ["timeout", "timeout"]
    assert "task's execution budget" in (results[0].error or "")
    assert results[1].output == "" and "not run" in (results[1].error or "")


def test_output_is_bounded_and_marked(server: FakeServer) -> None:
    with WorkerSession(server, Limits(output_chars=100)) as session:
        result = run1(session, "for i in range(10000):\n    print('y' * 50)\n")
    assert result.status == "completed"
    assert result.output.startswith("y" * 50)
    assert "output truncated" in result.output and len(result.output) < 200


# ---------------------------------------------------------------------------------------------
# protocol: the worker is untrusted


FORGERIES = {
    "garbage": "import os, sys\nos.write(int(sys.argv[2]), b'\\x00\\x00\\x00\\x03abc')\nnoop()\n",
    "unknown_tool": (
        "import os, sys, json\n"
        "m = json.dumps({'t': 'call', 'tool': 'rm_rf', 'args': {}}).encode()\n"
        "os.write(int(sys.argv[2]), len(m).to_bytes(4, 'big') + m)\n"
        "noop()\n"
    ),
    "claims_cancelled": (
        "import os, sys, json\n"
        "m = json.dumps({'t': 'end', 'status': 'cancelled', 'out': '', 'dropped': 0,"
        " 'error': None}).encode()\n"
        "os.write(int(sys.argv[2]), len(m).to_bytes(4, 'big') + m)\n"
        "import time\ntime.sleep(5)\n"
    ),
    "os_exit": "import os\nos._exit(0)\n",
    "unhashable_tool": (
        "import os, sys, json\n"
        "m = json.dumps({'t': 'call', 'tool': ['noop'], 'args': {}}).encode()\n"
        "os.write(int(sys.argv[2]), len(m).to_bytes(4, 'big') + m)\n"
        "noop()\n"
    ),
    "deep_json": (
        "import os, sys\n"
        "m = b'[' * 200000 + b']' * 200000\n"
        "os.write(int(sys.argv[2]), len(m).to_bytes(4, 'big') + m)\n"
        "noop()\n"
    ),
    "oversize": (
        "import os, sys\nos.write(int(sys.argv[2]), (10**9).to_bytes(4, 'big'))\nnoop()\n"
    ),
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_protocol_violations_kill_the_worker(name: str, server: FakeServer) -> None:
    with WorkerSession(server, Limits(block_exec_s=10)) as session:
        results = session.run_reply(
            [("setup", "v = 1"), ("evil", FORGERIES[name]), ("next", "print('ok')")], Recorder()
        )
    assert results[1].status == "killed", results[1]
    assert results[1].error
    assert results[2].status == "completed" and results[2].fresh_worker
    assert server.calls == []


def test_forged_call_from_cancelled_block_kills(server: FakeServer) -> None:
    code = (
        "import os, sys, json\n"
        "try:\n"
        "    noop()\n"
        "finally:\n"
        "    m = json.dumps({'t': 'call', 'tool': 'noop', 'args': {}}).encode()\n"
        "    os.write(int(sys.argv[2]), len(m).to_bytes(4, 'big') + m)\n"
    )
    # The finally clause is unwound by the tracer before it can forge anything; either way the
    # server never sees a call after the replacement.
    rec = Recorder(lambda b: ReplaceWorkflow(code="print('r')") if b.block_id == "b1" else Keep())
    with WorkerSession(server) as session:
        results = session.run_reply([("b1", code)], rec)
    assert results[0].status == "cancelled"
    assert server.calls == []


def test_threads_cannot_start(session: WorkerSession, server: FakeServer) -> None:
    code = (
        "import threading\n"
        "t = threading.Thread(target=noop)\n"
        "try:\n"
        "    t.start()\n"
        "except RuntimeError as e:\n"
        "    print('refused:', e)\n"
    )
    result = run1(session, code)
    assert result.output == "refused: can't start new thread\n"
    assert server.calls == []


def test_reassigned_proxy_names_are_restored(session: WorkerSession, server: FakeServer) -> None:
    run1(session, "read_text_file = lambda *a, **k: 'fake'\nprint(read_text_file('f1.txt'))")
    result = run1(session, "print(read_text_file('f1.txt'))")
    assert result.output == "content 1\n"
    assert server.calls == [("read_text_file", {"path": "f1.txt", "encoding": "utf-8"})]


def test_handler_failure_and_server_failure_propagate() -> None:
    def boom(b: Boundary) -> Decision:
        raise RuntimeError("reviewer crashed")

    rec = Recorder(boom)
    with WorkerSession(FakeServer(dict(FILES))) as session:
        with pytest.raises(RuntimeError, match="reviewer crashed"):
            run1(session, "noop()", rec)
        assert rec.ends[-1].status == "killed"
        assert run1(session, "print(1)").fresh_worker
    rec = Recorder()
    with WorkerSession(FakeServer(fail=True)) as session, pytest.raises(ToolServerError):
        run1(session, "noop()", rec)
    assert rec.ends[-1].status == "killed" and "tool server failed" in (rec.ends[-1].error or "")


def test_isolation_none_warns_and_works(server: FakeServer) -> None:
    with pytest.warns(RuntimeWarning, match="WITHOUT isolation"):
        session = WorkerSession(server, isolation="none")
    with session:
        assert session.isolation == "none"
        result = run1(session, "import os\nprint(read_text_file('f1.txt'), os.getcwd() != '/')")
    assert result.output == "content 1 True\n"


def test_bad_arguments_are_clear_errors(server: FakeServer) -> None:
    with pytest.raises(ValueError, match="isolation"):
        WorkerSession(server, isolation="docker")  # type: ignore[arg-type]
    with (
        warnings.catch_warnings(),
        WorkerSession(server) as session,
        pytest.raises(ValueError, match="replace_boundary"),
    ):
        session.run_reply([], Recorder(), replace_boundary="all")  # type: ignore[arg-type]
    session.close()
    with pytest.raises(RuntimeError, match="closed"):
        session.start()


HARDENING = r"""
import os, socket, subprocess, threading
def attempt(name, f):
    try:
        f()
        print(name, 'allowed')
    except OSError as e:
        print(name, 'blocked', e.errno)
attempt('fork', os.fork)
attempt('subprocess', lambda: subprocess.run(['true']))
attempt('kill_parent', lambda: os.kill(os.getppid(), 0))
attempt('inet', lambda: socket.socket().connect(('127.0.0.1', 9)))
attempt('unix_pair', socket.socketpair)
try:
    threading.Thread(target=int).start()
    print('thread allowed')
except RuntimeError:
    print('thread blocked')
print(sorted(k for k in os.environ if 'KEY' in k or 'TOKEN' in k))
"""


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_hardening_applies_in_both_modes(
    isolation: str, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-must-not-leak")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = WorkerSession(server, isolation=isolation)  # type: ignore[arg-type]
    with session:
        result = run1(session, HARDENING)
        assert session.seccomp
    assert result.status == "completed", result.error
    lines = result.output.splitlines()
    assert lines[:6] == [
        "fork blocked 1",
        "subprocess blocked 1",
        "kill_parent blocked 1",
        "inet blocked 1",
        "unix_pair blocked 1",
        "thread blocked",
    ]
    assert lines[6] == "[]"


def test_stale_message_after_forged_end_is_never_attributed(server: FakeServer) -> None:
    forged = (
        "rt = read_text_file.__globals__['_cs_call'].__self__\n"
        "rt.send({'t': 'end', 'status': 'completed', 'out': 'forged', 'dropped': 0,"
        " 'error': None})\n"
        "read_text_file('f8.txt')\n"
    )
    rec = Recorder()
    with WorkerSession(server) as session:
        results = session.run_reply(
            [("b1", forged), ("b2", "print(read_text_file('f1.txt'))")], rec
        )
    assert results[1].status == "completed" and results[1].output == "content 1\n"
    assert results[1].fresh_worker
    assert [b.arguments["path"] for b in rec.boundaries] == ["f1.txt"]
    assert [a["path"] for _, a in server.calls] == ["f1.txt"]


def test_unencodable_text_and_arguments(session: WorkerSession, server: FakeServer) -> None:
    code = (
        "print('bad \\udcff byte')\n"
        "s = 'x\\udcffy'\n"
        "try:\n"
        "    read_text_file(path=object())\n"
        "except TypeError as e:\n"
        "    print('refused:', 'JSON' in str(e))\n"
        "noop()\n"
    )
    rec = Recorder()
    result = run1(session, code, rec)
    assert result.status == "completed", result.error
    assert result.output == "bad \\udcff byte\nrefused: True\n"
    assert rec.boundaries[0].module_vars["s"] == "x\\udcffy"
    assert rec.boundaries[0].output == "bad \\udcff byte\nrefused: True\n"


def test_signal_during_a_boundary_wait_keeps_answers_paired(session: WorkerSession) -> None:
    def slow(b: Boundary) -> Decision:
        if b.block_call_index == 0:
            time.sleep(0.3)
        return Keep()

    code = (
        "import signal\n"
        "class Boom(Exception): pass\n"
        "def ring(*a): raise Boom()\n"
        "signal.signal(signal.SIGALRM, ring)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.1)\n"
        "try:\n"
        "    print('first', read_text_file('f1.txt'))\n"
        "except Boom:\n"
        "    print('interrupted')\n"
        "print('second', read_text_file('f2.txt'))\n"
    )
    result = run1(session, code, Recorder(slow))
    assert "second content 2" in result.output


def test_worker_dying_between_blocks_is_replaced(server: FakeServer) -> None:
    code = (
        "import signal\n"
        "signal.signal(signal.SIGALRM, signal.SIG_DFL)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.2)  # the process dies after the block\n"
        "x = 1\n"
    )
    with WorkerSession(server) as session:
        first = run1(session, code)
        time.sleep(0.6)
        second = run1(session, "print(globals().get('x'))")
    assert first.status == "completed"
    assert second.status == "completed" and second.fresh_worker and second.output == "None\n"


def test_auto_falls_back_to_none_when_bwrap_is_missing(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controlscope import _bwrap
    from controlscope.worker import _sandbox as sandbox

    monkeypatch.setattr(_bwrap, "bwrap_path", lambda: None)
    sandbox.bwrap_self_test.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="not installed"):
            WorkerSession(server, isolation="bwrap")
        with pytest.warns(RuntimeWarning, match="WITHOUT isolation"):
            session = WorkerSession(server, isolation="auto")
        with session:
            assert session.isolation == "none"
            assert run1(session, "print(read_text_file('f2.txt'))").output == "content 2\n"
    finally:
        sandbox.bwrap_self_test.cache_clear()


def test_hooks_of_a_replaced_block_are_defused(server: FakeServer) -> None:
    trap = (
        "import gc, signal, sys, builtins\n"
        "def forge(*a):\n"
        "    read_text_file.__globals__['_cs_call'].__self__.send(\n"
        "        {'t': 'call', 'tool': 'noop', 'args': {}, 'line': 0, 'fn': None, 'cls': None,\n"
        "         'mv': {}, 'lv': {}, 'out': '', 'dropped': 0, 'lits': {}})\n"
        "signal.signal(signal.SIGPROF, forge)\n"
        "signal.setitimer(signal.ITIMER_PROF, 0.05, 0.02)\n"
        "gc.callbacks.append(forge)\n"
        "builtins.sorted = forge\n"
        "sys.addaudithook(forge)  # silently refused by the runtime's own audit hook\n"
        "noop()\n"
    )
    replacement = "x = [[i] for i in range(200000)]\nprint(len(x), sorted([2, 1]))\n"
    rec = Recorder(lambda b: ReplaceWorkflow(code=replacement) if b.block_id == "b1" else Keep())
    with WorkerSession(server) as session:
        results = session.run_reply([("b1", trap)], rec)
    assert [(r.block_id, r.status) for r in results] == [
        ("b1", "cancelled"),
        ("b1.r1", "completed"),
    ]
    assert results[1].output == "200000 [1, 2]\n" and not results[1].fresh_worker
    assert server.calls == [] and len(rec.boundaries) == 1


def test_bwrap_options_show_only_what_is_needed(tmp_path: Path) -> None:
    """The one bwrap helper: shared confinement, paths already visible not bound twice, the
    private /tmp before any bind that may lie under it, ``--`` last."""
    from controlscope import _bwrap

    inside_usr = Path("/usr/lib")
    extra = tmp_path / "pkg"
    nested = extra / "bin"
    args = _bwrap.options(
        ro_paths=[inside_usr, extra, nested],
        binds=[(str(tmp_path / "ws"), "/workspace")],
        tmp_mb=8,
        chdir="/workspace",
        hostname="w",
    )
    assert args[:5] == ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    assert args[-1] == "--" and "--proc" not in args and "/sys" not in args
    pairs = list(itertools.pairwise(args))
    assert ("--ro-bind", str(extra)) in pairs
    assert ("--ro-bind", str(nested)) not in pairs and ("--ro-bind", "/usr/lib") not in pairs
    assert args.index("--tmpfs") < args.index("--bind")
    assert args[args.index("--size") + 1] == str(8 * 1024 * 1024)
    assert ("--chdir", "/workspace") in pairs and ("--hostname", "w") in pairs


def test_bwrap_probe_reports_why_not(monkeypatch: pytest.MonkeyPatch) -> None:
    from controlscope import _bwrap

    monkeypatch.setattr(_bwrap, "bwrap_path", lambda: None)
    assert "not installed" in (_bwrap.probe([], ["true"], timeout_s=5) or "")
    monkeypatch.setattr(_bwrap, "bwrap_path", lambda: "/bin/sh")
    # ``sh -c CMD --`` stands in for bwrap: the probe runs [bwrap, *options, *command]
    assert _bwrap.probe(["-c", "echo ok"], [], timeout_s=5) is None
    problem = _bwrap.probe(["-c", "echo nope >&2; exit 3"], [], timeout_s=5)
    assert problem is not None and "exit 3" in problem and "nope" in problem


# ---------------------------------------------------------------------------------------------
# output that survives an abnormal end; seeded randomness


@pytest.mark.parametrize(
    ("tail", "status"),
    [
        ("while True:\n    pass\n", "timeout"),  # the block's execution budget
        ("import os\nos._exit(3)\n", "killed"),  # the worker dies
        (
            'import os, sys\nm = b\'{"t": "nonsense"}\'\n'
            "os.write(int(sys.argv[2]), len(m).to_bytes(4, 'big') + m)\nimport time\n"
            "time.sleep(5)\n",
            "killed",  # a protocol violation
        ),
    ],
)
def test_output_printed_after_the_last_call_survives_an_abnormal_end(
    server: FakeServer, tail: str, status: str
) -> None:
    code = "print('before the call')\nread_text_file('f1.txt')\nprint('after the call')\n" + tail
    with WorkerSession(server, Limits(block_exec_s=2)) as session:
        result = run1(session, code)
    assert result.status == status, result
    assert result.output == "before the call\nafter the call\n"
    assert "before the call" in result.receipt() and "after the call" in result.receipt()


def test_output_before_a_timeout_is_bounded_as_output_is(server: FakeServer) -> None:
    code = "for i in range(100000):\n    print(i)\nwhile True:\n    pass\n"
    with WorkerSession(server, Limits(block_exec_s=2, output_chars=300)) as session:
        result = run1(session, code)
    assert result.status == "timeout"
    kept, _, note = result.output.partition("\n…[output truncated: ")
    assert kept == "".join(f"{i}\n" for i in range(200))[:300]
    assert note.endswith("more characters were not kept]")


RANDOM_BLOCK = (
    "import random\nprint(random.random(), random.randint(0, 10**9), random.choice('abcdefgh'))\n"
)


def _draws(seed: int, block_id: str = "b1") -> str:
    with WorkerSession(FakeServer(), Limits(block_exec_s=10), seed=seed) as session:
        [result] = session.run_reply([(block_id, RANDOM_BLOCK)], Recorder())
    assert result.status == "completed", result.error
    return result.output


def test_random_is_seeded_from_the_run_and_the_block() -> None:
    """Two workers of the same run draw the same numbers in the same block; another seed or
    another block draws others (``random.Random()`` and ``os.urandom`` are not seedable: a
    replay catches them by its checks of the actions)."""
    assert _draws(7) == _draws(7)
    assert _draws(7) != _draws(8)
    assert _draws(7, "b1") != _draws(7, "b2")
