"""Copying a workspace that agent code shaped (a forked branch's copy of its workspace)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controlscope._tree import copy_tree, walk_tree


def test_a_copy_keeps_contents_modes_and_links_and_is_independent(tmp_path: Path) -> None:
    src = tmp_path / "ws"
    deep = src.joinpath(*["d"] * 300)  # deeper than a recursive walk would like
    deep.mkdir(parents=True)
    (deep / "leaf.txt").write_text("leaf")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o750)
    outside = tmp_path / "secret.txt"
    outside.write_text("host")
    (src / "link").symlink_to(outside)
    dst = tmp_path / "copy"
    copy_tree(src, dst)
    assert dst.joinpath(*["d"] * 300, "leaf.txt").read_text() == "leaf"
    assert (dst / "run.sh").stat().st_mode & 0o777 == 0o750
    assert os.readlink(dst / "link") == str(outside)  # the link itself, not what it names
    (dst / "run.sh").write_text("changed")
    assert (src / "run.sh").read_text() == "#!/bin/sh\n"
    walked = sorted(e.rel for e in walk_tree(dst, max_depth=1000) if e.kind == "F")
    assert walked == sorted(e.rel for e in walk_tree(src, max_depth=1000) if e.kind == "F")


def test_a_copy_never_lands_in_an_existing_directory(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "copy").mkdir()
    with pytest.raises(FileExistsError):
        copy_tree(tmp_path / "ws", tmp_path / "copy")
    with pytest.raises(OSError, match="cannot copy"):
        copy_tree(tmp_path / "missing", tmp_path / "other")
