"""Block ids: how the controller names the blocks of a planner's reply and their replacements.

The ``n``-th block of the planner's reply ``t`` is ``t{t}.b{n}`` (``t3.b1``); the block that
replaces a running block takes the replaced block's id with a ``.r{k}`` tail, numbered from 1
(``t3.b1.r1``, then ``t3.b1.r2`` when the replacement is replaced in turn). Records keep the
id as text (``block_id: str``, the log's schema); :class:`BlockId` is how code reads one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TAIL = re.compile(r"\.r[0-9]+\Z")
_REPLACEMENT = re.compile(r"(.+)\.r([1-9][0-9]*)", re.DOTALL)


@dataclass(frozen=True)
class BlockId:
    """A block's id: ``t3.b1`` (the planner's reply 3, block 1), ``t3.b1.r2`` (its 2nd
    replacement).

    ``BlockId.parse(text)`` and ``str(block_id)`` are inverse: every id the controller and the
    worker write reads back as itself.

    Attributes:
        root: the id of the planned block (its text without the ``.rN`` tail): ``t3.b1``.
            Any non-empty text that does not itself end in ``.rN`` (tests name blocks ``3`` or
            ``b0``).
        replacement: 0 for a planned block; ``k`` for the ``k``-th replacement in its chain.
        reply: the part of the root before its first ``.``: the planner's reply the block
            belongs to (``t3``; the whole root when it has no ``.``).
        is_replacement: True for a replacement's id (``replacement > 0``).

    Raises:
        ValueError: from the constructor, for an empty root, a root that ends in ``.rN``, or a
            negative replacement.
    """

    root: str
    replacement: int = 0

    def __post_init__(self) -> None:
        if not self.root:
            raise ValueError("a block id is not empty")
        if self.replacement < 0:
            raise ValueError(f"block id {self.root!r}: replacement {self.replacement} < 0")
        if _TAIL.search(self.root):
            raise ValueError(
                f"block id {str(self)!r}: a replacement's id has one .rN tail, N from 1 "
                "without leading zeros"
            )

    @classmethod
    def parse(cls, text: str) -> BlockId:
        """Read a block id.

        Args:
            text: ``t3.b1``, ``t3.b1.r2``, or a test's own name (``3``, ``3.r1``).

        Returns:
            The id: a ``.rN`` tail (N from 1) is the replacement number, the rest the root.

        Raises:
            ValueError: an empty text, a ``.r0`` tail or one with leading zeros, or more than
                one ``.rN`` tail (no block is named so).
        """
        match = _REPLACEMENT.fullmatch(text)
        if match is not None:
            return cls(match.group(1), int(match.group(2)))
        return cls(text)

    @classmethod
    def planned(cls, turn: int, index: int) -> BlockId:
        """The id of a planned block.

        Args:
            turn: the planner's reply the block belongs to (the turn counter of the loop).
            index: the block's 0-based position in that reply.

        Returns:
            ``t{turn}.b{index}``.
        """
        return cls(f"t{turn}.b{index}")

    def next_replacement(self) -> BlockId:
        """The id of the block that replaces this one: ``3`` -> ``3.r1`` -> ``3.r2``.

        Returns:
            The same root with the next replacement number.
        """
        return BlockId(self.root, self.replacement + 1)

    @property
    def reply(self) -> str:
        """The planner's reply the block belongs to (see the class's Attributes)."""
        return self.root.split(".", 1)[0]

    @property
    def is_replacement(self) -> bool:
        """A replacement's id (see the class's Attributes)."""
        return self.replacement > 0

    def __str__(self) -> str:
        """The id as the log records it: ``root`` or ``root.rN``."""
        return f"{self.root}.r{self.replacement}" if self.replacement else self.root
