"""Tests for scope validation (controlscope.scope): every rule, accepted and rejected.

The filesystem tool schemas come from the real pinned MCP filesystem server, and one test checks
that argument-patch validation agrees with the server's own argument checking.
"""

from __future__ import annotations

import ast
import contextlib
import io
import itertools
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from controlscope.core import (
    MAX_CODE_CHARS,
    OPERATION_KINDS,
    REQUIRED_SCOPE,
    Boundary,
    CallSite,
    Keep,
    Lattice,
    Operation,
    OperationSet,
    PatchArguments,
    PatchBlockData,
    ReplaceWorkflow,
    Scope,
    ToolSchema,
    Validation,
    constants_in_order,
    slot_positions,
    tool_params,
    transform_block,
)
from controlscope.envs._mcp import McpToolServer
from controlscope.envs.filesystem.server import start_filesystem_server
from controlscope.review._operations import MalformedOperationError, parse_operation
from controlscope.scope import (
    block_data_constants,
    code_parameters,
    is_code_parameter,
    validate_operation,
)
from controlscope.worker._apply import final_arguments

BLOCK = """\
import json
limit = -1
names = ["a.txt", "b.txt"]
for name in names:
    text = read_text_file(path=f"notes/{name}", head=10)
    if len(text) > 3:
        print(f"{name}: {len(text):>5d} chars")
summary = {"count": len(names), "ratio": 0.5, "ok": True, "missing": None}
print(json.dumps(summary), limit)
"""


@pytest.fixture(scope="module")
def fs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpToolServer]:
    """The real pinned MCP filesystem server on a small workspace, up for the whole module."""
    workspace = tmp_path_factory.mktemp("ws")
    (workspace / "notes").mkdir()
    (workspace / "notes" / "a.txt").write_text("alpha\nbeta\ngamma\n")
    server = start_filesystem_server(workspace)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def fs_tools(fs_server: McpToolServer) -> dict[str, ToolSchema]:
    """The real server's tools, by name."""
    return {tool.name: tool for tool in fs_server.list_tools()}


def boundary(
    tool: str = "read_text_file",
    arguments: dict[str, Any] | None = None,
    code: str = BLOCK,
) -> Boundary:
    return Boundary(
        block_id="b1",
        call_index=0,
        block_call_index=0,
        tool=tool,
        arguments={"path": "notes/a.txt", "head": 10} if arguments is None else arguments,
        line=5,
        call_site=CallSite(module="b1"),
        code=code,
    )


def check(
    proposal: Operation | None,
    granted: Scope | OperationSet,
    tool: ToolSchema,
    b: Boundary | None = None,
) -> Validation:
    return validate_operation(proposal, granted, boundary=b or boundary(tool.name), tool=tool)


def assert_rejected(v: Validation, reason: str, *fragments: str) -> None:
    assert not v.accepted, v
    assert v.reason == reason, (v.reason, v.detail)
    assert v.realized == Keep()
    assert v.detail
    for fragment in fragments:
        assert fragment in v.detail, (fragment, v.detail)


def assert_accepted(v: Validation) -> None:
    assert v.accepted, (v.reason, v.detail)
    assert v.reason is None
    assert v.realized == v.proposal


# --------------------------------------------------------------------------- parse_operation


def test_parse_keep_ignores_payload_and_tolerates_case() -> None:
    assert parse_operation("keep") == Keep()
    assert parse_operation(" Keep ", {"reason": "fine", "code": "x"}) == Keep()


def test_parse_patch_arguments_object_and_json_string() -> None:
    op = parse_operation("patch_arguments", {"reason": "r", "arguments": {"path": "b.txt"}})
    assert op == PatchArguments(arguments={"path": "b.txt"})
    op = parse_operation("patch_arguments", {"arguments": '{"head": 3}'})
    assert op == PatchArguments(arguments={"head": 3})


@pytest.mark.parametrize(
    ("kind", "payload", "fragment"),
    [
        ("delete_everything", {}, "unknown operation kind"),
        (3, {}, "must be a string"),
        ("patch_arguments", {}, "missing field 'arguments'"),
        ("patch_arguments", {"arguments": [1, 2]}, "must be an object"),
        ("patch_arguments", {"arguments": "{not json"}, "not JSON"),
        ("patch_arguments", {"arguments": "[1]"}, "must be an object"),
        ("patch_arguments", ["arguments"], "payload must be an object"),
        ("patch_block_data", {"arguments": {}}, "missing field 'code'"),
        ("replace_workflow", {"code": 12}, "'code' must be a string"),
        ("replace_workflow", {"code": None}, "'code' must be a string"),
    ],
)
def test_parse_rejects_malformed_payloads(kind: Any, payload: Any, fragment: str) -> None:
    with pytest.raises(MalformedOperationError) as info:
        parse_operation(kind, payload)
    assert fragment in info.value.detail
    assert info.value.kind == kind
    assert isinstance(info.value, ValueError)


