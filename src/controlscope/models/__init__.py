"""Language models for both roles (planner, reviewer): one interface, several implementations.

Public API:

The request and response records and the :class:`~controlscope.core.ChatModel` protocol live
in :mod:`controlscope.core`. Here:

- models: :class:`OpenAIModel` (any OpenAI-compatible endpoint), :class:`ScriptedModel` and
  :class:`ReplayModel` (test doubles), the embedded local model via :func:`make_model`
  (``controlscope.models.local.LocalModel``, imported on demand because it loads ``llama_cpp``).
- wrappers: :class:`CachedModel` over a :class:`RequestCache` (exact-request cache).

- weights: :func:`ensure_weights` assembles and checks the embedded model's GGUF.

Importing this package is cheap: neither ``openai`` nor ``llama_cpp`` is imported until used.
"""

from controlscope.models._chat_format import parse_tool_call
from controlscope.models.cache import CachedModel, CacheError, RequestCache, request_key
from controlscope.models.factory import make_model
from controlscope.models.openai_client import OpenAIModel
from controlscope.models.replay import ReplayExhausted, ReplayMismatch, ReplayModel
from controlscope.models.scripted import ScriptedModel, ScriptExhausted
from controlscope.models.weights import (
    DEFAULT_MODEL,
    KNOWN_MODELS,
    KnownModel,
    WeightsError,
    ensure_weights,
    weights_dir,
)

__all__ = [
    "DEFAULT_MODEL",
    "KNOWN_MODELS",
    "CacheError",
    "CachedModel",
    "KnownModel",
    "OpenAIModel",
    "ReplayExhausted",
    "ReplayMismatch",
    "ReplayModel",
    "RequestCache",
    "ScriptExhausted",
    "ScriptedModel",
    "WeightsError",
    "ensure_weights",
    "make_model",
    "parse_tool_call",
    "request_key",
    "weights_dir",
]
