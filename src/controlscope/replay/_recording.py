"""A recorded run, read once: what a prefix replay, a branch or a frozen operation replay
needs from its log (paper sections 3.3 and A.4).

:meth:`Recording.load` refuses what cannot be replayed before anything runs: a log of a schema
version this code does not replay, a truncated log, a replay that diverged, a condition this
version cannot rebuild. :meth:`Recording.check_task` compares the task the log records with
the task the environment defines today (its instruction and every other field), then sets the
task up once and compares its data with the recorded task-data hash, so an edited log or a
generator that changed since the recording is refused too.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from controlscope._leftovers import make_dir
from controlscope._tree import remove_tree
from controlscope.core import (
    EVENTS_FILE,
    SCHEMA_VERSION,
    Boundary,
    BranchPointEvent,
    Condition,
    EndReason,
    Event,
    FallbackKind,
    FinalVerdictEvent,
    InputFileError,
    ModelCallEvent,
    ModelRequest,
    ModelResponse,
    Operation,
    PrimitiveCall,
    ProviderError,
    RunStartEvent,
    ScopeName,
    Task,
    TaskError,
    changed_data,
    clip_text,
    open_regular,
    read_source_program,
)
from controlscope.envs import Environment, get_environment
from controlscope.record import (
    MAX_EVENT_BYTES,
    LogError,
    RecordedActions,
    TruncatedLogWarning,
    first_difference,
    map_strings,
    read_events,
)

OLDEST_REPLAYABLE = 3
"""The oldest schema version whose logs this code replays: logs before it lack the worker's
seed and the controller-derived boundaries, and their requests were rendered by code whose
views and prompts this version no longer writes."""


class ReplayError(ValueError):
    """A recording, boundary or operation that cannot be replayed; nothing has run."""


RecordedPair = tuple[ModelRequest, ModelResponse | ProviderError]
"""One recorded model call: its request and its response (or the provider error it ended in)."""


@dataclass(frozen=True)
class RecordedReview:
    """One reviewed boundary of a recording: a decision a replay repeats.

    Attributes:
        index: its 0-based position among the recording's reviewed boundaries (the operation
            index of ``controlscope replay --operation N``).
        boundary: its boundary's 0-based position among the recording's boundaries.
        call_index: the boundary's call index.
        block_id: the block that was running.
        granted: the scope granted at that review.
        draw: the reviewer draw of the review's request.
        model_called: whether a model was asked (False for granted Keep and a reviewer of
            one's own, whose recorded proposal the replay repeats).
        proposal: the recorded proposal (None when nothing parseable came back).
        raw: the recorded answer text.
        realized: the operation executed.
        fallback: the fallback kind when the realized Keep was not the reviewer's answer.
    """

    index: int
    boundary: int
    call_index: int
    block_id: str
    granted: ScopeName
    draw: int
    model_called: bool
    proposal: Operation | None
    raw: str
    realized: Operation
    fallback: FallbackKind | None


@dataclass(frozen=True)
class Recording:
    """A recorded run, as a replay needs it.

    Attributes:
        run_dir: the run directory.
        start: its ``run_start`` event.
        condition: its condition, rebuilt from ``run_start``.
        env: the environment the task runs in.
        task: the task as the environment defines it today (with the recorded parameters).
        seed: the recorded data seed.
        boundaries: every boundary in order, with whether the schedule reviewed it.
        calls: every primitive call in order.
        planner: the planner's recorded model calls in order.
        reviewer: the reviewer's recorded model calls in order.
        reviews: every reviewed boundary in order.
        final: the final verdict (terminal state hash and file hashes), if any.
        end_reason: why the recorded run ended.
        branch_points: the ``branch_point`` events of the recording, by boundary position.
        events: every event, in order.
    """

    run_dir: Path
    start: RunStartEvent
    condition: Condition
    env: Environment
    task: Task
    seed: int
    boundaries: tuple[tuple[Boundary, bool], ...]
    calls: tuple[PrimitiveCall, ...]
    planner: tuple[RecordedPair, ...]
    reviewer: tuple[RecordedPair, ...]
    reviews: tuple[RecordedReview, ...]
    final: FinalVerdictEvent | None
    end_reason: EndReason
    branch_points: dict[int, BranchPointEvent]
    events: tuple[Event, ...]

    @classmethod
    def load(cls, run_dir: str | Path) -> Recording:
        """Read the run recorded in ``run_dir``.

        Args:
            run_dir: the run directory (holding ``events.jsonl``).

        Returns:
            The recording.

        Raises:
            ReplayError: no log; a log of a schema version this code does not replay (newer,
                or older than :data:`OLDEST_REPLAYABLE`); an unreadable or truncated log (a
                cut last line, or no ``run_end``: the run was killed); a replay that diverged
                or a run that was interrupted; a condition or task this version refuses.
        """
        path = Path(run_dir)
        events = _read(path)
        start = events[0]
        if not isinstance(start, RunStartEvent):
            raise ReplayError(f"the log in {path} does not start with run_start")
        ends = [e.end_reason for e in events if e.type == "run_end"]
        if not ends:
            raise ReplayError(f"the log in {path} is truncated: it has no run_end (was it killed?)")
        if ends[-1] in ("replay_diverged", "interrupted"):
            raise ReplayError(
                f"{path} holds a run that ended {ends[-1]}: it is not a complete recording"
            )
        try:
            condition = Condition.model_validate(start.config)
            env = get_environment(start.task.env)
            task = env.task(start.task.id, **start.task.params)
        except (ValidationError, TaskError) as err:
            raise ReplayError(f"the recording in {path} cannot be rebuilt: {err}") from None
        return cls(
            run_dir=path,
            start=start,
            condition=condition,
            env=env,
            task=task,
            seed=start.seed,
            **_parts(events),
            end_reason=ends[-1],
            events=tuple(events),
        )

    # -- reading -----------------------------------------------------------------------------

    def normalise(self, text: str) -> str:
        """``text`` with the clock readings no seed controls masked, dated from the
        recording's start (the environment's ``normalise_observation``, paper A.4)."""
        return self.env.normalise_observation(text, since=self.start.t)

    def actions(self) -> RecordedActions:
        """The recorded primitive calls, to check a replay's calls against (tool, final
        arguments and normalised observation)."""
        return RecordedActions(self.calls, normalise=self.normalise)

    def position_of(self, call_index: int) -> int:
        """The position of the first boundary whose call index is ``call_index``.

        Args:
            call_index: the calls completed before the boundary (K).

        Returns:
            The boundary's 0-based position among the recording's boundaries.

        Raises:
            ReplayError: no recorded boundary has that call index.
        """
        for position, (boundary, _) in enumerate(self.boundaries):
            if boundary.call_index == call_index:
                return position
        last = self.boundaries[-1][0].call_index if self.boundaries else None
        raise ReplayError(
            f"boundary {call_index} is not among the recorded boundaries of {self.run_dir} "
            f"(call indices 0 to {last})"
            if last is not None
            else f"{self.run_dir} recorded no boundary"
        )

    def review_at(self, position: int) -> RecordedReview | None:
        """The recorded review at the boundary in ``position``, if it was reviewed."""
        return next((r for r in self.reviews if r.boundary == position), None)

    def operation(self, index: int) -> RecordedReview:
        """The recorded operation ``index`` (0-based, among reviewed boundaries).

        Raises:
            ReplayError: no such operation.
        """
        if not 0 <= index < len(self.reviews):
            raise ReplayError(
                f"operation {index} is not recorded in {self.run_dir}: it holds "
                f"{len(self.reviews)} reviewed boundar{'y' if len(self.reviews) == 1 else 'ies'}"
            )
        return self.reviews[index]

    def condition_for(self, review: RecordedReview) -> Condition:
        """The condition a recorded review's request was rendered under: the run's, with the
        scope granted and the draw of that review (a branch's log holds its prefix's reviews
        under the source's scope)."""
        return self.condition.model_copy(update={"scope": review.granted, "draw": review.draw})

    def prefix_hash(self, position: int | None) -> str:
        """The SHA-256 of the recorded prefix up to the boundary in ``position`` (included).

        What is hashed: the task, its parameters and seed, and every event of the prefix
        without its timing (model requests and answers, blocks, boundaries, decisions, calls
        and observations; of the last boundary, not whether it was reviewed), clock readings
        masked. Equal recorded prefixes hash equally, so the prefix of a branch's log hashes
        as its source's does.

        Args:
            position: a boundary position; None hashes the whole run.

        Returns:
            64 hex digits.
        """
        digest = hashlib.sha256()
        head = {"task": self.task.id, "params": dict(self.task.params), "seed": self.seed}
        digest.update(_canonical(head).encode())
        for part in self.prefix_parts(position):
            digest.update(_canonical(part).encode())
        return digest.hexdigest()

    def prefix_parts(self, position: int | None) -> list[dict[str, Any]]:
        """What :meth:`prefix_hash` hashes of the prefix up to the boundary in ``position``
        (included), one part per counted event in order: its type and content without timing,
        clock readings masked (of the last boundary, not whether it was reviewed). Two
        recordings share a prefix when these parts are equal; the first that differs names
        the field (:func:`~controlscope.record.first_difference`).

        Args:
            position: a boundary position; None: the whole run.

        Returns:
            The parts, each a JSON-ready dict with its ``type``.
        """
        parts: list[dict[str, Any]] = []
        seen = -1
        for event in self.events:
            part = _fingerprint(event)
            if event.type == "boundary":
                seen += 1
            if part is not None:
                if seen == position and event.type == "boundary":
                    part.pop("review")  # whether to review there is the branch's decision
                parts.append(map_strings(part, self.normalise))
            if seen == position and event.type == "boundary":
                break
        return parts

    def check_task(self, workspace_root: Path | None = None) -> str | None:
        """Compare the recorded task with the task today, field by field (its instruction,
        parameters, budgets...), then set it up once and compare its data with the recorded
        task-data hash.

        Args:
            workspace_root: where the scratch workspace is made (a temporary directory when
                None); it is removed.

        Returns:
            The task data's hash today; None when the recording holds none (written before it
            was recorded: the check is then left to the replay's observations).

        Raises:
            ReplayError: a field of the recorded task differs from today's (named, both
                values shown: an edited ``run_start``, or a task defined otherwise today); the
                task's data differ from the recording's (its generator changed, or its files:
                :func:`~controlscope.core.changed_data`); the frozen source program the run
                took its first reply from was edited since (:meth:`check_source`); or the
                task cannot be set up.
        """
        self.check_source()
        changed = changed_data(self.start.task, self.task)
        if changed:
            raise ReplayError(
                f"the task {self.task.id}'s files changed since {self.run_dir} was recorded: "
                f"{', '.join(changed)}"
            )
        self._check_task_fields()
        recorded = self.start.task_data_hash
        if recorded is None:
            return None
        workspace = make_dir("cs-check-", workspace_root)
        try:
            self.env.setup(self.task, self.seed, workspace)
            today = self.env.state_hash(self.task, workspace, since=self.start.t)
        except TaskError as err:
            raise ReplayError(f"the recorded task cannot be set up: {err}") from None
        finally:
            remove_tree(workspace)
        if today != recorded:
            raise ReplayError(
                f"the task {self.task.id} {dict(self.task.params)} seed {self.seed} generates "
                f"other data than when {self.run_dir} was recorded (task-data hash "
                f"{recorded[:12]}… recorded, {today[:12]}… today): its generator changed"
            )
        return today

    def check_source(self) -> None:
        """The frozen source program the recorded run read its first reply from (``run_start``'s
        ``source_file``) still has the recorded SHA-256. A program no longer at its path is
        not checked: the log holds it (its first planner reply), and the replay answers from
        the log.

        Raises:
            ReplayError: the program's file was edited (both hashes shown) or cannot be read.
        """
        recorded = self.start.source_file
        if recorded is None or not os.path.lexists(recorded.path):
            return
        try:
            today = read_source_program(recorded.path).file.sha256
        except InputFileError as err:
            raise ReplayError(f"the run's frozen source program cannot be read: {err}") from None
        if today != recorded.sha256:
            raise ReplayError(
                f"the frozen source program of {self.run_dir} was edited since the recording: "
                f"its source_file.sha256 is {recorded.sha256[:12]}… in the log, {today[:12]}… "
                f"in {recorded.path} today"
            )

    def _check_task_fields(self) -> None:
        """The task the log records (``run_start``'s) is the task the replay runs: its
        instruction and every other field the log holds (a field written before it was
        recorded is left out).

        Raises:
            ReplayError: the first field that differs, with both values (the log was edited,
                or the environment defines the task otherwise today).
        """
        recorded = self.start.task
        fields = sorted(recorded.model_fields_set)
        found = first_difference(
            recorded.model_dump(mode="json", include=set(fields)),
            self.task.model_dump(mode="json", include=set(fields)),
        )
        if found is None:
            return
        where, there, here = found
        raise ReplayError(
            f"the task {recorded.id!r} recorded in {self.run_dir} is not the task the replay "
            f"runs: its {where} is {_shown(there)} in the log, {_shown(here)} as "
            f"{self.env.name} defines it today (the log was edited, or the task changed)"
        )


def _shown(value: Any) -> str:
    """A recorded or regenerated value, in one line and at most about 160 characters (its head
    and its tail: an edit at the end of an instruction shows)."""
    return clip_text(json.dumps(value, ensure_ascii=False), 160)


def _read(path: Path) -> list[Event]:
    """The log's events, refused when its version, reading or last line say it cannot be
    replayed."""
    log = path / EVENTS_FILE
    if not log.is_file():
        raise ReplayError(f"no recorded run at {path} ({EVENTS_FILE} is missing)")
    version = _first_version(log)
    if version is None or not OLDEST_REPLAYABLE <= version <= SCHEMA_VERSION:
        raise ReplayError(
            f"{log} was written with schema version {version}; this version replays logs of "
            f"versions {OLDEST_REPLAYABLE} to {SCHEMA_VERSION}"
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TruncatedLogWarning)
        try:
            events = read_events(path)
        except LogError as err:
            raise ReplayError(f"the log cannot be read: {err}") from None
    if any(issubclass(w.category, TruncatedLogWarning) for w in caught):
        raise ReplayError(f"{log} is truncated: its last line was cut (the run was killed)")
    if not events:
        raise ReplayError(f"{log} holds no event")
    return events


def _first_version(log: Path) -> int | None:
    """The ``schema_version`` of the log's first line as written (reading upgrades it).

    Raises:
        ReplayError: the log is not a regular file (a FIFO is refused, not waited on).
    """
    try:
        with open_regular(log) as f:
            line = f.readline(MAX_EVENT_BYTES + 1)
    except (OSError, InputFileError) as err:
        raise ReplayError(f"the log cannot be read: {err}") from None
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than json parses
        return None
    version = data.get("schema_version") if isinstance(data, dict) else None
    return version if isinstance(version, int) else None


def _parts(events: Iterable[Event]) -> dict[str, Any]:
    """Boundaries, calls, model calls by role, reviews, final verdict and branch points."""
    boundaries: list[tuple[Boundary, bool]] = []
    calls: list[PrimitiveCall] = []
    pairs: dict[str, list[RecordedPair]] = {"planner": [], "reviewer": []}
    reviews: list[RecordedReview] = []
    points: dict[int, BranchPointEvent] = {}
    final: FinalVerdictEvent | None = None
    pending: dict[str, Any] = {}
    for event in events:
        if event.type == "boundary":
            boundaries.append((event.boundary, event.review))
            pending = {"draw": 0, "proposal": None, "raw": ""}
        elif event.type == "primitive_call":
            calls.append(event.call)
        elif event.type == "model_call":
            pairs[event.role].append(_pair(event))
        elif event.type == "review_request":
            pending["draw"] = event.draw
        elif event.type == "proposal":
            pending.update(proposal=event.operation, raw=event.raw)
        elif event.type == "realized_operation":
            reviews.append(_review(len(reviews), len(boundaries) - 1, event, pending))
        elif event.type == "branch_point":
            points[event.boundary] = event
        elif event.type == "final_verdict":
            final = event
    return {
        "boundaries": tuple(boundaries),
        "calls": tuple(calls),
        "planner": tuple(pairs["planner"]),
        "reviewer": tuple(pairs["reviewer"]),
        "reviews": tuple(reviews),
        "final": final,
        "branch_points": points,
    }


def _review(index: int, position: int, event: Any, pending: dict[str, Any]) -> RecordedReview:
    return RecordedReview(
        index=index,
        boundary=position,
        call_index=event.call_index,
        block_id=event.block_id,
        granted=event.granted,
        draw=pending["draw"],
        model_called=event.model_called,
        proposal=pending["proposal"],
        raw=pending["raw"],
        realized=event.operation,
        fallback=event.fallback,
    )


def _pair(event: ModelCallEvent) -> RecordedPair:
    if event.response is not None:
        return event.request, event.response
    kind = event.error_kind or "other"
    return event.request, ProviderError(event.error or "", status=event.error_status, kind=kind)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"


_FINGERPRINTS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "model_call": lambda e: {
        "role": e.role,
        "request": e.request.model_dump(mode="json"),
        "text": e.response.text if e.response is not None else None,
        "tool_calls": (
            [c.model_dump(mode="json") for c in e.response.tool_calls] if e.response else None
        ),
        "error": e.error,
    },
    "block_start": lambda e: {"block": e.block_id, "code": e.code, "replaces": e.replaces},
    "block_end": lambda e: e.result.model_dump(mode="json", exclude={"wall_s", "exec_s"}),
    "boundary": lambda e: {"boundary": e.boundary.model_dump(mode="json"), "review": e.review},
    "realized_operation": lambda e: {
        "call": e.call_index,
        "granted": int(e.granted),
        "operation": e.operation.model_dump(mode="json"),
        "fallback": e.fallback,
    },
    "primitive_call": lambda e: {
        "call": e.call.model_dump(mode="json", exclude={"started_at", "elapsed_ms", "result"}),
        "text": e.call.result.text,
        "is_error": e.call.result.is_error,
    },
}


def _fingerprint(event: Event) -> dict[str, Any] | None:
    """What a prefix hash counts of ``event`` (its type and content, no timing), or None."""
    make = _FINGERPRINTS.get(event.type)
    return None if make is None else {"type": event.type, **make(event)}
