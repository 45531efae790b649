"""Schedules: at which boundaries a reviewer is asked (paper sections 3.2, 6.2, A.2, B, C.2).

Public API:

- the schedules (:mod:`._schedules`): the :class:`Schedule` protocol and its
  :class:`ScheduleContext`; :class:`Never`, :class:`Continuous`, :class:`EveryBoundary`,
  :class:`PerBlock`, :class:`AtCall`, :class:`OnceOnline`, and the modifiers
  :class:`Protect`, :class:`RetainFirst`, :class:`FromFirst`, :class:`Destructive` (MCP tool
  annotations: :class:`ReadsAnnotations`, :func:`tool_risk`);
- the grammar (:mod:`._grammar`): the registry of schedule kinds (:data:`SCHEDULES`, each a
  :class:`ScheduleKind`), a spec parsed once (:class:`ScheduleSpec`: canonical name, source
  placement, a branch's schedules, the schedule it builds) and the functions over it
  (:func:`parse_schedule`, :func:`schedule_name`, :func:`needs_source`,
  :func:`place_from_source`); the help lists :data:`SCHEDULE_FORMS` and
  :data:`BRANCH_SCHEDULE_FORMS`;
- offline placement on a recorded source trajectory (:mod:`._placement`):
  :func:`local_rule_boundary` (paper appendix B), :func:`feedback_rule_boundary` (A.3) and
  :func:`direct_site_problem`, over :class:`SourceBlock` records, answering a
  :class:`LocalBoundary`; the static call counts :func:`static_call_count` and
  :func:`static_write_count`.
"""

from controlscope.schedule._grammar import (
    BRANCH_SCHEDULE_FORMS,
    SCHEDULE_FORMS,
    SCHEDULES,
    SOURCE_PLACED,
    ScheduleArg,
    ScheduleKind,
    ScheduleSpec,
    ToolSets,
    branch_schedule_forms,
    needs_source,
    parse_schedule,
    place_from_source,
    schedule_forms,
    schedule_name,
)
from controlscope.schedule._placement import (
    LocalBoundary,
    SourceBlock,
    direct_site_problem,
    feedback_rule_boundary,
    local_rule_boundary,
    static_call_count,
    static_write_count,
)
from controlscope.schedule._schedules import (
    AtCall,
    Continuous,
    Destructive,
    EveryBoundary,
    FromFirst,
    Never,
    OnceOnline,
    PerBlock,
    Protect,
    ReadsAnnotations,
    RetainFirst,
    Schedule,
    ScheduleContext,
    tool_risk,
)

__all__ = [
    "BRANCH_SCHEDULE_FORMS",
    "SCHEDULES",
    "SCHEDULE_FORMS",
    "SOURCE_PLACED",
    "AtCall",
    "Continuous",
    "Destructive",
    "EveryBoundary",
    "FromFirst",
    "LocalBoundary",
    "Never",
    "OnceOnline",
    "PerBlock",
    "Protect",
    "ReadsAnnotations",
    "RetainFirst",
    "Schedule",
    "ScheduleArg",
    "ScheduleContext",
    "ScheduleKind",
    "ScheduleSpec",
    "SourceBlock",
    "ToolSets",
    "branch_schedule_forms",
    "direct_site_problem",
    "feedback_rule_boundary",
    "local_rule_boundary",
    "needs_source",
    "parse_schedule",
    "place_from_source",
    "schedule_forms",
    "schedule_name",
    "static_call_count",
    "static_write_count",
    "tool_risk",
]
