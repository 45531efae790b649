"""The app protocols (paper section 5.3, appendix A.2) on the apps environment: per-block
request allowances (V1 renews them for a Full replacement, V2 shares them), quota rejections,
the cap of natural blocks, the private-runtime guard, Params under V2, the pagination case
repaired by an argument edit, a data edit and a paging workflow, and the frozen aggregate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import controlscope as cs
from controlscope import replay
from controlscope.core import APP_PROTOCOLS, Condition, ModelResponse, TaskBudgets
from controlscope.envs.apps import TEMPLATES, instance
from controlscope.models import ScriptedModel
from controlscope.review import ModelReviewer
from controlscope.worker._guard import private_runtime_problem

TASK = "total_received_from/1"
KEEP = json.dumps({"reason": "fine", "operation": "keep"})
DOC = "api_docs__show_app_descriptions()\n"


def fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def script(tmp_path: Path, *answers: Any) -> str:
    path = tmp_path / f"script{len(list(tmp_path.glob('script*')))}.json"
    path.write_text(json.dumps(list(answers)))
    return f"scripted:{path}"


def blocks(*codes: str) -> dict[str, Any]:
    """One planner reply queuing ``codes`` as native execute_python calls (JSON, for a script)."""
    calls = tuple(
        ScriptedModel.tool_call("execute_python", {"code": c}).tool_calls[0] for c in codes
    )
    return ModelResponse(tool_calls=calls, finish_reason="tool_calls").model_dump(mode="json")


def events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def block_ends(run_dir: Path) -> list[dict[str, Any]]:
    return [e["result"] for e in events(run_dir) if e["type"] == "block_end"]


def run(tmp_path: Path, name: str, planner: list[Any], **spec: Any) -> cs.RunResult:
    reviews = spec.pop("reviews", None)
    options: dict[str, Any] = {"scope": "keep", "schedule": "never"} | spec
    if reviews is not None:
        options["reviewer_model"] = script(tmp_path, *reviews)
    return cs.run_task(
        cs.RunSpec(
            task=TASK, env="apps", model=script(tmp_path, *planner), out=tmp_path / name, **options
        )
    )


# --- the protocols as conditions ---------------------------------------------------------------


def test_the_protocols_fix_their_settings_and_are_recorded(tmp_path: Path) -> None:
    v1 = cs.RunSpec(task=TASK, env="apps", app_protocol="v1", out=tmp_path / "a")
    assert (v1.lattice, v1.schedule, v1.replace_boundary) == ("default", "per_block", "block")
    v2 = cs.RunSpec(task=TASK, env="apps", app_protocol="v2", scope="params", out=tmp_path / "b")
    assert (v2.lattice, v2.schedule, v2.replace_boundary) == ("v2", "continuous", "block")
    with pytest.raises(ValueError, match="v1 app protocol has lattice 'default'"):
        cs.RunSpec(task=TASK, env="apps", app_protocol="v1", lattice="v2", out=tmp_path / "c")
    with pytest.raises(ValueError, match="replace_boundary"):
        cs.RunSpec(
            task=TASK, env="apps", app_protocol="v2", replace_boundary="reply", out=tmp_path / "d"
        )
    with pytest.raises(ValueError, match="caps blocks"):
        Condition(app_protocol="v1", replace_boundary="block", block_allowance="renew")
    with pytest.raises(ValueError, match="block_allowance"):
        Condition(
            app_protocol="v2",
            lattice="v2",
            replace_boundary="block",
            runtime_guard=True,
            block_allowance="renew",
            budgets=TaskBudgets(blocks=40, block_requests=250),
        )
    result = run(tmp_path, "v1", [fenced(DOC), "Done."], app_protocol="v1")
    start = events(result.run_dir)[0]
    config = start["config"]
    assert config["app_protocol"] == "v1" and config["block_allowance"] == "renew"
    assert config["runtime_guard"] is False and start["schedule"] == "never"
    assert (start["budgets"]["blocks"], start["budgets"]["block_requests"]) == (40, 250)
    assert APP_PROTOCOLS["v2"]["runtime_guard"] is True


def test_a_request_over_the_blocks_allowance_is_a_recorded_quota_rejection(
    tmp_path: Path,
) -> None:
    """Three requests per block: the fourth is refused and stops its block; the block queued
    behind it in the same reply gets an allowance of its own."""
    greedy = "for i in range(5):\n    print(i)\n    " + DOC
    planner = [blocks(greedy, DOC * 2), "Done."]
    result = run(tmp_path, "quota", planner, max_block_requests=3)
    ends = block_ends(result.run_dir)
    first, second = ends
    assert first["status"] == "cancelled" and first["calls"] == 3
    assert first["refusal"]["kind"] == "quota" and first["refusal"]["tool"] == (
        "api_docs__show_app_descriptions"
    )
    assert "allowance of 3 API requests is spent" in first["error"]
    assert first["output"].split() == ["0", "1", "2", "3"]
    assert second["status"] == "completed" and second["calls"] == 2
    assert (first["allowance"], second["allowance"]) == (3, 3)
    summary = result.summary
    assert (summary.primitive_calls, summary.quota_rejections, summary.api_attempts) == (5, 1, 6)
    calls = [e for e in events(result.run_dir) if e["type"] == "primitive_call"]
    boundaries = [e for e in events(result.run_dir) if e["type"] == "boundary"]
    assert len(calls) == len(boundaries) == 5  # the refused request reached no boundary


REPLACE = json.dumps({"reason": "more", "operation": "replace_workflow", "code": DOC * 3})


@pytest.mark.parametrize("protocol", ["v1", "v2"])
def test_v1_renews_a_replacements_allowance_and_v2_shares_it(tmp_path: Path, protocol: str) -> None:
    """A block of four requests under an allowance of three, replaced at its third request by
    three requests: V1's replacement starts a new allowance (recorded) and makes all three;
    V2's shares the one left, and its second request is a quota rejection."""
    scope = "full"
    result = run(
        tmp_path,
        protocol,
        [fenced(DOC * 4), "Done."],
        scope=scope,
        schedule="once:2",
        app_protocol=protocol,
        max_block_requests=3,
        reviews=[REPLACE],
    )
    original, replacement = block_ends(result.run_dir)
    assert original["status"] == "cancelled" and original["calls"] == 2
    summary = result.summary
    assert summary.replacements == 1
    if protocol == "v1":
        assert replacement["allowance_renewed"] and replacement["allowance"] == 3
        assert replacement["status"] == "completed" and replacement["calls"] == 3
        assert (summary.allowance_renewals, summary.quota_rejections) == (1, 0)
        assert summary.primitive_calls == 5
    else:
        assert not replacement["allowance_renewed"] and replacement["allowance"] == 1
        assert replacement["refusal"]["kind"] == "quota" and replacement["calls"] == 1
        assert (summary.allowance_renewals, summary.quota_rejections) == (0, 1)
        assert summary.primitive_calls == 3 and summary.api_attempts == 4