def test_parse_code_strips_one_markdown_fence_only_when_it_wraps_everything() -> None:
    op = parse_operation("replace_workflow", {"code": "```python\nprint(1)\nprint(2)\n```\n"})
    assert op == ReplaceWorkflow(code="print(1)\nprint(2)")
    inner = 'print("```")\n'
    assert parse_operation("patch_block_data", {"code": inner}) == PatchBlockData(code=inner)


# --------------------------------------------------------------------------- scope nesting


def valid_proposals() -> dict[str, Operation]:
    return {
        "keep": Keep(),
        "patch_arguments": PatchArguments(arguments={"path": "notes/b.txt"}),
        "patch_block_data": PatchBlockData(code=BLOCK.replace('"b.txt"', '"c.txt"')),
        "replace_workflow": ReplaceWorkflow(code='print(read_text_file("notes/a.txt"))'),
    }


PAPER_SETS: dict[str, dict[Scope, set[str]]] = {
    # Section 3.1, eq. 1-3: A_Keep = {keep}; A_Arg = A_Keep ∪ P(h); A_Full = A_Arg ∪ R(h).
    "default": {
        Scope.KEEP: {"keep"},
        Scope.ARG: {"keep", "patch_arguments"},
        Scope.FULL: {"keep", "patch_arguments", "replace_workflow"},
    },
    # A.2: the V2 protocol "permits coordinated data edits. Its Full action set includes Keep,
    # next-call editing, coordinated block editing, and workflow replacement."
    "v2": {
        Scope.KEEP: {"keep"},
        Scope.ARG: {"keep", "patch_arguments"},
        Scope.PARAMS: {"keep", "patch_arguments", "patch_block_data"},
        Scope.FULL: {"keep", "patch_arguments", "patch_block_data", "replace_workflow"},
    },
}


@pytest.mark.parametrize(
    ("lattice", "granted"), [(lat, s) for lat, sets in PAPER_SETS.items() for s in sets]
)
@pytest.mark.parametrize("kind", list(REQUIRED_SCOPE))
def test_operation_sets_per_lattice(
    fs_tools: dict[str, ToolSchema], lattice: Lattice, granted: Scope, kind: str
) -> None:
    operations = OperationSet.of(granted, lattice)
    assert set(operations.operations) == PAPER_SETS[lattice][granted]
    proposal = valid_proposals()[kind]
    v = check(proposal, operations, fs_tools["read_text_file"])
    assert v.granted is granted
    assert v.proposal == proposal
    if kind in PAPER_SETS[lattice][granted]:
        assert_accepted(v)
    else:
        assert_rejected(v, "out_of_scope", kind, granted.name.lower(), lattice)


def test_params_exists_only_in_the_v2_lattice() -> None:
    with pytest.raises(ValueError, match="does not exist in the default lattice"):
        OperationSet.of(Scope.PARAMS, "default")
    with pytest.raises(ValueError, match="not"):
        OperationSet(scope=Scope.FULL, lattice="default", operations=OPERATION_KINDS)


def test_a_bare_scope_is_read_in_the_v2_lattice(fs_tools: dict[str, ToolSchema]) -> None:
    patch = valid_proposals()["patch_block_data"]
    assert check(patch, Scope.FULL, fs_tools["read_text_file"]).accepted
    full = OperationSet.of(Scope.FULL)
    assert_rejected(check(patch, full, fs_tools["read_text_file"]), "out_of_scope")


def test_scope_order_is_inclusion() -> None:
    assert Scope.KEEP < Scope.ARG < Scope.PARAMS < Scope.FULL
    for lattice, sets in PAPER_SETS.items():
        ordered = sorted(sets)
        for smaller, larger in itertools.pairwise(ordered):
            assert sets[smaller] < sets[larger], lattice


@pytest.mark.parametrize("granted", list(Scope))
def test_nothing_parseable_is_malformed_keep(
    fs_tools: dict[str, ToolSchema], granted: Scope
) -> None:
    v = check(None, granted, fs_tools["read_text_file"])
    assert_rejected(v, "malformed")
    assert v.proposal is None


