"""A person as the reviewer: :class:`HumanReviewer` waits at each reviewed boundary for a
person's decision, at the viewer's review page or at a terminal.

The person is shown the public state a model reviewer gets (paper section 3.1) and may choose
only what the granted scope allows; the decision is judged by the same validation as a model's
(:class:`~controlscope.review.ReviewDesk`); a refused one is shown with its reason and the
person tries again. The accepted decision is recorded like a model's proposal, with who made it
(``reviewer: human``), where, how long the person took and the refused tries. A decision not
made within ``timeout_s`` is a recorded ``timeout`` fallback (Keep, paper A.4); Ctrl-C during
the wait ends the run, recorded as ``interrupted``.
"""

from __future__ import annotations

import time
from typing import TextIO

from controlscope.core import Condition, HumanChannel, HumanDecision
from controlscope.review._desk import PendingReview, ReviewDesk
from controlscope.review._reviewer import Proposal
from controlscope.review._state import PublicState
from controlscope.review._terminal import TerminalFront


class HumanReviewer:
    """A reviewer that asks a person (a :class:`~controlscope.review.Reviewer`).

    In the browser (``channel="browser"``) each reviewed boundary is posted on :attr:`desk`,
    which the viewer's review page serves (``controlscope run --reviewer human`` starts it and
    prints its address; from Python, serve it with ``view.ViewServer(run_dir,
    desk=reviewer.desk)`` and open ``server.review_url``). At a terminal
    (``channel="terminal"``) the state is shown with ``rich`` and the decision read from
    ``stdin`` (arguments as JSON, code in ``$EDITOR``).

    Args:
        channel: ``browser`` or ``terminal``.
        desk: the desk to post on; None makes one (with a fresh secret).
        timeout_s: the most seconds a person may take at one boundary; None waits (within the
            run's wall-clock ceiling).
        label: which run the boundaries belong to, as the review page's queue names it.
        stdin: the terminal's input (``sys.stdin`` by default).
        stdout: the terminal's output (``sys.stdout`` by default).

    Raises:
        ValueError: an unknown channel, or a time limit that is not above 0.
    """

    def __init__(
        self,
        channel: HumanChannel = "browser",
        *,
        desk: ReviewDesk | None = None,
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
        self.desk = desk if desk is not None else ReviewDesk()
        self.timeout_s = timeout_s
        self.label = label
        self._stdin = stdin
        self._stdout = stdout

    def propose(self, state: PublicState, condition: Condition) -> Proposal:
        """Wait for the person's accepted decision (or the time limit).

        Returns:
            The decision as a proposal with :class:`~controlscope.core.HumanDecision`; when no
            decision came in time, no operation and ``human.timed_out`` (a ``timeout``
            fallback).
        """
        pending = self.desk.post(state, condition.operations, label=self.label)
        if self.channel == "terminal":
            front = TerminalFront(self.desk, stdin=self._stdin, stdout=self._stdout)
            self.desk.where = front.name
            front.ask(pending, condition, self.timeout_s)
        operation = self.desk.wait(pending, self.timeout_s)
        return self._proposal(pending, operation is None)

    def _proposal(self, pending: PendingReview, timed_out: bool) -> Proposal:
        human = HumanDecision(
            channel=self.channel,
            where=self.desk.where,
            decided_s=round(time.monotonic() - pending.posted, 3),
            refused=tuple(pending.refused),
            timed_out=timed_out,
        )
        if timed_out:
            problem = f"the person made no decision within {self.timeout_s:g} s"
            return Proposal(problem=problem, human=human)
        return Proposal(
            operation=pending.operation, reason=pending.reason, raw=pending.decision, human=human
        )
