"""One mechanism for prefix replays, branches and frozen operation replays: a trajectory whose
first part answers from a recording (paper sections 3.1, 3.3 and A.4).

Up to the boundary where the prefix ends, the planner and the reviewer answer from the
recording (every request checked, clock readings masked and their raw differences kept), the
schedule repeats the recorded decisions to review, each review is rendered under the
condition it was recorded under, and every boundary, decision and primitive call (tool, final
arguments, observation) is checked against the recording: the first difference ends the run
naming it. At that boundary the hook records the shared state ``(h, s)`` (a ``branch_point``
event: the workspace's hashes and the hash of the first review request with the operation set
left out) and then either stops (a prefix replay) or hands the trajectory to the branch: its
condition, its reviewer (or the recorded review, or a frozen operation) and, after the
boundary, its schedule and the live planner.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from controlscope.core import (
    BlockResult,
    Boundary,
    BranchPointEvent,
    ChatModel,
    ClockDifferencesEvent,
    Condition,
    ModelRequest,
    ModelResponse,
    Operation,
    PrimitiveCall,
    Scope,
    TaskError,
    seeded_request,
)
from controlscope.models import ReplayModel
from controlscope.record import ABSENT, ReplayMismatch, first_difference, map_strings
from controlscope.replay._recording import RecordedReview, Recording
from controlscope.review import ModelReviewer, Proposal, PublicState, Reviewer
from controlscope.run import StopRun, TrajectoryControl
from controlscope.schedule import Never, Schedule, ScheduleContext

FROZEN_NOTE = "the recorded operation, frozen"
"""The answer text a frozen operation's proposal is recorded with."""

ReviewAtPoint = Literal["branch", "recorded", "frozen"]
"""Who decides at the boundary where the prefix ends: the branch's reviewer, the recorded
review (replayed, its request checked), or the recorded operation proposed without a model."""


@dataclass(frozen=True)
class Plan:
    """What happens at the boundary where the replayed prefix ends, and after it.

    Attributes:
        position: the boundary's 0-based position among the recording's boundaries; None
            when the prefix is the whole run (a replay of all of it).
        condition: the run's condition from that boundary on (recorded in ``run_start``).
        stop: end the run at that boundary (a prefix replay), graded as it stands.
        review: who decides at the boundary.
        frozen: the operation a ``frozen`` review proposes.
        after: the schedule after the boundary; it observes every boundary from the start.
        candidate: end the run when the replacement realized at the boundary ends (no
            further planning, paper C.2).
        decides: ``after`` decides at every boundary from the start (a second schedule
            branched at its divergence point from a first schedule's run, paper B.1, B.2):
            in the prefix it must decide as the recording did, at the plan's boundary
            otherwise (that is where the two schedules part), and after it alone.
    """

    position: int | None
    condition: Condition
    stop: bool = False
    review: ReviewAtPoint = "branch"
    frozen: Operation | None = None
    after: Schedule = field(default_factory=Never)
    candidate: bool = False
    decides: bool = False


class PrefixMismatch(ReplayMismatch):
    """A replay's boundary, decision or count differs from the recording.

    Args:
        index: which boundary, decision or count.
        path: the first differing field (empty when one side has nothing there).
        recorded: the recorded value.
        received: the replay's value.
        what: what differs (``boundary``, ``decision``...), named in the message.
        message: the whole message, when the usual one does not fit.
    """

    def __init__(
        self,
        index: int,
        path: str,
        recorded: Any,
        received: Any,
        *,
        what: str,
        message: str | None = None,
    ) -> None:
        super().__init__(index, path, recorded, received, what=what)
        if message is not None:
            self.args = (message,)


