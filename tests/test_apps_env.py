"""The app-API environment: apps over MCP, documentation APIs, pagination, tokens, the
database copy per branch, every template's reference solution through the real server, wrong
solutions failing for the right reason, evaluator errors recorded, determinism per instance,
and whole runs (planner, worker, server) on the apps."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import controlscope as cs
from controlscope.cli import main as cli
from controlscope.core import TaskError, ToolAnnotations
from controlscope.envs import McpToolServer, get_environment
from controlscope.envs.alfworld.server import GAME_FILE
from controlscope.envs.apps import (
    APIS,
    APPS,
    INSTANCES,
    PAGE_LIMIT_DEFAULT,
    PAGE_LIMIT_MAX,
    SPLITS,
    TEMPLATES,
    AppsEnvironment,
    instance,
    instance_seed,
)
from controlscope.envs.apps._schema import connect
from controlscope.envs.apps._world import base_world
from controlscope.envs.apps.appworld_server import CONFIG_FILE as APPWORLD_CONFIG
from controlscope.envs.apps.server import DB_FILE, build_server
from controlscope.envs.apps.testing import run_program

PAGED = "total_received_from/1"


def fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def script(tmp_path: Path, *answers: str) -> str:
    path = tmp_path / f"script{len(list(tmp_path.glob('script*')))}.json"
    path.write_text(json.dumps(list(answers)))
    return f"scripted:{path}"


def events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


@contextlib.contextmanager
def served(task_id: str, tmp_path: Path) -> Any:
    """An in-memory server on a fresh copy of the task's world; yields (server, workspace)."""
    env = AppsEnvironment()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env.setup(env.task(task_id), 0, workspace)
    with (
        contextlib.closing(connect(str(workspace / DB_FILE))) as db,
        McpToolServer.in_memory(build_server(db)) as server,
    ):
        yield server, workspace


def call(server: McpToolServer, tool: str, **arguments: Any) -> Any:
    result = server.call(tool, arguments)
    assert not result.is_error, result.text
    return json.loads(result.text)


def token(server: McpToolServer, app: str) -> str:
    me = call(server, "supervisor__show_profile")["email"]
    passwords = {
        p["account_name"]: p["password"] for p in call(server, "supervisor__show_account_passwords")
    }
    return str(call(server, f"{app}__login", username=me, password=passwords[app])["access_token"])


# --- the apps and their documentation ---------------------------------------------------------


def test_every_api_declares_whether_it_writes_in_its_annotations(tmp_path: Path) -> None:
    with served(PAGED, tmp_path) as (server, _):
        tools = {t.name: t for t in server.list_tools()}
    for name, spec in APIS.items():
        hints = tools[name].annotations
        assert hints is not None, name
        assert hints.read_only_hint is (not spec.writes), name
        assert hints.open_world_hint is False, name
        assert hints.risk().risky is spec.writes, name
    assert tools["mail__delete_message"].annotations == ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
    )


def test_seven_apps_a_supervisor_and_documentation_serve_every_api(tmp_path: Path) -> None:
    assert [a for a in APPS if a not in ("supervisor", "api_docs")] == [
        "contacts",
        "files",
        "notes",
        "todo",
        "mail",
        "payments",
        "music",
    ]
    with served(PAGED, tmp_path) as (server, _):
        tools = {t.name: t for t in server.list_tools()}
        assert set(tools) == set(APIS)
        described = call(server, "api_docs__show_app_descriptions")
        assert [a["name"] for a in described] == list(APPS)
        for app in APPS:
            listed = call(server, "api_docs__show_api_descriptions", app_name=app)
            assert {a["function"] for a in listed} == {t for t, a in APIS.items() if a.app == app}
            for entry in listed:
                doc = call(server, "api_docs__show_api_doc", app_name=app, api_name=entry["name"])
                schema = tools[doc["function"]].input_schema
                assert [p["name"] for p in doc["parameters"]] == list(schema["properties"])
                required = [p["name"] for p in doc["parameters"] if p["required"]]
                assert sorted(required) == sorted(schema.get("required", []))
        missing = server.call("api_docs__show_api_doc", {"app_name": "music", "api_name": "fly"})
        assert missing.is_error and "404" in missing.text and "no API 'fly'" in missing.text


