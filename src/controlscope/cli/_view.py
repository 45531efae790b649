"""``controlscope view``: a run, a branch set, a panel or a folder of runs in the browser, served
on loopback until Ctrl-C (it prints the URL), or written as static files with ``--export DIR``.

Exit status: 0 (served until interrupted, or exported: it prints the page's path); 2 on bad
input (one line: a path that is not a folder, a port that cannot be bound, an export folder that
is not empty or cannot be written, nothing to export).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from urllib.parse import urlsplit

from rich.console import Console

from controlscope.cli._console import NumberOption, fail, path_option
from controlscope.core import Port
from controlscope.view import DEFAULT_HOST, ViewError, export, find_target, is_loopback, serve


def _host(text: str) -> str:
    """``--host``: an address; a blank one is refused (it would listen on every interface,
    where the viewer answers any Host name)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty host; name an address (default 127.0.0.1)")
    return text.strip()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``view``'s options."""
    parser.add_argument(
        "path",
        type=path_option,
        metavar="PATH",
        help="a run directory, a branch set, a panel or a folder of runs",
    )
    port = NumberOption(Port)
    parser.add_argument(
        "--port", type=port, default=0, help=f"port (default: a free one; {port.span})"
    )
    parser.add_argument(
        "--host", type=_host, default=DEFAULT_HOST, help=f"address (default {DEFAULT_HOST})"
    )
    parser.add_argument(
        "--export", type=path_option, default=None, metavar="DIR", help="write static pages to DIR"
    )


def main(args: argparse.Namespace) -> int:
    """Serve or export; return the exit status (see the module docstring)."""
    console = Console(stderr=True, soft_wrap=True)
    path: Path = args.path
    try:
        folder = path.is_dir()
    except OSError as err:  # a name the file system refuses (too long...)
        return fail(console, "view", f"{path} cannot be looked at: {err.strerror}", 2)
    if not folder:
        return fail(console, "view", f"{path} is not a folder", 2)
    if args.export is not None:
        try:
            index = export(path, args.export)
        except ViewError as err:
            return fail(console, "view", str(err), 2)
        print(index, flush=True)
        return 0
    try:
        find_target(path)
    except (
        ViewError
    ) as err:  # served all the same: the page says so, and shows a run once one starts
        console.print(f"controlscope view: note: {err}", markup=False)
    try:
        serve(path, host=args.host, port=args.port, on_ready=_ready)
    except ViewError as err:
        return fail(console, "view", str(err), 2)
    except KeyboardInterrupt:
        return 0
    return 0


def _ready(url: str) -> None:
    print(url, flush=True)
    host = urlsplit(url).hostname or ""
    if not is_loopback(host):
        print(
            f"controlscope view: warning: serving on {host}, not loopback: anyone who can reach "
            "this machine can read these runs (agent text, model answers), without a login",
            file=sys.stderr,
            flush=True,
        )
    print("controlscope view: serving until Ctrl-C", file=sys.stderr, flush=True)