def shared_request_hash(
    reviewer: ModelReviewer,
    state: PublicState,
    condition: Condition,
    normalise: Callable[[str], str],
) -> str:
    """The hash of a review request with the operation set left out (paper 5.1, A.4).

    Args:
        reviewer: renders the request (:meth:`ModelReviewer.build_request`).
        state: the public state ``h`` at the boundary.
        condition: the condition the request is rendered under (view, mode, sampling).
        normalise: masks clock readings no seed controls.

    Returns:
        The SHA-256 of the request for ``state`` rendered for every operation of the ``v2``
        lattice, draw 0, clock readings masked: equal for every scope and draw that sees the
        same ``h``.
    """
    canonical = condition.model_copy(update={"scope": Scope.FULL, "lattice": "v2", "draw": 0})
    request = reviewer.build_request(state, canonical)
    data = map_strings(request.model_dump(mode="json"), normalise)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _Answering:
    """A model that answers from the recording until the hook has switched to the branch,
    then from ``live`` (from the recording still when there is none)."""

    def __init__(self, hook: PrefixHook, replay: ReplayModel, live: ChatModel | None) -> None:
        self._hook, self._replay, self._live = hook, replay, live

    @property
    def model_id(self) -> str:
        """The live model's id, else the recording's."""
        return self._live.model_id if self._live is not None else self._replay.model_id

    def sampling_seed(self, request: ModelRequest) -> int | None:
        """The seed of the model that answers now (see :class:`~controlscope.core.SeededModel`)."""
        if self._hook.switched and self._live is not None:
            return seeded_request(self._live, request).seed
        return self._replay.sampling_seed(request)

    def complete(self, request: ModelRequest) -> ModelResponse:
        """The recorded answer (request checked) or, after the switch, the live one."""
        if self._hook.switched and self._live is not None:
            return self._live.complete(request)
        return self._replay.complete(request)


class FrozenOperation:
    """A reviewer that proposes one recorded operation, without a model (paper C.1: one
    argument patch replayed under the Arg and the Full label).

    Args:
        operation: the recorded operation.
        note: the answer text recorded with the proposal.
    """

    def __init__(self, operation: Operation, note: str) -> None:
        self.operation, self.note = operation, note

    def propose(self, state: PublicState, condition: Condition) -> Proposal:
        """The recorded operation, whatever the state (it is validated like any proposal)."""
        return Proposal(operation=self.operation, reason=self.note, raw=self.note)


class _Repeat:
    """The recorded proposal of a reviewer that asked no model (a rule, a human)."""

    def __init__(self, review: RecordedReview) -> None:
        self._review = review

    def propose(self, state: PublicState, condition: Condition) -> Proposal:
        return Proposal(operation=self._review.proposal, raw=self._review.raw)


class _Dispatch:
    """The trajectory's reviewer: whoever decides at the current boundary."""

    def __init__(self, hook: PrefixHook) -> None:
        self._hook = hook

    def propose(self, state: PublicState, condition: Condition) -> Proposal:
        return self._hook.reviewer_now().propose(state, condition)