def test_listings_are_paginated_with_a_small_default_limit(tmp_path: Path) -> None:
    paged = [a for a in APIS.values() if any(p.name == "page_limit" for p in a.params)]
    assert len(paged) >= 10
    assert all(
        next(p for p in a.params if p.name == "page_limit").default == PAGE_LIMIT_DEFAULT == 5
        for a in paged
    )
    with served(PAGED, tmp_path) as (server, _):
        pay = token(server, "payments")
        first = call(server, "payments__show_transactions", access_token=pay)
        assert len(first) == PAGE_LIMIT_DEFAULT
        everything = call(
            server, "payments__show_transactions", access_token=pay, page_limit=PAGE_LIMIT_MAX
        )
        assert everything[:5] == first and len(everything) > 5
        second = call(server, "payments__show_transactions", access_token=pay, page_index=1)
        assert second == everything[5:10]
        assert call(server, "payments__show_transactions", access_token=pay, page_index=99) == []
        over = server.call(
            "payments__show_transactions", {"access_token": pay, "page_limit": PAGE_LIMIT_MAX + 1}
        )
        assert over.is_error and "page_limit" in over.text


def test_every_app_needs_its_own_token_and_answers_with_its_own_errors(tmp_path: Path) -> None:
    with served(PAGED, tmp_path) as (server, _):
        music = token(server, "music")
        for tool, args in [
            ("music__show_library", {"access_token": "not-a-token"}),
            ("payments__show_balance", {"access_token": music}),  # another app's token
            ("notes__search_notes", {"access_token": ""}),
        ]:
            result = server.call(tool, args)
            assert result.is_error and "401" in result.text, result.text
        wrong = server.call("music__login", {"username": "nobody@x.test", "password": "x"})
        assert wrong.is_error and "invalid username or password" in wrong.text
        typed = server.call("music__show_song", {"access_token": music, "song_id": "seven"})
        assert typed.is_error and "song_id" in typed.text
        absent = server.call("music__show_song", {"access_token": music, "song_id": 10_000})
        assert absent.is_error and "404" in absent.text
        pay = token(server, "payments")
        first = call(server, "payments__show_transactions", access_token=pay)[0]
        me = call(server, "supervisor__show_profile")["email"]
        other = first["sender_email"] if first["receiver_email"] == me else first["receiver_email"]
        args = {"access_token": pay, "amount": 1e9, "receiver_email": other}
        broke = server.call("payments__send_money", args)
        assert broke.is_error and "409: insufficient balance" in broke.text
        # careless arguments get the app's own error, never a crash of the tool
        for tool, args in [
            ("music__show_song", {"access_token": music, "song_id": 10**30}),
            ("music__search_songs", {"access_token": music, "query": "a", "page_index": 2**62}),
        ]:
            careless = server.call(tool, args)
            assert careless.is_error and "422" in careless.text, careless.text
        # a search is for a substring: LIKE's wildcards match themselves, any length is fine
        for query in ["%", "_", "a" * 100_000]:
            found = call(server, "music__search_songs", access_token=music, query=query)
            assert found == [], (query, found)


def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    env = AppsEnvironment()
    task = env.task(PAGED)
    with served(PAGED, tmp_path) as (server, workspace):
        before = env.state_hash(task, workspace)
        pay = token(server, "payments")
        result = server.call(
            "payments__send_money",
            {"access_token": pay, "receiver_email": "nobody@x.test", "amount": 5},
        )
        assert result.is_error and "404" in result.text
        assert env.state_hash(task, workspace) == before


# --- instances, worlds, branches ------------------------------------------------------------


def test_thirty_templates_three_instances_each_over_three_splits() -> None:
    tasks = get_environment("apps").tasks()
    assert len(TEMPLATES) >= 30 and len(tasks) == INSTANCES * len(TEMPLATES)
    by_split = {s: [t for t in TEMPLATES.values() if t.split == s] for s in SPLITS}
    assert all(len(v) >= 8 for v in by_split.values()), {k: len(v) for k, v in by_split.items()}
    assert {t.difficulty for t in TEMPLATES.values()} == {1, 2, 3}
    assert sum(len(t.apps) > 1 for t in TEMPLATES.values()) >= 10
    task = tasks[0]
    assert task.id.endswith("/1") and task.template == task.id.rsplit("/", 1)[0]
    assert task.metadata["split"] in SPLITS and task.budgets.primitive_calls == 10_000
    # the instances of a template differ in people, data and numbers
    for template in TEMPLATES:
        made = [instance(template, n) for n in range(1, INSTANCES + 1)]
        assert len({m.data for m in made}) == INSTANCES
        shown = {json.dumps([m.built.instruction, m.built.answer, m.built.facts]) for m in made}
        assert len(shown) == INSTANCES, template


