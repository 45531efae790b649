"""ALFWorld on its own engine: game loads, actions through the MCP server from the worker, and
every game's expert plan.

Prints a few human-readable lines, then as its LAST line one JSON object:

- ``game_load_s``: median seconds to load and reset one game in the engine (all games; target
  <= 2 s);
- ``server_start_s``: median seconds to start a game's MCP server process until its tools are
  listed (the sampled games);
- ``action_median_ms`` / ``action_p95_ms``: one action timed in agent code in the isolated
  worker, through the controller and the MCP server to the engine and back (the sampled games'
  expert plans; target <= 20 ms);
- ``engine_step_median_ms``: one action of the engine alone, in process (all expert plans): the
  part of an action the engine itself takes;
- ``expert_plans_won``: games whose expert plan (from ``traj_data.json``, run through the
  engine with the server's commands) wins, of ``games``; ``expert_plans_lost`` lists the
  others with the engine's last observation;
- ``substitutions``: games whose plan takes a same-type object for one the game places in no
  receptacle (alfworld issue #107);
- ``openings_match`` / ``names_match``: games whose opening observation and entity names, read
  from the game file without the engine, equal the engine's (what ``controlscope tasks``
  shows);
- ``engine_faults``: engine exceptions caught while playing the expert plans;
- ``sped_up``: whether the engine's speed-up (``speed_up_engine``) was in force;
- ``compared`` / ``observations_unchanged``: sampled games whose expert plan was played with
  and without the speed-up, and those of them whose every observation, final state and outcome
  were the same; ``unsped_step_median_ms``: the engine's step without the speed-up.

The game files come from ``$ALFWORLD_DATA``, else the tarball in ``../shared/alfworld/`` beside
the repository, unpacked into a temporary folder.

Usage: ``python benchmarks/alfworld_env.py [--sample N] [--limit N]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from controlscope.core import BlockResult, Boundary, Keep, Operation, PrimitiveCall
from controlscope.envs.alfworld import (
    ACTIONS,
    COHORTS,
    DATA_ENV,
    AlfworldEnvironment,
    Game,
    GameFile,
    expert_plan,
)
from controlscope.envs.alfworld._actions import command_for
from controlscope.envs.alfworld._engine import speed_up_engine
from controlscope.worker import Limits, WorkerSession

SHARED_TARBALL = Path(__file__).resolve().parents[2] / "shared" / "alfworld"
TARBALL = "json_2.1.1_valid.tar.gz"
BY_NAME = {a.name: a for a in ACTIONS}


def data_folder(scratch: Path) -> Path:
    """The data folder: ``$ALFWORLD_DATA``, else the shared tarball unpacked in ``scratch``."""
    given = os.environ.get(DATA_ENV)
    if given and all((Path(given) / sub).is_dir() for sub in COHORTS.values()):
        return Path(given)
    tarball = next(
        p for p in [Path(given or ".") / TARBALL, SHARED_TARBALL / TARBALL] if p.is_file()
    )
    with tarfile.open(tarball) as archive:
        archive.extractall(scratch, filter="data")
    return scratch


def play_expert(folder: Path) -> dict[str, Any]:
    """Load a game, compare its opening and names, play its expert plan; what happened."""
    path = folder / "game.tw-pddl"
    game_file = GameFile(path)
    plan = expert_plan(game_file, folder / "traj_data.json")
    started = time.perf_counter()
    game = Game.load(path)
    load_s = time.perf_counter() - started
    engine_names = {i.id: i.name for i in game._env._entity_infos.values() if "_bar_" in i.id}
    last, steps = "", []
    for tool, arguments in plan.calls:
        command = command_for(BY_NAME[tool], arguments, game_file.put_template)
        started = time.perf_counter()
        last = game.step(command).observation
        steps.append((time.perf_counter() - started) * 1000)
    return {
        "load_s": load_s,
        "steps_ms": steps,
        "won": game.won,
        "last": last,
        "faults": len(game.faults),
        "opening": game.opening == game_file.opening(),
        "names": {k: v for k, v in game_file.names.items() if "_bar_" in k} == engine_names,
        "substituted": bool(plan.substitutions),
    }


def compare_engines(folder: Path) -> tuple[bool, list[float]]:
    """Play a game's expert plan without and with the engine's speed-up: whether every
    observation, the final state and the outcome are the same, and the unsped steps' ms."""
    path = folder / "game.tw-pddl"
    game_file = GameFile(path)
    commands = [
        command_for(BY_NAME[tool], arguments, game_file.put_template)
        for tool, arguments in expert_plan(game_file, folder / "traj_data.json").calls
    ]
    played, unsped = [], []
    try:
        for fast in (False, True):
            speed_up_engine(fast)
            game = Game.load(path)
            observations = []
            for command in commands:
                started = time.perf_counter()
                observations.append(game.step(command).observation)
                if not fast:
                    unsped.append((time.perf_counter() - started) * 1000)
            played.append((observations, game.state_digest(), game.won))
    finally:
        speed_up_engine(True)
    return played[0] == played[1], unsped


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