def test_the_task_stops_at_its_cap_of_natural_blocks(tmp_path: Path) -> None:
    two = blocks(DOC, "print('late')")
    result = run(tmp_path, "cap", [fenced(DOC), two, fenced(DOC), "Done."], max_blocks=2)
    assert result.end_reason == "budget:blocks"
    ends = block_ends(result.run_dir)
    assert [e["status"] for e in ends] == ["completed", "completed", "cancelled"]
    assert "cap of 2 blocks" in ends[2]["error"]
    assert result.summary.budgets_hit == ["blocks"] and result.summary.primitive_calls == 2
    assert result.verdict.checks  # graded as it stands


# --- the private-runtime guard ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "problem"),
    [
        ("import sqlite3\nsqlite3.connect('apps.db')", "import of sqlite3"),
        ("print(open('apps.db').read())", "use of open"),
        ("from os import path", "import from os"),
        ("f = music__login\nprint(f.__globals__)", "access to the attribute __globals__"),
        ("print(_cs_call('music__login', {}))", "use of _cs_call"),
        ("print(getattr(music__login, 'x'))", "use of getattr"),
        ("__import__('subprocess')", "use of __import__"),
        # detours: a module an allowed module imported, attributes by a string, frames
        ("import typing\ntyping.sys.modules['os'].system('id')", "access to the attribute sys"),
        ("from typing import sys", "import of typing.sys"),
        ("import dataclasses as d\nd.builtins.open('apps.db')", "access to the attribute builtins"),
        ("import operator\noperator.attrgetter('__globals__')(f)", "access to the attribute attrg"),
        ("from operator import methodcaller", "import of operator.methodcaller"),
        ("import string\nstring.Formatter().get_field('0.__globals__', (f,), {})", "access to"),
        ("print('{0.__globals__}'.format(music__login))", "a format field reaching __globals__"),
        ("print('{0:{1.__class__}}'.format(1, 2))", "a format field reaching __class__"),
        ("t = '{0.' + 'x}'\nprint(t.format(f))", "str.format on a string built at run time"),
        ("match f:\n    case object(__globals__=g): pass", "access to the attribute __g"),
        ("def g():\n    yield 1\nprint(g().gi_frame)", "access to the attribute gi_frame"),
        ("print(type(1).mro())", "access to the attribute mro"),
        ("x = " + "not " * 3000 + "__import__('os')", "code nested too deeply to check"),
        ("import typing\ndef h(x: 'int'): pass\ntyping.get_type_hints(h)", "access to the at"),
    ],
)
def test_the_guard_names_what_reaches_for_private_state(code: str, problem: str) -> None:
    found = private_runtime_problem(code)
    assert found is not None and found.startswith(problem), found


