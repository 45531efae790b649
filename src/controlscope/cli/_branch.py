"""``controlscope branch``: branches from one recorded prefix, one per scope and reviewer draw,
all from the same ``(h, s)`` (paper 3.1, 3.3, A.4, B.1).

Exit status: 0 when every branch replayed its prefix and all share their first review request
(it prints one line per branch and the mechanism used); 1 naming the divergence; 2 on bad
input (one line, before anything runs).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from controlscope.cli._console import NumberOption, fail, inert, path_option
from controlscope.cli._live_models import add_model_arguments, build_live
from controlscope.core import Draws
from controlscope.replay import (
    BRANCHES_FILE,
    MECHANISM_NOTES,
    BranchSet,
    Recording,
    ReplayError,
    branch,
    branch_schedule,
    check_branches_out,
    resolve_boundary,
)
from controlscope.schedule import BRANCH_SCHEDULE_FORMS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``branch``'s options."""
    parser.add_argument("run_dir", type=path_option, metavar="RUN_DIR", help="the recorded run")
    parser.add_argument(
        "--at",
        required=True,
        help="the boundary: a call index K, midpoint, local-rule (appendix B) or feedback-rule "
        "(A.3)",
    )
    parser.add_argument("--scope", default="keep,arg,full", help="scopes, comma-separated")
    draws = NumberOption(Draws)
    parser.add_argument(
        "--draws", type=draws, default=1, help=f"reviewer draws per scope ({draws.span})"
    )
    parser.add_argument(
        "--schedule",
        default="once",
        help=f"after the boundary: {BRANCH_SCHEDULE_FORMS}",
    )
    parser.add_argument("--out", type=path_option, required=True, help="directory of the branches")
    parser.add_argument(
        "--mechanism",
        choices=("auto", "fork", "replay"),
        default="auto",
        help="how branches start: by fork where possible, else each by prefix replay (auto); "
        "by fork or not at all (fork); each by its own prefix replay (replay)",
    )
    add_model_arguments(parser, reviewer=True)


def main(args: argparse.Namespace) -> int:
    """Branch; return the exit status (see the module docstring)."""
    console = Console(stderr=True, soft_wrap=True)
    scopes = [s.strip() for s in args.scope.split(",") if s.strip()]
    try:
        recording = Recording.load(args.run_dir)
        choice = resolve_boundary(recording, args.at)  # refused before a model is built
        branch_schedule(args.schedule, choice.call_index)
        check_branches_out(args.out)
        reviews = any(s.lower() != "keep" for s in scopes)
        planner, reviewer = build_live(args, need_planner=True, need_reviewer=reviews)
        found = branch(
            recording,
            at=args.at,
            scopes=scopes,
            out=args.out,
            planner=planner,
            reviewer=reviewer,
            draws=args.draws,
            schedule=args.schedule,
            mechanism=args.mechanism,
        )
    except ReplayError as err:
        return fail(console, "branch", str(err), 2)
    _print(found, args.out)
    if found.divergence is not None:
        return fail(console, "branch", f"diverged: {found.divergence.message}", 1)
    return 0


def _print(found: BranchSet, out_dir: Path) -> None:
    out = Console(soft_wrap=True)
    out.print(
        inert(
            f"{len(found.branches)} branch(es) of {found.source_run} at boundary "
            f"{found.call_index} (schedule {found.schedule}); mechanism: "
            f"{MECHANISM_NOTES.get(found.mechanism, found.mechanism)}"
        )
    )
    if found.mechanism_note:
        out.print(inert(f"not forked: {found.mechanism_note}"))
    for b in found.branches:
        s = b.summary
        verdict = (
            "no verdict" if s is None or s.success is None else ("PASS" if s.success else "FAIL")
        )
        detail = "" if s is None else f" ({s.end_reason}; {s.primitive_calls} calls)"
        problem = f" [{b.problem}]" if b.problem else ""
        out.print(inert(f"  {b.scope}-d{b.draw}: {verdict}{detail}{problem}"))
    if found.request_hash is not None:
        out.print(inert(f"first review request (operation set left out): {found.request_hash}"))
    out.print(inert(f"branches: {out_dir / BRANCHES_FILE}"))
