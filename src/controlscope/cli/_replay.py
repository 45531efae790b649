"""``controlscope replay``: a recorded run replayed whole or to a boundary, or one recorded
operation replayed frozen at its prefix (paper 3.3, 6.2, A.4, C.1, C.2).

Exit status: 0 when the replay stayed on its recording (it prints the verified calls, or the
frozen replay's outcome); 1 naming the first divergence; 2 on bad input (one line, before
anything runs).
"""

from __future__ import annotations

import argparse
from typing import cast

from rich.console import Console

from controlscope.cli._console import NumberOption, fail, inert, path_option
from controlscope.cli._live_models import add_model_arguments, build_live
from controlscope.core import CallIndex
from controlscope.replay import (
    Endpoint,
    OperationReplay,
    PrefixReplay,
    Recording,
    ReplayError,
    check_operation_out,
    replay_operation,
    replay_prefix,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``replay``'s options."""
    parser.add_argument("run_dir", type=path_option, metavar="RUN_DIR", help="the recorded run")
    index = NumberOption(CallIndex)
    parser.add_argument(
        "--until", type=index, default=None, help=f"stop at boundary K (call index; {index.span})"
    )
    parser.add_argument(
        "--operation", type=index, default=None, help=f"recorded operation N ({index.span})"
    )
    parser.add_argument(
        "--endpoint",
        choices=("candidate", "retained", "shared-patch"),
        default=None,
        help="with --operation: the frozen replay",
    )
    parser.add_argument("--out", type=path_option, required=True, help="run directory to write")
    add_model_arguments(parser, reviewer=False)


def main(args: argparse.Namespace) -> int:
    """Replay; return the exit status (see the module docstring)."""
    console = Console(stderr=True, soft_wrap=True)
    try:
        _check_options(args)
        recording = Recording.load(args.run_dir)
        if args.operation is None:
            found: PrefixReplay | OperationReplay = replay_prefix(
                recording, out=args.out, until=args.until
            )
        else:
            found = _operation(args, recording)
    except ReplayError as err:
        return fail(console, "replay", str(err), 2)
    if found.divergence is not None:
        return fail(console, "replay", f"diverged: {found.divergence.message}", 1)
    out = Console(soft_wrap=True)
    out.print(inert(_report(found), lines=True))
    return 0


def _check_options(args: argparse.Namespace) -> None:
    """Options that go together (their ranges are checked as they are parsed).

    Raises:
        ReplayError: ``--until`` with ``--operation``, or one of ``--operation`` and
            ``--endpoint`` without the other.
    """
    if (args.operation is None) != (args.endpoint is None):
        raise ReplayError("--operation N and --endpoint go together")
    if args.operation is not None and args.until is not None:
        raise ReplayError("--until replays a prefix; --operation replays at its own boundary")


def _operation(args: argparse.Namespace, recording: Recording) -> OperationReplay:
    """The frozen replay of ``--operation`` (models built after the recording is checked).

    Raises:
        ReplayError: see :func:`~controlscope.replay.replay_operation`.
    """
    endpoint = args.endpoint.replace("-", "_")
    review = recording.operation(args.operation)  # refused before a model is built
    check_operation_out(args.out, cast("Endpoint", endpoint))
    need_planner = endpoint != "candidate"
    planner, _ = build_live(args, need_planner=need_planner, need_reviewer=False)
    if need_planner and planner is None:
        raise ReplayError(f"the {args.endpoint} endpoint plans on: give --model")
    return replay_operation(recording, review.index, endpoint, out=args.out, planner=planner)


def _report(found: PrefixReplay | OperationReplay) -> str:
    """What a replay that stayed on its recording prints."""
    if isinstance(found, PrefixReplay):
        where = "the whole run" if found.point is None else f"boundary {found.call_index}"
        files = "files match" if found.files_compared else "no recorded files to compare"
        requests = ", ".join(f"{n} {role}" for role, n in found.verified_requests.items())
        return (
            f"replayed {where}: {found.verified_calls} calls verified ({requests} requests; "
            f"{files}; {found.clock_differences} masked clock differences)\nlog: "
            f"{found.run_dir / 'events.jsonl'}"
        )
    lines = [f"operation {found.operation} (call {found.call_index}), {found.endpoint}:"]
    for run in found.runs:
        reached = {True: "goal reached", False: "goal not reached", None: "no verdict"}
        end = run.summary.end_reason if run.summary else None
        lines.append(f"  {run.label}: {reached[run.success]}, {run.calls} calls ({end})")
    if found.block_finished is not None:
        lines.append(f"  block finished: {'yes' if found.block_finished else 'no'}")
    if found.matched is not None:
        lines.append(
            f"  labels match: {'yes' if found.matched else 'no: ' + str(found.difference)}"
        )
    lines += [f"  log: {run.run_dir / 'events.jsonl'}" for run in found.runs]
    return "\n".join(lines)
