"""``controlscope clean``: remove the directories that killed runs left behind (task
workspaces, worker directories, a fork point's copies, a killed weights assembly...) in the
temporary folder and the weights folder, or the folders given, those whose owning process is
gone (:func:`controlscope.clean`)."""

from __future__ import annotations

import argparse
import tempfile

from rich.console import Console

from controlscope._leftovers import clean
from controlscope.cli._console import fail, inert, path_option
from controlscope.models import weights_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``clean`` verb's options to ``parser``."""
    parser.add_argument(
        "folders",
        nargs="*",
        type=path_option,
        metavar="DIR",
        help="folders to look in (not below them; default: the temporary folder, TMPDIR, "
        "and the embedded model's weights folder)",
    )
    parser.add_argument("--dry-run", action="store_true", help="only print what would be removed")


def main(args: argparse.Namespace) -> int:
    """Remove (or, with ``--dry-run``, list) the leftovers; print one line each. Returns 0, 1
    when one could not be removed, 2 when a folder given is not one."""
    out, errors = Console(soft_wrap=True), Console(stderr=True, soft_wrap=True)
    for folder in args.folders:
        if not folder.is_dir():
            return fail(errors, "clean", f"{folder} is not a folder", 2)
    try:
        roots = args.folders or dict.fromkeys([tempfile.gettempdir(), str(weights_dir())])
        found = clean(roots, dry_run=args.dry_run)
    except OSError as err:
        return fail(errors, "clean", f"cannot read a folder: {err}", 2)
    failed = 0
    for leftover in found:
        owner = f"(the process that made it, {leftover.owner}, is gone)"
        if leftover.problem is not None:
            failed += 1
            fail(errors, "clean", f"cannot remove {leftover.path}: {leftover.problem}", 1)
        elif args.dry_run:
            out.print(inert(f"would remove {leftover.path} {owner}"))
        else:
            out.print(inert(f"removed {leftover.path} {owner}"))
    if not found:
        out.print("nothing to remove")
    return 1 if failed else 0
