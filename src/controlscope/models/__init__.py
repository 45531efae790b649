"""Language models for both roles (planner, reviewer): one interface, several implementations.

Public API:

- types: :class:`ModelRequest`, :class:`ModelResponse`, :class:`Message`, :class:`ToolCall`,
  :class:`ToolSpec`, :class:`Usage`, :class:`ProviderError`, :class:`ChatModel`.
- models: :class:`OpenAIModel` (any OpenAI-compatible endpoint), :class:`ScriptedModel` and
  :class:`ReplayModel` (test doubles), the embedded local model via :func:`make_model`
  (``controlscope.models.local.LocalModel``, imported on demand; llama.cpp runs in its child
  processes).
- wrappers: :class:`CachedModel` over a :class:`RequestCache` (exact-request cache),
  :class:`AccountedModel` over a :class:`TokenLedger` (logical vs uncached totals, paper A.5).

Importing this package is cheap: neither ``openai`` nor ``llama_cpp`` is imported until used.
"""

from controlscope.models.accounting import (
    AccountedModel,
    LedgerSummary,
    RoleTotals,
    TokenLedger,
    TokenTotals,
)
from controlscope.models.cache import CachedModel, CacheError, RequestCache, request_key
from controlscope.models.factory import make_model
from controlscope.models.openai_client import OpenAIModel, parse_tool_call
from controlscope.models.replay import ReplayExhausted, ReplayMismatch, ReplayModel
from controlscope.models.scripted import ScriptedModel, ScriptExhausted
from controlscope.models.types import (
    DEFAULT_MAX_TOKENS,
    ChatModel,
    Message,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    ToolChoice,
    ToolSpec,
    Usage,
)

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "AccountedModel",
    "CacheError",
    "CachedModel",
    "ChatModel",
    "LedgerSummary",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "OpenAIModel",
    "ProviderError",
    "ReplayExhausted",
    "ReplayMismatch",
    "ReplayModel",
    "RequestCache",
    "RoleTotals",
    "ScriptExhausted",
    "ScriptedModel",
    "TokenLedger",
    "TokenTotals",
    "ToolCall",
    "ToolChoice",
    "ToolSpec",
    "Usage",
    "make_model",
    "parse_tool_call",
    "request_key",
]