def test_an_instance_is_the_same_world_every_time() -> None:
    built = instance("genre_playlist", 2)
    again = base_world(instance_seed("genre_playlist", 2))
    assert TEMPLATES["genre_playlist"].build(again) == built.built
    assert again.to_bytes() == built.data
    assert instance_seed("genre_playlist", 2) != instance_seed("genre_playlist", 3)
    assert instance("genre_playlist", 3).data != built.data


def test_each_branch_has_its_own_copy_of_the_world(tmp_path: Path) -> None:
    env = AppsEnvironment()
    task = env.task("shopping_note/1")
    spaces = [tmp_path / "a", tmp_path / "b"]
    keys = []
    for ws in spaces:
        ws.mkdir()
        keys.append(env.setup(task, 7, ws))
    assert keys[0] == keys[1] and keys[0]["initial_hash"] == env.state_hash(task, spaces[0])
    with contextlib.closing(connect(str(spaces[0] / DB_FILE))) as db:
        db.execute("DELETE FROM notes_notes")
        db.commit()
    assert env.state_hash(task, spaces[0]) != env.state_hash(task, spaces[1])
    assert env.state_hash(task, spaces[1]) == keys[1]["initial_hash"]
    with pytest.raises(TaskError, match="empty"):
        env.setup(task, 0, spaces[0])


# --- reference solutions and evaluators -----------------------------------------------------


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_every_reference_solution_passes_through_the_mcp_server(template: str) -> None:
    for n in range(1, INSTANCES + 1):
        built = instance(template, n).built
        outcome = run_program(f"{template}/{n}", built.solution)
        assert outcome.error is None, outcome.error
        assert outcome.verdict.success, outcome.verdict.checks
        assert not any(error for _, _, error in outcome.calls)
        names = [c.name for c in outcome.verdict.checks]
        assert names[-1] == "protected"
        assert ("answer" in names) == (TEMPLATES[template].answer_kind != "none")
        assert ("answer" in names) or any(n.startswith("required:") for n in names)


SABOTAGE = {  # a write to an app the task does not use, after the reference solution
    "contacts": "contacts__delete_contact(access_token=contacts_token, contact_id=1)\n",
    "notes": "notes__delete_note(access_token=notes_token, note_id=1)\n",
    "files": "files__delete_file(access_token=files_token, path=json.loads("
    "files__show_directory(access_token=files_token))[0]['path'])\n",
    "music": "music__create_playlist(access_token=music_token, title='extra')\n",
}


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_wrong_solutions_fail_for_the_right_reason(template: str) -> None:
    """Doing nothing fails the answer or the required changes (and nothing else); the right
    work plus a change the task does not allow fails the protected criteria alone."""
    from controlscope.envs.apps._template import PRELUDE, login

    t = TEMPLATES[template]
    task_id = f"{template}/1"
    idle = run_program(task_id, "supervisor__complete_task(answer='no idea')\n")
    failed = {c.name for c in idle.verdict.checks if not c.passed}
    assert failed and "protected" not in failed, idle.verdict.checks
    assert failed <= {"answer"} | {
        c.name for c in idle.verdict.checks if c.name.startswith("required:")
    }
    app = next(a for a in SABOTAGE if a not in t.apps)
    extra = PRELUDE + login(app) + SABOTAGE[app]
    spoiled = run_program(task_id, instance(template, 1).built.solution + extra)
    assert spoiled.error is None, spoiled.error
    failed = [c for c in spoiled.verdict.checks if not c.passed]
    assert [c.name for c in failed] == ["protected"], spoiled.verdict.checks
    assert "does not allow" in failed[0].reason


def test_the_one_page_program_misses_transfers_that_paging_finds() -> None:
    built = instance("total_received_from", 1).built
    assert built.facts["transfers"] > PAGE_LIMIT_DEFAULT
    assert built.facts["transfers"] <= PAGE_LIMIT_MAX
    short = run_program(PAGED, built.variants["one_page"])
    assert short.error is None
    assert [c.name for c in short.verdict.checks if not c.passed] == ["answer"]
    wide = built.variants["one_page"].replace("page_limit=5", "page_limit=20")
    assert wide != built.variants["one_page"]
    assert run_program(PAGED, wide).verdict.success


def test_an_evaluator_that_raises_is_a_recorded_evaluation_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> Any:
        raise KeyError("facts missing")

    monkeypatch.setattr(TEMPLATES["shopping_note"], "check", broken)
    result = cs.run_task(
        cs.RunSpec(
            task="shopping_note/1",
            env="apps",
            scope="keep",
            schedule="never",
            model=script(tmp_path, fenced(instance("shopping_note", 1).built.solution), "done"),
            out=tmp_path / "run",
        )
    )
    assert result.end_reason == "final_answer"
    [check] = result.verdict.checks
    assert check.name == "evaluation_error" and "KeyError" in check.reason
    assert not result.verdict.success and result.summary.complete


