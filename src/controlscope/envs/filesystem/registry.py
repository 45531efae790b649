"""The filesystem task registry: each task is a spec with a generator, a verifier and a reference
solution.

INTERFACE CONTRACT (fixed): task modules under ``controlscope.envs.filesystem.tasks`` call
:func:`register` at import time; the environment and the tests read :data:`REGISTRY`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlscope.core import AnswerKey, Check, ToolResult

ToolCaller = Callable[..., ToolResult]
"""``call(tool_name, **arguments) -> ToolResult``; raises on a tool error (reference solutions)."""

Generator = Callable[[random.Random, Path, Mapping[str, Any]], AnswerKey]
"""``generate(rng, workspace, params) -> answer_key``: writes the initial files (setting any
task-relevant modification times with ``os.utime``) and returns the answer key."""

Verifier = Callable[[Path, AnswerKey], list[Check]]
"""``verify(workspace, answer_key) -> checks``: never raises on missing or malformed outputs."""

Reference = Callable[[ToolCaller], None]
"""A reference solution: a program that solves the task through the tools only, reading the
workspace like an agent would (it never sees the answer key). Paths are relative to the workspace
root, which the caller resolves."""


@dataclass(frozen=True)
class FsTaskSpec:
    """One filesystem task (paper section 4 and appendix B).

    Attributes:
        category: one of the task categories (``student_database``...).
        name: the task's name within its category; the task id is ``category/name``.
        instruction: the instruction in our own words; ``{placeholders}`` are filled from params.
        template: the scenario template id (tasks from one template are grouped in analysis);
            the task id when empty.
        generate: writes the initial state and returns the answer key.
        verify: checks the terminal state.
        reference: a reference solution through the tools.
        python_allowed: False when the instruction restricts Python (paper appendix B).
        default_params: generator parameters and their defaults (e.g. ``{"students": 150}``).
        check_params: validates params, raising ``TaskError`` with a clear message.
        time_sensitive: True when the task depends on modification times (replay hashes
            include mtimes then).
    """

    category: str
    name: str
    instruction: str
    generate: Generator
    verify: Verifier
    reference: Reference
    template: str = ""
    python_allowed: bool = True
    default_params: Mapping[str, Any] = field(default_factory=dict)
    check_params: Callable[[Mapping[str, Any]], None] | None = None
    time_sensitive: bool = False

    def __post_init__(self) -> None:
        if not self.template:  # each task its own template unless it shares one
            object.__setattr__(self, "template", self.id)

    @property
    def id(self) -> str:
        """``category/name``."""
        return f"{self.category}/{self.name}"


REGISTRY: dict[str, FsTaskSpec] = {}


def register(spec: FsTaskSpec) -> FsTaskSpec:
    """Add ``spec`` to :data:`REGISTRY`.

    Raises:
        ValueError: when a task with the same id is already registered.
    """
    if spec.id in REGISTRY:
        raise ValueError(f"filesystem task {spec.id!r} is registered twice")
    REGISTRY[spec.id] = spec
    return spec
