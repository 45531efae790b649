"""Build a :class:`~controlscope.core.ChatModel` from a model spec
(:class:`~controlscope.core.ModelSpec`, or its text).

Specs (as given to ``--model`` / ``--reviewer-model``):

===========================  ==========================================================
``local``                    the embedded Qwen2.5-Coder-1.5B-Instruct (the default)
``local:1.5b``/``local:0.5b``  a known embedded model by name
``local:PATH.gguf``, ``PATH.gguf``  any GGUF file
``openai:NAME``              ``NAME`` behind an OpenAI-compatible endpoint
``openai``                   the model named by ``CONTROLSCOPE_MODEL``
``scripted:FILE.json``       a :class:`ScriptedModel` loaded from a JSON list of answers
                             (``{"by": "turn", "answers": [...]}``: by conversation turn)
``replay:DIR``               a :class:`ReplayModel` of one role of ``DIR/events.jsonl``
===========================  ==========================================================

The local model class is imported only when a ``local`` spec is built; ``llama_cpp`` itself is
loaded only in the local model's child processes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controlscope.core import ChatModel, ModelSpec
from controlscope.models._openai import OpenAIModel
from controlscope.models._replay import ReplayModel
from controlscope.models._scripted import ScriptedModel

__all__ = ["LOCAL_OPTIONS", "OPENAI_OPTIONS", "make_model"]

LOCAL_OPTIONS = frozenset(
    {"n_ctx", "n_threads", "seed", "verbose", "request_timeout_s", "start_timeout_s"}
)
"""Keyword options that :func:`make_model` passes to the local model."""

OPENAI_OPTIONS = frozenset(
    {
        "timeout_s",
        "request_timeout_s",
        "max_retries",
        "backoff_s",
        "max_backoff_s",
        "json_format",
        "max_tokens_field",
        "stream",
        "cancels_abandoned",
    }
)
"""Keyword options that :func:`make_model` passes to :class:`OpenAIModel`."""


def _options(kind: str, given: dict[str, Any], allowed: frozenset[str]) -> dict[str, Any]:
    chosen = {key: value for key, value in given.items() if value is not None}
    unknown = sorted(set(chosen) - allowed)
    if unknown:
        raise ValueError(
            f"option(s) {unknown} do not apply to {kind} models (they take {sorted(allowed)})"
        )
    return chosen


def make_model(
    spec: str | ModelSpec,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    role: str | None = None,
    normalise: Callable[[str], str] | None = None,
    **options: Any,
) -> ChatModel:
    """Return the model a spec names.

    Args:
        spec: a parsed spec, or its text (see the module docstring).
        base_url: endpoint for ``openai`` specs (default: ``OPENAI_BASE_URL``).
        api_key: key for ``openai`` specs (default: ``OPENAI_API_KEY``).
        role: which role's calls a ``replay`` spec answers (``planner`` or ``reviewer``).
        normalise: for ``replay`` specs, applied to every string of the recorded and received
            requests before comparing them (see :class:`ReplayModel`); ignored otherwise.
        **options: constructor options: :data:`LOCAL_OPTIONS` for local models,
            :data:`OPENAI_OPTIONS` for ``openai`` ones. Options set to ``None`` are ignored.

    Returns:
        A ready model. A local model is loaded (and its weights assembled on first use).

    Raises:
        ValueError: for an unknown spec, an empty path, a ``replay`` spec without ``role``,
            ``base_url``/``api_key`` with a non-``openai`` spec, or options that do not apply
            (the words of :meth:`ModelSpec.parse` for a spec it refuses).
        FileNotFoundError: when a ``scripted`` file or ``replay`` run directory is missing.
        controlscope.models.WeightsError: when local weights are missing or corrupt.
    """
    parsed = spec if isinstance(spec, ModelSpec) else ModelSpec.parse(spec)
    if parsed.kind != "openai" and (base_url is not None or api_key is not None):
        raise ValueError(f"base_url and api_key apply only to openai specs, not {str(spec)!r}")
    if parsed.kind == "local":
        from controlscope.models._local import LocalModel

        name = parsed.arg or "1.5b"
        model: ChatModel = LocalModel(name, **_options("local", options, LOCAL_OPTIONS))
        return model
    if parsed.kind == "openai":
        chosen = _options("openai", options, OPENAI_OPTIONS)
        return OpenAIModel(parsed.arg or None, base_url=base_url, api_key=api_key, **chosen)
    _options(parsed.kind, options, frozenset())
    if parsed.kind == "scripted":
        return ScriptedModel.from_file(parsed.arg)
    if role is None:
        raise ValueError(
            f"replay spec {str(spec)!r} needs a role: make_model(spec, role='planner')"
        )
    return ReplayModel.from_run_dir(parsed.arg, role, normalise=normalise)
