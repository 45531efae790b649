"""The live models of ``controlscope branch`` and ``controlscope replay --operation``: what
plans (and reviews) after a replayed prefix."""

from __future__ import annotations

import argparse

from controlscope.cli._settings_args import add_settings
from controlscope.core import ChatModel, ProviderError
from controlscope.models import CacheError, WeightsError
from controlscope.replay import ReplayError
from controlscope.review import ModelReviewer
from controlscope.run import RunSpec, build_models

RECORDED = "recorded"
"""The ``--model`` value that lets the recording answer on after the prefix."""


def add_model_arguments(parser: argparse.ArgumentParser, *, reviewer: bool) -> None:
    """Register the live models' options (``--model``, ``--reviewer-model``, ``--base-url``,
    ``--cache``: the run settings' own, defaults kept)."""
    roles = ("model", "reviewer_model") if reviewer else ("model",)
    add_settings(
        parser,
        RunSpec,
        fields=(*roles, "base_url", "cache"),
        title="live models (after the replayed prefix)",
        keep_defaults=True,
        extra_help={"model": f"or {RECORDED}: the recording answers on after the prefix"},
    )


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