def test_validation_round_trips_through_json(fs_tools: dict[str, ToolSchema]) -> None:
    for proposal in valid_proposals().values():
        v = check(proposal, Scope.ARG, fs_tools["read_text_file"])
        again = TypeAdapter(Validation).validate_json(v.model_dump_json())
        assert again == v
        assert type(again.proposal) is type(proposal)


def test_programming_errors_raise(fs_tools: dict[str, ToolSchema]) -> None:
    with pytest.raises(ValueError, match="does not belong"):
        validate_operation(
            Keep(), Scope.FULL, boundary=boundary("write_file"), tool=fs_tools["read_text_file"]
        )
    with pytest.raises(TypeError, match="must be a Scope"):
        validate_operation(
            Keep(),
            3,  # type: ignore[arg-type]
            boundary=boundary(),
            tool=fs_tools["read_text_file"],
        )


# --------------------------------------------------------------------------- patch_arguments


def test_patch_arguments_rules(fs_tools: dict[str, ToolSchema]) -> None:
    read = fs_tools["read_text_file"]
    assert_accepted(check(PatchArguments(arguments={"head": 2, "path": "x"}), Scope.ARG, read))
    assert_rejected(check(PatchArguments(arguments={}), Scope.ARG, read), "empty_patch")
    assert_rejected(
        check(PatchArguments(arguments={"path": "notes/a.txt"}), Scope.FULL, read),
        "empty_patch",
        "already",
    )
    assert_rejected(
        check(PatchArguments(arguments={"pth": "x", "path": "y"}), Scope.ARG, read),
        "unknown_argument",
        "'pth'",
        "path",
    )
    assert_rejected(
        check(PatchArguments(arguments={"head": "3"}), Scope.ARG, read),
        "schema_violation",
        "head",
        "number",
    )
    v = check(PatchArguments(arguments={"head": "9" * 100_000}), Scope.ARG, read)
    assert_rejected(v, "schema_violation", "head")
    assert len(v.detail) < 1000  # the offending value is quoted, but bounded
    assert_rejected(
        check(PatchArguments(arguments={"head": math.nan}), Scope.ARG, read),
        "schema_violation",
        "not JSON",
    )
    assert_rejected(
        check(PatchArguments(arguments={"head": object()}), Scope.ARG, read),
        "schema_violation",
        "not JSON",
    )


def test_patch_arguments_nested_schema(fs_tools: dict[str, ToolSchema]) -> None:
    edit = fs_tools["edit_file"]
    b = boundary("edit_file", {"path": "a.txt", "edits": [{"oldText": "a", "newText": "b"}]})
    good = PatchArguments(arguments={"edits": [{"oldText": "a", "newText": "c"}]})
    assert_accepted(check(good, Scope.ARG, edit, b))
    bad = PatchArguments(arguments={"edits": [{"oldText": "a"}]})
    assert_rejected(check(bad, Scope.ARG, edit, b), "schema_violation", "edits/0", "newText")
    many = fs_tools["read_multiple_files"]
    b = boundary("read_multiple_files", {"paths": ["a"]})
    assert_rejected(
        check(PatchArguments(arguments={"paths": []}), Scope.ARG, many, b), "schema_violation"
    )


def test_patch_does_not_inherit_blame_for_a_broken_pending_call(
    fs_tools: dict[str, ToolSchema],
) -> None:
    """A schema error the pending call already had does not block a patch of another argument;
    an error the patch introduces does."""
    write = fs_tools["write_file"]
    broken = boundary("write_file", {"path": "a.txt"})  # 'content' missing already
    assert_accepted(check(PatchArguments(arguments={"path": "b.txt"}), Scope.ARG, write, broken))
    assert_accepted(check(PatchArguments(arguments={"content": "hi"}), Scope.ARG, write, broken))
    assert_rejected(
        check(PatchArguments(arguments={"path": 3}), Scope.ARG, write, broken),
        "schema_violation",
        "path",
    )


def test_schema_dialect_follows_dollar_schema() -> None:
    """No ``$schema``: Draft 2020-12 (``prefixItems`` enforced); draft-07 ignores that keyword."""
    props = {"pair": {"type": "array", "prefixItems": [{"type": "integer"}]}}
    modern = ToolSchema(name="t", input_schema={"type": "object", "properties": props})
    old = ToolSchema(
        name="t",
        input_schema={
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": props,
        },
    )
    b = boundary("t", {"pair": [1]})
    patch = PatchArguments(arguments={"pair": ["one"]})
    assert_rejected(check(patch, Scope.ARG, modern, b), "schema_violation", "pair/0")
    assert_accepted(check(patch, Scope.ARG, old, b))


