"""Language models for both roles (planner, reviewer): one interface, several implementations.

Public API:

The request and response records and the :class:`~controlscope.core.ChatModel` protocol live
in :mod:`controlscope.core`. Here:

- models: :class:`OpenAIModel` (any OpenAI-compatible endpoint), :class:`LocalModel` (the
  embedded model: llama.cpp runs in one child process per purpose), :class:`ScriptedModel` and
  :class:`ReplayModel` (test doubles); :func:`make_model` builds any of them from a spec;
- wrappers: :class:`CachedModel` over a :class:`RequestCache` (exact-request cache);
- weights: :func:`ensure_weights` assembles and checks the embedded model's GGUF;
- endpoint gates: :class:`EndpointGate` (a panel's bound on one served endpoint's requests in
  flight, its rate-limit pauses and counts, :class:`GateStats`), :func:`install_gate` and
  :func:`current_gate`;
- :func:`base_url_problem`: what is wrong with an endpoint's base URL (checked before any
  request).

Importing this package is cheap: neither ``openai`` nor ``llama_cpp`` is imported until used
(``llama_cpp`` only ever in the local model's child processes).
"""

from controlscope.models._cache import CachedModel, CacheError, RequestCache, request_key
from controlscope.models._chat_format import parse_tool_call
from controlscope.models._factory import make_model
from controlscope.models._gate import EndpointGate, GateStats, current_gate, install_gate
from controlscope.models._local import GenerationStats, LocalModel
from controlscope.models._openai import OpenAIModel, base_url_problem
from controlscope.models._replay import ReplayExhausted, ReplayMismatch, ReplayModel
from controlscope.models._scripted import ScriptedModel, ScriptExhausted
from controlscope.models._weights import (
    DEFAULT_MODEL,
    KNOWN_MODELS,
    KnownModel,
    UnknownWeights,
    WeightsError,
    ensure_weights,
    resolve_model_name,
    weights_dir,
)

__all__ = [
    "DEFAULT_MODEL",
    "KNOWN_MODELS",
    "CacheError",
    "CachedModel",
    "EndpointGate",
    "GateStats",
    "GenerationStats",
    "KnownModel",
    "LocalModel",
    "OpenAIModel",
    "ReplayExhausted",
    "ReplayMismatch",
    "ReplayModel",
    "RequestCache",
    "ScriptExhausted",
    "ScriptedModel",
    "UnknownWeights",
    "WeightsError",
    "base_url_problem",
    "current_gate",
    "ensure_weights",
    "install_gate",
    "make_model",
    "parse_tool_call",
    "request_key",
    "resolve_model_name",
    "weights_dir",
]
