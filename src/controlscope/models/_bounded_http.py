"""An HTTP client for the OpenAI SDK that reads at most a bounded answer.

The SDK reads a whole answer into memory before it parses it, so an endpoint that sends
200 MB (or never stops) would hold the controller's memory and then a log event no reader takes
back. The client made here reads every answer, an error's included, through a stream that
stops at :data:`~controlscope.core.MAX_RESPONSE_BYTES`: an answer that announces more
(``Content-Length``) is refused before its body is read, one that sends more is cut off there,
and either is :class:`ResponseTooLarge`, which the model turns into a ``response_too_large``
:class:`~controlscope.core.ProviderError` (never retried). Answers are asked for uncompressed
(``Accept-Encoding: identity``): a compressed one could decode to far more than its bytes on
the wire, so one that comes compressed all the same is refused too.

The SDK's HTTP library (``httpx``, or ``httpx2`` in newer SDKs) is whichever its
``DefaultAsyncHttpxClient`` is built on; only its public interface is used (event hooks, a
response's ``stream``, its ``AsyncByteStream``).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["ResponseTooLarge", "bounded_client"]


class ResponseTooLarge(Exception):
    """An endpoint's answer is larger than a run may take in (or comes compressed, so its size
    cannot be bounded)."""


def bounded_client(limit: int, **options: Any) -> Any:
    """The SDK's default async HTTP client, reading at most ``limit`` bytes of any answer.

    Args:
        limit: the most bytes of one answer's body.
        **options: passed to ``openai.DefaultAsyncHttpxClient`` (its defaults otherwise).

    Returns:
        The client, for ``openai.AsyncOpenAI(http_client=...)``.
    """
    import openai

    async def check(response: Any) -> None:
        encoding = response.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            raise ResponseTooLarge(
                f"the answer came compressed ({encoding}) though asked for uncompressed: its "
                f"size cannot be bounded to {limit:,} bytes"
            )
        length = response.headers.get("content-length", "").strip()
        if length.isdigit() and int(length) > limit:
            raise ResponseTooLarge(
                f"response too large: the answer announces {int(length):,} bytes; at most "
                f"{limit:,} are read"
            )
        base = sys.modules[type(response).__module__.partition(".")[0]].AsyncByteStream
        response.stream = _bounded_stream(base)(response.stream, limit)

    headers = {"Accept-Encoding": "identity", **options.pop("headers", {})}
    hooks = options.pop("event_hooks", {})
    hooks = {**hooks, "response": [*hooks.get("response", []), check]}
    return openai.DefaultAsyncHttpxClient(headers=headers, event_hooks=hooks, **options)


@functools.cache
def _bounded_stream(base: type) -> type:
    """A subclass of the HTTP library's ``AsyncByteStream`` (its responses read only those)
    passing on at most ``limit`` bytes of the stream it wraps."""

    class Bounded(base):  # type: ignore[misc]
        def __init__(self, inner: Any, limit: int) -> None:
            self._inner = inner
            self._limit = limit

        async def __aiter__(self) -> AsyncIterator[bytes]:
            seen = 0
            async for chunk in self._inner:
                seen += len(chunk)
                if seen > self._limit:
                    raise ResponseTooLarge(
                        f"response too large: the answer goes on past {self._limit:,} bytes "
                        "(read no further)"
                    )
                yield chunk

        async def aclose(self) -> None:
            await self._inner.aclose()

    return Bounded
