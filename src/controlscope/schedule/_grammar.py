"""The schedule grammar: one registry of schedule kinds, and a spec parsed once (paper 3.2, A.2,
B, B.1, B.2, C.2).

A spec is one or more parts joined with ``+``; a part is a kind's name, with ``:NUMBER`` when
the kind takes an argument. Each kind is one :class:`ScheduleKind` in :data:`SCHEDULES`: its
argument, whether it may follow ``+``, whether a recorded source run numbers its bare form,
whether a branch may take it, and how it is built. :meth:`ScheduleSpec.parse` reads a spec
with them; canonical names, source placement, a branch's schedules, the help lists
(:data:`SCHEDULE_FORMS`, :data:`BRANCH_SCHEDULE_FORMS`) and the error lists follow from the
registry.

Specs accepted (:func:`parse_schedule` builds them):

==================  =====================================================================
``never``           no reviews (the Keep baseline).
``continuous``      the paper's sustained revision policy (3.2, B.1, B.2): a review at every
                    boundary that follows a completed public call; none before the task's
                    first call, none at a replacement's first call before a further call
                    completes (:class:`~controlscope.schedule.Continuous`).
``every_boundary``  every boundary, the first call and a replacement's first call included
                    (not the paper's rule; kept for comparison).
``per_block``       the first boundary of each natural block (AppWorld's one review per natural
                    block, A.2); replacement blocks are not natural blocks.
``once:K``          the boundary of the primitive call with 0-based index ``K``, once.
``once``            the paper's local rule (appendix B), placed from a recorded source run
                    (:func:`~controlscope.schedule.local_rule_boundary`;
                    ``RunSpec.source_run``), run as ``once:K``.
``once_online``     an online approximation of the local rule that needs no source run
                    (:class:`~controlscope.schedule.OnceOnline`); not the paper's rule.
``midpoint:N``      once, after ``floor(N/2)`` completed calls; ``N`` is the source
                    trajectory's call count (paper B.1; bare ``midpoint`` takes it from a
                    recorded source run).
``protect:n``       continuous, but after a replacement no review until ``n`` more primitive
                    calls have completed (paper B.2).
``retain_first``    continuous until the first replacement, then no more reviews (paper C.2).
``destructive``     every call of a tool its server marks destructive or not read-only (MCP
                    tool annotations; a tool without them takes MCP's defaults and is
                    reviewed), the first call included (:class:`~controlscope.schedule.
                    Destructive`); not a rule of the paper.
==================  =====================================================================

The feedback-visibility boundary of appendix A.3
(:func:`~controlscope.schedule.feedback_rule_boundary`) is placed from a recorded source run
too; it starts branches (``controlscope branch --at feedback-rule``, a panel's ``start =
"feedback_rule"``) and is not a schedule spec of its own.

``protect:n`` and ``retain_first`` are also modifiers of any base schedule, joined with ``+``:
``per_block+protect:5``, ``midpoint:40+continuous`` (the paper's continuous rule from the
midpoint on; B.1's continuous condition shares the first review with the one-time condition).
``destructive`` is a modifier too: after ``+`` it narrows the schedule before it to the calls
of such tools (``continuous+destructive``), and the others wrap it (``destructive+protect:3``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from controlscope.core import ToolAnnotations
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
    RetainFirst,
    Schedule,
)

ScheduleArg = Literal["none", "count", "call_index", "calls"]
"""What follows a kind's name after ``:``: nothing, a count (``protect:n``), a call index
(``once:K``) or a source trajectory's call count (``midpoint:N``)."""

_LETTER: dict[ScheduleArg, str] = {"none": "", "count": "n", "call_index": "K", "calls": "N"}


@dataclass(frozen=True)
class ToolSets:
    """The environment's tool sets a schedule may read (``once_online`` reads both,
    ``destructive`` the annotations).

    Attributes:
        write_tools: the names of the writing tools.
        read_tools: the names of the information-returning tools.
        annotations: each tool's MCP annotations by name (None or absent: none given).
    """

    write_tools: frozenset[str] = frozenset()
    read_tools: frozenset[str] = frozenset()
    annotations: Mapping[str, ToolAnnotations | None] = field(default_factory=dict)


