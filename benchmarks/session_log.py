"""How fast an executor session's log grows: bytes per block over a long session.

Runs one :class:`controlscope.Executor` session (Keep, no reviews, no upstream server) of
``--blocks`` blocks, each printing a line, and measures ``events.jsonl`` after every block. Each
block is a planner request whose conversation holds every block before it; the log records what
each request adds (a ``model_call`` continues the previous one), so a block costs about the
same at the end of the session as at its start. Prints a line, then as its LAST line one JSON
object:

- ``blocks``: blocks run;
- ``log_bytes``: the log's size at the end;
- ``bytes_per_block``: its mean growth per block after the first;
- ``last_block_bytes``: the growth of the last block (a log that records whole histories grows
  with the session: its last block costs far more than its first).

Usage: ``python benchmarks/session_log.py [--blocks N]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from pathlib import Path

import controlscope as cs
from controlscope.core import EVENTS_FILE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "session"
        log = out / EVENTS_FILE
        sizes: list[int] = []
        settings = cs.RunSettings(scope="keep", schedule="never", max_turns=args.blocks + 5)
        with cs.Executor(settings=settings, out=out) as ex:
            for block in range(args.blocks):
                done = ex.execute(f"print('block {block}: ' + 'x' * 40)")
                assert done.ok, done.error
                sizes.append(log.stat().st_size)
        growth = [b - a for a, b in itertools.pairwise(sizes)]
        result = {
            "blocks": args.blocks,
            "log_bytes": log.stat().st_size,
            "bytes_per_block": round(sum(growth) / max(1, len(growth))),
            "last_block_bytes": growth[-1] if growth else 0,
        }
    print(f"{args.blocks} blocks: the log grew {result['bytes_per_block']} bytes a block")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
