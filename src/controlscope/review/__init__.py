"""The reviewer: public state, views, prompts, operation interface and fallbacks.

Public API::

    from controlscope.review import PublicState, Reviewer, render_view, operation_tools

A :class:`Reviewer` turns the :class:`PublicState` at a boundary into a validated operation
(:class:`ReviewOutcome`); malformed, out-of-scope, invalid and provider-failed reviews become
recorded Keep fallbacks (paper A.4).
"""

from controlscope.review.operations import (
    DecisionMode,
    ParsedDecision,
    decision_schema,
    find_json_object,
    granted_kinds,
    operation_tools,
    parse_decision,
    raw_answer,
)
from controlscope.review.prompts import describe_tool, system_prompt
from controlscope.review.reviewer import EventSink, Reviewer, ReviewOutcome
from controlscope.review.state import DecisionRecord, PublicState
from controlscope.review.views import VIEWS, View, ViewLimits, clip, render_view

__all__ = [
    "VIEWS",
    "DecisionMode",
    "DecisionRecord",
    "EventSink",
    "ParsedDecision",
    "PublicState",
    "ReviewOutcome",
    "Reviewer",
    "View",
    "ViewLimits",
    "clip",
    "decision_schema",
    "describe_tool",
    "find_json_object",
    "granted_kinds",
    "operation_tools",
    "parse_decision",
    "raw_answer",
    "render_view",
    "system_prompt",
]
