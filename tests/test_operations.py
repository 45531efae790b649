"""The operation registry (``controlscope.core.OPERATIONS``): one spec per kind, which every
layer iterates; and what the kinds shape, byte for byte as the golden fixture recorded it
before the registry (review requests are part of recorded runs and of cache keys)."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from _operations_golden import FIXTURES, GOLDEN, golden
from controlscope.cli._run import _print_result
from controlscope.core import (
    LATTICE_OPERATIONS,
    OPERATION_GROUPS,
    OPERATION_KINDS,
    OPERATIONS,
    Boundary,
    CallSite,
    Keep,
    MalformedOperationError,
    OperationSet,
    OperationSpec,
    PatchArguments,
    PatchBlockData,
    RealizedOperationEvent,
    ReplaceWorkflow,
    Verdict,
    operation_spec,
)
from controlscope.record import RunSummary, read_events, summarize
from controlscope.replay import ENDPOINT_KINDS
from controlscope.review import decision_schema, operation_tools, parse_operation
from controlscope.run import RunResult, RunSpec
from controlscope.view._render import Links, render_run_page
from controlscope.view._timeline import read_run
from controlscope.worker._apply import Cancel, MakeCall, apply_operation
from controlscope.worker._sandbox import RUNTIME_MODULES

MAIN_JOB = FIXTURES / "main_job"
PACKAGE = Path(__file__).parents[1] / "src" / "controlscope"

SAMPLES: dict[str, BaseModel] = {
    "keep": Keep(),
    "patch_arguments": PatchArguments(arguments={"path": "b.txt", "n": [1, 2]}),
    "patch_block_data": PatchBlockData(code='x = "b.txt"\nprint(x)\n'),
    "replace_workflow": ReplaceWorkflow(code='print("instead")'),
}
"""One operation of each kind."""

SPECS = pytest.mark.parametrize("spec", OPERATIONS, ids=lambda s: s.kind)
COUNTED = pytest.mark.parametrize(
    "spec", [s for s in OPERATIONS if s.counter is not None], ids=lambda s: s.kind
)
GRANTS = [OperationSet.of(s, lat) for lat, table in LATTICE_OPERATIONS.items() for s in table]


# --- the golden fixture ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def computed() -> dict[str, Any]:
    return json.loads(json.dumps(golden()))


@pytest.mark.parametrize(
    "part",
    [
        "operation_tools",
        "decision_schema",
        "system_prompt",
        "render_view",
        "validate_operation",
        "parse_operation",
        "summarize_main_job",
    ],
)
def test_what_the_operation_kinds_shape_is_unchanged(
    part: str, recorded: dict[str, Any], computed: dict[str, Any]
) -> None:
    assert computed[part] == recorded[part]


# --- the registry ------------------------------------------------------------------------------


def test_the_registry_holds_every_kind_once_in_order() -> None:
    assert tuple(s.kind for s in OPERATIONS) == OPERATION_KINDS
    assert all(isinstance(s, OperationSpec) for s in OPERATIONS)
    with pytest.raises(KeyError, match="unknown operation kind 'nope'"):
        operation_spec("nope")


@SPECS
def test_a_kinds_model_and_spec_agree(spec: OperationSpec[Any]) -> None:
    assert operation_spec(spec.kind) is spec
    sample = SAMPLES[spec.kind]
    assert isinstance(sample, spec.model) and sample.model_dump()["kind"] == spec.kind
    assert spec.description and spec.rule.startswith(f"{spec.kind}: ")


@SPECS
def test_a_kinds_tool_and_decision_branch_are_offered_exactly_when_granted(
    spec: OperationSpec[Any],
) -> None:
    for granted in GRANTS:
        tools = {t.name: t for t in operation_tools(granted)}
        schema = decision_schema(granted)
        branches = {b["properties"]["operation"]["const"]: b for b in schema.get("anyOf", [schema])}
        assert (spec.kind in tools) == granted.allows(spec.kind) == (spec.kind in branches)
        if spec.kind in tools:
            assert tools[spec.kind].description == spec.description
            payload = {"none": [], "arguments": ["arguments"], "code": ["code"]}[spec.payload]
            assert tools[spec.kind].parameters["required"] == ["reason", *payload]
            assert branches[spec.kind]["required"] == ["reason", "operation", *payload]


@SPECS
def test_a_kind_parses_back_from_its_own_payload(spec: OperationSpec[Any]) -> None:
    sample = SAMPLES[spec.kind]
    payload = {"reason": "why", **sample.model_dump()}
    assert spec.parse(payload) == sample
    assert parse_operation(f" {spec.kind.upper()} ", payload) == sample
    if spec.payload != "none":
        with pytest.raises(MalformedOperationError, match=f"^malformed ' {spec.kind}' operation"):
            parse_operation(f" {spec.kind}", {"reason": "why"})


@SPECS
def test_a_kind_is_applied_as_its_spec_says(spec: OperationSpec[Any]) -> None:
    code = 'x = "a.txt"\nprint(x)\n'
    boundary = Boundary(
        block_id="t1.b0",
        call_index=0,
        block_call_index=0,
        tool="read",
        arguments={"path": "a.txt", "n": [1]},
        line=1,
        call_site=CallSite(module="__main__"),
        code=code,
    )
    applied = apply_operation(boundary, SAMPLES[spec.kind], original_tree=ast.parse(code))
    if spec.cancels:
        assert applied == Cancel(replacement=spec.new_code(SAMPLES[spec.kind]))
        return
    assert isinstance(applied, MakeCall) and applied.operation == spec.kind
    final = spec.final_arguments(SAMPLES[spec.kind], boundary)
    assert final is not None and applied.arguments == final.arguments
    new_code = spec.new_code(SAMPLES[spec.kind])
    assert applied.patched == (new_code is not None)
    assert applied.code == (new_code or code)


@COUNTED
def test_a_realized_kind_is_counted_in_its_summary_field(spec: OperationSpec[Any]) -> None:
    assert spec.counter in RunSummary.model_fields and spec.label
    events = read_events(MAIN_JOB)
    before = summarize(events)
    extra = RealizedOperationEvent(
        seq=len(events), t=events[-1].t, call_index=99, operation=SAMPLES[spec.kind]
    )
    after = summarize([*events, extra])
    assert getattr(after, spec.counter) == getattr(before, spec.counter) + 1
    others = [s.counter for s in OPERATIONS if s.counter not in (None, spec.counter)]
    assert [getattr(after, c) for c in others] == [getattr(before, c) for c in others]
    group = OPERATION_GROUPS[spec.group] if spec.group else ()
    assert spec.counter in group


@COUNTED
def test_a_kinds_count_is_printed_by_the_run_command_and_shown_on_the_run_page(
    spec: OperationSpec[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    summary = RunSummary.model_validate_json((MAIN_JOB / "summary.json").read_text())
    summary = summary.model_copy(update={spec.counter: 7})
    result = RunResult(
        summary=summary,
        verdict=Verdict(task_id="t", checks=[]),
        run_dir=MAIN_JOB,
        end_reason="final_answer",
    )
    _print_result(RunSpec(task="student_database/english_talent", out=MAIN_JOB), result)
    assert f"7 {spec.label}," in capsys.readouterr().out
    page = read_run(MAIN_JOB)
    html = render_run_page(page, None, Links(), None)
    assert f"{getattr(page.summary, spec.counter)} {spec.label} ·" in html


def test_each_replay_endpoint_takes_the_kinds_it_replays() -> None:
    assert ENDPOINT_KINDS == {
        "candidate": ("replace_workflow",),
        "retained": ("patch_arguments", "patch_block_data", "replace_workflow"),
        "shared_patch": ("patch_arguments",),
    }


# --- the block-data walk the worker's runtime runs ----------------------------------------------


def _imports(tree: ast.AST) -> set[str]:
    """The top modules a tree imports outside ``if __name__ != "__main__":`` (the controller's
    side of the bundle)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add((node.module or "").split(".")[0] if node.level == 0 else ".")
    return found


@pytest.mark.parametrize("module", RUNTIME_MODULES)
def test_the_runtime_bundle_imports_only_the_standard_library(module: str) -> None:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    imported = _imports(tree)
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
