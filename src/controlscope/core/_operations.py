"""Scopes and their operation sets: which operation kinds a reviewer may use at a boundary.

Paper section 3.1 defines nested operation sets (eq. 1-3): A_Keep = {keep}, A_Arg = A_Keep ∪
argument edits, A_Full = A_Arg ∪ workflow replacements. Coordinated data editing (Params) exists
only in the AppWorld V2 protocol, whose Full action set includes it (A.2). A scope therefore
names a set of operations only within a *lattice*: :data:`LATTICE_OPERATIONS` gives both, and
:class:`OperationSet` is one scope's set in one lattice, the granted set a run records and a
reviewer is offered. Each kind (its model, how it is offered, judged, applied, counted and shown)
is one entry of :data:`controlscope.core.OPERATIONS`; judging a proposal is
:func:`controlscope.scope.validate_operation`.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    model_validator,
)


class Scope(enum.IntEnum):
    """Granted scope, ordered by inclusion (paper section 3.1); the operations each grants
    depend on the lattice (:data:`LATTICE_OPERATIONS`).

    Attributes:
        KEEP: only ``keep``: the program continues unchanged.
        ARG: also ``patch_arguments``: new values for the pending call's data arguments.
        PARAMS: also ``patch_block_data``: the block rewritten with other constants (the
            ``v2`` lattice only, paper A.2).
        FULL: also ``replace_workflow``: new code for the rest of the block (or reply); under
            ``v2`` also ``patch_block_data``.
    """

    KEEP = 0
    ARG = 1
    PARAMS = 2
    FULL = 3


OperationKind = Literal["keep", "patch_arguments", "patch_block_data", "replace_workflow"]

OPERATION_KINDS: tuple[OperationKind, ...] = get_args(OperationKind)
"""Every operation kind, smallest scope first."""

SummaryGroup = Literal["patches", "replacements"]
"""The column of the report's and the viewer's run tables an operation kind is counted in
(:attr:`~controlscope.core.OperationSpec.group`)."""

SCOPE_NAMES: tuple[str, ...] = tuple(s.name.lower() for s in Scope)
"""The scopes' names (``keep``, ``arg``, ``params``, ``full``), smallest first."""

MAX_CODE_CHARS = 1_000_000
"""The most characters of code one operation may carry (a replacement, a rewritten block):
as many as a tool result keeps. A longer one is refused (``too_large``) before it is parsed,
and recorded clipped (:func:`~controlscope.core.recorded_operation`)."""


Lattice = Literal["default", "v2"]
"""Which nesting of scopes a run uses: ``default`` is Keep ⊂ Arg ⊂ Full with Full = {keep,
patch_arguments, replace_workflow} (paper section 3.1, eq. 1-3); ``v2`` is Keep ⊂ Arg ⊂ Params ⊂
Full with Full adding patch_block_data (the AppWorld V2 protocol, paper A.2)."""

LATTICES: tuple[Lattice, ...] = get_args(Lattice)
"""Every lattice, the default first."""

LATTICE_OPERATIONS: dict[Lattice, dict[Scope, tuple[OperationKind, ...]]] = {
    "default": {
        Scope.KEEP: ("keep",),
        Scope.ARG: ("keep", "patch_arguments"),
        Scope.FULL: ("keep", "patch_arguments", "replace_workflow"),
    },
    "v2": {
        Scope.KEEP: ("keep",),
        Scope.ARG: ("keep", "patch_arguments"),
        Scope.PARAMS: ("keep", "patch_arguments", "patch_block_data"),
        Scope.FULL: ("keep", "patch_arguments", "patch_block_data", "replace_workflow"),
    },
}
"""The operation kinds each scope grants, per lattice (smallest scope first; a scope absent from
a lattice cannot be granted under it)."""

#: The least scope that grants each operation kind (in the ``v2`` lattice, where every kind
#: has one; under ``default`` Params does not exist and Full does not grant ``patch_block_data``).
REQUIRED_SCOPE: dict[str, Scope] = {
    "keep": Scope.KEEP,
    "patch_arguments": Scope.ARG,
    "patch_block_data": Scope.PARAMS,
    "replace_workflow": Scope.FULL,
}


