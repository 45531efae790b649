"""Where a call is made, as the controller derives it (``controlscope.worker._site``).

The worker's claims about a call (its line, function, class, literal slots) are checked against
the controller's own parse of the block it sent; a claim that disagrees kills the worker, and a
call whose literals cannot be identified with certainty is not editable by Params. Forged
frames are written on the real channel by agent code in a real worker; the server is an
in-process fake that records every call, so "nothing ran" is checked directly.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

from controlscope.core import (
    BlockResult,
    Boundary,
    Keep,
    Operation,
    OperationSet,
    PatchBlockData,
    PrimitiveCall,
    Scope,
    ToolResult,
    ToolSchema,
    tool_params,
)
from controlscope.review import PublicState, render_view
from controlscope.scope import validate_operation
from controlscope.worker import Limits, WorkerSession
from controlscope.worker._site import BlockSource, SiteMismatch, resolve_site

STRING = {"type": "string"}
READ = ToolSchema(
    name="read_text_file",
    input_schema={
        "type": "object",
        "properties": {"path": STRING, "head": {"type": "integer", "minimum": 1}},
        "required": ["path"],
    },
)
WRITE = ToolSchema(
    name="write_file",
    input_schema={
        "type": "object",
        "properties": {"path": STRING, "content": STRING},
        "required": ["path", "content"],
    },
)
MOVE = ToolSchema(  # "from" is a keyword: its Python parameter is ``from_``
    name="move",
    input_schema={
        "type": "object",
        "properties": {"from": STRING, "to": STRING},
        "required": ["from", "to"],
    },
)
SCHEMAS = {s.name: s for s in (READ, WRITE, MOVE)}
FIND_RUNTIME = "rt = read_text_file.__globals__['_cs_call'].__self__\n"


class Server:
    """An in-memory filesystem that records every call."""

    agent_roots: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.files = {"notes.txt": "old notes", "a.txt": "A", "b.txt": "B", "c.txt": "C"}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def list_tools(self) -> list[ToolSchema]:
        return list(SCHEMAS.values())

    server_info: ClassVar[dict[str, str]] = {}

    def call(
        self, name: str, arguments: dict[str, Any], timeout_s: float | None = None
    ) -> ToolResult:
        self.calls.append((name, dict(arguments)))
        if name == "write_file":
            self.files[arguments["path"]] = arguments["content"]
            return ToolResult(text="ok")
        if name == "move":
            return ToolResult(text="moved")
        return ToolResult(text=self.files.get(arguments["path"], "?"))

    def close(self) -> None:
        pass


class Reviewer:
    """A handler that validates each proposal as the controller does and records everything."""

    def __init__(self, propose: Callable[[Boundary], Operation] | None = None) -> None:
        self.propose = propose or (lambda b: Keep())
        self.boundaries: list[Boundary] = []
        self.realized: list[Operation] = []
        self.rejections: list[str | None] = []
        self.calls: list[PrimitiveCall] = []
        self.ends: list[BlockResult] = []

    def on_block_start(self, block_id: str, code: str, replaces: str | None) -> None:
        pass

    def on_boundary(self, boundary: Boundary) -> Operation:
        self.boundaries.append(boundary)
        v = validate_operation(
            self.propose(boundary), Scope.PARAMS, boundary=boundary, tool=SCHEMAS[boundary.tool]
        )
        self.realized.append(v.realized)
        self.rejections.append(v.reason)
        return v.realized

    def on_call(self, call: PrimitiveCall) -> None:
        self.calls.append(call)

    def on_block_end(self, result: BlockResult) -> None:
        self.ends.append(result)


@pytest.fixture
def server() -> Server:
    return Server()


@pytest.fixture
def session(server: Server) -> Iterator[WorkerSession]:
    with WorkerSession(server, Limits(block_exec_s=10)) as s:
        yield s


def rewrite(old: str, new: str) -> Callable[[Boundary], Operation]:
    """Propose a Params rewrite of the running block replacing the literal ``old`` by ``new``."""
    return lambda b: PatchBlockData(code=b.code.replace(repr(old), repr(new)))


def call_span(code: str, line: int) -> list[int]:
    """The span of the (first) call expression starting on ``line`` of ``code``."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call) and node.lineno == line:
            return [node.lineno, node.end_lineno or 0, node.col_offset, node.end_col_offset or 0]
    raise AssertionError(f"no call on line {line}")


def forged_frame(**fields: Any) -> str:
    """Agent code that writes a hand-made call frame and reads its answer."""
    frame = {
        "t": "call",
        "mv": {},
        "lv": {},
        "out": "",
        "dropped": 0,
        "fn": None,
        "cls": None,
        **fields,
    }
    return f"FORGE = json.loads({json.dumps(json.dumps(frame))})\n"