def test_invalid_tool_schema_rejects_with_reason() -> None:
    tool = ToolSchema(name="t", input_schema={"type": "object", "properties": {"a": {"type": 5}}})
    v = check(PatchArguments(arguments={"a": 1}), Scope.ARG, tool, boundary("t", {"a": 0}))
    assert_rejected(v, "schema_violation", "itself invalid")


@pytest.mark.parametrize(
    "ref", ["http://example.invalid/schema.json", "#/$defs/missing"], ids=["remote", "dangling"]
)
def test_unresolvable_schema_reference_rejects_with_reason(ref: str) -> None:
    tool = ToolSchema(name="t", input_schema={"type": "object", "properties": {"a": {"$ref": ref}}})
    v = check(PatchArguments(arguments={"a": 1}), Scope.ARG, tool, boundary("t", {"a": 0}))
    assert_rejected(v, "schema_violation", "cannot be resolved")


def test_open_schema_without_properties_leaves_names_to_the_schema() -> None:
    open_tool = ToolSchema(name="t", input_schema={"type": "object"})
    closed = ToolSchema(name="t", input_schema={"type": "object", "additionalProperties": False})
    patch = PatchArguments(arguments={"anything": 1})
    assert_accepted(check(patch, Scope.ARG, open_tool, boundary("t", {})))
    assert_rejected(check(patch, Scope.ARG, closed, boundary("t", {})), "unknown_argument")


def test_declared_code_parameter_is_rejected_even_with_data_name() -> None:
    tool = ToolSchema(
        name="run_query",
        input_schema={
            "type": "object",
            "properties": {"body": {"type": "string"}, "limit": {"type": "integer"}},
        },
        code_params=("body",),
    )
    b = boundary("run_query", {"body": "SELECT 1", "limit": 5})
    assert_rejected(
        check(PatchArguments(arguments={"body": "DROP TABLE t", "limit": 1}), Scope.FULL, tool, b),
        "code_parameter",
        "'body'",
    )
    assert_accepted(check(PatchArguments(arguments={"limit": 1}), Scope.ARG, tool, b))


def test_hinted_code_parameter_is_rejected() -> None:
    tool = ToolSchema(
        name="execute",
        input_schema={
            "type": "object",
            "properties": {
                "snippet": {"type": "string"},
                "timeout": {"type": "number"},
                "note": {"type": "string", "description": "Python code to execute"},
            },
        },
    )
    b = boundary("execute", {"snippet": "print(1)", "timeout": 3, "note": ""})
    assert code_parameters(tool) == {"snippet", "note"}
    for name in ("snippet", "note"):
        v = check(PatchArguments(arguments={name: "import os"}), Scope.FULL, tool, b)
        assert_rejected(v, "code_parameter", name)
    assert_accepted(check(PatchArguments(arguments={"timeout": 9}), Scope.ARG, tool, b))


@pytest.mark.parametrize(
    ("name", "prop", "expected"),
    [
        ("code", {}, True),
        ("source_code", {}, True),
        ("sourceCode", {}, True),
        ("script", {}, True),
        ("sql_query", {}, True),
        ("shellCommand", {}, True),
        ("cmd", {}, True),
        ("python", {}, True),
        ("body", {"format": "python"}, True),
        ("body", {"contentMediaType": "text/x-python"}, True),
        ("body", {"contentMediaType": "application/javascript"}, True),
        ("body", {"x-code": True}, True),
        ("body", {"description": "A shell command to run on the host"}, True),
        ("body", {"description": "Statement that will be executed"}, True),
        ("body", {"description": "JavaScript to evaluate in the page"}, True),
        ("verification_code", {}, False),
        ("zipCode", {}, False),
        ("country_code", {"description": "ISO country code"}, False),
        ("code", {"description": "The verification code sent by SMS"}, False),
        ("pattern", {"description": "A regular expression to match file names"}, False),
        ("excludePatterns", {"type": "array"}, False),
        ("query", {"description": "Search query"}, False),
        ("content", {"type": "string"}, False),
        ("path", {}, False),
        ("timestamp", {}, False),
        ("description", {"description": "Describes the program's purpose to users"}, False),
    ],
)
def test_code_parameter_hints(name: str, prop: dict[str, Any], expected: bool) -> None:
    assert is_code_parameter(name, prop) is expected