def _scope_from(value: Any) -> Any:
    """Accept a scope as a :class:`Scope`, its integer value or its (case-insensitive) name."""
    if isinstance(value, str) and not value.isdigit():
        try:
            return Scope[value.upper()]
        except KeyError:
            names = ", ".join(SCOPE_NAMES)
            raise ValueError(f"unknown scope {value!r} (expected one of {names})") from None
    return value


ScopeName = Annotated[
    Scope,
    BeforeValidator(_scope_from),
    PlainSerializer(lambda s: Scope(s).name.lower(), return_type=str),
]
"""A :class:`Scope` in a record: written as its lower-case name (``"full"``), read back from a
name or an integer."""


class OperationSet(BaseModel):
    """The operations one scope grants in one lattice: the granted set of a run (paper 3.1).

    Build one with :meth:`of`; the run records it in ``run_start`` and the reviewer is offered
    exactly these operations (:func:`controlscope.review.operation_tools`).

    Attributes:
        scope: the granted scope.
        lattice: the lattice the scope is read in.
        operations: the granted operation kinds, smallest scope first.

    Raises:
        pydantic.ValidationError: ``operations`` is not the scope's set in the lattice (the
            scope is not in the lattice, e.g. Params under ``default``).
    """

    model_config = ConfigDict(frozen=True)
    scope: ScopeName
    lattice: Lattice = "default"
    operations: tuple[OperationKind, ...]

    @model_validator(mode="after")
    def _matches_lattice(self) -> OperationSet:
        expected = lattice_operations(self.scope, self.lattice)
        if self.operations != expected:
            raise ValueError(
                f"{self.scope.name.lower()} grants {list(expected)} under the {self.lattice} "
                f"lattice, not {list(self.operations)}"
            )
        return self

    @classmethod
    def of(cls, scope: Scope | str, lattice: Lattice = "default") -> OperationSet:
        """The set ``scope`` grants under ``lattice``.

        Raises:
            ValueError: the scope does not exist in the lattice (Params outside ``v2``) or is
                unknown.
        """
        chosen = Scope(_scope_from(scope))
        return cls(scope=chosen, lattice=lattice, operations=lattice_operations(chosen, lattice))

    def allows(self, kind: str) -> bool:
        """Whether ``kind`` is among the granted operations."""
        return kind in self.operations

    @property
    def keep_only(self) -> bool:
        """True when ``keep`` is the only granted operation (no review can change anything)."""
        return self.operations == ("keep",)

    def describe(self) -> str:
        """``"full (default lattice: keep, patch_arguments, replace_workflow)"``."""
        return f"{self.scope.name.lower()} ({self.lattice} lattice: {', '.join(self.operations)})"


def lattice_operations(scope: Scope, lattice: Lattice) -> tuple[OperationKind, ...]:
    """The operation kinds ``scope`` grants under ``lattice`` (:data:`LATTICE_OPERATIONS`).

    Raises:
        ValueError: the lattice is unknown, or the scope does not exist in it.
    """
    table = LATTICE_OPERATIONS.get(lattice)
    if table is None:
        raise ValueError(f"unknown lattice {lattice!r}; expected one of {', '.join(LATTICES)}")
    if scope not in table:
        have = ", ".join(s.name.lower() for s in table)
        raise ValueError(
            f"scope {scope.name.lower()} does not exist in the {lattice} lattice (it has {have}); "
            "Params is part of the v2 lattice (paper A.2)"
        )
    return table[scope]


RejectionReason = Literal[
    "out_of_scope",
    "too_large",
    "unknown_argument",
    "schema_violation",
    "code_parameter",
    "structure_changed",
    "syntax_error",
    "empty_patch",
    "malformed",
    "data_not_editable",
]
"""Why a proposal was rejected (it is then executed as ``Keep``).

``malformed`` means the review held no parseable operation; ``data_not_editable`` a
``patch_block_data`` at a call whose data it cannot edit (``Boundary.params_refusal``);
``too_large`` code longer than :data:`MAX_CODE_CHARS`."""


FallbackKind = Literal[
    "malformed",
    "out_of_scope",
    "invalid_arguments",
    "provider_error",
    "syntax_error",
    "timeout",
]
"""Why a review was executed as ``keep`` although the reviewer did not choose it (paper A.4);
``syntax_error``: the proposed code (a replacement or a new block) does not compile;
``timeout``: a person did not decide within the review's time limit."""

FALLBACK_KINDS: tuple[FallbackKind, ...] = get_args(FallbackKind)
"""Every fallback kind."""
