"""Seeded filler text for generated task files (file context, folder structure, papers).

Every function draws only from the given :class:`random.Random`, so a task's workspace is a
pure function of its seed (the same seed gives the same initial state). The text is
plain ASCII, so upper-casing and byte sizes agree between Python and the Node.js server.
"""

from __future__ import annotations

import random

_SUBJECTS = (
    "The team",
    "Our supplier",
    "The committee",
    "The new intern",
    "Maintenance",
    "The client",
    "Finance",
    "The night shift",
    "The review board",
    "Our partner lab",
    "The help desk",
    "The survey group",
)
_VERBS = (
    "approved",
    "postponed",
    "reviewed",
    "rejected",
    "scheduled",
    "summarised",
    "questioned",
    "updated",
    "archived",
    "discussed",
    "measured",
    "recorded",
)
_OBJECTS = (
    "the quarterly budget",
    "the server migration",
    "the printer contract",
    "the safety checklist",
    "the hiring plan",
    "the travel policy",
    "the warehouse inventory",
    "the customer survey",
    "the backup schedule",
    "the training material",
    "the floor plan",
    "the vendor invoices",
)
_TAILS = (
    "before the deadline",
    "after a long meeting",
    "without further comment",
    "for the second time",
    "with minor changes",
    "at the end of the week",
    "pending a final check",
    "on short notice",
    "as agreed last month",
    "in the shared folder",
)


def sentence(rng: random.Random) -> str:
    """One sentence of office prose ending with a full stop (ASCII, 30 to 80 characters)."""
    return (
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}."
    )


def paragraph(rng: random.Random, sentences: int) -> str:
    """``sentences`` sentences joined by single spaces (no trailing newline)."""
    return " ".join(sentence(rng) for _ in range(sentences))


def lines(rng: random.Random, count: int) -> list[str]:
    """``count`` distinct sentences, one per line (no newline characters)."""
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < count:
        text = sentence(rng)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out