def test_filesystem_tools_have_no_code_parameters(fs_tools: dict[str, ToolSchema]) -> None:
    tools = list(fs_tools.values())
    assert len(tools) >= 10
    assert {t.name: code_parameters(t) for t in tools} == {t.name: frozenset() for t in tools}


@pytest.mark.parametrize(
    ("arguments", "patch"),
    [
        ({"path": "notes/a.txt"}, {"head": 2}),
        ({"path": "notes/a.txt"}, {"head": "2"}),
        ({"path": "notes/a.txt"}, {"path": ["notes/a.txt"]}),
        ({"path": "notes/a.txt"}, {"tail": True}),
        ({"path": "notes/a.txt", "head": 1}, {"head": None}),
        ({"path": "notes/a.txt"}, {"tail": 1.0}),
    ],
)
def test_argument_validation_agrees_with_the_real_server(
    fs_server: McpToolServer,
    fs_tools: dict[str, ToolSchema],
    arguments: dict[str, Any],
    patch: dict[str, Any],
) -> None:
    """What validation accepts the real server runs; what it rejects as a schema violation the
    real server refuses as invalid arguments."""
    v = check(
        PatchArguments(arguments=patch),
        Scope.ARG,
        fs_tools["read_text_file"],
        boundary(arguments=arguments),
    )
    result = fs_server.call("read_text_file", {**arguments, **patch})
    assert v.accepted == (not result.is_error), (v.detail, result.text)
    if not v.accepted:
        assert v.reason == "schema_violation"


# --------------------------------------------------------------------------- patch_block_data


def test_block_data_constants_are_the_workers_table() -> None:
    # depth-first in ast field order (a dict's keys before its values); the sign of -1 is
    # structure; f-string literal text is data, its format specs are not
    assert block_data_constants(BLOCK) == [
        1,
        "a.txt",
        "b.txt",
        "notes/",
        10,
        3,
        ": ",
        " chars",
        "count",
        "ratio",
        "ok",
        "missing",
        0.5,
        True,
        None,
    ]
    assert block_data_constants('p = f"{x:.2f} and {y!r:>{w}} end"') == [" and ", " end"]
    _tree, values, _ = transform_block(ast.parse(BLOCK), "__k")
    assert values == block_data_constants(BLOCK)
    with pytest.raises(SyntaxError):
        block_data_constants("def (:")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('x = read_text_file("a.txt")', 'x = read_text_file("b.txt")'),
        ("n = 10", "n = 3"),
        ("n = -1", "n = -5"),
        ("n = -1", "n = -2.5"),
        ("n = 10", "n = None"),
        ('n = "5"', "n = 5"),
        ("flag = True", "flag = 0"),
        ("p = f\"{d['k']}\"", "p = f\"{d['j']}\""),
        ('p = f"{d}/report.txt"', 'p = f"{d}/summary.txt"'),
        ('p = f"{n:>5d} files in {d}"', 'p = f"{n:>5d} dirs under {d}"'),
        ('b = b"xy"', 'b = b"z"'),
        (
            'def f(a, b="x"):\n    """Doc."""\n    return a',
            'def f(a, b="y"):\n    """Doc."""\n    return a',
        ),
        ('d = {"k": 1}', "d = {'k': 2}  # comment and other quotes are layout"),
        ("x = 1", "x = (\n    2\n)"),
    ],
)
def test_block_data_accepted(old: str, new: str) -> None:
    tool = ToolSchema(name="read_text_file")
    v = check(PatchBlockData(code=new), Scope.PARAMS, tool, boundary(code=old))
    assert_accepted(v)


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        ('x = read_text_file("a.txt")', 'x = write_file("a.txt")', "differs"),
        ('x = read_text_file("a.txt")', 'y = read_text_file("a.txt")', "differs"),
        ('x = read_text_file("a.txt")', 'x = read_text_file(path="a.txt")', "differs"),
        ("x = 1 + 2", "x = 1 - 2", "differs"),
        ("x = 1\ny = 2", "x = 1", "statements"),
        ("x = 1", "x = 1\nimport os", "statements"),
        ("n = -1", "n = -x", "differs"),
        ("n = -1", "n = 5", "differs"),
        ("n = 1", "n = -5", "differs"),
        ('p = f"{v:.2f}"', 'p = f"{v:.3f}"', "not block data"),
        ('p = f"{v!r}"', 'p = f"{v!s}"', "differs"),
        ('p = f"{v}"', 'p = "{v}"', "differs"),
        ('p = f"{d}/r.txt"', 'p = f"{d}"', "differs"),
        ("match v:\n    case 1:\n        pass", "match v:\n    case 2:\n        pass", "case"),
        ('"""Doc."""\nx = 1', '"""Other doc."""\nx = 1', "docstring"),
        ('def f():\n    "Doc."\n    return 1', 'def f():\n    "Doc!"\n    return 1', "docstring"),
        ('class C:\n    "Doc."', 'class C:\n    "Doc!"', "docstring"),
        ("x = ...", "x = None", "changes type from ellipsis to NoneType"),
        ('b = b"xy"', 'b = "xy"', "changes type from bytes to str"),
        ("c = 2j", "c = 2", "changes type"),
    ],
)
def test_block_data_structure_changed(old: str, new: str, fragment: str) -> None:
    tool = ToolSchema(name="read_text_file")
    v = check(PatchBlockData(code=new), Scope.FULL, tool, boundary(code=old))
    assert_rejected(v, "structure_changed", fragment)