def test_the_guard_lets_computation_through() -> None:
    for t in TEMPLATES:  # every reference solution can be a V2 program
        built = instance(t, 1).built
        for code in (built.solution, *built.variants.values()):
            assert private_runtime_problem(code) is None, t
    assert private_runtime_problem("import json, re, datetime\nfor _ in range(3): pass") is None
    fine = "import collections.abc, json\nprint('{0:>{1}} {x[a]}'.format('a', 3, x={'a': 1}))\n"
    fine += "print(json.decoder.JSONDecodeError, collections.abc.Mapping, f'{1:.2f}')"
    assert private_runtime_problem(fine) is None


def test_v2_refuses_and_records_private_runtime_access(tmp_path: Path) -> None:
    sneaky = "import sqlite3\nprint(sqlite3.connect('apps.db').execute('select 1').fetchall())"
    planner = [fenced(sneaky), fenced(DOC), "Done."]
    guarded = run(tmp_path, "v2", planner, app_protocol="v2")
    refused, fine = block_ends(guarded.run_dir)
    assert refused["status"] == "error" and refused["calls"] == 0
    assert refused["refusal"] == {
        "kind": "private_runtime",
        "detail": "import of sqlite3 (line 1)",
        "tool": None,
    }
    assert "private-runtime guard" in refused["error"] and refused["output"] == ""
    assert fine["status"] == "completed"
    assert guarded.summary.guard_refusals == 1
    # the planner saw why
    planner_requests = [e for e in events(guarded.run_dir) if e["type"] == "model_call"]
    assert "private-runtime guard" in json.dumps(planner_requests[1]["request"]["messages"])
    unguarded = run(
        tmp_path, "v1", [fenced("import sqlite3\nprint('ran')"), "Done."], app_protocol="v1"
    )
    [ran] = block_ends(unguarded.run_dir)
    assert ran["status"] == "completed" and ran["output"].strip() == "ran"


def test_v2_guards_a_replacement_too(tmp_path: Path) -> None:
    bad = json.dumps({"reason": "x", "operation": "replace_workflow", "code": "import os\n"})
    result = run(
        tmp_path,
        "r",
        [fenced(DOC * 2), "Done."],
        scope="full",
        schedule="once:1",
        app_protocol="v2",
        reviews=[bad],
    )
    original, replacement = block_ends(result.run_dir)
    assert original["status"] == "cancelled"
    assert replacement["refusal"]["kind"] == "private_runtime"
    assert result.summary.guard_refusals == 1


