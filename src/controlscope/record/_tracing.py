"""Whether a run's events become OpenTelemetry spans, and where they go.

Tracing is off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)
is set, or a caller chose a tracer provider with :func:`trace_to`. Off, this module imports
nothing of OpenTelemetry and a writer's only cost is one ``is None`` check per event. On, each
:class:`~controlscope.record.TrajectoryWriter` gets a :class:`~controlscope.record._spans.RunSpans`
that turns its events into spans as they are written (:mod:`controlscope.record._spans`), so every
run is traced the same way wherever it runs (the CLI, a panel's pool, served or Ray processes, an
executor's session).

With the environment variable, this process exports through one ``TracerProvider`` of its own
(OTLP over HTTP, batched; the exporter reads the standard ``OTEL_EXPORTER_OTLP_*`` variables;
made anew when the endpoint changes),
flushed at each run's end for at most :data:`FLUSH_S` seconds. ``OTEL_SDK_DISABLED=true`` turns
it off. The SDK and the exporter are the ``otel`` extra.
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controlscope._extras import MissingExtra, require_extra
from controlscope.core import Event

if TYPE_CHECKING:
    from controlscope.record._spans import RunSpans

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
"""Either one set (non-empty) turns tracing on."""

FLUSH_S = 5.0
"""Seconds a run's end waits at most for its spans to be exported (a collector that does not
answer costs each run at most this much; the spans are then dropped)."""

_lock = threading.Lock()
_chosen: Any = None  # a TracerProvider chosen with trace_to
_own: tuple[tuple[str, ...], Any] | None = None  # (the endpoints, this process's provider)
_warned = False


def trace_to(provider: Any) -> None:
    """Send the spans of the runs this process starts from now on to ``provider``.

    Args:
        provider: an OpenTelemetry SDK ``TracerProvider`` (e.g. one with an in-memory exporter,
            or the application's own); None: back to the environment (traced only when
            ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set).
    """
    global _chosen
    with _lock:
        _chosen = provider


def tracing_on() -> bool:
    """Whether runs started now are traced (a provider chosen, or an OTLP endpoint set and
    ``OTEL_SDK_DISABLED`` not ``true``). Cheap: no import."""
    if _chosen is not None:
        return True
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(os.environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def run_spans(run_dir: Path) -> RunSpans | None:
    """The span builder for a new run's events, or None when tracing is off.

    Args:
        run_dir: the run's directory (a span attribute).

    Returns:
        None when off, or when an endpoint is set but the ``otel`` extra is not installed (a
        warning says so once per process; the run goes on untraced).
    """
    if not tracing_on():
        return None
    try:
        provider = _provider()
    except MissingExtra as err:
        _warn_once(f"{err}; runs are not traced")
        return None
    from controlscope.record._spans import RunSpans

    return RunSpans(provider, run_dir=run_dir, flush_s=FLUSH_S)


def trace_log(events: Iterable[Event], provider: Any = None, run_dir: Path | None = None) -> None:
    """Build the spans of a recorded run from its events (the same spans as when it ran: their
    times are the events' own) and flush them.

    Args:
        events: the run's events in order (e.g. :func:`~controlscope.record.iter_events`).
        provider: where the spans go (None: the provider runs would use; tracing must be on).
        run_dir: the run's directory, for the run span's attribute.

    Raises:
        MissingExtra: no provider is given and the ``otel`` extra is not installed.
        ValueError: no provider is given and tracing is off.
    """
    if provider is None:
        if not tracing_on():
            raise ValueError(
                "tracing is off: set OTEL_EXPORTER_OTLP_ENDPOINT or give a tracer provider"
            )
        provider = _provider()
    from controlscope.record._spans import RunSpans

    spans = RunSpans(provider, run_dir=run_dir, flush_s=FLUSH_S)
    for event in events:
        spans.add(event)
    spans.close()


def _provider() -> Any:
    """The chosen provider, else this process's own, made once from the environment.

    Raises:
        MissingExtra: the SDK or the OTLP exporter is not installed.
    """
    global _own
    with _lock:
        if _chosen is not None:
            return _chosen
        endpoints = tuple(os.environ.get(name, "") for name in ENDPOINT_VARIABLES)
        if _own is None or _own[0] != endpoints:  # made anew when the endpoint changed
            _own = (endpoints, _environment_provider())
        return _own[1]


def _environment_provider() -> Any:
    """A ``TracerProvider`` exporting in batches over OTLP/HTTP to the environment's endpoint;
    the service is ``controlscope`` unless ``OTEL_SERVICE_NAME`` (or the resource attributes)
    name another; one export waits :data:`FLUSH_S` for an answer unless
    ``OTEL_EXPORTER_OTLP_TIMEOUT`` states another positive number (so a process's exit does
    not wait longer for a collector that does not answer)."""
    what = "tracing to OTEL_EXPORTER_OTLP_ENDPOINT"
    require_extra("otel", "opentelemetry.sdk", what)
    require_extra("otel", "opentelemetry.exporter.otlp.proto.http", what)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "controlscope"}))
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter() if _timeout_stated() else OTLPSpanExporter(timeout=FLUSH_S)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _timeout_stated() -> bool:
    """Whether the environment states the exporter's timeout as a positive, finite number of
    seconds (the traces' variable first, as the exporter reads them); anything else (``abc``,
    ``inf``, ``-1``) is warned about and :data:`FLUSH_S` holds, so no wait is unbounded."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"):
        raw = os.environ.get(name, "")
        if not raw:
            continue
        try:
            seconds = float(raw)
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds) and seconds > 0:
            return True
        warnings.warn(
            f"{name}={raw!r} is not a positive number of seconds; exports wait {FLUSH_S:g} s",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    return False


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(message, RuntimeWarning, stacklevel=3)
