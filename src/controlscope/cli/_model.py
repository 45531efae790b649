"""``controlscope model pull|list``: fetch, check and list the embedded model's weights."""

from __future__ import annotations

import argparse
import sys

from controlscope.core import escape_untrusted
from controlscope.models import (
    DEFAULT_MODEL,
    KNOWN_MODELS,
    UnknownWeights,
    WeightsError,
    ensure_weights,
    weights_dir,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``model`` verb's subcommands (``pull``, ``list``) on ``parser``."""
    sub = parser.add_subparsers(dest="model_command", required=True)
    pull = sub.add_parser(
        "pull",
        help="assemble and verify the local model's weights; print the GGUF path (last line)",
    )
    names = sorted(KNOWN_MODELS)
    pull.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"known model ({', '.join(names)}; default {DEFAULT_MODEL}) or a .gguf path",
    )
    pull.add_argument("--quiet", action="store_true", help="no progress bars")
    sub.add_parser("list", help="list the known models and whether they are cached")


def main(args: argparse.Namespace) -> int:
    """Run ``controlscope model pull|list``; return the exit status: 2 when ``--model`` names
    no weights (neither a known model nor a GGUF file), 1 when they cannot be fetched or
    checked."""
    if args.model_command == "list":
        for model in KNOWN_MODELS.values():
            path = weights_dir() / model.file_name
            state = "cached" if path.is_file() else "absent"
            print(f"{model.name}\t{model.model_id}\t{state}\t{path}")
        return 0
    try:
        path = ensure_weights(args.model, progress=not args.quiet)
    except WeightsError as exc:
        print(f"controlscope model: {escape_untrusted(str(exc))}", file=sys.stderr)
        return 2 if isinstance(exc, UnknownWeights) else 1
    print(path)
    return 0