def test_block_data_points_at_the_first_differing_statement() -> None:
    old = "a = 1\nb = 2\nc = f(3)\n"
    new = "a = 5\nb = 2\nc = g(3)\n"
    v = check(PatchBlockData(code=new), Scope.PARAMS, ToolSchema(name="read_text_file"),
              boundary(code=old))  # fmt: skip
    assert_rejected(v, "structure_changed", "line 3")


@pytest.mark.parametrize(
    ("new", "reason"),
    [
        (BLOCK, "empty_patch"),
        (BLOCK.replace("limit = -1", "limit = -1  # unchanged value"), "empty_patch"),
        (BLOCK.replace("limit = -1", "limit = (-1)"), "empty_patch"),
        (BLOCK.replace("limit = -1", "limit = -1 +"), "syntax_error"),
        ("return 3\n", "syntax_error"),
        ("x = 1\x00", "syntax_error"),
    ],
)
def test_block_data_empty_or_unparseable(new: str, reason: str) -> None:
    v = check(PatchBlockData(code=new), Scope.PARAMS, ToolSchema(name="read_text_file"))
    assert_rejected(v, reason)


def test_block_data_against_a_broken_running_block() -> None:
    v = check(
        PatchBlockData(code="x = 2"),
        Scope.PARAMS,
        ToolSchema(name="read_text_file"),
        boundary(code="x = (1"),
    )
    assert_rejected(v, "structure_changed", "running block")


def _fake_env(table: list[Any] | None = None) -> dict[str, Any]:
    env: dict[str, Any] = {"read_text_file": lambda path, head=0: path * 2}
    if table is not None:
        env["__k"] = table
    return env


