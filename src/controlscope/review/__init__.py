"""The reviewer: public state, views, prompts, the operation interface, reviews and fallbacks.

A :class:`Reviewer` (the model reviewer :class:`ModelReviewer`, or your own) proposes an
operation for the :class:`PublicState` at a boundary; :func:`review_boundary` validates it
against the granted scope and records it. Malformed, out-of-scope, invalid and provider-failed
reviews become recorded Keep fallbacks (paper A.4). :class:`HumanReviewer` asks a person (at the
viewer's review page through a :class:`ReviewDesk`, or at a terminal; a panel's runs post to
its desk in another process through a :class:`RemoteDesk`); :func:`reviewer_id` names
who reviews as a run records it.
"""

from controlscope.core import VIEWS, ViewLimits, find_json_object
from controlscope.review._desk import DeskAnswer, PendingReview, ReviewDesk, rest_of_block
from controlscope.review._human import HumanReviewer, reviewer_id
from controlscope.review._operations import (
    MalformedOperationError,
    ParsedDecision,
    decision_schema,
    granted_kinds,
    operation_tools,
    parse_decision,
    parse_operation,
    raw_answer,
)
from controlscope.review._prompts import UNTRUSTED_DATA_RULE, describe_tool, system_prompt
from controlscope.review._remote import (
    DESK_VARIABLE,
    DeskAddress,
    DeskUnreachable,
    RemoteDesk,
    claim_desk,
    share_desk,
)
from controlscope.review._reviewer import (
    EventSink,
    ModelReviewer,
    Proposal,
    Reviewer,
    ReviewOutcome,
    review_boundary,
)
from controlscope.review._state import DecisionRecord, PublicState
from controlscope.review._views import (
    QUOTE_PREFIX,
    VIEW_SECTIONS,
    clip,
    json_line,
    quote,
    quote_code,
    render_view,
)

__all__ = [
    "DESK_VARIABLE",
    "QUOTE_PREFIX",
    "UNTRUSTED_DATA_RULE",
    "VIEWS",
    "VIEW_SECTIONS",
    "DecisionRecord",
    "DeskAddress",
    "DeskAnswer",
    "DeskUnreachable",
    "EventSink",
    "HumanReviewer",
    "MalformedOperationError",
    "ModelReviewer",
    "ParsedDecision",
    "PendingReview",
    "Proposal",
    "PublicState",
    "RemoteDesk",
    "ReviewDesk",
    "ReviewOutcome",
    "Reviewer",
    "ViewLimits",
    "claim_desk",
    "clip",
    "decision_schema",
    "describe_tool",
    "find_json_object",
    "granted_kinds",
    "json_line",
    "operation_tools",
    "parse_decision",
    "parse_operation",
    "quote",
    "quote_code",
    "raw_answer",
    "render_view",
    "rest_of_block",
    "review_boundary",
    "reviewer_id",
    "share_desk",
    "system_prompt",
]
