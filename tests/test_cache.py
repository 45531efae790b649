"""Tests of controlscope.models._cache (exact-request cache) and controlscope.models.accounting."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from controlscope.core import (
    ChatModel,
    Message,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolSpec,
    Usage,
)
from controlscope.models import (
    CachedModel,
    CacheError,
    RequestCache,
    ScriptedModel,
    request_key,
)
from controlscope.record import LedgerSummary, TokenLedger


def request(text: str = "plan the task", **fields: object) -> ModelRequest:
    return ModelRequest(messages=(Message(role="user", content=text),), **fields)  # type: ignore[arg-type]


def answer(text: str, tokens_in: int = 100, tokens_out: int = 10) -> ModelResponse:
    return ModelResponse(
        text=text,
        usage=Usage(input_tokens=tokens_in, output_tokens=tokens_out),
        latency_s=0.5,
        model="m",
    )


class FailingModel:
    model_id = "failing"

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        raise ProviderError("down", status=503, kind="server")


def test_key_covers_model_facing_fields_and_draw_but_not_purpose() -> None:
    base = request()
    key = request_key("m", base)
    assert len(key) == 64 and int(key, 16) >= 0
    assert request_key("m", request()) == key
    assert request_key("m", base.model_copy(update={"purpose": "planner"})) == key
    changed = [
        request_key("other-model", base),
        request_key("m", request("plan the task!")),
        request_key("m", request(draw=1)),
        request_key("m", request(temperature=0.0)),
        request_key("m", request(top_p=0.5)),
        request_key("m", request(max_tokens=100)),
        request_key("m", request(seed=3)),
        request_key("m", request(json_schema={"type": "object"})),
        request_key("m", request(provider_options={"reasoning_effort": "high"})),
        request_key("m", request(tools=(ToolSpec(name="t"),))),
        request_key("m", request(tools=(ToolSpec(name="t"),), tool_choice="required")),
    ]
    assert key not in changed
    assert len(set(changed)) == len(changed)


def test_key_is_independent_of_dict_order() -> None:
    one = request(json_schema={"a": 1, "b": {"c": 2, "d": 3}})
    two = request(json_schema={"b": {"d": 3, "c": 2}, "a": 1})
    assert request_key("m", one) == request_key("m", two)


def test_hit_miss_and_draw_separation(tmp_path: Path) -> None:
    inner = ScriptedModel([answer("first"), answer("second draw"), answer("third")])
    cache = RequestCache(tmp_path / "cache.sqlite")
    model = CachedModel(inner, cache)
    assert model.model_id == "scripted"

    miss = model.complete(request())
    assert (miss.text, miss.cached, miss.latency_s) == ("first", False, 0.5)
    hit = model.complete(request().model_copy(update={"purpose": "planner"}))
    assert (hit.text, hit.cached, hit.latency_s) == ("first", True, 0.0)
    assert hit.usage == miss.usage
    assert len(inner.requests) == 1  # the identical request never reached the model

    draw_1 = model.complete(request(draw=1))
    assert (draw_1.text, draw_1.cached) == ("second draw", False)
    assert len(inner.requests) == 2
    assert (cache.hits, cache.misses, len(cache)) == (1, 2, 2)


def test_entries_persist_across_instances(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "cache.sqlite"
    with RequestCache(path) as cache:
        CachedModel(ScriptedModel([answer("stored")]), cache).complete(request())
    reopened = RequestCache(path)
    fresh_inner = ScriptedModel([])  # would raise ScriptExhausted if asked
    response = CachedModel(fresh_inner, reopened).complete(request())
    assert (response.text, response.cached) == ("stored", True)
    assert fresh_inner.requests == []
    row = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()
    assert row[0] == "wal"


def test_provider_errors_are_not_cached(tmp_path: Path) -> None:
    cache = RequestCache(tmp_path / "c.sqlite")
    failing = FailingModel()
    model = CachedModel(failing, cache)
    for _ in range(2):
        with pytest.raises(ProviderError):
            model.complete(request())
    assert failing.calls == 2 and len(cache) == 0


def test_first_writer_wins_and_later_writer_keeps_its_own_usage(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    first, second = RequestCache(path), RequestCache(path)
    key = request_key("scripted", request())
    first.put(key, "scripted", request(), answer("winner"))
    # the second process missed before the first stored, so its model did the work too
    late = CachedModel(ScriptedModel([answer("loser", tokens_in=7, tokens_out=2)]), second)
    late.cache.get = lambda key: None  # type: ignore[method-assign]
    response = late.complete(request())
    assert response.text == "winner"
    assert response.usage == Usage(input_tokens=7, output_tokens=2)
    assert response.cached is False
    assert second.put(key, "scripted", request(), answer("again")).text == "winner"


def test_corrupt_entry_is_a_miss_and_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    cache = RequestCache(path)
    key = request_key("scripted", request())
    cache.put(key, "scripted", request(), answer("old"))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE responses SET response = '{not json' WHERE key = ?", (key,))
    assert cache.get(key) is None
    model = CachedModel(ScriptedModel([answer("new")]), cache)
    assert model.complete(request()).text == "new"
    assert cache.get(key) is not None and cache.get(key).text == "new"  # type: ignore[union-attr]


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    path.write_bytes(b"this is not an sqlite database, just text" * 100)
    with pytest.raises(CacheError, match="cannot use"):
        RequestCache(path)
    assert path.read_bytes().startswith(b"this is not")  # nothing was lost


def _writer(path: str, worker: int, n: int) -> None:
    cache = RequestCache(path)
    for i in range(n):
        req = request(f"shared {i}")
        key = request_key("m", req)
        cache.put(key, "m", req, answer(f"worker {worker}"))
        own = request(f"own {worker} {i}")
        cache.put(request_key("m", own), "m", own, answer(f"own {worker}"))
        assert cache.get(key) is not None
    cache.close()


def test_several_processes_share_one_cache(tmp_path: Path) -> None:
    path = str(tmp_path / "c.sqlite")
    RequestCache(path).close()
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_writer, args=(path, w, 40)) for w in range(3)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
    assert [p.exitcode for p in workers] == [0, 0, 0]
    cache = RequestCache(path)
    assert len(cache) == 40 + 3 * 40
    shared = {cache.get(request_key("m", request(f"shared {i}"))).text for i in range(40)}  # type: ignore[union-attr]
    assert shared <= {"worker 0", "worker 1", "worker 2"}


def _opener(path: str, start: object) -> None:
    start.wait(30)  # type: ignore[attr-defined]
    RequestCache(path).close()


def test_processes_opening_a_new_cache_together_all_succeed(tmp_path: Path) -> None:
    """A panel's workers open the same new file at once: SQLite refuses the switch to WAL to all
    but one without waiting, and the others must retry rather than fail their runs."""
    context = multiprocessing.get_context("fork")
    for round_ in range(60):
        path = str(tmp_path / f"c{round_}.sqlite")
        start = context.Event()
        openers = [context.Process(target=_opener, args=(path, start)) for _ in range(6)]
        for process in openers:
            process.start()
        start.set()
        for process in openers:
            process.join(60)
        assert [p.exitcode for p in openers] == [0] * 6, f"round {round_}"


def _forked_child(cache: RequestCache, text: str) -> None:
    req = request(text)
    cache.put(request_key("m", req), "m", req, answer(text))


def test_a_cache_opened_before_fork_works_in_the_child(tmp_path: Path) -> None:
    cache = RequestCache(tmp_path / "c.sqlite")
    cache.put(request_key("m", request("parent")), "m", request("parent"), answer("parent"))
    child = multiprocessing.get_context("fork").Process(target=_forked_child, args=(cache, "child"))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert cache.get(request_key("m", request("child"))) is not None
    assert len(cache) == 2


# --- accounting ---------------------------------------------------------------------------------


class AccountedModel:
    """Counts every response and failure of ``inner`` in ``ledger`` (as the run summary does)."""

    def __init__(self, inner: ChatModel, ledger: TokenLedger, role: str | None = None) -> None:
        self.inner, self.ledger, self.role = inner, ledger, role

    def complete(self, request: ModelRequest) -> ModelResponse:
        role = self.role or request.purpose
        try:
            response = self.inner.complete(request)
        except ProviderError:
            self.ledger.add_failure(role)
            raise
        self.ledger.add(role, response)
        return response


def test_ledger_keeps_logical_and_uncached_totals_apart(tmp_path: Path) -> None:
    ledger = TokenLedger()
    cache = RequestCache(tmp_path / "c.sqlite")
    planner = AccountedModel(
        CachedModel(ScriptedModel([answer("p1", 100, 10), answer("p2", 200, 20)]), cache), ledger
    )
    reviewer = AccountedModel(
        CachedModel(ScriptedModel([answer("r1", 50, 5), answer("r2", 50, 5)]), cache),
        ledger,
        role="reviewer",
    )
    planner.complete(request("plan", purpose="planner"))
    planner.complete(request("plan", purpose="planner"))  # a hit: shared ordinary planning
    planner.complete(request("plan more", purpose="planner"))
    reviewer.complete(request("review", draw=0))
    reviewer.complete(request("review", draw=1))  # a separate draw: never merged

    summary = ledger.summary()
    plan = summary.roles["planner"]
    assert plan.logical.requests == 3 and plan.uncached.requests == 2
    assert plan.cache_hits == 1
    assert plan.logical.input_tokens == 100 + 100 + 200
    assert plan.uncached.input_tokens == 100 + 200
    assert plan.logical.output_tokens == 40 and plan.uncached.output_tokens == 30
    assert plan.latency_s == pytest.approx(1.0)
    review = summary.roles["reviewer"]
    assert review.logical == review.uncached and review.cache_hits == 0
    assert summary.total.logical.requests == 5 and summary.total.uncached.requests == 4
    assert summary.total.logical.input_tokens == 500
    assert LedgerSummary.model_validate_json(summary.model_dump_json()) == summary


def test_ledger_counts_failures_apart_and_summaries_are_snapshots() -> None:
    ledger = TokenLedger()
    model = AccountedModel(FailingModel(), ledger)
    with pytest.raises(ProviderError):
        model.complete(request(purpose="reviewer"))
    snapshot = ledger.summary()
    assert snapshot.roles["reviewer"].failed_requests == 1
    assert snapshot.roles["reviewer"].logical.requests == 0
    ledger.add("reviewer", answer("x", 1, 1))
    ledger.add(
        "reviewer",
        ModelResponse(text="y", usage=Usage(input_tokens=10, output_tokens=1, cached_tokens=8)),
    )
    assert snapshot.roles["reviewer"].logical.requests == 0
    after = ledger.summary().roles["reviewer"]
    assert after.logical.requests == 2 and after.logical.cached_tokens == 8
    with pytest.raises(ValueError, match="non-empty"):
        ledger.add("", answer("z"))