def run_forgery(
    session: WorkerSession,
    target: str,
    frame: dict[str, Any],
    reviewer: Reviewer,
    answer: str = "rt.recv()",
) -> list[BlockResult]:
    """Block ``setup`` keeps the forged frame in a variable; block ``attack`` (``target``, whose
    line 2 sends it and reads the answer with ``answer``) writes it on the channel."""
    setup = "import json\n" + forged_frame(**frame)
    attack = FIND_RUNTIME + f"rt.send(FORGE); print({answer})\n" + target
    return session.run_reply([("setup", setup), ("attack", attack)], reviewer)


# --------------------------------------------------------------------------- forged frames

#: The block the issue describes: the reviewer sees the write of 'hello' to notes.txt and
#: edits 'hello'; the constants 'secret.txt' and 'EVIL' sit elsewhere in the block.
TARGET = (
    "other, evil = 'secret.txt', 'EVIL'\n"  # line 3 of the attack block
    "write_file(path='notes.txt', content='hello')\n"  # line 4
)
ATTACK = FIND_RUNTIME + "rt.send(FORGE); print(rt.recv())\n" + TARGET
REAL_CALL = call_span(ATTACK, 4)
SLOTS = {v: i for i, v in enumerate(BlockSource.parse("a", ast.parse(ATTACK)).values)}
#: The frame the real call on line 4 sends: every claim agrees with the source.
HONEST = {
    "tool": "write_file",
    "args": {"path": "notes.txt", "content": "hello"},
    "site": "attack",
    "pos": REAL_CALL,
    "line": 4,
    "direct": True,
    "lits": {"path": SLOTS["notes.txt"], "content": SLOTS["hello"]},
}


def test_forged_literal_slots_cannot_redirect_a_params_edit(
    session: WorkerSession, server: Server
) -> None:
    """The frame claims the real call's position and arguments, but maps path and content onto
    the constants 'secret.txt' and 'EVIL': a Params edit of 'hello' must not write there."""
    frame = {**HONEST, "lits": {"path": SLOTS["secret.txt"], "content": SLOTS["EVIL"]}}
    reviewer = Reviewer(rewrite("hello", "HELLO"))
    results = run_forgery(session, TARGET, frame, reviewer)
    attack = results[1]
    assert attack.status == "killed" and "protocol violation" in (attack.error or "")
    assert "literal slots" in (attack.error or "")
    assert "secret.txt" not in server.files and reviewer.calls == []


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"line": 1}, "line 1 claimed"),  # an innocuous line shown for another call
        ({"pos": None}, "without a position"),
        ({"pos": [1, 1, 0, 3]}, "no expression"),
        ({"pos": [40, 40, 0, 5], "line": 40}, "no expression"),
        ({"site": "t9.b9"}, "never ran"),
        ({"fn": "helper"}, "function/class"),
        ({"lits": {}}, "literal slots"),
        ({"args": {"path": "secret.txt", "content": "hello"}}, "literal"),
        ({"args": {"path": "notes.txt", "head": 5}, "tool": "read_text_file"}, "provides"),
    ],
)
def test_claims_that_disagree_with_the_source_kill_the_worker(
    session: WorkerSession, server: Server, changes: dict[str, Any], why: str
) -> None:
    frame = {**HONEST, **changes}
    reviewer = Reviewer()
    results = run_forgery(session, TARGET, frame, reviewer)
    attack = results[1]
    assert attack.status == "killed", attack
    assert "protocol violation" in (attack.error or "") and why in (attack.error or "")
    assert server.calls == [] and reviewer.boundaries == []


def test_a_consistent_forged_frame_gains_nothing_over_a_proxy_call(
    session: WorkerSession, server: Server
) -> None:
    """A frame whose every claim agrees with the source is the call the source makes: it is
    reviewed at a boundary, and a Params edit changes exactly the edited literal."""
    frame = HONEST
    # a forger that reads the answer but skips the rewrite's constants is caught at the next
    # call, whose literal is no longer what the controller knows
    skipped = run_forgery(session, TARGET, frame, Reviewer(rewrite("hello", "HELLO")))
    assert skipped[1].status == "killed" and "'hello'" in (skipped[1].error or "")
    server.files.pop("notes.txt")
    reviewer = Reviewer(rewrite("hello", "HELLO"))
    results = run_forgery(session, TARGET, frame, reviewer, answer="rt._answer(rt.recv())")
    assert results[1].status == "completed", results[1]
    first = reviewer.boundaries[0]
    assert first.line == 4
    assert first.literal_slots == {"path": SLOTS["notes.txt"], "content": SLOTS["hello"]}
    assert [c.arguments for c in reviewer.calls] == [{"path": "notes.txt", "content": "HELLO"}] * 2
    assert server.files["notes.txt"] == "HELLO" and "secret.txt" not in server.files