class _Schedule:
    """The trajectory's schedule: the recorded decisions to review in the prefix, a review at
    the boundary where it ends, the branch's schedule after it."""

    name = "prefix"

    def __init__(self, hook: PrefixHook) -> None:
        self._hook = hook

    def should_review(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        hook = self._hook
        if hook.plan.decides:
            return hook.decide(boundary, ctx)
        if hook.position == hook.plan.position:
            return not hook.plan.stop
        if not hook.switched:
            return hook.recording.boundaries[hook.position][1]
        return hook.plan.after.should_review(boundary, ctx)

    def observe(self, boundary: Boundary, realized: Operation) -> None:
        self._hook.check_decision(realized)
        self._hook.plan.after.observe(boundary, realized)
        self._hook.stop_at_point()


class Splitter(Protocol):
    """Branches forked from a trunk at its plan's boundary (a
    :class:`~controlscope.replay._fork.Fanout`): the hook calls :meth:`split` there, and the
    trunk's run ends its process with :meth:`exit_child` in a forked branch."""

    @property
    def child(self) -> object | None:
        """The branch this process is, in a forked child; None in the trunk."""
        ...

    def split(self, hook: PrefixHook, control: TrajectoryControl) -> None:
        """Fork the branches at this boundary; return in a forked child only.

        Raises:
            StopRun: in the trunk, once every branch has ended.
        """
        ...

    def exit_child(self, failed: bool) -> None:
        """End a forked child's process once its branch is recorded (never returns)."""
        ...


class PrefixHook:
    """The :class:`~controlscope.run.TrajectoryHook` of a trajectory that starts from a
    recorded prefix (see the module docstring).

    Args:
        recording: the recording.
        plan: what happens at the boundary where the prefix ends, and after it.
        reviewer: the branch's reviewer (None for a Keep branch or a replay).
        planner: the live planner after the boundary (None: the recording answers on).

    Attributes:
        recording: the recording.
        plan: the plan.
        planner: the trajectory's planner (recorded, then live).
        recorded_reviewer: the recorded reviewer (a model reviewer answering from the log).
        prefix_hash: the recorded prefix's hash.
        position: the current boundary's position (-1 before the first).
        switched: whether the trajectory has passed to the branch.
        point: the ``branch_point`` event, once written.
        clock_files: the files holding clock readings at the boundary, or at the end of a
            whole replay (see ``BranchPointEvent.clock_files``).
        block_status: how the candidate's replacement block ended (candidate endpoints).
        verified_calls: primitive calls checked against the recording.
        verified_requests: model requests answered from the recording, by role.
        masked: requests that differed from their recording only in masked clock readings.
    """

    def __init__(
        self,
        recording: Recording,
        plan: Plan,
        *,
        reviewer: Reviewer | None = None,
        planner: ChatModel | None = None,
    ) -> None:
        self.recording, self.plan, self._branch_reviewer = recording, plan, reviewer

        def replay(role: str, pairs: Any) -> ReplayModel:
            normalise = recording.normalise
            return ReplayModel(pairs, model_id=f"replay:{role}", normalise=normalise, role=role)

        self._planner_replay = replay("planner", recording.planner)
        self._reviewer_replay = replay("reviewer", recording.reviewer)
        self._actions = recording.actions()
        self.planner: ChatModel = _Answering(self, self._planner_replay, planner)
        self.recorded_reviewer = ModelReviewer(_Answering(self, self._reviewer_replay, None))
        self.prefix_hash = recording.prefix_hash(plan.position)
        self.position = -1
        self.switched = False
        self.point: BranchPointEvent | None = None
        self.clock_files: dict[str, str] = {}
        self.block_status: str | None = None
        self._workspace = Path()
        self._point_block: str | None = None
        self._replacement: str | None = None
        self._reported = {"planner": 0, "reviewer": 0}
        self.fanout: Splitter | None = None
        """The branches to fork at the plan's boundary (a trunk, :mod:`._fork`)."""

    # -- counts ------------------------------------------------------------------------------

    @property
    def verified_calls(self) -> int:
        """Primitive calls checked against the recording."""
        return self._actions.position

    @property
    def verified_requests(self) -> dict[str, int]:
        """Model requests answered from the recording (and checked), by role."""
        return {
            "planner": self._planner_replay.position,
            "reviewer": self._reviewer_replay.position,
        }

    @property
    def masked(self) -> int:
        """Requests that differed from their recording only in masked clock readings."""
        return len(self._planner_replay.masked) + len(self._reviewer_replay.masked)

    # -- the hook ------------------------------------------------------------------------------

    def attach(self, control: TrajectoryControl, workspace: Path) -> None:
        """Give the trajectory the prefix's reviewer, schedule and recorded condition."""
        self._workspace = workspace
        control.steer(
            condition=self.recording.condition, schedule=_Schedule(self), reviewer=_Dispatch(self)
        )

    def before_boundary(self, control: TrajectoryControl, boundary: Boundary) -> None:
        """Check the boundary against the recording, set the condition its review was
        recorded under, and at the plan's boundary record ``(h, s)`` and switch."""
        self.position += 1
        if not self.switched:
            self._check_boundary(boundary)
            review = self.recording.review_at(self.position)
            if review is not None:
                control.steer(condition=self.recording.condition_for(review))
        if self.position == self.plan.position:
            if self.fanout is not None and self.fanout.child is None:
                self.fanout.split(self, control)  # returns in a forked branch only
            self._reach(control, boundary)

    def become(self, plan: Plan, reviewer: Reviewer | None) -> None:
        """Go on as a branch forked at the plan's boundary: its plan and its reviewer."""
        self.plan, self._branch_reviewer = plan, reviewer

    def after_call(self, control: TrajectoryControl, call: PrimitiveCall) -> None:
        """Check a prefix call's tool, final arguments and observation."""
        if not self.switched:
            self._actions.check(call)

    def after_block(self, control: TrajectoryControl, result: BlockResult) -> None:
        """A candidate endpoint ends when the replacement chosen at its boundary ends."""
        if not (self.switched and self.plan.candidate):
            return
        if self._replacement is None:
            if result.block_id == self._point_block and result.replaced_by is not None:
                self._replacement = result.replaced_by
            return
        if result.block_id == self._replacement:
            self.block_status = result.status
            raise StopRun(
                "candidate_end",
                f"the replacement block {result.block_id} ended {result.status} after "
                f"{result.calls} call(s); no further planning (a frozen candidate)",
            )

    def finish(self, control: TrajectoryControl) -> None:
        """A whole replay made every recorded call and request; a branch reached its
        boundary."""
        if self.plan.position is not None:
            if not self.switched:
                raise PrefixMismatch(
                    self.plan.position,
                    "",
                    "boundary",
                    ABSENT,
                    what="boundary",
                    message=f"the run ended before boundary {self.plan.position} was reached",
                )
            return
        self._report_clock(control)
        self._actions.finish()
        self._check_counts()
        self.clock_files = self._clock_files(self._hashes()[1])

    # -- the steps -----------------------------------------------------------------------------

    def reviewer_now(self) -> Reviewer:
        """Who decides at the current boundary."""
        at_point = self.position == self.plan.position
        if not self.switched or (at_point and self.plan.review == "recorded"):
            review = self.recording.review_at(self.position)
            if review is not None and not review.model_called:
                return _Repeat(review)
            return self.recorded_reviewer
        if at_point and self.plan.frozen is not None:
            return FrozenOperation(self.plan.frozen, FROZEN_NOTE)
        if self._branch_reviewer is None:
            raise ValueError("the branch's scope reviews but no reviewer was given")
        return self._branch_reviewer

    def decide(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        """The branch's schedule's decision at a boundary of a plan that ``decides``: in the
        prefix the recorded one, at the plan's boundary the other one (paper B.1, B.2).

        Raises:
            PrefixMismatch: the schedule decides otherwise in the prefix, or as recorded at
                the plan's boundary (``what="schedule decision"``, field ``review``).
        """
        decided = self.plan.after.should_review(boundary, ctx)
        at_point = self.position == self.plan.position
        if self.switched and not at_point:
            return decided
        recorded = self.recording.boundaries[self.position][1]
        if at_point == (decided == recorded):
            where = "where the schedules part" if at_point else "in the shared prefix"
            raise PrefixMismatch(
                self.position,
                "review",
                recorded,
                decided,
                what="schedule decision",
                message=f"schedule {self.plan.after.name} decides review={decided} at boundary "
                f"{self.position} (call {boundary.call_index}), {where}; the recording "
                f"decided review={recorded}",
            )
        return decided

    def stop_at_point(self) -> None:
        """End a prefix replay at its boundary, once the boundary is logged.

        Raises:
            StopRun: this is the boundary where the prefix replay ends.
        """
        if self.plan.stop and self.position == self.plan.position:
            assert self.point is not None
            raise StopRun(
                "prefix_end",
                f"the prefix replay reached boundary {self.position} (call "
                f"{self.point.call_index}) with {self.verified_calls} call(s) checked against "
                "the recording",
            )

    def check_decision(self, realized: Operation) -> None:
        """A replayed review realized what was recorded (the prefix, or a recorded review at
        the boundary).

        Raises:
            PrefixMismatch: the realized operation differs.
        """
        at_point = self.position == self.plan.position
        if (self.switched and not (at_point and self.plan.review == "recorded")) or (
            at_point and self.plan.stop
        ):
            return
        review = self.recording.review_at(self.position)
        recorded = review.realized.model_dump(mode="json") if review else {"kind": "keep"}
        found = first_difference(recorded, realized.model_dump(mode="json"))
        if found is not None:
            raise PrefixMismatch(self.position, found[0], found[1], found[2], what="decision")

    def _check_boundary(self, boundary: Boundary) -> None:
        if self.position >= len(self.recording.boundaries):
            raise PrefixMismatch(
                self.position,
                "",
                ABSENT,
                boundary.tool,
                what="boundary",
                message=f"boundary {self.position} was not recorded: the replay reached "
                f"{boundary.tool}({boundary.arguments}) at call {boundary.call_index}",
            )
        recorded = self._compared(self.recording.boundaries[self.position][0])
        found = first_difference(recorded, self._compared(boundary))
        if found is not None:
            raise PrefixMismatch(self.position, *found, what="boundary")

    def _compared(self, boundary: Boundary) -> Any:
        data = {
            "block_id": boundary.block_id,
            "call_index": boundary.call_index,
            "tool": boundary.tool,
            "arguments": boundary.arguments,
        }
        return map_strings(data, self.recording.normalise)

    def _reach(self, control: TrajectoryControl, boundary: Boundary) -> None:
        """Record ``(h, s)`` at the plan's boundary; stop there or switch to the branch."""
        self._report_clock(control)
        state, files = self._hashes()
        self.clock_files = self._clock_files(files)
        reviewer = ModelReviewer(self._reviewer_replay)
        state_h = control.public_state(boundary)
        normalise = self.recording.normalise
        request_hash = shared_request_hash(reviewer, state_h, self.plan.condition, normalise)
        self.point = BranchPointEvent(
            call_index=boundary.call_index,
            boundary=self.position,
            prefix_hash=self.prefix_hash,
            state_hash=state,
            file_hashes=files,
            request_hash=request_hash,
            clock_files=self.clock_files,
        )
        control.sink(self.point)
        if self.plan.stop:
            return  # the boundary is logged, then the run stops (stop_at_point)
        self.switched = True
        self._point_block = boundary.block_id
        control.steer(condition=self.plan.condition)

    def _hashes(self) -> tuple[str | None, dict[str, str]]:
        env, task, since = self.recording.env, self.recording.task, self.recording.start.t
        try:
            return (
                env.state_hash(task, self._workspace, since=since),
                env.file_hashes(task, self._workspace, since=since),
            )
        except TaskError:
            return None, {}

    def _clock_files(self, files: dict[str, str]) -> dict[str, str]:
        """The workspace's files whose text holds clock readings no seed controls, each the
        hash of its text with them masked (agent code wrote them: their bytes differ from
        run to run while every call that wrote them matched its recording, masked)."""
        out: dict[str, str] = {}
        for rel in files:
            try:
                text = (self._workspace / rel).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            masked = self.recording.normalise(text)
            if masked != text:
                out[rel] = hashlib.sha256(masked.encode("utf-8", "surrogateescape")).hexdigest()
        return out

    def _report_clock(self, control: TrajectoryControl) -> None:
        """Record the masked clock differences not reported yet (paper A.4)."""
        fresh = []
        for role, model in (("planner", self._planner_replay), ("reviewer", self._reviewer_replay)):
            fresh += model.masked[self._reported[role] :]
            self._reported[role] = len(model.masked)
        if fresh:
            control.sink(ClockDifferencesEvent(differences=fresh))

    def _check_counts(self) -> None:
        """Every recorded boundary and request was reached by a whole replay."""
        reached = {
            "boundary": (self.position + 1, len(self.recording.boundaries)),
            "planner request": (self._planner_replay.position, len(self.recording.planner)),
            "reviewer request": (self._reviewer_replay.position, len(self.recording.reviewer)),
        }
        for what, (made, recorded) in reached.items():
            if made < recorded:
                raise PrefixMismatch(
                    made,
                    "",
                    what,
                    ABSENT,
                    what=what,
                    message=f"the recording holds {recorded} {what}s; the replay reached {made}",
                )