def _printed(code: str | ast.Module, env: dict[str, Any]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<t>", "exec"), env)
    return out.getvalue()


def test_accepted_block_data_is_what_the_worker_makes_effective() -> None:
    """The worker's own transform (constants as table lookups) of the OLD block, with the table
    refilled from the accepted NEW code, behaves exactly like the new code."""
    new = (
        BLOCK.replace("limit = -1", "limit = -7")
        .replace('"b.txt"', '"c.txt"')
        .replace("0.5", "None")
        .replace('"ok"', '"fine"')
        .replace("notes/", "docs/")
    )
    assert check(PatchBlockData(code=new), Scope.PARAMS, ToolSchema(name="read_text_file")).accepted
    tree, values, _ = transform_block(ast.parse(BLOCK), "__k")
    table = list(values)
    assert _printed(tree, _fake_env(table)) == _printed(BLOCK, _fake_env())
    table[:] = block_data_constants(new)
    out = _printed(tree, _fake_env(table))
    assert out == _printed(new, _fake_env())
    assert "c.txt:" in out
    assert "b.txt" not in out
    assert '"fine": true' in out
    assert out.endswith("-7\n")


def test_validated_block_data_patch_takes_effect_in_the_real_worker() -> None:
    """End to end: a reviewer's block-data patch, validated here, is applied by a real
    WorkerSession; the rest of the block (and the pending call) sees the new constants."""
    from controlscope.core import BlockResult, PrimitiveCall
    from controlscope.worker import WorkerSession

    code = (
        "base = 'notes'\n"
        "limit = 2\n"
        "first = read_text_file(path=f'{base}/a.txt', head=limit)\n"
        "second = read_text_file(path=f'{base}/b.txt', head=limit)\n"
        "print(first, second, limit * 10)\n"
    )
    patched = code.replace("/b.txt", "/c.txt").replace("limit * 10", "limit * 30")

    class Server:
        def __init__(self) -> None:
            self.calls: list[dict[str, Any]] = []

        def list_tools(self) -> list[ToolSchema]:
            return [
                ToolSchema(
                    name="read_text_file",
                    input_schema={
                        "type": "object",
                        "properties": {"path": {"type": "string"}, "head": {"type": "number"}},
                        "required": ["path"],
                    },
                )
            ]

        def call(
            self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
        ) -> Any:
            from controlscope.core import ToolResult

            self.calls.append(dict(arguments))
            return ToolResult(text=str(arguments["path"]))

        def close(self) -> None:
            pass

    server = Server()
    verdicts: list[Validation] = []

    class Handler:
        def on_block_start(self, block_id: str, code: str, replaces: str | None) -> None:
            pass

        def on_boundary(self, b: Boundary) -> Operation:
            proposal = PatchBlockData(code=patched) if b.block_call_index == 0 else Keep()
            verdict = validate_operation(proposal, Scope.PARAMS, boundary=b, tool=tool)
            verdicts.append(verdict)
            return verdict.realized

        def on_call(self, call: PrimitiveCall) -> None:
            pass

        def on_block_end(self, result: BlockResult) -> None:
            pass

    tool = server.list_tools()[0]
    with WorkerSession(server) as session:
        [result] = session.run_reply([("b1", code)], Handler())
    assert verdicts, (result.status, result.error)
    assert verdicts[0].accepted, verdicts[0].detail
    assert result.status == "completed", result.error
    assert server.calls == [{"path": "notes/a.txt", "head": 2}, {"path": "notes/c.txt", "head": 2}]
    assert result.output.strip() == "notes/a.txt notes/c.txt 60"


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=0, max_value=10**9),
    st.floats(min_value=0.0, allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=8),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(scalars, min_size=15, max_size=15))
def test_any_scalar_rewrite_of_data_constants_is_accepted(values: list[Any]) -> None:
    """Property: substituting arbitrary JSON scalars for the data constants (non-negative
    numbers: a sign is structure; non-empty text for f-string parts: the grammar has no empty
    parts) is a valid block-data patch whose data constants are exactly the substituted values;
    substituting the same values is an empty patch."""
    tree = ast.parse(BLOCK)
    constants = constants_in_order(tree)
    slots = slot_positions(tree)
    assert len(slots) == len(values)
    fstring_parts = {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
        if isinstance(part, ast.Constant)
    }
    values = [
        (str(v) or "-") if id(constants[i]) in fstring_parts else v
        for i, v in zip(slots, values, strict=True)
    ]
    values = [0.0 if isinstance(v, float) and v == 0 else v for v in values]  # no -0.0
    originals = [constants[i].value for i in slots]
    for i, value in zip(slots, values, strict=True):
        constants[i].value = value
    new = ast.unparse(tree)
    v = check(PatchBlockData(code=new), Scope.PARAMS, ToolSchema(name="read_text_file"))
    same = all(
        type(a) is type(b) and repr(a) == repr(b) for a, b in zip(originals, values, strict=True)
    )
    if same:
        assert_rejected(v, "empty_patch")
    else:
        assert_accepted(v)
    got = block_data_constants(new)
    assert [json.dumps(x) for x in got] == [json.dumps(x) for x in values]


# --------------------------------------------------------------------------- replace_workflow


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("", "empty_patch"),
        ("   \n\n", "empty_patch"),
        ("# just stop\n", "empty_patch"),
        ("for x in range(3)\n    print(x)", "syntax_error"),
        ("return None", "syntax_error"),
        ("await read_text_file('a')", "syntax_error"),
        ("print(1)\x00", "syntax_error"),
        ("(" * 300 + ")" * 300, "syntax_error"),
    ],
)
def test_replacement_rejected(code: str, reason: str) -> None:
    v = check(ReplaceWorkflow(code=code), Scope.FULL, ToolSchema(name="read_text_file"))
    assert_rejected(v, reason)


@pytest.mark.parametrize(
    "code",
    [
        "pass",
        'print("stopping: the file is missing")',
        "for name in names:\n    print(read_text_file(path=name))\n",
        "import json\ntry:\n    x = 1\nexcept Exception:\n    x = 2\n",
    ],
)
def test_replacement_accepted(code: str) -> None:
    assert_accepted(
        check(ReplaceWorkflow(code=code), Scope.FULL, ToolSchema(name="read_text_file"))
    )