def test_an_indirect_forged_claim_is_not_editable(session: WorkerSession, server: Server) -> None:
    """Claiming only a position (not a direct call) shows that line, says the call is
    indirect, and refuses Params: the arguments are then exactly the reviewed ones."""
    frame = {**HONEST, "args": {"path": "secret.txt", "content": "x"}, "direct": False, "lits": {}}
    reviewer = Reviewer(rewrite("hello", "HELLO"))
    run_forgery(session, TARGET, frame, reviewer)
    first = reviewer.boundaries[0]
    assert first.params_refusal is not None and "indirectly" in first.params_refusal
    assert reviewer.rejections[0] == "data_not_editable"
    assert reviewer.calls[0].arguments == first.arguments  # executed = reviewed (keep)


# --------------------------------------------------------------------------- indirect calls

INDIRECT = {
    "a builtin's key function": "max('a.txt', 'b.txt', key=read_text_file)\n",
    "map": "list(map(read_text_file, ['a.txt', 'b.txt']))\n",
    "sorted's key": "sorted(['a.txt', 'b.txt'], key=read_text_file)\n",
    "functools.partial": (
        "import functools\nfor p in ['a.txt', 'b.txt']:\n"
        "    functools.partial(read_text_file, p)()\n"
    ),
    "an attribute": (
        "import types\nns = types.SimpleNamespace(r=read_text_file)\nns.r('a.txt'); ns.r('b.txt')\n"
    ),
    "a wrapper named like the tool": (
        "import functools\nreal = read_text_file\n"
        "read_text_file = functools.partial(real, head=2)\n"
        "read_text_file('a.txt'); read_text_file('b.txt')\n"
    ),
    "a stdlib function's callback": (
        "import textwrap\ntextwrap.indent('a.txt\\nb.txt', '', read_text_file)\n"
    ),
}


@pytest.mark.parametrize("name", sorted(INDIRECT))
def test_indirect_calls_are_not_editable_by_params(
    session: WorkerSession, server: Server, name: str
) -> None:
    """The caller frame's current call expression is not the proxy call: its constants say
    nothing certain about the call's arguments, so Params is refused and the executed call is
    the reviewed one (never the outer expression's other literal)."""
    reviewer = Reviewer(rewrite("b.txt", "c.txt"))
    [result] = session.run_reply([("b1", INDIRECT[name])], reviewer)
    assert result.status == "completed", result.error
    reads = [b for b in reviewer.boundaries if b.tool == "read_text_file"]
    assert len(reads) == 2
    for boundary, call in zip(reviewer.boundaries, reviewer.calls, strict=True):
        assert boundary.literal_slots == {} and boundary.params_refusal is not None
        assert call.arguments == boundary.arguments  # executed = reviewed
    assert set(reviewer.rejections) == {"data_not_editable"}


DIRECT = {
    "module level": ("read_text_file('b.txt')\n", "b.txt"),
    "keyword": ("read_text_file(path='b.txt', head=3)\n", "b.txt"),
    "an alias": ("r = read_text_file\nr('b.txt')\n", "b.txt"),
    "a function of the block": ("def f():\n    return read_text_file('b.txt')\nf()\n", "b.txt"),
    "a method": (
        "class A:\n    def m(self):\n        return read_text_file('b.txt')\nA().m()\n",
        "b.txt",
    ),
    "a lambda": ("g = lambda: read_text_file('b.txt')\ng()\n", "b.txt"),
    "a multi-line call": ("x = (read_text_file\n  ('b.txt'))\n", "b.txt"),
}


@pytest.mark.parametrize("name", sorted(DIRECT))
def test_direct_calls_take_exactly_the_edited_literal(
    session: WorkerSession, server: Server, name: str
) -> None:
    code, literal = DIRECT[name]
    reviewer = Reviewer(rewrite(literal, "c.txt"))
    [result] = session.run_reply([("b1", code)], reviewer)
    assert result.status == "completed", result.error
    [boundary] = reviewer.boundaries
    assert boundary.params_refusal is None and set(boundary.literal_slots) >= {"path"}
    assert reviewer.rejections == [None]
    [call] = reviewer.calls
    assert call.arguments == {**boundary.arguments, "path": "c.txt"}
    assert call.operation == "patch_block_data" and call.requested == boundary.arguments


def test_a_keyword_parameter_is_named_as_the_server_names_it(
    session: WorkerSession, server: Server
) -> None:
    """``from`` is ``from_`` in Python: the edited literal lands on ``from``, and no stray
    ``from_`` argument reaches the server."""
    reviewer = Reviewer(rewrite("a.txt", "c.txt"))
    session.run_reply([("b1", "move(from_='a.txt', to='b.txt')\n")], reviewer)
    [boundary] = reviewer.boundaries
    assert set(boundary.literal_slots) == {"from", "to"}
    assert server.calls == [("move", {"from": "c.txt", "to": "b.txt"})]


