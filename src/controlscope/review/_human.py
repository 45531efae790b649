"""A person as the reviewer: :class:`HumanReviewer` waits at each reviewed boundary for a
person's decision, at the viewer's review page or at a terminal.

The person is shown the public state a model reviewer gets (paper section 3.1) and may choose
only what the granted scope allows; the decision is judged by the same validation as a model's
(:class:`~controlscope.review.ReviewDesk`); a refused one is shown with its reason and the
person tries again. The accepted decision is recorded like a model's proposal, with who made it
(``reviewer: human``), where, how long the person took and the refused tries. A decision not
made within ``timeout_s`` is a recorded ``timeout`` fallback (Keep, paper A.4), and so is one at a
terminal whose input ended (``< /dev/null``: nobody can answer); Ctrl-C during the wait ends
the run, recorded as ``interrupted``. A desk in another process
(:class:`~controlscope.review.RemoteDesk`, a panel's) that stops answering is a recorded
``provider_error`` fallback (Keep).
"""

from __future__ import annotations

import time
from typing import TextIO

from controlscope.core import Condition, HumanChannel, HumanDecision
from controlscope.review._desk import PendingReview, ReviewDesk
from controlscope.review._remote import DeskUnreachable, RemoteDesk
from controlscope.review._reviewer import ModelReviewer, Proposal, Reviewer
from controlscope.review._state import PublicState
from controlscope.review._terminal import TerminalFront


def reviewer_id(reviewer: Reviewer) -> str:
    """Who reviews, as ``run_start`` records it (``models["reviewer"]``): a model reviewer's
    model id, ``human:browser`` or ``human:terminal`` for a person, a reviewer's own
    ``reviewer_id`` (a wrapper names what it wraps), else its class's name."""
    if isinstance(reviewer, ModelReviewer):
        return reviewer.model.model_id
    if isinstance(reviewer, HumanReviewer):
        return f"human:{reviewer.channel}"
    named = getattr(reviewer, "reviewer_id", None)
    return named if isinstance(named, str) and named else type(reviewer).__name__


class HumanReviewer:
    """A reviewer that asks a person (a :class:`~controlscope.review.Reviewer`).

    In the browser (``channel="browser"``) each reviewed boundary is posted on :attr:`desk`,
    which the viewer's review page serves (``controlscope run --reviewer human`` starts it and
    prints its address; from Python, serve it with ``view.ViewServer(run_dir,
    desk=reviewer.desk)`` and open ``server.review_url``); a panel's runs post to the panel's
    desk in another process (``remote=RemoteDesk(address)``). At a terminal
    (``channel="terminal"``) the state is shown with ``rich`` and the decision read from
    ``stdin`` (arguments as JSON, code in ``$EDITOR``).

    Args:
        channel: ``browser`` or ``terminal``.
        desk: the desk to post on; None makes one (with a fresh secret).
        remote: a desk served by another process to post on instead (in the browser only).
        timeout_s: the most seconds a person may take at one boundary; None waits (within the
            run's wall-clock ceiling).
        label: which run the boundaries belong to, as the review page's queue names it.
        stdin: the terminal's input (``sys.stdin`` by default).
        stdout: the terminal's output (``sys.stdout`` by default).

    Raises:
        ValueError: an unknown channel, a time limit that is not above 0, or a remote desk at
            a terminal.
    """

    def __init__(
        self,
        channel: HumanChannel = "browser",
        *,
        desk: ReviewDesk | None = None,
        remote: RemoteDesk | None = None,
        timeout_s: float | None = None,
        label: str = "",
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
    ) -> None:
        if channel not in ("browser", "terminal"):
            raise ValueError(f"a person reviews in the browser or at the terminal, not {channel!r}")
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"the review time limit must be above 0 seconds, not {timeout_s}")
        self.channel: HumanChannel = channel
        if channel == "terminal" and remote is not None:
            raise ValueError("a person at this terminal decides on a desk of this process")
        self.desk = desk if desk is not None else ReviewDesk()
        self.remote = remote
        self.timeout_s = timeout_s
        self.label = label
        self._stdin = stdin
        self._stdout = stdout

    def propose(self, state: PublicState, condition: Condition) -> Proposal:
        """Wait for the person's accepted decision (or the time limit).

        Returns:
            The decision as a proposal with :class:`~controlscope.core.HumanDecision`; when no
            decision came in time, no operation and ``human.timed_out`` (a ``timeout``
            fallback); when the desk stopped answering, no operation and the error (a
            ``provider_error`` fallback).
        """
        if self.remote is not None:
            return self._remote(self.remote, state, condition)
        pending = self.desk.post(state, condition.operations, label=self.label)
        wait_s = self.timeout_s
        if self.channel == "terminal":
            front = TerminalFront(self.desk, stdin=self._stdin, stdout=self._stdout)
            self.desk.where = front.name
            front.ask(pending, condition, self.timeout_s)
            wait_s = 0.0  # decided, out of time, or its input ended: no decision is to come
        operation = self.desk.wait(pending, wait_s)
        return self._proposal(pending, operation is None)

    def _remote(self, desk: RemoteDesk, state: PublicState, condition: Condition) -> Proposal:
        """Post to a desk of another process and wait; a desk gone is a recorded error."""
        started = time.monotonic()
        pending: PendingReview | None = None
        try:
            pending = desk.post(state, condition.operations, label=self.label)
            operation = desk.wait(pending, self.timeout_s)
        except DeskUnreachable as err:
            human = HumanDecision(
                channel=self.channel,
                where=desk.where,
                decided_s=round(time.monotonic() - started, 3),
                refused=tuple(pending.refused) if pending is not None else (),
            )
            return Proposal(error=str(err), error_kind="connection", human=human)
        return self._proposal(pending, operation is None)

    def _proposal(self, pending: PendingReview, timed_out: bool) -> Proposal:
        human = HumanDecision(
            channel=self.channel,
            where=self.remote.where if self.remote is not None else self.desk.where,
            decided_s=round(time.monotonic() - pending.posted, 3),
            refused=tuple(pending.refused),
            timed_out=timed_out,
        )
        if timed_out:
            problem = (
                "the person made no decision (the terminal's input ended)"
                if self.timeout_s is None
                else f"the person made no decision within {self.timeout_s:g} s"
            )
            return Proposal(problem=problem, human=human)
        return Proposal(
            operation=pending.operation, reason=pending.reason, raw=pending.decision, human=human
        )