def test_code_over_the_bound_is_refused_before_it_is_parsed_and_recorded_clipped() -> None:
    tool = ToolSchema(name="read_text_file")
    limit = MAX_CODE_CHARS
    over = "x = '" + "a" * (limit - 6) + "'\n"  # one statement that parses: its size alone
    for proposal, scope in (
        (ReplaceWorkflow(code=over), Scope.FULL),
        (PatchBlockData(code=over), Scope.PARAMS),
    ):
        v = check(proposal, scope, tool)
        assert_rejected(v, "too_large")
        assert f"{len(over):,} characters" in v.detail
        assert v.proposal is not None and v.proposal.kind == proposal.kind
        kept = v.proposal.code  # type: ignore[union-attr]
        assert len(kept) < limit + 100 and kept.startswith("x = 'a") and "chars cut" in kept
    at_the_bound = over.replace("a", "", 1)
    assert (len(over), len(at_the_bound)) == (limit + 1, limit)
    assert_accepted(check(ReplaceWorkflow(code=at_the_bound), Scope.FULL, tool))
    out_of_scope = check(ReplaceWorkflow(code=over), Scope.ARG, tool)  # recorded clipped too
    assert_rejected(out_of_scope, "out_of_scope")
    assert len(out_of_scope.proposal.code) < limit + 100  # type: ignore[union-attr]


# --------------------------------------------------------------------------- final arguments

LIMITED = ToolSchema(
    name="read_text_file",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}, "head": {"type": "integer", "minimum": 1}},
        "required": ["path"],
    },
)
CALL = "text = read_text_file('a.txt', 3)\nprint('done')\n"


def literal_boundary(code: str = CALL, **fields: Any) -> Boundary:
    """The pending call ``read_text_file('a.txt', 3)`` made directly by the block: its path
    and head are the literals of slots 0 and 1."""
    values = {
        "arguments": {"path": "a.txt", "head": 3},
        "literal_slots": {"path": 0, "head": 1},
        **fields,
    }
    return boundary("read_text_file", code=code).model_copy(update=values)


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        ("3)", "0)", "head: 0 is less than the minimum of 1"),
        ("'a.txt'", "5", "path: 5 is not of type 'string'"),
        ("3)", "'three')", "head: 'three' is not of type 'integer'"),
    ],
)
def test_block_data_whose_final_arguments_break_the_schema_is_rejected(
    old: str, new: str, fragment: str
) -> None:
    """The rewrite is a valid constant change, but the pending call would be sent with
    arguments its tool refuses: rejected as patch_arguments would be."""
    v = check(
        PatchBlockData(code=CALL.replace(old, new)), Scope.PARAMS, LIMITED, literal_boundary()
    )
    assert_rejected(v, "schema_violation", fragment)


def test_the_final_arguments_validated_are_the_worker_s() -> None:
    """A rewrite that changes only a later constant is accepted (it takes effect later) and
    leaves the call's arguments as they are, saying so; an optional literal set to ``None`` is
    left out of the call, as the tool's function does, so no null breaks the schema."""
    b = literal_boundary()
    no_op = PatchBlockData(code=CALL.replace("'done'", "'over'"))
    assert_accepted(check(no_op, Scope.PARAMS, LIMITED, b))
    final = final_arguments(b, no_op, params=tool_params(LIMITED))
    assert final.arguments == b.arguments and final.notice is not None
    dropped = PatchBlockData(code=CALL.replace("3)", "None)"))
    assert_accepted(check(dropped, Scope.PARAMS, LIMITED, b))
    assert final_arguments(b, dropped, params=tool_params(LIMITED)).arguments == {"path": "a.txt"}


def test_block_data_at_a_call_whose_data_it_cannot_edit_is_rejected() -> None:
    refusal = "the tool's function is called indirectly at line 1"
    b = literal_boundary(literal_slots={}, params_refusal=refusal)
    v = check(PatchBlockData(code=CALL.replace("'a.txt'", "'b.txt'")), Scope.FULL, LIMITED, b)
    assert_rejected(v, "data_not_editable", "indirectly")
    # patch_arguments still edits this call's data
    assert_accepted(check(PatchArguments(arguments={"path": "b.txt"}), Scope.FULL, LIMITED, b))
