"""Reviews a small model can get right: decisions decoded under schemas narrowed to the pending
call (its tool's data parameters, its block's constants), code shown without per-line markers,
and answers that break the narrowed form recorded as fallbacks, never repaired."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from controlscope.core import (
    Boundary,
    CallSite,
    Condition,
    OperationSet,
    PatchBlockData,
    Scope,
    ToolSchema,
    ViewLimits,
    arguments_schema,
    block_with_constants,
    constants_schema,
    editable_constants,
    fences,
)
from controlscope.envs.filesystem.server import start_filesystem_server
from controlscope.models import OpenAIModel
from controlscope.models._grammar import grammar_problem
from controlscope.models._scripted import ScriptedModel
from controlscope.review import (
    ModelReviewer,
    PublicState,
    decision_schema,
    operation_tools,
    render_view,
    review_boundary,
)
from controlscope.scope import validate_operation
from fixtures.stream_server import Answer, StreamServer

TOOL = ToolSchema(
    name="copy_file",
    description="Copy a file.",
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "pattern": "^/.*$", "description": "where from"},
            "count": {"type": "integer", "minimum": 1},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 9}},
            "mode": {"enum": ["copy", "link"]},
            "note": {"anyOf": [{"type": "string", "format": "email"}, {"type": "null"}]},
            "script": {"type": "string", "description": "Python code to run afterwards"},
        },
        "required": ["path", "script"],
    },
)

BLOCK = (
    'root = "/workspace"\n'
    "n = 3\n"
    'print(f"step {n}")\n'
    'text = read_text_file(path=root + "/notes.txt", head=n)\n'
    "flag = None\n"
)
READ = ToolSchema(
    name="read_text_file",
    description="Read a file.",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}, "head": {"type": "number"}},
        "required": ["path"],
    },
)


def _state(tool: ToolSchema, code: str = BLOCK, **boundary: Any) -> PublicState:
    fields: dict[str, Any] = {
        "block_id": "t0.b0",
        "call_index": 0,
        "block_call_index": 0,
        "tool": tool.name,
        "arguments": {"path": "/workspace/notes.txt", "head": 3},
        "line": 4,
        "call_site": CallSite(module="t0.b0"),
        "code": code,
        "literal_slots": {"head": 5},
    }
    fields.update(boundary)
    return PublicState(
        goal="Read the notes.",
        reply_blocks=(code,),
        running_block=0,
        boundary=Boundary(**fields),
        tools=(tool,),
    )


def test_arguments_schema_is_the_tools_data_parameters_and_their_types() -> None:
    schema = arguments_schema(TOOL)
    assert schema == {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "count": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "mode": {"enum": ["copy", "link"]},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },  # the code-valued "script" is not a data parameter (paper 3.1)
        "additionalProperties": False,
    }
    assert grammar_problem(schema) is None  # llama.cpp's grammar enforces all of it
    jsonschema.validate({"path": "/b", "tags": ["x"]}, schema)
    for bad in (
        {"where": "where clause", "arguments": {"path": "/b"}},
        {"script": "x"},
        {"count": "2"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    open_tool = ToolSchema(name="anything", input_schema={"type": "object"})
    assert arguments_schema(open_tool) is None


def test_decision_schema_and_tools_carry_the_pending_tools_parameters() -> None:
    state = _state(TOOL)
    arg = OperationSet.of(Scope.ARG)
    narrowed = arguments_schema(TOOL)
    branches = decision_schema(arg, state)["anyOf"]
    assert branches[1]["properties"]["arguments"] == narrowed
    (patch,) = [t for t in operation_tools(arg, state) if t.name == "patch_arguments"]
    assert patch.parameters["properties"]["arguments"] == narrowed
    assert grammar_problem(decision_schema(OperationSet.of(Scope.FULL), state)) is None
    the_issues_answer = {
        "reason": "wrong folder",
        "operation": "patch_arguments",
        "arguments": {"where": "where clause", "arguments": {"path": "/workspace/x"}},
    }
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(the_issues_answer, decision_schema(arg, state))


def test_narrowed_decision_schemas_compile_to_llama_grammars() -> None:
    """The embedded model decodes under them: llama.cpp's converter must accept each."""
    import llama_cpp.llama_grammar as grammar_mod

    for tool in (TOOL, READ):
        for scope in Scope:
            schema = decision_schema(OperationSet.of(scope, "v2"), _state(tool))
            gbnf = grammar_mod.json_schema_to_gbnf(json.dumps(schema))
            if scope >= Scope.ARG:
                assert "path" in gbnf, scope
            if scope >= Scope.PARAMS:
                assert "constants" in gbnf, scope


