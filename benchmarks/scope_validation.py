"""How long scope validation takes per proposal (controlscope.scope.validate_operation).

Validation runs once per review, on the controller, before the realized operation is executed;
this measures it for each operation kind on a filesystem-sized block and the filesystem
server's ``edit_file`` schema (draft-07, nested array of objects).

Prints a human-readable line per case, then, as its LAST line, one JSON object with the median
and p95 microseconds per case.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

from controlscope.core import (
    Boundary,
    CallSite,
    Keep,
    Operation,
    PatchArguments,
    PatchBlockData,
    ReplaceWorkflow,
    Scope,
    ToolSchema,
)
from controlscope.scope import validate_operation

EDIT_FILE = ToolSchema(
    name="edit_file",
    input_schema={
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "edits": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"oldText": {"type": "string"}, "newText": {"type": "string"}},
                    "required": ["oldText", "newText"],
                },
            },
            "dryRun": {"default": False, "type": "boolean"},
        },
        "required": ["path", "edits"],
    },
)

#: A 40-line block of the kind the planner writes for filesystem tasks.
BLOCK = "\n".join(
    [
        "import json",
        "report = []",
        "for name in ['a.txt', 'b.txt', 'c.txt', 'd.txt']:",
        "    text = read_text_file(path=f'notes/{name}', head=20)",
        "    words = [w for w in text.split() if len(w) > 3]",
        "    report.append({'name': name, 'words': len(words), 'ok': True})",
    ]
    + [f"value_{i} = {{'index': {i}, 'label': 'item {i}', 'ratio': {i / 10}}}" for i in range(30)]
    + [
        "edit_file(path='summary.md', edits=[{'oldText': 'TODO', 'newText': json.dumps(report)}])",
        "print(len(report))",
    ]
)

BOUNDARY = Boundary(
    block_id="b1",
    call_index=4,
    block_call_index=4,
    tool="edit_file",
    arguments={"path": "summary.md", "edits": [{"oldText": "TODO", "newText": "[]"}]},
    line=37,
    call_site=CallSite(module="b1"),
    code=BLOCK,
)

CASES: dict[str, Operation] = {
    "keep": Keep(),
    "patch_arguments": PatchArguments(
        arguments={"edits": [{"oldText": "TODO", "newText": "done"}], "dryRun": True}
    ),
    "patch_arguments_rejected": PatchArguments(arguments={"edits": [{"oldText": "TODO"}]}),
    "patch_block_data": PatchBlockData(code=BLOCK.replace("'summary.md'", "'report.md'")),
    "patch_block_data_rejected": PatchBlockData(code=BLOCK.replace("len(w) > 3", "len(w) >= 3")),
    "replace_workflow": ReplaceWorkflow(code=BLOCK),
}


def measure(run: Callable[[], object], repeats: int = 300) -> tuple[float, float]:
    """Median and p95 wall microseconds of ``run`` over ``repeats`` calls (after a warm-up)."""
    for _ in range(20):
        run()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        samples.append((time.perf_counter() - t0) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def main() -> None:
    """Measure every case and print the JSON summary last."""
    out: dict[str, float] = {}
    for name, proposal in CASES.items():
        verdict = validate_operation(proposal, Scope.FULL, boundary=BOUNDARY, tool=EDIT_FILE)
        median, p95 = measure(
            lambda p=proposal: validate_operation(  # type: ignore[misc]
                p, Scope.FULL, boundary=BOUNDARY, tool=EDIT_FILE
            )
        )
        print(
            f"{name:28s} accepted={verdict.accepted!s:5s} "
            f"median {median:8.1f} us  p95 {p95:8.1f} us"
        )
        out[f"{name}_median_us"] = round(median, 1)
        out[f"{name}_p95_us"] = round(p95, 1)
    out["block_lines"] = BLOCK.count("\n") + 1
    print(json.dumps(out))


if __name__ == "__main__":
    main()