def timed_program(calls: list[tuple[str, dict[str, str]]]) -> str:
    """Agent code that makes ``calls`` and prints each one's milliseconds, measured in the
    worker."""
    lines = ["import json, time", "ms = []"]
    for tool, arguments in calls:
        args = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
        lines += ["t = time.perf_counter()", f"{tool}({args})"]
        lines.append("ms.append((time.perf_counter() - t) * 1000)")
    lines.append("print(json.dumps(ms))")
    return "\n".join(lines) + "\n"


def through_server(
    env: AlfworldEnvironment, task_id: str, scratch: Path
) -> tuple[float, list[float]]:
    """Start the task's server, run its expert plan in the worker; the server's start seconds
    and each action's milliseconds."""
    record = env.record(task_id)
    calls = expert_plan(
        GameFile(record.folder / "game.tw-pddl"), record.folder / "traj_data.json"
    ).calls
    workspace = Path(tempfile.mkdtemp(dir=scratch))
    env.setup(env.task(task_id), 0, workspace)
    started = time.perf_counter()
    with env.start_server(workspace) as server:
        server.list_tools()
        start_s = time.perf_counter() - started
        handler = Stamps()
        with WorkerSession(server, Limits(primitive_calls=1000)) as session:
            session.run_reply([("b0", timed_program(calls))], handler)
    if handler.result.status != "completed":
        raise RuntimeError(f"{task_id}: {handler.result.error}")
    return start_s, json.loads(handler.result.output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=12, help="games run through the server")
    parser.add_argument("--limit", type=int, default=0, help="expert plans to play (0: all)")
    parser.add_argument(
        "--compare", type=int, default=12, help="games played with and without the speed-up"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="alfworld-bench-") as tmp:
        scratch = Path(tmp)
        os.environ[DATA_ENV] = str(data_folder(scratch / "data"))
        env = AlfworldEnvironment(excluded_scenes=())
        tasks = env.tasks()
        chosen = tasks[: args.limit] if args.limit else tasks
        played: dict[str, dict[str, Any]] = {}
        for n, task in enumerate(chosen, 1):
            played[task.id] = play_expert(env.record(task.id).folder)
            if n % 25 == 0:
                print(f"{n}/{len(chosen)} expert plans played", flush=True)
        step = max(1, len(tasks) // max(1, args.compare))
        compared = [compare_engines(env.record(t.id).folder) for t in tasks[::step][: args.compare]]
        step = max(1, len(tasks) // max(1, args.sample))
        starts, actions = [], []
        for task in tasks[::step][: args.sample]:
            start_s, ms = through_server(env, task.id, scratch)
            starts.append(start_s)
            actions += ms
    lost = {k: v["last"] for k, v in played.items() if not v["won"]}
    loads = [v["load_s"] for v in played.values()]
    result = {
        "games": len(played),
        "game_load_s": round(statistics.median(loads), 3),
        "server_start_s": round(statistics.median(starts), 3),
        "action_median_ms": round(statistics.median(actions), 2),
        "engine_step_median_ms": round(
            statistics.median(ms for v in played.values() for ms in v["steps_ms"]), 2
        ),
        "action_p95_ms": round(statistics.quantiles(actions, n=20)[-1], 2),
        "actions_timed": len(actions),
        "expert_plans_won": len(played) - len(lost),
        "expert_plans_lost": lost,
        "substitutions": sum(v["substituted"] for v in played.values()),
        "openings_match": sum(v["opening"] for v in played.values()),
        "names_match": sum(v["names"] for v in played.values()),
        "engine_faults": sum(v["faults"] for v in played.values()),
        "sped_up": speed_up_engine(True),
        "compared": len(compared),
        "observations_unchanged": sum(same for same, _ in compared),
        "unsped_step_median_ms": round(statistics.median(ms for _, u in compared for ms in u), 2),
    }
    print(f"{result['expert_plans_won']}/{len(played)} expert plans won; lost: {list(lost)}")
    print(f"load {result['game_load_s']} s, action {result['action_median_ms']} ms (median)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
