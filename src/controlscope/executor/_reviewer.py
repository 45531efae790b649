"""A reviewer of one's own, kept from ending the session when it raises."""

from __future__ import annotations

from controlscope.core import Condition, clip_text
from controlscope.review import Proposal, PublicState, Reviewer


class GuardedReviewer:
    """A reviewer whose exception is a proposal without an operation: a recorded
    ``malformed`` fallback (Keep), the exception named in its validation's detail (paper A.4:
    a review that cannot be used runs as Keep). Implements
    :class:`~controlscope.review.Reviewer`.

    Args:
        inner: the reviewer.
    """

    def __init__(self, inner: Reviewer) -> None:
        self.inner = inner

    def propose(self, state: PublicState, condition: Condition) -> Proposal:
        """The inner reviewer's proposal, or a proposal naming what it raised."""
        try:
            return self.inner.propose(state, condition)
        except Exception as err:
            why = clip_text(f"the reviewer raised {type(err).__name__}: {err}", 2000)
            return Proposal(operation=None, problem=why, raw="")
