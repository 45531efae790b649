"""The operation kinds: what the reviewer is offered and told, how proposals are judged and
parsed, and what a run's summary counts, byte for byte as the golden fixture recorded them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from _operations_golden import GOLDEN, golden


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