def test_a_missing_database_is_an_evaluation_error_not_a_crash(tmp_path: Path) -> None:
    env = AppsEnvironment()
    task = env.task("payments_balance/1")
    verdict = env.verify(task, tmp_path, {"facts": {}, "answer": 1})
    assert [c.name for c in verdict.checks] == ["evaluation_error"]
    assert "no apps.db" in verdict.checks[0].reason


# --- whole runs --------------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", ["pay_back_from_email/2", "genre_playlist/3"])
def test_a_reference_solution_as_a_planners_program_succeeds(tmp_path: Path, task_id: str) -> None:
    """The whole path: planner, isolated worker, boundaries, the server process, the
    evaluator; the planner's prompt lists the documentation APIs, not every app's."""
    template, n = task_id.split("/")
    built = instance(template, int(n)).built
    result = cs.run_task(
        cs.RunSpec(
            task=task_id,
            env="apps",
            scope="keep",
            schedule="never",
            model=script(tmp_path, fenced(built.solution), "Done."),
            out=tmp_path / "run",
        )
    )
    assert result.verdict.success, result.verdict.checks
    log = events(result.run_dir)
    start = log[0]
    assert start["server"]["name"] == "controlscope-apps"
    prompt = next(e for e in log if e["type"] == "model_call")["request"]["messages"][0]["content"]
    assert "api_docs__show_api_doc" in prompt and "def music__show_library" not in prompt
    calls = [e["call"] for e in log if e["type"] == "primitive_call"]
    assert calls and calls[-1]["tool"] == "supervisor__complete_task"
    assert result.summary.primitive_calls == len(calls)


def test_errors_are_observations_and_count_as_requests(tmp_path: Path) -> None:
    code = (
        "for bad in [dict(access_token='x'), dict(access_token='x', page_limit='many')]:\n"
        "    try:\n"
        "        music__show_library(**bad)\n"
        "    except ToolError as err:\n"
        "        print('error:', str(err)[:60])\n"
    )
    result = cs.run_task(
        cs.RunSpec(
            task=PAGED,
            env="apps",
            scope="keep",
            schedule="never",
            model=script(tmp_path, fenced(code), "Done."),
            out=tmp_path / "run",
        )
    )
    calls = [e["call"] for e in events(result.run_dir) if e["type"] == "primitive_call"]
    assert len(calls) == result.summary.primitive_calls == 2
    assert all(c["result"]["is_error"] for c in calls)
    assert "401" in calls[0]["result"]["text"] and "page_limit" in calls[1]["result"]["text"]
    assert [c.name for c in result.verdict.checks if not c.passed] == ["answer"]


def test_the_task_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["tasks", "--env", "apps", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == INSTANCES * len(TEMPLATES)
    row = next(r for r in rows if r["id"] == PAGED)
    assert row["template"] == "total_received_from" and row["category"] == "payments"
    assert row["metadata"]["split"] == "dev" and row["metadata"]["difficulty"] == 2
    assert cli(["tasks", "--env", "apps"]) == 0
    table = capsys.readouterr().out
    assert "split" in table and "difficulty" in table and "test_challenge" in table


@pytest.mark.parametrize(
    ("module", "needs"),
    [
        ("controlscope.envs.apps.server", DB_FILE),
        ("controlscope.envs.apps.appworld_server", APPWORLD_CONFIG),
        ("controlscope.envs.alfworld.server", GAME_FILE),
    ],
)
def test_a_module_server_without_its_workspace_file_exits_2_with_one_line(
    module: str, needs: str, tmp_path: Path
) -> None:
    """The environments' own servers (``python -m MODULE WORKSPACE``) refuse a missing argument
    and a workspace without their file, with status 2 and a line saying why, before serving."""
    bare = subprocess.run(
        [sys.executable, "-m", module], capture_output=True, text=True, timeout=60
    )
    usage = bare.stderr.strip().splitlines()[-1]  # after runpy's warning for a package's module
    assert bare.returncode == 2 and usage == f"usage: python -m {module} WORKSPACE"
    empty = subprocess.run(
        [sys.executable, "-m", module, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert empty.returncode == 2
    assert empty.stderr.strip().splitlines()[-1].endswith(f": no {needs} in {tmp_path.resolve()}")
