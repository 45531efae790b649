"""``controlscope setup``: what an installation from a package needs to run a task, installed
into the user's controlscope directory (see :func:`controlscope.setup`)."""

from __future__ import annotations

import argparse
import sys

from controlscope._setup import setup
from controlscope.core import escape_untrusted
from controlscope.envs.filesystem import SetupError
from controlscope.models import DEFAULT_MODEL, KNOWN_MODELS, UnknownWeights, WeightsError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``setup``'s options on ``parser``."""
    names = ", ".join(sorted(KNOWN_MODELS))
    parser.add_argument(
        "--weights",
        nargs="?",
        const=DEFAULT_MODEL,
        default=None,
        metavar="MODEL",
        help=f"also fetch and verify the embedded model's weights ({names}; "
        f"default {DEFAULT_MODEL})",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def main(args: argparse.Namespace) -> int:
    """Run ``controlscope setup``; print what is where. Exit status: 0 when done, 1 when the
    server or the weights could not be installed (npm or Node.js missing, npm or the download
    failed; one line), 2 when ``--weights`` names no known model."""
    try:
        result = setup(weights=args.weights, progress=not args.quiet)
    except (SetupError, WeightsError) as err:
        print(f"controlscope setup: {escape_untrusted(str(err))}", file=sys.stderr)
        return 2 if isinstance(err, UnknownWeights) else 1
    print(f"MCP filesystem server: {result.server}")
    if result.weights is not None:
        print(f"weights: {result.weights}")
    return 0