def test_the_real_filesystem_tools_narrow_to_their_own_parameters(tmp_path: Any) -> None:
    server = start_filesystem_server(tmp_path)
    try:
        tools = {t.name: t for t in server.list_tools()}
    finally:
        server.close()
    assert arguments_schema(tools["list_allowed_directories"]) is None  # no parameter
    tools.pop("list_allowed_directories")
    for name, tool in tools.items():
        schema = arguments_schema(tool)
        assert schema is not None, name
        assert set(schema["properties"]) == set(tool.input_schema["properties"]), name
        assert grammar_problem(schema) is None, name


def test_constants_schema_is_the_blocks_editable_slots() -> None:
    table = editable_constants(BLOCK)
    # f-string text ("step ") is left out; None may become any scalar
    assert list(table.values()) == ["/workspace", 3, "/notes.txt", None]
    schema = constants_schema(BLOCK)
    assert schema is not None and schema["additionalProperties"] is False
    by_value = {table[int(k)]: v for k, v in schema["properties"].items()}
    assert by_value["/workspace"] == {"type": "string"} and by_value[3] == {"type": "number"}
    assert by_value[None] == {"type": ["string", "number", "boolean", "null"]}
    assert grammar_problem(schema) is None
    assert constants_schema("x = y") is None  # no constant: the generic code is asked for
    params = decision_schema(OperationSet.of(Scope.PARAMS, "v2"), _state(READ))
    (branch,) = [
        b for b in params["anyOf"] if b["properties"]["operation"]["const"] == "patch_block_data"
    ]
    assert branch["properties"]["constants"] == schema and "code" not in branch["properties"]


def test_a_constants_answer_is_the_block_with_those_constants() -> None:
    slot = {v: k for k, v in editable_constants(BLOCK).items()}
    new = block_with_constants(BLOCK, {str(slot["/notes.txt"]): "/todo.txt", str(slot[3]): 5})
    assert new == BLOCK.replace('"/notes.txt"', "'/todo.txt'").replace("n = 3", "n = 5")
    state = _state(READ, literal_slots={"head": slot[3]})
    answer = {
        "reason": "other file",
        "operation": "patch_block_data",
        "constants": {str(slot["/notes.txt"]): "/todo.txt", str(slot[3]): 5},
    }
    model = ScriptedModel([json.dumps(answer)])
    condition = Condition(scope=Scope.PARAMS, lattice="v2", review_mode="json")
    outcome = review_boundary(ModelReviewer(model), state, condition)
    assert outcome.validation.accepted, outcome.validation.detail
    assert outcome.realized == PatchBlockData(code=new)
    assert validate_operation(
        outcome.realized, condition.operations, boundary=state.boundary, tool=READ
    ).accepted
    text = render_view(state, "with_feedback", condition.operations, mode="json")[1].content or ""
    assert json.dumps({str(k): v for k, v in editable_constants(BLOCK).items()}) in text


@pytest.mark.parametrize(
    ("scope", "answer", "problem"),
    [
        (  # the issue's Arg answer: not the tool's own parameters
            Scope.ARG,
            {
                "operation": "patch_arguments",
                "arguments": {"where": "w", "arguments": {"path": "/x"}},
            },
            "Additional properties are not allowed",
        ),
        (  # a constant the block does not have
            Scope.PARAMS,
            {"operation": "patch_block_data", "constants": {"99": "x"}},
            "('99' was unexpected)",
        ),
        (  # a value of another type than the parameter's
            Scope.ARG,
            {"operation": "patch_arguments", "arguments": {"head": "three"}},
            "is not of type 'number'",
        ),
    ],
)
def test_an_answer_outside_the_narrowed_schema_is_a_recorded_malformed_fallback(
    scope: Scope, answer: dict[str, Any], problem: str
) -> None:
    """Never repaired: the unknown names are not dropped, the answer is no proposal."""
    events: list[Any] = []
    model = ScriptedModel([json.dumps({"reason": "r", **answer})])
    lattice = "v2" if scope == Scope.PARAMS else "default"
    condition = Condition(scope=scope, lattice=lattice, review_mode="json")
    outcome = review_boundary(ModelReviewer(model), _state(READ), condition, log=events.append)
    assert outcome.fallback == "malformed" and outcome.realized.kind == "keep"
    assert problem in outcome.validation.detail
    (proposal,) = [e for e in events if e.type == "proposal"]
    assert (
        proposal.operation is None and json.loads(proposal.raw)["operation"] == answer["operation"]
    )


@pytest.mark.parametrize("view", ["code_only", "with_feedback"])
def test_the_view_shows_code_with_no_marker_a_model_could_copy(view: str) -> None:
    """The code is one fenced block per reply block, each line exactly the program's; labels and
    the pending line's number stand outside the fence."""
    queued = "print(list_directory(path=root))\n"
    state = _state(READ).model_copy(
        update={"reply_blocks": (BLOCK, queued), "queued_blocks": (queued,)}
    )
    text = render_view(state, view, OperationSet.of(Scope.FULL), mode="json")[1].content or ""  # type: ignore[arg-type]
    blocks = fences(text)
    assert [b.body for b in blocks] == [BLOCK.rstrip(), queued.rstrip()]
    assert all(b.language == "python" for b in blocks)
    for line in text.split("\n"):
        if line.startswith("text = read_text_file(") or line.endswith("head=n)"):
            assert line == 'text = read_text_file(path=root + "/notes.txt", head=n)', line
    assert "Block 1 of 2, running; the pending call is its line 4:\n```python\n" in text


