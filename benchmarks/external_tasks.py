"""Users' own tasks: what the sandbox adds to a third-party verifier, and how long a task spec's
environment takes to set up.

Prints a few human-readable lines, then as its LAST line one JSON object:

- ``verify_overhead_ms``: the median sandboxed verification of an MCPMark task folder
  (``McpmarkEnvironment.verify``: the final workspace copied, ``verify.py`` run under bubblewrap
  with its limits on the read-only copy) less the median of the same ``verify.py`` run as
  MCPMark runs it (a plain subprocess on the workspace itself); target <= 300 ms;
- ``verify_sandboxed_ms`` / ``verify_unsandboxed_ms``: the two medians;
- ``same_verdicts``: both ways gave the same exit status every time;
- ``spec_env_setup_s``: the median seconds from an empty workspace to a task spec's server
  ready to call (the state directory copied, the pinned npm filesystem server started confined,
  its tools listed); target <= 1 s;
- ``builtin_env_setup_s``: the same for the built-in filesystem environment's task (its
  generator, the same server), for comparison;
- ``targets_met``: both targets met.

The task folder is ``tests/fixtures/mcpmark``'s ``notes/shout``, solved in the workspace; the
spec is the built-in ``file_context/file_splitting`` on the pinned server (as the tests'
``split_spec``).

Usage: ``python benchmarks/external_tasks.py [--repeat N]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from controlscope._bwrap import base_interpreter
from controlscope._tree import remove_tree
from controlscope.core import Task
from controlscope.envs import Environment
from controlscope.envs.external import McpmarkEnvironment, SpecEnvironment
from controlscope.envs.filesystem.environment import FilesystemEnvironment
from controlscope.envs.filesystem.server import find_server_script

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SHOUT = FIXTURES / "mcpmark" / "tasks" / "filesystem" / "standard" / "notes" / "shout"
NOTES = FIXTURES / "mcpmark" / "test_environments" / "notes"
SPLIT = "file_context/file_splitting"


def solved_workspace(scratch: Path) -> tuple[McpmarkEnvironment, Task, Path]:
    """The shout task's state with its loud copies written (its verifier passes)."""
    env = McpmarkEnvironment(SHOUT)
    task = env.task("notes/shout", state=str(NOTES))
    workspace = scratch / "shout"
    workspace.mkdir()
    env.setup(task, 0, workspace)
    (workspace / "loud").mkdir()
    for note in workspace.glob("*.txt"):
        (workspace / "loud" / note.name).write_text(note.read_text().upper())
    return env, task, workspace


def verify_times(repeat: int, scratch: Path) -> tuple[list[float], list[float], bool]:
    """Milliseconds of each sandboxed and each plain verification, and whether every one of
    them passed."""
    env, task, workspace = solved_workspace(scratch)
    plain = [str(base_interpreter()), "-s", str(SHOUT / "verify.py")]
    variables = {**os.environ, "FILESYSTEM_TEST_DIR": str(workspace)}
    sandboxed, unsandboxed, same = [], [], True
    env.verify(task, workspace, {})  # the sandbox's probe, once
    for _ in range(repeat):
        started = time.perf_counter()
        verdict = env.verify(task, workspace, {})
        sandboxed.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        done = subprocess.run(plain, env=variables, capture_output=True, timeout=300, check=False)
        unsandboxed.append((time.perf_counter() - started) * 1000)
        same = same and verdict.success and done.returncode == 0
    return sandboxed, unsandboxed, same


def split_spec(folder: Path) -> Path:
    """A task spec of the built-in file-splitting task on the pinned npm server."""
    (folder / "state").mkdir(parents=True)
    builtin = FilesystemEnvironment()
    task = builtin.task(SPLIT)
    builtin.setup(task, 0, folder / "state")
    shutil.copy(FIXTURES / "task_specs" / "verify_split.py", folder)
    script = find_server_script()
    path = folder / "spec.toml"
    path.write_text(
        f'[server]\ncommand = "node"\nargs = ["{script}", "{{workspace}}"]\n'
        f'paths = ["{script.parents[3]}"]\n\n[state]\ndirectory = "state"\n\n'
        '[verifier]\ncommand = ["{python}", "{spec_dir}/verify_split.py", '
        '"{spec_dir}/state/large_file.txt"]\n\n'
        f'[[tasks]]\nid = "{SPLIT}"\ninstruction = {json.dumps(task.instruction)}\n'
    )
    return path


def setup_times(env: Environment, task: Task, repeat: int, scratch: Path) -> list[float]:
    """Seconds from an empty workspace to the server's tools listed, each time."""
    times = []
    for i in range(repeat):
        workspace = scratch / f"{env.name.partition(':')[0]}-{i}"
        workspace.mkdir()
        started = time.perf_counter()
        env.setup(task, 0, workspace)
        with env.start_server(workspace) as server:
            server.list_tools()
            times.append(time.perf_counter() - started)
        remove_tree(workspace)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="cs-bench-external-"))
    try:
        sandboxed, unsandboxed, same = verify_times(args.repeat, scratch)
        spec = SpecEnvironment(split_spec(scratch / "spec"))
        spec_s = setup_times(spec, spec.task(SPLIT), args.repeat, scratch)
        builtin = FilesystemEnvironment()
        builtin_s = setup_times(builtin, builtin.task(SPLIT), args.repeat, scratch)
    finally:
        remove_tree(scratch)
    result = {
        "verify_overhead_ms": round(
            statistics.median(sandboxed) - statistics.median(unsandboxed), 1
        ),
        "verify_sandboxed_ms": round(statistics.median(sandboxed), 1),
        "verify_unsandboxed_ms": round(statistics.median(unsandboxed), 1),
        "same_verdicts": same,
        "spec_env_setup_s": round(statistics.median(spec_s), 3),
        "builtin_env_setup_s": round(statistics.median(builtin_s), 3),
        "repeat": args.repeat,
    }
    result["targets_met"] = (
        result["verify_overhead_ms"] <= 300 and result["spec_env_setup_s"] <= 1.0
    )
    print(
        f"verify.py: {result['verify_sandboxed_ms']} ms sandboxed (copy, bwrap, limits), "
        f"{result['verify_unsandboxed_ms']} ms as MCPMark runs it"
    )
    print(
        f"set-up to a listed server: {result['spec_env_setup_s']} s from a task spec, "
        f"{result['builtin_env_setup_s']} s built in"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
