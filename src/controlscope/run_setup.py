"""Turn ``--model`` / ``--reviewer-model`` specs into the planner and reviewer of a run."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from controlscope.core import DEFAULT_MAX_TOKENS, ChatModel
from controlscope.models.cache import CachedModel, RequestCache
from controlscope.models.factory import make_model

if TYPE_CHECKING:
    from controlscope.core import RunStartEvent

LOCAL_MAX_TOKENS = 1024
"""Default per-request cap for the embedded model: at about 20 tokens/s on 2 cores, the paper's
16,384 would let one runaway answer take minutes."""


@dataclass(frozen=True)
class RunModels:
    """The models of one run and the formats that suit them.

    Attributes:
        planner: the ordinary planner.
        reviewer: the reviewer (None when no review can happen).
        planner_format: ``fenced`` for local models (small models write fenced code more
            reliably than code inside a JSON string), ``tools`` otherwise.
        review_mode: ``json`` (schema-constrained decision) for local models, ``tools`` otherwise.
        max_tokens: the default per-request token cap for these models.
    """

    planner: ChatModel
    reviewer: ChatModel | None
    planner_format: Literal["tools", "fenced"]
    review_mode: Literal["tools", "json"]
    max_tokens: int


def _is_local(spec: str) -> bool:
    return spec.startswith("local") or spec.lower().endswith(".gguf")


def build_models(
    *,
    planner: str,
    reviewer: str | None,
    base_url: str | None = None,
    cache_path: Path | None = None,
    need_reviewer: bool = True,
    normalise: Callable[[str], str] | None = None,
) -> RunModels:
    """Build the planner and the reviewer.

    A reviewer spec equal to the planner's shares one model object (the local model keeps a
    separate KV context per role, so they do not evict each other's prefixes). ``replay:DIR``
    answers each role from that role's recorded calls.

    Args:
        planner: the planner's spec (see :func:`controlscope.models.factory.make_model`).
        reviewer: the reviewer's spec; None means the planner's.
        base_url: endpoint for ``openai`` specs.
        cache_path: an SQLite exact-request cache file; None for no cache.
        need_reviewer: False when the condition never reviews (Keep or ``never``).
        normalise: for ``replay`` specs, what masks run-dependent text before requests are
            compared (the environment's ``normalise_observation``).

    Raises:
        ValueError, FileNotFoundError, WeightsError: from the model factory.
    """
    reviewer_spec = reviewer or planner

    def build(spec: str, role: str) -> ChatModel:
        is_openai = spec.startswith("openai")
        return make_model(
            spec,
            base_url=base_url if is_openai else None,
            role=role if spec.startswith("replay:") else None,
            normalise=normalise,
        )

    planner_model = build(planner, "planner")
    reviewer_model: ChatModel | None = None
    if need_reviewer:
        if reviewer_spec == planner and not planner.startswith("replay:"):
            reviewer_model = planner_model
        else:
            reviewer_model = build(reviewer_spec, "reviewer")
    if cache_path is not None:
        cache = RequestCache(cache_path)
        planner_model = CachedModel(planner_model, cache)
        if reviewer_model is not None:
            reviewer_model = CachedModel(reviewer_model, cache)
    local = _is_local(planner)
    return RunModels(
        planner=planner_model,
        reviewer=reviewer_model,
        planner_format="fenced" if local else "tools",
        review_mode="json" if _is_local(reviewer_spec) else "tools",
        max_tokens=LOCAL_MAX_TOKENS if local else DEFAULT_MAX_TOKENS,
    )


REPLAYED_KNOBS = ("planner_format", "review_mode", "max_tokens", "temperature", "draw")
"""Run settings that shape model requests: a replay takes them from the recorded run, so the
replayed requests can match the recorded ones."""


def _recording(run_dir: Path) -> tuple[RunStartEvent, bool]:
    """A recorded run's ``run_start`` event, and whether the run is a replay that diverged."""
    from controlscope.agent import REPLAY_DIVERGED
    from controlscope.core import RunEndEvent, RunStartEvent
    from controlscope.record.store import read_events

    if not (run_dir / "events.jsonl").exists():
        raise FileNotFoundError(f"no recorded run at {run_dir} (events.jsonl is missing)")
    events = read_events(run_dir)
    start = next((e for e in events if isinstance(e, RunStartEvent)), None)
    if start is None:
        raise ValueError(f"the log in {run_dir} has no run_start event")
    diverged = any(isinstance(e, RunEndEvent) and e.end_reason == REPLAY_DIVERGED for e in events)
    return start, diverged


def recorded_config(run_dir: Path) -> dict[str, object]:
    """The model-facing settings of a recorded run (``run_start``'s config).

    Raises:
        FileNotFoundError: when ``run_dir/events.jsonl`` is missing.
        ValueError: when the log has no ``run_start`` event.
    """
    config = _recording(run_dir)[0].config
    return {k: config[k] for k in REPLAYED_KNOBS if k in config}


def check_replay_condition(run_dir: Path, given: Mapping[str, object]) -> None:
    """Refuse a replay whose condition differs from the recorded run's.

    Args:
        run_dir: the recorded run.
        given: the replay's condition by option name: ``--task`` (task id), ``params`` (the
            task's generator parameters), ``--seed``, ``--scope`` (lower-case name),
            ``--schedule``, ``--view``, ``--replace-boundary``, the budgets (``--max-calls``,
            ``--max-turns``, ``--max-seconds``) and the request settings of
            :data:`REPLAYED_KNOBS` (``--temperature``...); options left out are not checked.

    Raises:
        FileNotFoundError: when ``run_dir/events.jsonl`` is missing.
        ValueError: naming every option whose value differs from the recording, with both
            values; or the recording is itself a replay that diverged.
    """
    start, diverged = _recording(run_dir)
    if diverged:
        raise ValueError(
            f"{run_dir} holds a replay that diverged from its recording; replay the original run"
        )
    recorded: dict[str, object] = {
        "--task": start.task.id,
        "params": dict(start.task.params),
        "--seed": start.seed,
        "--scope": start.scope.name.lower(),
        "--schedule": start.schedule,
        "--view": start.view,
        "--replace-boundary": start.replace_boundary,
        "--max-calls": start.budgets.primitive_calls,
        "--max-turns": start.budgets.planning_turns,
        "--max-seconds": start.budgets.execution_seconds,
        **{
            f"--{knob.replace('_', '-')}": start.config[knob]
            for knob in REPLAYED_KNOBS
            if knob in start.config
        },
    }
    from controlscope.schedule import parse_schedule

    def same(name: str, value: object) -> bool:
        if name == "--schedule" and isinstance(value, str):  # compare canonical specs
            try:
                return parse_schedule(value).name == parse_schedule(start.schedule).name
            except ValueError:
                return False
        return recorded[name] == value

    differ = [
        f"{name} (recorded {recorded[name]!r}, given {value!r})"
        for name, value in given.items()
        if name in recorded and not same(name, value)
    ]
    if differ:
        raise ValueError(
            f"the replay's options differ from the recorded run in {run_dir}: "
            + "; ".join(differ)
            + ". A replay repeats the recorded run's options."
        )
