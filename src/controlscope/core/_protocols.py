"""The paper's protocols: named bundles of settings a run follows.

The two ALFWorld reviewer protocols (paper sections 4 and 5.2, appendix C.3) and the two
app-environment protocols (section 5.3, appendix A.2) each fix several settings at once; a run
spec or panel names one, and the settings it leaves out take the protocol's values.
"""

from __future__ import annotations

from typing import Any, Literal

ReviewerProtocol = Literal["fast", "reasoning"]
"""The paper's two ALFWorld reviewer protocols (sections 4 and 5.2, appendix C.3)."""

REVIEWER_PROTOCOLS: dict[ReviewerProtocol, dict[str, Any]] = {
    "fast": {
        "reviewer_tool_choice": "required",
        "reviewer_max_tokens": 8192,
        "review_fallback": "plan_error",
    },
    "reasoning": {
        "reviewer_tool_choice": "auto",
        "reviewer_max_tokens": 16384,
        "review_fallback": "keep",
    },
}
"""What each reviewer protocol fixes: fast reviewers make a required tool call under an
8,192-token cap, and a malformed review becomes a plan error handled by ordinary recovery;
reasoning reviewers choose tools automatically under a 16,384-token cap and Keep after an
invalid review (paper section 4)."""


AppProtocol = Literal["v1", "v2"]
"""The paper's two app-environment protocols (section 5.3, appendix A.2)."""

APP_BLOCKS = 40
"""Natural blocks per task under the app protocols (paper section 4, A.2)."""

APP_BLOCK_REQUESTS = 250
"""API requests per natural block under the app protocols (paper section 4, A.2)."""

APP_PROTOCOLS: dict[AppProtocol, dict[str, Any]] = {
    "v1": {
        "lattice": "default",
        "schedule": "per_block",
        "replace_boundary": "block",
        "block_allowance": "renew",
        "runtime_guard": False,
    },
    "v2": {
        "lattice": "v2",
        "replace_boundary": "block",
        "block_allowance": "shared",
        "runtime_guard": True,
    },
}
"""What each app protocol fixes (paper A.2). V1: one review per natural block, Keep ⊂ Arg ⊂
Full, a Full replacement edits the unfinished current block and starts a new allowance (its
``schedule`` is the default a run spec takes; a branch or a one-time review places its own).
V2: the
replacement shares the block's remaining allowance, Params (coordinated data editing) is granted
and Full includes it, and a private-runtime guard refuses code that reaches for the runtime's
private state; its schedule is the panel's (the paper's V2 diagnostic is local). Both cap a task
at :data:`APP_BLOCKS` natural blocks of :data:`APP_BLOCK_REQUESTS` requests (the budgets'
``blocks`` and ``block_requests``)."""


PROTOCOL_DEFAULTED = ("lattice", "schedule", "replace_boundary")
"""The settings an app protocol gives a run spec or a panel that leaves them out."""


def app_protocol_defaults(data: Any) -> Any:
    """``data`` (a run spec's or panel's fields) with the settings its ``app_protocol`` fixes
    filled in where it leaves them out (:data:`PROTOCOL_DEFAULTED`); other data unchanged.
    A stated setting is kept (and checked against the protocol by the model's own checks)."""
    protocol = data.get("app_protocol") if isinstance(data, dict) else None
    if not isinstance(protocol, str) or protocol not in APP_PROTOCOLS:
        return data  # no protocol, or one the field's own check refuses
    fixed = APP_PROTOCOLS[protocol]
    filled = dict(data)
    for name in PROTOCOL_DEFAULTED:
        if name in fixed and filled.get(name) is None:
            filled[name] = fixed[name]
    return filled


def app_protocol_conflict(protocol: AppProtocol, **settings: Any) -> str | None:
    """The first of ``settings`` (lattice, replace_boundary...) that contradicts ``protocol``,
    in words; None when none does (the schedule is only a default)."""
    for name, value in settings.items():
        fixed = APP_PROTOCOLS[protocol].get(name)
        if name != "schedule" and fixed is not None and value != fixed:
            return f"the {protocol} app protocol has {name} {fixed!r}, not {value!r}"
    return None