# --- the pagination case of appendix A.2 ----------------------------------------------------


def _pagination(tmp_path: Path, name: str, scope: str, review: str | None) -> cs.RunResult:
    built = instance("total_received_from", 1).built
    return run(
        tmp_path,
        name,
        [fenced(built.variants["one_page"]), "Done."],
        scope=scope,
        schedule="never" if review is None else "once:3",
        app_protocol="v2",
        reviews=None if review is None else [review],
    )


def test_the_one_page_program_is_repaired_by_arg_params_and_full(tmp_path: Path) -> None:
    """Keep reads one default-sized page and answers short; a next-call page_limit edit, a
    Params edit of the block's data and a paging workflow each repair it (paper A.2)."""
    built = instance("total_received_from", 1).built
    one_page = built.variants["one_page"]
    keep = _pagination(tmp_path, "keep", "keep", None)
    assert not keep.verdict.success
    assert [c.name for c in keep.verdict.checks if not c.passed] == ["answer"]
    arg = _pagination(
        tmp_path,
        "arg",
        "arg",
        json.dumps(
            {
                "reason": "one page is not all",
                "operation": "patch_arguments",
                "arguments": {"page_limit": 20},
            }
        ),
    )
    assert arg.verdict.success and arg.summary.argument_patches == 1
    params = _pagination(
        tmp_path,
        "params",
        "params",
        json.dumps(
            {
                "reason": "a bigger page",
                "operation": "patch_block_data",
                "code": one_page.replace("page_limit=5", "page_limit=20"),
            }
        ),
    )
    assert params.verdict.success and params.summary.block_data_patches == 1
    loop = "sent = every_page" + built.solution.split("sent = every_page")[1]
    workflow = _pagination(
        tmp_path,
        "workflow",
        "full",
        json.dumps({"reason": "page through", "operation": "replace_workflow", "code": loop}),
    )
    assert workflow.verdict.success and workflow.summary.replacements == 1
    paged = [
        e["call"]["arguments"]
        for e in events(workflow.run_dir)
        if e["type"] == "primitive_call" and e["call"]["block_id"].endswith(".r1")
    ]
    assert paged and paged[0]["page_limit"] == 20 and paged[0]["page_index"] == 0


def test_v2_branches_of_the_pagination_case_share_one_state(tmp_path: Path) -> None:
    """The fixed-candidate diagnostic (paper A.2): one recorded Keep run of the one-page
    program, branched at the listing call under Keep, Arg, Params and Full; the same (h, s),
    and every candidate but Keep repairs it."""
    built = instance("total_received_from", 1).built
    one_page = built.variants["one_page"]
    source = _pagination(tmp_path, "source", "keep", None)
    assert not source.verdict.success
    decisions = [
        {"reason": "a page of 20", "operation": "patch_arguments", "arguments": {"page_limit": 20}},
        {
            "reason": "a bigger page",
            "operation": "patch_block_data",
            "code": one_page.replace("page_limit=5", "page_limit=20"),
        },
        {
            "reason": "page through",
            "operation": "replace_workflow",
            "code": "sent = every_page" + built.solution.split("sent = every_page")[1],
        },
    ]
    found = replay.branch(
        source.run_dir,
        at=3,
        scopes=["keep", "arg", "params", "full"],
        out=tmp_path / "branches",
        planner=ScriptedModel(["Done."] * 4),
        reviewer=ModelReviewer(ScriptedModel([json.dumps(d) for d in decisions])),
    )
    assert found.ok, found.divergence
    outcome = {b.scope: b.summary for b in found.branches}
    assert {k: bool(v and v.success) for k, v in outcome.items()} == {
        "keep": False,
        "arg": True,
        "params": True,
        "full": True,
    }
    start = events(tmp_path / "branches" / "params-d0")[0]
    assert start["config"]["app_protocol"] == "v2" and start["lattice"] == "v2"
