"""What an endpoint's error answer means: one :data:`~controlscope.core.ProviderErrorKind` per
meaning, read from the error body where there is one, and whether another attempt can succeed.

An OpenAI-compatible endpoint answers a failed request with an HTTP status and, usually, a body
``{"error": {"message", "type", "param", "code"}}``. The status alone misleads: a prompt longer
than the context is a 400 like any other bad request, and ``llama_cpp.server`` answers every
exception, a schema it cannot convert included, with a 500 that no retry can cure. So the body
decides where it says something:

- OpenAI's documented codes and types: ``context_length_exceeded``, ``rate_limit_exceeded``,
  ``insufficient_quota`` (a spent quota: retrying cannot help), ``server_error``, and a
  ``response_format`` parameter error (a schema the provider will not enforce);
- llama.cpp's server (``llama-server``): the types ``exceed_context_size_error``,
  ``unavailable_error`` (still loading), ``not_supported_error``, ``server_error``;
- ``llama_cpp.server`` (llama-cpp-python): ``context_length_exceeded`` and, inside its 500s, the
  messages of llama.cpp's schema converter.

The status decides where the body says nothing it knows: 429 ``rate_limit``, 408 ``timeout``,
409 and 5xx ``server`` (retried), other 4xx ``bad_request`` (not retried). The local model's
process reports the same kinds for the same meanings (``context_length``,
``schema_unsupported``, ``timeout``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from controlscope.core import ProviderErrorKind

__all__ = ["Meaning", "error_meaning"]

_CONTEXT_TEXT = re.compile(
    r"maximum context length|context (?:length|window|size)|exceeds? (?:the )?"
    r"(?:available )?context|too many tokens|prompt is too long",
    re.IGNORECASE,
)
_SCHEMA_TEXT = re.compile(
    r"json[_ ]?schema|response_format|grammar|Pattern must start with|Unrecognized schema|"
    r"Unsupported (?:ref|pattern)|schema .*not supported|unsupported schema",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Meaning:
    """What a failed attempt means.

    Attributes:
        kind: the provider-error kind.
        retryable: whether another attempt of the same request can succeed.
    """

    kind: ProviderErrorKind
    retryable: bool


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def error_meaning(status: int, body: object, message: str = "") -> Meaning:
    """The meaning of an HTTP error answer.

    Args:
        status: the HTTP status (400 or more).
        body: the decoded error body: the ``error`` object, or the whole body, or anything else
            (ignored when it is not a JSON object).
        message: the error's text when the body has none (the SDK's message).

    Returns:
        The kind and whether retrying can help (see the module docstring).
    """
    error = body.get("error", body) if isinstance(body, Mapping) else {}
    if not isinstance(error, Mapping):
        error = {"message": error}
    code = str(error.get("code") or "")
    kind = _text(error.get("type"))
    param = _text(error.get("param"))
    text = _text(error.get("message")) or message
    if code == "context_length_exceeded" or kind == "exceed_context_size_error":
        return Meaning("context_length", False)
    if code == "insufficient_quota":
        return Meaning("rate_limit", False)
    if param.startswith("response_format") or code in ("invalid_json_schema", "invalid_schema"):
        return Meaning("schema_unsupported", False)
    if status == 429 or code == "rate_limit_exceeded" or kind == "rate_limit_error":
        return Meaning("rate_limit", True)
    if status == 408:
        return Meaning("timeout", True)
    if status in (400, 413, 422, 500) and _CONTEXT_TEXT.search(text):
        return Meaning("context_length", False)
    if status in (400, 422, 500, 501) and _SCHEMA_TEXT.search(text):
        return Meaning("schema_unsupported", False)
    if status == 501 or kind == "not_supported_error":
        return Meaning("bad_request", False)
    if status == 409 or status >= 500:
        return Meaning("server", True)
    return Meaning("bad_request", False)