def test_a_call_by_an_earlier_blocks_function_is_not_editable(
    session: WorkerSession, server: Server
) -> None:
    """The literal behind the call sits in another block's constants, which a rewrite of the
    running block cannot reach."""
    session.run_reply([("b1", "def f():\n    return read_text_file('a.txt')\n")], Reviewer())
    reviewer = Reviewer(rewrite("x", "y"))
    session.run_reply([("b2", "f()\nprint('x')\n")], reviewer)
    [boundary] = reviewer.boundaries
    assert boundary.call_site.module == "block_b1" and boundary.line == 2
    # the reviewer is shown that line of block b1, not line 2 of the running block
    assert boundary.source_line == "return read_text_file('a.txt')"
    assert PublicState(goal="g", boundary=boundary).source_line == boundary.source_line
    assert boundary.params_refusal is not None and "block b1" in boundary.params_refusal
    assert reviewer.rejections == ["data_not_editable"]


# --------------------------------------------------------------------------- without a worker


def _message(code: str, line: int, **claims: Any) -> dict[str, Any]:
    return {
        "site": "b1",
        "pos": call_span(code, line),
        "line": line,
        "fn": None,
        "cls": None,
        "direct": True,
        "lits": {},
        **claims,
    }


def test_resolve_site_derives_what_the_block_says() -> None:
    code = "class A:\n    def m(self):\n        return write_file('n.txt', content='hi')\n"
    source = BlockSource.parse("b1", ast.parse(code))
    msg = _message(code, 3, fn="m", cls="A", lits={"path": 0, "content": 1})
    site = resolve_site(
        msg,
        blocks={"b1": source},
        running="b1",
        params=tool_params(WRITE),
        arguments={"path": "n.txt", "content": "hi"},
    )
    assert (site.line, site.call_site.function, site.call_site.class_name) == (3, "m", "A")
    assert site.literal_slots == {"path": 0, "content": 1} and site.refusal is None
    with pytest.raises(SiteMismatch, match="function/class"):
        resolve_site(
            {**msg, "fn": None, "cls": None},
            blocks={"b1": source},
            running="b1",
            params=tool_params(WRITE),
            arguments={"path": "n.txt", "content": "hi"},
        )


def test_a_patched_block_checks_its_new_literals() -> None:
    code = "read_text_file('a.txt')\n"
    source = BlockSource.parse("b1", ast.parse(code))
    source.patch("read_text_file('z.txt')\n")
    args = {"path": "z.txt"}
    msg = _message(code, 1, lits={"path": 0})
    site = resolve_site(
        msg, blocks={"b1": source}, running="b1", params=tool_params(READ), arguments=args
    )
    assert site.literal_slots == {"path": 0}
    with pytest.raises(SiteMismatch, match="literal"):
        resolve_site(
            msg,
            blocks={"b1": source},
            running="b1",
            params=tool_params(READ),
            arguments={"path": "a.txt"},
        )


def test_an_optional_literal_none_is_left_out_of_the_call() -> None:
    code = "read_text_file('a.txt', None)\n"
    source = BlockSource.parse("b1", ast.parse(code))
    msg = _message(code, 1, lits={"path": 0, "head": 1})
    site = resolve_site(
        msg,
        blocks={"b1": source},
        running="b1",
        params=tool_params(READ),
        arguments={"path": "a.txt"},
    )
    assert site.literal_slots == {"path": 0, "head": 1}


def test_the_reviewer_granted_params_is_told_when_it_cannot_edit_the_call(
    session: WorkerSession, server: Server
) -> None:
    """The refusal is part of the view when ``patch_block_data`` is granted (the v2 lattice's
    Params and Full), not otherwise (Arg, and the default lattice's Full)."""
    reviewer = Reviewer()
    session.run_reply([("b1", INDIRECT["map"])], reviewer)
    state = PublicState(goal="g", boundary=reviewer.boundaries[0], tools=tuple(SCHEMAS.values()))
    granted = {
        "v2 params": OperationSet.of(Scope.PARAMS, "v2"),
        "v2 full": OperationSet.of(Scope.FULL, "v2"),
        "arg": OperationSet.of(Scope.ARG, "v2"),
        "default full": OperationSet.of(Scope.FULL, "default"),
    }
    shown = {
        name: render_view(state, "code_only", ops)[1].content or "" for name, ops in granted.items()
    }
    assert "called indirectly at line 1" in shown["v2 params"]
    assert "called indirectly at line 1" in shown["v2 full"]
    assert "patch_block_data" not in shown["arg"]
    assert "patch_block_data" not in shown["default full"]
