"""The range of every numeric setting, declared once and checked before anything runs.

Each setting a person gives as a number (an option of ``controlscope``, a key of a panel or
experiment file, a field of :class:`~controlscope.run.RunSpec`, :class:`Condition`,
:class:`TaskBudgets` or a panel's configuration) takes one of the annotated types below, so the
command line, the files and Python callers refuse the same values with the same words, before a
model is called or a process started. The ceilings lie far above any experiment of the paper
(section 4: 100 calls, 100 turns, 1,800 s, 16,384 tokens, a few draws and source programs) and far
below what breaks a part: an rlimit or a tmpfs size that overflows, a plan of billions of runs, a
wait longer than a thread can wait, a number no JSON reader takes back.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

MAX_SEED = 2**63 - 1
"""The largest seed (data seeds, the bootstrap's): a signed 64-bit integer."""

MAX_CALLS = 100_000
"""The largest primitive-call budget, and so the largest call index a boundary can have (a
thousand times the paper's 100)."""

MAX_TURNS = 100_000
"""The largest planning-turn budget (the paper's: 100)."""

MAX_REPAIRS = 1_000
"""The most ordinary repairs after failed plans (ALFWorld's: 5)."""

MAX_BLOCKS = 100_000
"""The most natural blocks per task (the app protocols': 40)."""

MAX_BLOCK_REQUESTS = 100_000
"""The most API requests per natural block (the app protocols': 250)."""

MAX_SECONDS = 604_800.0
"""The longest duration of any kind, in seconds: one week (execution budget, wall-clock ceiling,
per-block limit, one model call's limit; the paper's execution budget is 1,800)."""

MAX_TOKENS = 1_048_576
"""The largest per-request token cap (the paper's: 16,384)."""

MAX_TEMPERATURE = 2.0
"""The highest sampling temperature (OpenAI's range)."""

MAX_DRAWS = 1_000
"""The most reviewer draws per scope (the paper's: 3); a draw index is below it."""

MAX_SOURCE_PROGRAMS = 100
"""The most source programs per task (the paper's: 2); a source-program index is below it."""

MIN_WORKER_MEMORY_MB = 128
"""The least memory a worker runs in (the interpreter and its private ``/tmp``)."""

MAX_WORKER_MEMORY_MB = 1 << 20
"""The most memory a worker may be given, in MiB (1 TiB: its ``/tmp`` is an eighth of it)."""

MAX_WORKERS = 1_024
"""The most runs a panel runs at a time, and the most CPUs one run declares to Ray."""

MAX_RESAMPLES = 1_000_000
"""The most bootstrap resamples of a report (the paper's: 10,000)."""

MAX_PORT = 65_535
"""The highest TCP port."""

Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
"""A seed: 0 to :data:`MAX_SEED`."""

CallBudget = Annotated[int, Field(ge=1, le=MAX_CALLS)]
"""Primitive calls per task: 1 to :data:`MAX_CALLS`."""

TurnBudget = Annotated[int, Field(ge=1, le=MAX_TURNS)]
"""Planning turns per task: 1 to :data:`MAX_TURNS`."""

Repairs = Annotated[int, Field(ge=0, le=MAX_REPAIRS)]
"""Ordinary repairs: 0 to :data:`MAX_REPAIRS`."""

BlockBudget = Annotated[int, Field(ge=1, le=MAX_BLOCKS)]
"""Natural blocks per task: 1 to :data:`MAX_BLOCKS`."""

BlockRequests = Annotated[int, Field(ge=1, le=MAX_BLOCK_REQUESTS)]
"""API requests per natural block: 1 to :data:`MAX_BLOCK_REQUESTS`."""

Seconds = Annotated[float, Field(gt=0.0, le=MAX_SECONDS, allow_inf_nan=False)]
"""A duration in seconds: above 0, at most :data:`MAX_SECONDS`, finite."""

TokenCap = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
"""A per-request token cap: 1 to :data:`MAX_TOKENS`."""

Temperature = Annotated[float, Field(ge=0.0, le=MAX_TEMPERATURE, allow_inf_nan=False)]
"""A sampling temperature: 0 to :data:`MAX_TEMPERATURE`, finite."""

Draws = Annotated[int, Field(ge=1, le=MAX_DRAWS)]
"""Reviewer draws per scope: 1 to :data:`MAX_DRAWS`."""

DrawIndex = Annotated[int, Field(ge=0, lt=MAX_DRAWS)]
"""A reviewer draw's index: 0 to :data:`MAX_DRAWS` - 1."""

SourcePrograms = Annotated[int, Field(ge=1, le=MAX_SOURCE_PROGRAMS)]
"""Source programs per task: 1 to :data:`MAX_SOURCE_PROGRAMS`."""

SourceIndex = Annotated[int, Field(ge=0, lt=MAX_SOURCE_PROGRAMS)]
"""A source program's index (P1 = 0): 0 to :data:`MAX_SOURCE_PROGRAMS` - 1."""

CallIndex = Annotated[int, Field(ge=0, lt=MAX_CALLS)]
"""A boundary's call index (or a count of calls below the budget): 0 to :data:`MAX_CALLS` - 1."""

WorkerMemoryMb = Annotated[int, Field(ge=MIN_WORKER_MEMORY_MB, le=MAX_WORKER_MEMORY_MB)]
"""A worker's whole memory in MiB: :data:`MIN_WORKER_MEMORY_MB` to :data:`MAX_WORKER_MEMORY_MB`."""

Workers = Annotated[int, Field(ge=1, le=MAX_WORKERS)]
"""Runs at a time: 1 to :data:`MAX_WORKERS`."""

Connections = Annotated[int, Field(ge=1, le=MAX_WORKERS)]
"""Requests in flight at once to one served endpoint: 1 to :data:`MAX_WORKERS`."""

CpusPerRun = Annotated[float, Field(gt=0.0, le=MAX_WORKERS, allow_inf_nan=False)]
"""CPUs one run declares to Ray: above 0, at most :data:`MAX_WORKERS`."""

Resamples = Annotated[int, Field(ge=1, le=MAX_RESAMPLES)]
"""Bootstrap resamples: 1 to :data:`MAX_RESAMPLES`."""

Port = Annotated[int, Field(ge=0, le=MAX_PORT)]
"""A TCP port: 0 (a free one) to :data:`MAX_PORT`."""

Coverage = Annotated[float, Field(gt=0.0, lt=1.0, allow_inf_nan=False)]
"""An interval's coverage: above 0, below 1."""


@functools.cache
def _adapter(setting: Any) -> TypeAdapter[Any]:
    return TypeAdapter(setting)


def range_problem(name: str, setting: Any, value: object) -> str | None:
    """Why ``value`` is not a value of ``setting`` (one of the annotated types above), in one
    line naming ``name``; None when it is. For numbers given to a function rather than to a
    pydantic model (``branch(draws=...)``, ``report(resamples=...)``).

    Args:
        name: the argument's name, for the message.
        setting: the annotated type, e.g. :data:`Draws`.
        value: the value given.

    Returns:
        None, or e.g. ``"draws: Input should be less than or equal to 1000 (got 5000)"``.
    """
    try:
        _adapter(setting).validate_python(value, strict=True)
    except ValidationError as err:
        return f"{name}: {err.errors()[0]['msg']} (got {value!r})"
    return None