@pytest.fixture
def server() -> Iterator[StreamServer]:
    answer = {"reason": "wrong file", "operation": "patch_arguments", "arguments": {"path": "/b"}}
    fake = StreamServer(Answer(pieces=[json.dumps(answer)], streams=False))
    yield fake
    fake.close()


def test_an_openai_json_review_sends_the_narrowed_schema(server: StreamServer) -> None:
    """An OpenAI-compatible server that honours ``response_format: json_schema`` decodes the
    decision under the pending tool's parameters (``review_mode="json"``, opt-in); a tools-mode
    review (the default for served models) offers the narrowed ``patch_arguments`` tool."""
    model = OpenAIModel("m", base_url=server.base_url, api_key="k", max_retries=0)
    state = _state(READ)
    json_review = Condition(scope=Scope.ARG, review_mode="json")
    outcome = review_boundary(ModelReviewer(model), state, json_review)
    assert outcome.validation.accepted and outcome.realized.kind == "patch_arguments"
    sent = server.bodies[-1]["response_format"]
    assert sent["type"] == "json_schema"
    branches = sent["json_schema"]["schema"]["anyOf"]
    assert branches[1]["properties"]["arguments"] == arguments_schema(READ)
    review_boundary(ModelReviewer(model), state, Condition(scope=Scope.ARG))
    body = server.bodies[-1]
    assert "response_format" not in body
    (tool,) = [t for t in body["tools"] if t["function"]["name"] == "patch_arguments"]
    assert tool["function"]["parameters"]["properties"]["arguments"] == arguments_schema(READ)


@pytest.mark.slow
@pytest.mark.needs_weights
def test_the_embedded_models_argument_patch_names_the_tools_own_parameters(tmp_path: Any) -> None:
    """The issue's boundary: the embedded 1.5B model, made to patch (only the
    ``patch_arguments`` branch of its decision schema), writes the pending tool's own
    parameters, and validation accepts the patch."""
    from controlscope.models import LocalModel

    server = start_filesystem_server(tmp_path)
    try:
        tools = tuple(server.list_tools())
    finally:
        server.close()
    code = (
        'entries = list_directory(path="/workspace/student")\n'
        "for line in entries.splitlines():\n"
        '    if line.startswith("[DIR] "):\n'
        '        print(read_text_file(path="/workspace/students/" + line[6:]))\n'
    )
    state = PublicState(
        goal="The folder /workspace/students holds one sub-folder per student. List them.",
        reply_blocks=(code,),
        running_block=0,
        boundary=Boundary(
            block_id="t0.b0",
            call_index=0,
            block_call_index=0,
            tool="list_directory",
            arguments={"path": "/workspace/student"},
            line=1,
            call_site=CallSite(module="t0.b0"),
            code=code,
            literal_slots={"path": 0},
        ),
        tools=tools,
    )
    condition = Condition(scope=Scope.ARG, review_mode="json", max_tokens=256)
    with LocalModel("1.5b", n_ctx=8192, seed=0) as model:
        request = ModelReviewer(model).build_request(state, condition)
        assert request.json_schema is not None
        (patch,) = [
            b
            for b in request.json_schema["anyOf"]
            if b["properties"]["operation"]["const"] == "patch_arguments"
        ]
        response = model.complete(request.model_copy(update={"json_schema": patch}))
    decision = json.loads(response.text or "")
    assert set(decision["arguments"]) <= {"path"}, decision
    outcome = review_boundary(ModelReviewer(ScriptedModel([response.text or ""])), state, condition)
    assert outcome.validation.reason != "unknown_argument", outcome.validation.detail
    assert outcome.proposal is not None and outcome.proposal.operation is not None


def test_a_bounded_view_cuts_code_outside_its_fences() -> None:
    """A cut is marked between two fences of whole lines, never inside the code."""
    long = "".join(f"step_{i} = read_text_file(path='/workspace/{i}.txt')\n" for i in range(200))
    state = _state(READ, code=long).model_copy(update={"reply_blocks": (long,)})
    granted = OperationSet.of(Scope.FULL)
    text = render_view(state, "with_feedback", granted, limits=ViewLimits())[1].content or ""
    head, tail = fences(text)
    assert long.startswith(head.body + "\n") and long.endswith(tail.body + "\n")
    assert "cut" not in head.body + tail.body
    assert "lines of this block cut ...]" in text[head.end : tail.start]
