"""Block ids read once (``controlscope.core.BlockId``): the controller's planned ids, the
worker's replacement ids, and the readers of both agree with it."""

from __future__ import annotations

import itertools

import pytest

from controlscope.core import BlockId
from controlscope.worker import replacement_id


@pytest.mark.parametrize(
    ("text", "root", "replacement", "reply"),
    [
        ("t3.b1", "t3.b1", 0, "t3"),
        ("t3.b1.r1", "t3.b1", 1, "t3"),
        ("t3.b1.r12", "t3.b1", 12, "t3"),
        ("t0.b0", "t0.b0", 0, "t0"),
        ("3", "3", 0, "3"),  # tests name blocks freely
        ("call_ab.r9", "call_ab", 9, "call_ab"),
        ("b1.r1", "b1", 1, "b1"),
        ("x.rb", "x.rb", 0, "x"),  # ``.r`` without a number is part of the root
    ],
)
def test_ids_read_as_root_replacement_and_reply(
    text: str, root: str, replacement: int, reply: str
) -> None:
    block = BlockId.parse(text)
    assert (block.root, block.replacement, block.reply) == (root, replacement, reply)
    assert block.is_replacement is (replacement > 0)
    assert str(block) == text


def test_planned_ids_are_the_controllers() -> None:
    assert str(BlockId.planned(3, 1)) == "t3.b1"
    assert BlockId.planned(0, 0) == BlockId.parse("t0.b0") == BlockId("t0.b0")
    assert BlockId.planned(7, 2).reply == "t7"
    assert {BlockId.planned(1, 0): "a"}[BlockId.parse("t1.b0")] == "a"  # hashable, by value


def _chain(first: str, length: int) -> list[str]:
    """``first`` and the ids the worker gives its successive replacements."""
    ids = [first]
    for _ in range(length):
        ids.append(replacement_id(ids[-1]))
    return ids


@pytest.mark.parametrize("first", ["t0.b0", "t12.b3", "3", "b0", "call_ab"])
def test_replacements_follow_the_workers_numbering(first: str) -> None:
    ids = _chain(first, 11)
    assert ids[1] == f"{first}.r1" and ids[11] == f"{first}.r11"
    for old, new in itertools.pairwise(ids):
        assert str(BlockId.parse(old).next_replacement()) == new
    for text in ids:
        block = BlockId.parse(text)
        assert str(block) == text
        # what the loop, the controller and the source reader read from the text today
        assert block.root == text.split(".r", 1)[0] == first
        assert block.is_replacement is (".r" in text)
        assert block.reply == first.split(".", 1)[0]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "t3.b1.r0",  # replacements are numbered from 1
        "t3.b1.r01",
        "t3.b1.r1.r2",  # a replacement's id has one tail: the worker numbers on
        ".r1",
    ],
)
def test_texts_no_block_is_named_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="block id"):
        BlockId.parse(text)


def test_the_constructor_keeps_root_and_number_apart() -> None:
    with pytest.raises(ValueError, match=r"one \.rN tail"):
        BlockId("t3.b1.r1")
    with pytest.raises(ValueError, match="< 0"):
        BlockId("t3.b1", -1)
    assert BlockId("t3.b1", 2) == BlockId.parse("t3.b1.r2")