Build = Callable[[int | None, Schedule | None, ToolSets], Schedule]
"""How a kind is built: from its argument (None for a kind that takes none), the schedule the
parts before it make (None when it comes first) and the environment's tool sets."""


@dataclass(frozen=True)
class ScheduleKind:
    """One kind of part of a schedule spec: how it is written, read and built.

    Attributes:
        name: the word that names it (``protect``).
        arg: what follows ``name:`` (:data:`ScheduleArg`).
        build: the schedule (see :data:`Build`).
        missing: what a part without its required argument is told it needs, after the
            kind's name (``needs a call count, e.g. protect:5``); for kinds with an argument.
        modifier: it may follow ``+``; it receives the schedule the parts before it make.
        wraps: a modifier that wraps the schedule before it and, first in a spec, wraps
            ``continuous``: ``continuous+protect:5`` is ``protect:5`` (its canonical name).
        source_placed: written bare, a recorded source run supplies its number (``once``: the
            local rule's call index, paper appendix B; ``midpoint``: the source's calls, B.1).
        branch: a branch may take it after its boundary, joined to ``continuous``
            (:meth:`ScheduleSpec.for_branch`).
        form: how help texts and error lists write it (``protect:n``; a property).
    """

    name: str
    arg: ScheduleArg
    build: Build
    missing: str = ""
    modifier: bool = False
    wraps: bool = False
    source_placed: bool = False
    branch: bool = False

    @property
    def form(self) -> str:
        """``name``, or ``name:X`` with the argument's letter (see the class's Attributes)."""
        return f"{self.name}:{_LETTER[self.arg]}" if self.arg != "none" else self.name


def _given(arg: int | None) -> int:
    """A kind's argument; :meth:`ScheduleSpec.build` builds no part that lacks it."""
    if arg is None:
        raise ValueError("a schedule part is built without its number")
    return arg


def _continuous(arg: int | None, base: Schedule | None, tools: ToolSets) -> Schedule:
    return Continuous() if base is None else FromFirst(base)


def _once(arg: int | None, base: Schedule | None, tools: ToolSets) -> Schedule:
    k = _given(arg)
    return AtCall(k, name=f"once:{k}", by_completed=False)


def _once_online(arg: int | None, base: Schedule | None, tools: ToolSets) -> Schedule:
    return OnceOnline(write_tools=tools.write_tools, read_tools=tools.read_tools)


