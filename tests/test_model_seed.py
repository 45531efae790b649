"""The seed a model samples with is part of its request: what the log records, what the
exact-request cache keys on and what the local model's process is sent.

A request that sets no seed is answered with the seed of the model's own choice (the local
model's base seed and the draw); two local models that differ only in that seed share one model
id, so without the seed in the request a shared cache served one's answer to the other and the
log said ``seed: null`` for both.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import controlscope as cs
from controlscope import replay
from controlscope.core import (
    Message,
    ModelCallEvent,
    ModelRequest,
    ModelResponse,
    SeededModel,
    seeded_request,
)
from controlscope.models import CachedModel, RequestCache, ScriptedModel, request_key
from controlscope.models._local import LocalModel
from controlscope.review import ModelReviewer
from test_api import SOLVE, TASK, script
from test_replay import fenced

DRAW_STRIDE = 1_000_003
"""The local model's seed for draw ``d`` is ``seed + DRAW_STRIDE * d``."""


def request(**fields: object) -> ModelRequest:
    return ModelRequest(
        messages=(Message(role="user", content="Name a colour."),),
        temperature=1.0,
        max_tokens=8,
        **fields,  # type: ignore[arg-type]
    )


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    """A file the local model accepts as weights until a process tries to load them."""
    path = tmp_path / "unloadable.gguf"
    path.write_bytes(b"GGUF" + b"\x00" * 64)
    return path


class Sampler:
    """A model with a seed of its own, as the local model has: each answer names the seed it
    was sampled with; every instance has the same model id."""

    model_id = "local:one-model"

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.calls = 0

    def sampling_seed(self, request: ModelRequest) -> int:
        return request.seed if request.seed is not None else self.seed + DRAW_STRIDE * request.draw

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        return ModelResponse(text=f"sampled with seed {self.sampling_seed(request)}")


def test_the_local_model_states_the_seed_it_samples_a_request_with(gguf: Path) -> None:
    with LocalModel(str(gguf), seed=5) as model:
        assert isinstance(model, SeededModel) and model.seed == 5
        assert seeded_request(model, request()).seed == 5
        assert seeded_request(model, request(draw=2)).seed == 5 + 2 * DRAW_STRIDE
        assert seeded_request(model, request(seed=9)).seed == 9  # the request's own wins
        assert model._sampling(request(draw=1))["seed"] == 5 + DRAW_STRIDE  # what is sent
        assert model.pids == {}  # stating the seed starts no process
    with LocalModel(str(gguf), seed=0) as other:
        assert other.model_id == model.model_id
        keys = {request_key(m.model_id, seeded_request(m, request())) for m in (model, other)}
        assert len(keys) == 2
    assert seeded_request(ScriptedModel(["x"]), request()).seed is None  # no seed of its own


def test_two_models_differing_only_in_their_seed_never_share_a_cached_answer(
    tmp_path: Path,
) -> None:
    cache = RequestCache(tmp_path / "cache.sqlite")
    zero, five = Sampler(0), Sampler(5)
    first = CachedModel(zero, cache).complete(request())
    second = CachedModel(five, cache).complete(request())
    assert (first.text, first.cached) == ("sampled with seed 0", False)
    assert (second.text, second.cached) == ("sampled with seed 5", False)
    again = CachedModel(Sampler(5), cache).complete(request())
    assert (again.text, again.cached) == ("sampled with seed 5", True)  # the same seed shares
    assert (zero.calls, five.calls, len(cache)) == (1, 1, 2)
    assert CachedModel(five, cache).sampling_seed(request(draw=1)) == 5 + DRAW_STRIDE


def test_the_log_records_the_seed_each_request_was_sampled_with(gguf: Path, tmp_path: Path) -> None:
    """A scripted planner chooses no seed (null in the log); the local reviewer's requests are
    recorded with its seed even when its process fails (the weights cannot be loaded), and a
    replay of the run, which has no local model, asks exactly the recorded requests."""
    spec = cs.RunSpec(
        task=TASK,
        model=script(tmp_path, fenced(SOLVE), "Done."),
        reviewer_model=script(tmp_path),
        scope="full",
        schedule="once:2",
        out=tmp_path / "run",
    )
    with LocalModel(str(gguf), seed=7) as local:
        result = cs.run_task(spec, reviewer=ModelReviewer(local))
    calls = [e for e in cs.read_events(result.run_dir) if isinstance(e, ModelCallEvent)]
    reviews = [e for e in calls if e.role == "reviewer"]
    assert [e.request.seed for e in calls if e.role == "planner"] == [None, None]
    assert len(reviews) == 1 and reviews[0].error_kind == "other"  # "could not load"
    assert reviews[0].request.seed == 7
    replayed = replay.replay_prefix(result.run_dir, out=tmp_path / "replayed")
    assert replayed.ok, replayed.divergence
    assert replayed.verified_requests == {"planner": 2, "reviewer": 1}


@pytest.mark.slow
@pytest.mark.needs_weights
def test_local_models_with_other_seeds_sharing_a_cache_each_answer_with_their_own() -> None:
    cache = RequestCache(":memory:")
    with (
        LocalModel("0.5b", n_ctx=512, seed=0) as zero,
        LocalModel("0.5b", n_ctx=512, seed=5) as five,
    ):
        CachedModel(zero, cache).complete(request())
        shared = CachedModel(five, cache).complete(request())
        own = five.complete(request())  # the same request, no cache: its seed alone decides
    assert shared.cached is False and len(cache) == 2
    assert shared.text == own.text
