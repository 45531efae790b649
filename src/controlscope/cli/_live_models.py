"""The live models of ``controlscope branch`` and ``controlscope replay --operation``: what
plans (and reviews) after a replayed prefix."""

from __future__ import annotations

import argparse

from controlscope.cli._console import path_option
from controlscope.core import ChatModel, ProviderError
from controlscope.models import CacheError, WeightsError
from controlscope.replay import ReplayError
from controlscope.review import ModelReviewer
from controlscope.run import build_models

RECORDED = "recorded"
"""The ``--model`` value that lets the recording answer on after the prefix."""


def add_model_arguments(parser: argparse.ArgumentParser, *, reviewer: bool) -> None:
    """Register the live models' options (``--model``, ``--reviewer-model``, ``--base-url``,
    ``--cache``)."""
    group = parser.add_argument_group("live models (after the replayed prefix)").add_argument
    group(
        "--model",
        default="local",
        help="planner after the prefix: local|local:0.5b|PATH.gguf|openai:NAME, or "
        f"{RECORDED} (the recording answers on; default local)",
    )
    if reviewer:
        group("--reviewer-model", default=None, help="reviewer model (default: --model)")
    group("--base-url", default=None, help="OpenAI-compatible base URL")
    group("--cache", type=path_option, default=None, help="an SQLite exact-request cache file")


def build_live(
    args: argparse.Namespace, *, need_planner: bool, need_reviewer: bool
) -> tuple[ChatModel | None, ModelReviewer | None]:
    """The live planner (None for ``recorded`` or when none is needed) and reviewer.

    Raises:
        ReplayError: a model that cannot be built (unknown spec, missing weights or file).
    """
    planner_spec = args.model.strip()
    reviewer_spec = getattr(args, "reviewer_model", None) or planner_spec
    if reviewer_spec == RECORDED and need_reviewer:
        raise ReplayError("--reviewer-model must name a model (the branch's reviews are live)")
    if not need_planner or planner_spec == RECORDED:
        if not need_reviewer:
            return None, None
        planner_spec = reviewer_spec  # built only for the reviewer
        need_planner = False
    try:
        models = build_models(
            planner=planner_spec,
            reviewer=reviewer_spec,
            base_url=args.base_url,
            cache_path=args.cache,
            need_reviewer=need_reviewer,
        )
    except (ValueError, FileNotFoundError, ProviderError, WeightsError, CacheError) as err:
        raise ReplayError(str(err)) from None
    reviewer = ModelReviewer(models.reviewer) if models.reviewer is not None else None
    return (models.planner if need_planner else None), reviewer
