"""The reviewer-facing and recorded text the operation kinds shape, for the golden fixture
``fixtures/operations_v1.json`` (review requests are part of recorded runs and of cache keys:
they must not change by one byte).

``python tests/_operations_golden.py`` rewrites the fixture from the code in ``PYTHONPATH``;
``tests/test_operations.py`` checks the code against it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from controlscope.core import (
    LATTICE_OPERATIONS,
    Boundary,
    CallSite,
    Keep,
    OperationSet,
    PatchArguments,
    PatchBlockData,
    ReplaceWorkflow,
    ToolSchema,
    ViewLimits,
)
from controlscope.record import read_events, summarize
from controlscope.review import (
    DecisionRecord,
    PublicState,
    decision_schema,
    operation_tools,
    parse_operation,
    render_view,
    system_prompt,
)
from controlscope.scope import validate_operation

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "operations_v1.json"

_TOOL = ToolSchema(
    name="write_file",
    description="Write a file.",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
)
_CODE = 'n = 3\nwrite_file(path="a.txt", content="x" * n)\nprint("done")\n'


def _boundary(**changes: Any) -> Boundary:
    fields: dict[str, Any] = {
        "block_id": "t1.b0",
        "call_index": 4,
        "block_call_index": 0,
        "tool": "write_file",
        "arguments": {"path": "a.txt", "content": "xxx"},
        "line": 2,
        "call_site": CallSite(module="__main__"),
        "code": _CODE,
        "literal_slots": {"path": 1},
    }
    return Boundary(**{**fields, **changes})


def _grants() -> list[OperationSet]:
    return [OperationSet.of(s, lat) for lat, table in LATTICE_OPERATIONS.items() for s in table]


def _key(granted: OperationSet) -> str:
    return f"{granted.scope.name.lower()}/{granted.lattice}"


def _views() -> dict[str, Any]:
    ops = [
        Keep(),
        PatchArguments(arguments={"path": "b.txt"}),
        PatchBlockData(code=_CODE.replace("3", "4")),
        ReplaceWorkflow(code='print("stop")\nprint("here")'),
    ]
    fallback = DecisionRecord(
        call_index=9,
        block_id="t1.b0",
        tool="write_file",
        granted="arg",
        operation=Keep(),
        fallback="malformed",
    )
    decisions = (
        *(
            DecisionRecord(
                call_index=i, block_id="t1.b0", tool="write_file", granted="full", operation=op
            )
            for i, op in enumerate(ops)
        ),
        fallback,
    )
    boundaries = {
        "slots": _boundary(),
        "no_slots": _boundary(literal_slots={}),
        "refused": _boundary(params_refusal="the call is made indirectly"),
    }
    out: dict[str, Any] = {}
    for name, boundary in boundaries.items():
        state = PublicState(goal="g", boundary=boundary, tools=(_TOOL,), decisions=decisions)
        for granted in _grants():
            for limits in (None, ViewLimits(decisions=2, message_chars=40)):
                key = f"{name}/{_key(granted)}/{'bounded' if limits else 'full'}"
                messages = render_view(state, "with_feedback", granted, limits=limits)
                out[key] = [m.model_dump(mode="json") for m in messages]
    return out


def _validations() -> dict[str, Any]:
    proposals = {
        "keep": Keep(),
        "args": PatchArguments(arguments={"path": "b.txt"}),
        "args_same": PatchArguments(arguments={"path": "a.txt"}),
        "args_unknown": PatchArguments(arguments={"mode": "x"}),
        "args_schema": PatchArguments(arguments={"path": 3}),
        "data": PatchBlockData(code=_CODE.replace('"a.txt"', '"b.txt"')),
        "data_same": PatchBlockData(code=_CODE),
        "data_structure": PatchBlockData(code=_CODE + "x = 1\n"),
        "data_syntax": PatchBlockData(code="def ("),
        "data_big": PatchBlockData(code="x" * 1_000_001),
        "replace": ReplaceWorkflow(code='print("x")'),
        "replace_empty": ReplaceWorkflow(code="# nothing"),
        "replace_syntax": ReplaceWorkflow(code="return 1"),
        "replace_big": ReplaceWorkflow(code="#" * 1_000_001),
    }
    out: dict[str, Any] = {}
    for granted in _grants():
        for name, proposal in proposals.items():
            for bname, boundary in (("b", _boundary()), ("r", _boundary(params_refusal="no"))):
                v = validate_operation(proposal, granted, boundary=boundary, tool=_TOOL)
                dumped = v.model_dump(mode="json")
                for side in ("proposal", "realized"):
                    code = (dumped[side] or {}).get("code")
                    if isinstance(code, str) and len(code) > 200:
                        dumped[side]["code"] = f"{len(code)} chars: {code[:50]}...{code[-50:]}"
                out[f"{_key(granted)}/{name}/{bname}"] = dumped
    return out


def _parses() -> dict[str, Any]:
    cases: list[tuple[Any, Any]] = [
        ("keep", None),
        (" Patch_Arguments ", {"arguments": {"a": 1}}),
        ("patch_arguments", {"arguments": '{"a": 1}'}),
        ("patch_arguments", {"arguments": "[1"}),
        ("patch_arguments", {"arguments": [1]}),
        ("patch_arguments", {}),
        ("patch_block_data", {"code": "```python\nx = 1\n```"}),
        ("patch_block_data", {"code": 3}),
        ("replace_workflow", {}),
        ("replace_workflow", {"code": "x = 2", "arguments": {}}),
        ("nope", {}),
        (3, {}),
        ("keep", [1]),
    ]
    out: dict[str, Any] = {}
    for i, (kind, payload) in enumerate(cases):
        try:
            out[str(i)] = parse_operation(kind, payload).model_dump(mode="json")
        except ValueError as err:
            out[str(i)] = f"{type(err).__name__}: {err}"
    return out


def golden() -> dict[str, Any]:
    """Everything the fixture holds, computed by the code in ``PYTHONPATH``."""
    tools: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    prompts: dict[str, str] = {}
    for granted in _grants():
        key = _key(granted)
        tools[key] = [t.model_dump(mode="json") for t in operation_tools(granted)]
        schemas[key] = decision_schema(granted)
        for mode in ("tools", "json"):
            for boundary in ("block", "reply"):
                text = system_prompt(granted, mode=mode, replace_boundary=boundary)
                prompts[f"{key}/{mode}/{boundary}"] = text
    main_job = summarize(read_events(FIXTURES / "main_job")).model_dump(mode="json")
    return {
        "operation_tools": tools,
        "decision_schema": schemas,
        "system_prompt": prompts,
        "render_view": _views(),
        "validate_operation": _validations(),
        "parse_operation": _parses(),
        "summarize_main_job": main_job,
    }


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(golden(), indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    sys.stdout.write(f"wrote {GOLDEN}\n")
