"""Model specs (``local``, ``openai:NAME``, ``replay:DIR``...) -> a run's planner and reviewer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from controlscope.core import (
    DEFAULT_MAX_TOKENS,
    ChatModel,
    DecisionMode,
    ModelSpec,
    PlannerFormat,
    ViewLimits,
)
from controlscope.models import CachedModel, RequestCache, make_model

LOCAL_MAX_TOKENS = 1024
"""Default per-request cap for the embedded model: at about 20 tokens/s on 2 cores, the paper's
16,384 would let one runaway answer take minutes."""


@dataclass(frozen=True)
class RunModels:
    """The models of one run and the formats that suit them.

    Attributes:
        planner: the ordinary planner.
        reviewer: the reviewer (None when no review can happen).
        planner_format: ``fenced`` for local models (small models write fenced code more
            reliably than code inside a JSON string), ``tools`` otherwise.
        review_mode: ``json`` (schema-constrained decision) for local models, ``tools`` otherwise.
        max_tokens: the default per-request token cap for these models.
        view_limits: the default bounds of the review view: :class:`ViewLimits` for a local
            reviewer (the embedded model's context holds 8,192 tokens, which the complete state
            of a long run exceeds), None (the complete state, paper 3.1) otherwise.
    """

    planner: ChatModel
    reviewer: ChatModel | None
    planner_format: PlannerFormat
    review_mode: DecisionMode
    max_tokens: int
    view_limits: ViewLimits | None = None


def _runs_here(text: str) -> bool:
    """Whether ``text`` names a model that runs in this machine's processes
    (:attr:`ModelSpec.is_local`); False for a spec that names none."""
    try:
        return ModelSpec.parse(text).is_local
    except ValueError:
        return False


def build_models(
    *,
    planner: str,
    reviewer: str | None,
    base_url: str | None = None,
    cache_path: Path | None = None,
    need_reviewer: bool = True,
    normalise: Callable[[str], str] | None = None,
    planner_model: ChatModel | None = None,
) -> RunModels:
    """Build the planner and the reviewer.

    A reviewer spec equal to the planner's shares one model object (the local model keeps a
    separate KV context per role, so they do not evict each other's prefixes). ``replay:DIR``
    answers each role from that role's recorded calls.

    Args:
        planner: the planner's spec (see :func:`controlscope.models.make_model`).
        reviewer: the reviewer's spec; None means the planner's.
        base_url: endpoint for ``openai`` specs.
        cache_path: an SQLite exact-request cache file; None for no cache.
        need_reviewer: False when the condition never reviews (Keep or ``never``).
        normalise: for ``replay`` specs, what masks run-dependent text before requests are
            compared (the environment's ``normalise_observation``).
        planner_model: a planner model object in place of the one ``planner`` names (an
            agent's session); ``planner`` still sets the defaults that depend on its kind,
            and the reviewer is built from its own spec.

    Raises:
        ValueError, FileNotFoundError, WeightsError: from the model factory.
    """
    planner_spec = ModelSpec.parse(planner)
    reviewer_text = reviewer or planner
    reviewer_spec = ModelSpec.parse(reviewer_text) if need_reviewer else None

    def build(spec: ModelSpec, role: str) -> ChatModel:
        return make_model(
            spec,
            base_url=base_url if spec.kind == "openai" else None,
            role=role if spec.kind == "replay" else None,
            normalise=normalise,
        )

    given = planner_model
    planner_model = given if given is not None else build(planner_spec, "planner")
    reviewer_model: ChatModel | None = None
    if reviewer_spec is not None:
        if reviewer_spec == planner_spec and planner_spec.kind != "replay" and given is None:
            reviewer_model = planner_model
        else:
            reviewer_model = build(reviewer_spec, "reviewer")
    if cache_path is not None:
        cache = RequestCache(cache_path)
        planner_model = CachedModel(planner_model, cache)
        if reviewer_model is not None:
            reviewer_model = CachedModel(reviewer_model, cache)
    local = planner_spec.is_local
    local_reviewer = _runs_here(reviewer_text)
    return RunModels(
        planner=planner_model,
        reviewer=reviewer_model,
        planner_format="fenced" if local else "tools",
        review_mode="json" if local_reviewer else "tools",
        max_tokens=LOCAL_MAX_TOKENS if local else DEFAULT_MAX_TOKENS,
        view_limits=ViewLimits() if local_reviewer else None,
    )
