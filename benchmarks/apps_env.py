"""The app-API environment: templates, reference solutions through the MCP server, API calls
from the worker, and the state copied for a new branch.

Prints a few human-readable lines, then as its LAST line one JSON object:

- ``templates`` / ``instances``: scenario templates and task instances (target: at least 30
  templates, three instances each);
- ``reference_solutions_passed``: instances whose reference solution, run through the apps'
  MCP server (``--transport``: the server in this process by default, ``stdio`` for its own
  process per instance), passes the native evaluator (target: all);
- ``reference_failures``: the instances that did not, with their failed checks;
- ``api_call_median_ms`` / ``api_call_p95_ms``: one API call timed in agent code in the
  isolated worker, through the controller and the stdio MCP server to the database and back
  (a mix of documentation, supervisor, listing and show calls; target <= 5 ms);
- ``server_start_s``: seconds to start the server process until its tools are listed;
- ``branch_copy_ms``: median milliseconds to give a new branch its own copy of an instance's
  state (``setup``: the database written into a fresh workspace; target <= 50 ms);
- ``live_copy_ms``: median milliseconds to copy a running workspace's database file (what
  forking a live state would cost);
- ``world_build_ms``: median milliseconds to generate an instance's world from its seed
  (once per process; later setups reuse the bytes).

Usage: ``python benchmarks/apps_env.py [--transport memory|stdio] [--calls N]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from controlscope.core import BlockResult, Boundary, Keep, Operation, PrimitiveCall
from controlscope.envs.apps import INSTANCES, TEMPLATES, AppsEnvironment, instance
from controlscope.envs.apps._world import base_world
from controlscope.envs.apps.environment import instance_seed
from controlscope.envs.apps.server import DB_FILE
from controlscope.envs.apps.testing import run_program
from controlscope.worker import Limits, WorkerSession


class Stamps:
    """A Keep handler (no reviews) that lets every call through."""

    def on_block_start(self, block_id: str, code: str, replaces: str | None) -> None:
        pass

    def on_boundary(self, boundary: Boundary) -> Operation:
        return Keep()

    def on_call(self, call: PrimitiveCall) -> None:
        pass

    def on_block_end(self, result: BlockResult) -> None:
        self.result = result


TIMED = """import json, time
ms = []
def timed(api, **kw):
    t = time.perf_counter()
    out = api(**kw)
    ms.append((time.perf_counter() - t) * 1000)
    return out
me = json.loads(timed(supervisor__show_profile))['email']
listed = json.loads(timed(supervisor__show_account_passwords))
pw = {p['account_name']: p['password'] for p in listed}
pay = json.loads(timed(payments__login, username=me, password=pw['payments']))['access_token']
notes = json.loads(timed(notes__login, username=me, password=pw['notes']))['access_token']
for i in range(ROUNDS):
    timed(api_docs__show_api_doc, app_name='payments', api_name='send_money')
    timed(payments__show_transactions, access_token=pay, page_index=i % 3)
    timed(notes__search_notes, access_token=notes, tag='work')
    timed(payments__show_balance, access_token=pay)
print(json.dumps(ms))
"""


def calls_from_the_worker(rounds: int) -> tuple[float, list[float]]:
    """Start a server process on a fresh world and time API calls from agent code in the
    isolated worker; the server's start seconds and each call's milliseconds."""
    env = AppsEnvironment()
    with tempfile.TemporaryDirectory(prefix="apps-bench-") as folder:
        workspace = Path(folder)
        env.setup(env.task("total_received_from/1"), 0, workspace)
        started = time.perf_counter()
        with env.start_server(workspace) as server:
            server.list_tools()
            start_s = time.perf_counter() - started
            handler = Stamps()
            with WorkerSession(server, Limits(primitive_calls=10_000)) as session:
                code = TIMED.replace("ROUNDS", str(rounds))
                session.run_reply([("b0", code)], handler)
    if handler.result.status != "completed":
        raise RuntimeError(f"the timed block failed: {handler.result.error}")
    return start_s, json.loads(handler.result.output.strip().splitlines()[-1])


def copies(env: AppsEnvironment) -> tuple[list[float], list[float]]:
    """Milliseconds of each instance's setup into a fresh workspace, and of copying a live
    workspace's database file."""
    setups, live = [], []
    with tempfile.TemporaryDirectory(prefix="apps-copy-") as folder:
        root = Path(folder)
        for i, task in enumerate(env.tasks()):
            target = root / f"ws{i}"
            target.mkdir()
            started = time.perf_counter()
            env.setup(task, 0, target)
            setups.append((time.perf_counter() - started) * 1000)
            fork = root / f"fork{i}"
            fork.mkdir()
            started = time.perf_counter()
            shutil.copyfile(target / DB_FILE, fork / DB_FILE)
            live.append((time.perf_counter() - started) * 1000)
    return setups, live


def references(transport: str) -> tuple[int, dict[str, list[str]]]:
    """Instances whose reference solution passes, and the failures' failed checks."""
    passed, failures = 0, {}
    for template in TEMPLATES:
        for n in range(1, INSTANCES + 1):
            task_id = f"{template}/{n}"
            outcome = run_program(
                task_id,
                instance(template, n).built.solution,
                transport="stdio" if transport == "stdio" else "memory",
            )
            if outcome.verdict.success and outcome.error is None:
                passed += 1
            else:
                failed = [f"{c.name}: {c.reason}" for c in outcome.verdict.checks if not c.passed]
                failures[task_id] = failed + ([outcome.error] if outcome.error else [])
    return passed, failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=("memory", "stdio"), default="memory")
    parser.add_argument("--calls", type=int, default=400, help="API calls timed in the worker")
    args = parser.parse_args()
    builds = []
    for template in list(TEMPLATES)[:10]:
        started = time.perf_counter()
        world = base_world(instance_seed(template, 1))
        TEMPLATES[template].build(world)
        world.to_bytes()
        builds.append((time.perf_counter() - started) * 1000)
    env = AppsEnvironment()
    setups, live = copies(env)
    print(f"branch copy: median {statistics.median(setups):.2f} ms", flush=True)
    start_s, calls = calls_from_the_worker(max(1, args.calls // 4))
    print(f"API call from the worker: median {statistics.median(calls):.2f} ms", flush=True)
    passed, failures = references(args.transport)
    result = {
        "templates": len(TEMPLATES),
        "instances": len(TEMPLATES) * INSTANCES,
        "reference_solutions_passed": passed,
        "reference_failures": failures,
        "transport": args.transport,
        "api_call_median_ms": round(statistics.median(calls), 3),
        "api_call_p95_ms": round(statistics.quantiles(calls, n=20)[-1], 3),
        "api_calls_timed": len(calls),
        "server_start_s": round(start_s, 3),
        "branch_copy_ms": round(statistics.median(setups), 3),
        "live_copy_ms": round(statistics.median(live), 3),
        "world_build_ms": round(statistics.median(builds), 2),
    }
    print(f"{passed}/{result['instances']} reference solutions pass")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