def _midpoint(arg: int | None, base: Schedule | None, tools: ToolSets) -> Schedule:
    n = _given(arg)
    return AtCall(n // 2, name=f"midpoint:{n}", by_completed=True)


def _destructive(arg: int | None, base: Schedule | None, tools: ToolSets) -> Schedule:
    return Destructive(base, tools.annotations)


def _protect(arg: int | None, base: Schedule | None, tools: ToolSets) -> Schedule:
    return Protect(base or Continuous(), _given(arg))


def _retain_first(arg: int | None, base: Schedule | None, tools: ToolSets) -> Schedule:
    return RetainFirst(base or Continuous())


_SOURCE_RUN = "(RunSpec.source_run, --source-run)"

SCHEDULES: dict[str, ScheduleKind] = {
    kind.name: kind
    for kind in (
        ScheduleKind("never", "none", lambda arg, base, tools: Never()),
        ScheduleKind("continuous", "none", _continuous, modifier=True, branch=True),
        ScheduleKind("every_boundary", "none", lambda arg, base, tools: EveryBoundary()),
        ScheduleKind("per_block", "none", lambda arg, base, tools: PerBlock()),
        ScheduleKind(
            "once",
            "call_index",
            _once,
            missing=f"needs its boundary from a recorded source run {_SOURCE_RUN} or a call "
            "index, e.g. once:6",
            source_placed=True,
        ),
        ScheduleKind("once_online", "none", _once_online),
        ScheduleKind(
            "midpoint",
            "calls",
            _midpoint,
            missing="needs the source trajectory's call count, e.g. midpoint:40, or a "
            f"recorded source run {_SOURCE_RUN}",
            source_placed=True,
        ),
        ScheduleKind("destructive", "none", _destructive, modifier=True),
        ScheduleKind(
            "protect",
            "count",
            _protect,
            missing="needs a call count, e.g. protect:5",
            modifier=True,
            wraps=True,
            branch=True,
        ),
        ScheduleKind("retain_first", "none", _retain_first, modifier=True, wraps=True, branch=True),
    )
}
"""Every schedule kind by name, in the order help texts list them."""


def _or(words: Iterable[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    listed = list(words)
    return " or ".join([", ".join(listed[:-1]), listed[-1]] if len(listed) > 1 else listed)


def schedule_forms() -> str:
    """The spec forms the registry accepts, as help texts and error messages list them: each
    kind's form, and a source-placed kind's bare form ``NAME (with a source run)``."""
    forms = []
    for kind in SCHEDULES.values():
        forms.append(kind.form)
        if kind.source_placed:
            forms.append(f"{kind.name} (with a source run)")
    return ", ".join(forms)


def branch_schedule_forms() -> str:
    """The schedules a branch may take after its boundary, as help texts list them: ``once``
    (the boundary's one review, then Keep) or the registry's branch kinds."""
    return ", ".join(["once (then Keep)", *(k.form for k in SCHEDULES.values() if k.branch)])


SCHEDULE_FORMS = schedule_forms()
"""The schedule specs :func:`parse_schedule` accepts, as help texts and error messages list them
(the module docstring describes each)."""

BRANCH_SCHEDULE_FORMS = branch_schedule_forms()
"""The schedules a branch may take after its boundary, as help texts list them: ``once`` (the
boundary's one review, then Keep) or the continuous rule, alone or with ``protect:n`` or
``retain_first`` joined by ``+`` (``controlscope branch --schedule``)."""

SOURCE_PLACED = tuple(kind.name for kind in SCHEDULES.values() if kind.source_placed)
"""Schedule parts that take their number from a recorded source run when given bare: ``once``
(the local rule's call index, appendix B) and ``midpoint`` (the source's call count, B.1)."""

Part = tuple[str, int | None]
"""A spec's part: a kind's name and its number (None when it takes none, or is bare)."""

_CONTINUOUS: Part = ("continuous", None)


def _int_arg(spec: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"schedule {spec!r}: {text!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"schedule {spec!r}: {value} must be >= 0")
    return value


def _part(part: str, spec: str, *, first: bool, numbered: bool) -> Part:
    """Read one ``+``-separated part of ``spec``.

    Raises:
        ValueError: a part that may not follow ``+``, an unknown kind, an argument given to a
            kind that takes none or missing from one that needs it, or a number that is not
            an integer >= 0.
    """
    head, colon, arg = part.partition(":")
    kind = SCHEDULES.get(head)
    if not first and (kind is None or not kind.modifier):
        modifiers = sorted((k for k in SCHEDULES.values() if k.modifier), key=lambda k: not k.wraps)
        raise ValueError(f"schedule {spec!r}: only {_or(k.form for k in modifiers)} may follow '+'")
    if kind is None:
        raise ValueError(f"unknown schedule {spec!r}; expected one of {schedule_forms()}")
    if kind.arg == "none":
        if arg:
            raise ValueError(f"schedule {spec!r}: {head} takes no argument")
        return head, None
    if arg:
        return head, _int_arg(spec, arg)
    if kind.source_placed and not numbered and not colon:  # bare: ``once``, not ``once:``
        return head, None
    raise ValueError(f"schedule {spec!r}: {head} {kind.missing}")


def _canonical(parts: Iterable[Part]) -> tuple[Part, ...]:
    """``parts`` without a leading ``continuous`` that a wrapping modifier implies."""
    listed = tuple(parts)
    if len(listed) > 1 and listed[0] == _CONTINUOUS and SCHEDULES[listed[1][0]].wraps:
        return listed[1:]
    return listed


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule spec parsed once (the grammar in the module docstring).

    Attributes:
        parts: the parts in order, canonical: each a kind's name and its number, None for a
            kind that takes none or a bare source-placed part (``("once", None)``); no leading
            ``continuous`` before a wrapping modifier.
        text: the spec as written, which errors name (empty for a spec made from another).
        name: the canonical text, e.g. ``once:3+protect:2``; a bare ``once`` or ``midpoint``
            stays bare (``ScheduleSpec.parse(spec.name) == spec``).
        needs_source: True when a bare source-placed part waits for a recorded source run.

    Raises:
        ValueError: from the constructor, for a spec without parts.
    """

    parts: tuple[Part, ...]
    text: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("a schedule spec has at least one part")

    @classmethod
    def parse(cls, text: str, *, numbered: bool = False) -> ScheduleSpec:
        """Read a spec.

        Args:
            text: e.g. ``"continuous"``, ``" once:6 "``, ``"midpoint"``, ``"per_block+protect:5"``.
            numbered: True when no source run will place a bare part: ``once`` and
                ``midpoint`` then need their number (:func:`parse_schedule`).

        Returns:
            The parsed spec.

        Raises:
            ValueError: an empty spec or part, an unknown or malformed part (the message lists
                the accepted forms or says what the part needs), or a part that may not follow
                ``+``; the first problem from the left is named.
        """
        pieces = [p.strip() for p in text.strip().split("+")]
        if any(not p for p in pieces):
            raise ValueError(f"empty schedule spec {text!r}; expected one of {schedule_forms()}")
        parts = (_part(p, text, first=i == 0, numbered=numbered) for i, p in enumerate(pieces))
        return cls(_canonical(parts), text)

    @property
    def name(self) -> str:
        """The canonical text (see the class's Attributes)."""
        return "+".join(kind if arg is None else f"{kind}:{arg}" for kind, arg in self.parts)

    @property
    def needs_source(self) -> bool:
        """A bare source-placed part (see the class's Attributes)."""
        return any(arg is None and SCHEDULES[kind].source_placed for kind, arg in self.parts)

    def placed(self, *, call_index: int | None, calls: int) -> ScheduleSpec:
        """This spec with a bare ``once`` made ``once:K`` and a bare ``midpoint`` made
        ``midpoint:N``, from a source trajectory (paper appendix B and B.1).

        Args:
            call_index: the local rule's boundary in the source (``K``); None when the source
                has no eligible boundary.
            calls: the source trajectory's primitive calls (``N``).

        Returns:
            The spec with its numbers.

        Raises:
            ValueError: a bare ``once`` and no eligible boundary.
        """
        numbers: dict[ScheduleArg, int | None] = {"call_index": call_index, "calls": calls}
        parts = []
        for kind, arg in self.parts:
            if arg is None and SCHEDULES[kind].source_placed:
                arg = numbers[SCHEDULES[kind].arg]
                if arg is None:
                    raise ValueError("the source trajectory has no boundary the local rule selects")
            parts.append((kind, arg))
        return ScheduleSpec(tuple(parts))

    def build(
        self,
        *,
        write_tools: frozenset[str],
        read_tools: frozenset[str],
        annotations: Mapping[str, ToolAnnotations | None] | None = None,
    ) -> Schedule:
        """A fresh schedule of this spec, each part built on the ones before it.

        Args:
            write_tools: the environment's writing tools (for ``once_online``).
            read_tools: the environment's information-returning tools (for ``once_online``).
            annotations: the tools' MCP annotations by name (for ``destructive``; None: no
                tool gives any, so every call counts as destructive).

        Returns:
            A schedule that has observed nothing yet.

        Raises:
            ValueError: a bare source-placed part (place it first: :meth:`placed`).
        """
        tools = ToolSets(write_tools, read_tools, annotations or {})
        built: Schedule | None = None
        for name, arg in self.parts:
            kind = SCHEDULES[name]
            if arg is None and kind.arg != "none":
                raise ValueError(f"schedule {self.text or self.name!r}: {name} {kind.missing}")
            built = kind.build(arg, built, tools)
        if built is None:  # unreachable: a spec has a part
            raise ValueError("a schedule spec has at least one part")
        return built

    def for_branch(self, call_index: int) -> tuple[ScheduleSpec, ScheduleSpec]:
        """A branch's schedule (paper 3.2): what the branch records, and what decides after its
        boundary.

        Args:
            call_index: the branch's boundary (``K``).

        Returns:
            For a bare ``once``: ``once:K`` and ``never`` (the boundary's one review, then
            Keep). For the continuous rule with branch modifiers (``continuous``,
            ``protect:n``, ``retain_first``, joined with ``+``): ``once:K+continuous[+...]``
            and ``continuous[+...]``.

        Raises:
            ValueError: any other spec.
        """
        if self.parts == (("once", None),):
            return ScheduleSpec((("once", call_index),)), ScheduleSpec((("never", None),))
        if not all(SCHEDULES[kind].branch for kind, _ in self.parts):
            branch = [k for k in SCHEDULES.values() if k.branch]
            plain = _or(k.form for k in branch if not k.wraps)
            wrapping = _or(k.form for k in branch if k.wraps)
            raise ValueError(
                f"a branch's schedule is once or {plain} (with {wrapping}), "
                f"not {self.text or self.name!r}"
            )
        modifiers = [part for part in self.parts if part != _CONTINUOUS]
        recorded = ScheduleSpec((("once", call_index), _CONTINUOUS, *modifiers))
        return recorded, ScheduleSpec(_canonical([_CONTINUOUS, *modifiers]))


def parse_schedule(
    spec: str,
    *,
    write_tools: frozenset[str],
    read_tools: frozenset[str],
    annotations: Mapping[str, ToolAnnotations | None] | None = None,
) -> Schedule:
    """Build a fresh schedule from its spec (see the module docstring for the grammar).

    Args:
        spec: e.g. ``"continuous"``, ``"once:6"``, ``"midpoint:40"``, ``"protect:5"``,
            ``"per_block+retain_first"``, ``"destructive+protect:3"``.
        write_tools: the environment's writing tools (for ``once``'s local rule).
        read_tools: the environment's information-returning tools (for ``once``).
        annotations: the tools' MCP annotations by name (for ``destructive``; None: none
            given, every call counts as destructive).

    Returns:
        A schedule that has observed nothing yet.

    Raises:
        ValueError: unknown or malformed spec (the message lists the accepted forms).
    """
    parsed = ScheduleSpec.parse(spec, numbered=True)
    return parsed.build(write_tools=write_tools, read_tools=read_tools, annotations=annotations)


def schedule_name(spec: str) -> str:
    """The canonical form of a schedule spec, e.g. ``" once:3 "`` -> ``"once:3"``. A bare
    ``once`` or ``midpoint`` (placed from a source run, see :func:`place_from_source`) stays
    bare.

    Raises:
        ValueError: unknown or malformed spec.
    """
    return ScheduleSpec.parse(spec).name


def needs_source(spec: str) -> bool:
    """Whether ``spec`` has a bare ``once`` or ``midpoint``, whose number a recorded source run
    supplies.

    Raises:
        ValueError: unknown or malformed spec.
    """
    return ScheduleSpec.parse(spec).needs_source


def place_from_source(spec: str, *, call_index: int | None, calls: int) -> str:
    """``spec`` with a bare ``once`` made ``once:K`` and a bare ``midpoint`` made
    ``midpoint:N``, from a source trajectory (paper appendix B and B.1).

    Args:
        spec: a schedule spec.
        call_index: the local rule's boundary in the source (``K``); None when the source has
            no eligible boundary.
        calls: the source trajectory's primitive calls (``N``).

    Returns:
        The spec with numbers, canonical.

    Raises:
        ValueError: unknown or malformed spec; a bare ``once`` and no eligible boundary.
    """
    return ScheduleSpec.parse(spec).placed(call_index=call_index, calls=calls).name
