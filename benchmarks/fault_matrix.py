"""Fault matrix: faults of parts, hostile blocks and bad input, each run to its end in time.

Every case is one run (the real worker under a 512 MiB memory bound, the real npm filesystem
server or a stdio MCP server that misbehaves on purpose, scripted or loopback models, a custom
reviewer), one ``controlscope`` command in a subprocess (``run``, or another verb), or one
``python -m controlscope.record`` on a hostile log. The classes are those of the robustness
contract (``docs/architecture.md``, "Execution contract"): exceptions of parts (a model run dry,
a 200 MB answer), untrusted text in the terminal, memory, the seccomp filter, deadlines,
agent- and reviewer-made sizes, agent-made trees, the log reader, bad options and loose input
(numbers over their ceilings, a base URL that is not one, too broad a root, an empty host, an
unknown model), MCP sessions, panels (two ``controlscope panel`` commands on one folder: the
second refused in one line, exit 2, the first finishing with every run counted), the files a
user names (a FIFO, a link to ``/dev/zero``, TOML or JSON nested 5,000 deep, given to each
reader's command), and what a ``controlscope run`` killed with SIGKILL leaves (its workspace,
which ``controlscope clean`` must remove).

For each case it checks that the outcome is recorded as the contract says (a run: ``run_end``
and ``summary.json``; bad input: exit status 2 and no log; a hostile log: exit status 2), that it
ended within its budget (the run's wall-clock ceiling, or the case's own) plus 5 s, that no
process of it is left (the benchmark is the subreaper of orphans), and it samples the worker's
memory (peak resident memory plus its ``/tmp`` and ``/dev/shm``) from ``/proc``.

Prints one line per case, then as its LAST line one JSON object: ``cases``, ``ended_recorded``,
``within_deadline``, ``leftover_processes``, ``max_worker_memory_mb`` (under a 512 MiB bound),
``worker_memory_limit_mb`` and ``failed`` (the names of cases that missed a target).
Targets: every case recorded and within its deadline, 0 leftovers, memory at most 512.

Usage: ``python benchmarks/fault_matrix.py [--only SUBSTRING]`` (``--only "input file"``: the files
a user names).
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import controlscope as cs
from controlscope import panel as cp
from controlscope._proc import alive, cmdline, descendants, reap_orphans, status_kib
from controlscope.core import (
    Condition,
    ModelRequest,
    ModelResponse,
    TaskBudgets,
    ToolCall,
    ToolServer,
)
from controlscope.envs._mcp import McpToolServer
from controlscope.envs.filesystem.environment import FilesystemEnvironment
from controlscope.models import OpenAIModel, ScriptedModel
from controlscope.record import SUMMARY_FILE, read_events

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fixtures.big_server import BigServer  # noqa: E402 - a 200 MB answer
from fixtures.misbehaving import Misbehaving, Mute  # noqa: E402 - the tests' misbehaving parts

TASK = "file_context/file_splitting"
MAIN_JOB = ROOT / "tests" / "fixtures" / "main_job"
MEMORY_MB = 512
MARGIN_S = 5.0


# ------------------------------------------------------------------------------- environments


class NeverStarts(FilesystemEnvironment):
    def start_server(self, workspace: Path) -> ToolServer:  # type: ignore[override]
        return McpToolServer.stdio(sys.executable, ["-c", "pass"], timeout_s=10)


class BadVerifier(FilesystemEnvironment):
    def verify(self, task: cs.Task, workspace: Path, answer_key: Any) -> cs.Verdict:
        raise RuntimeError("the verifier crashed")


# ------------------------------------------------------------------------------- models


class Raising:
    """A planner that raises something other than a provider error."""

    model_id = "raising"

    def complete(self, request: ModelRequest) -> ModelResponse:
        raise RuntimeError("a bug in the model client")


class Silent:
    """A reviewer that never answers (released when the benchmark ends)."""

    release = threading.Event()

    def propose(self, state: cs.PublicState, condition: cs.Condition) -> cs.Proposal:
        Silent.release.wait(3600)
        return cs.Proposal(operation=cs.core.Keep())


class RaisingReviewer:
    def propose(self, state: cs.PublicState, condition: cs.Condition) -> cs.Proposal:
        raise ValueError("a bug in a reviewer")


class HugeReviewer:
    """A reviewer of the user's own proposing a 2,000,000-line replacement."""

    def propose(self, state: cs.PublicState, condition: cs.Condition) -> cs.Proposal:
        return cs.Proposal(operation=cs.core.ReplaceWorkflow(code="x = 1\n" * 2_000_000))


def deep_tool_call() -> ModelResponse:
    value: Any = "x"
    for _ in range(300):
        value = [value]
    args = {"code": "print(1)", "extra": value}
    call = ToolCall(id="c1", name="execute_python", arguments=json.dumps(args), parsed=args)
    return ModelResponse(tool_calls=(call,), finish_reason="tool_calls")


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


# ------------------------------------------------------------------------------- cases


@dataclass
class Case:
    """One fault: how to provoke it and what bounds its run."""

    name: str
    fault: str
    answers: list[Any] = field(default_factory=list)
    env: Callable[[], FilesystemEnvironment] = FilesystemEnvironment
    planner: Callable[[], Any] | None = None
    reviewer: Callable[[], Any] | None = None
    schedule: str = "never"
    isolation: str = "bwrap"
    exec_s: float = 60.0
    wall_s: float = 60.0
    cli: list[str] | None = None  # a subprocess of `verb`; its expected exit status in `status`
    status: int = 0
    verb: str = "run"  # the command `cli` is given to
    files: Callable[[Path], None] | None = None  # puts the command's input files in its folder
    log: Callable[[Path], None] | None = None  # a hostile log for python -m controlscope.record
    own: Callable[[Path], tuple[bool, str]] | None = None  # a case that runs itself


def block(code: str, isolation: str = "bwrap", **kw: Any) -> dict[str, Any]:
    return {"answers": [fenced(code), "Done."], "isolation": isolation, **kw}


HOARD_SHM = "for i in range(200):\n  open(f'/dev/shm/h{i}', 'wb').write(b'x' * (8 << 20))"
HOARD_TMP = "for i in range(200):\n  open(f'/tmp/h{i}', 'wb').write(b'x' * (8 << 20))"
HOARD_HEAP = "held = []\nwhile True:\n  held.append(bytearray(16 << 20))"
HOARD_MEMFD = (
    "import os\nfds = []\nfor i in range(100):\n  fd = os.memfd_create('h')\n"
    "  os.write(fd, b'x' * (8 << 20))\n  fds.append(fd)"
)
HOARD_ALL = (
    "import os\nheld = []\n"
    "for path in ('/tmp', '/dev/shm'):\n  for i in range(100):\n"
    "    try:\n      open(f'{path}/a{i}', 'wb').write(b'x' * (8 << 20))\n"
    "    except OSError:\n      break\n"
    "try:\n  while True:\n    held.append(bytearray(8 << 20))\nexcept MemoryError:\n  pass\n"
    "print(len(held))"
)
SYSV = (
    "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "print(libc.shmget(0, 1 << 30, 0o1600))"
)
PIPES = (
    "import fcntl, os\nps = []\nfor i in range(100):\n  r, w = os.pipe()\n"
    "  fcntl.fcntl(w, 1031, 1 << 20)\n  ps.append((r, w))"
)
KILL_PARENT = "import os, signal\nos.kill(os.getppid(), signal.SIGTERM)"
SIGQUEUE = (
    "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "info = (ctypes.c_int * 32)(15, 0, -1)\n"
    "nr = 129 if os.uname().machine == 'x86_64' else 138\n"
    "print(libc.syscall(nr, os.getppid(), 15, info), ctypes.get_errno())"
)
UNIX = "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('/run/systemd/private')"
FORK = (
    "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "print(libc.syscall(57), ctypes.get_errno())"
)
FORGE = (
    "rt = read_text_file.__globals__['_cs_call'].__self__\nframe = FRAME\n"
    "rt.write(len(frame).to_bytes(4, 'big') + frame)\nrt.recv()"
)
DEEP_ARGS = "d = 'x'\nfor _ in range(300):\n  d = [d]\nwrite_file(path='/workspace/d', content=d)"
BIG_WRITE = "write_file(path='/workspace/big.txt', content='x' * 30_000_000)"
CHAIN = "print(create_directory(path='/workspace/' + '/'.join(['d'] * 1900))[:30])"
LOCAL_CHAIN = (
    "import os\nbase = os.getcwd()\nfor _ in range(2500):\n  os.mkdir('d')\n  os.chdir('d')\n"
    "os.chdir(base)"
)


def forge(frame: bytes) -> str:
    return FORGE.replace("FRAME", repr(frame))


DEEP_TOML = "x = " + "[" * 5000 + "]" * 5000 + "\n"
DEEP_JSON = "[" * 5000 + "]" * 5000 + "\n"
SPEC = ROOT / "tests" / "fixtures" / "task_specs"
MCPMARK_TASK = ROOT / "tests" / "fixtures" / "mcpmark" / "tasks" / "filesystem" / "standard"


def copy_spec(work: Path) -> None:
    """The notebook task spec, its task's instruction read from ``task.md``."""
    shutil.copytree(SPEC, work / "spec")
    spec = work / "spec" / "notebook.toml"
    text = spec.read_text()
    spec.write_text(text[: text.index("instruction = ")] + 'instruction_file = "task.md"\n')


def copy_task(work: Path) -> None:
    """An MCPMark task folder without its meta.json."""
    shutil.copytree(MCPMARK_TASK / "notes" / "shout", work / "task")
    (work / "task" / "meta.json").unlink()


#: reader -> (verb, its file in the case's folder, deep text or None, arguments, other files)
READERS: dict[str, tuple[str, str, str | None, list[str], Callable[[Path], None] | None]] = {
    "scripted model": ("run", "script.json", DEEP_JSON,
                       ["--task", TASK, "--model", "scripted:{file}", "--quiet", "--out", "{out}"],
                       None),
    "panel file": ("panel", "panel.toml", DEEP_TOML, ["{file}", "--out", "{out}"], None),
    "task spec": ("run", "spec/spec.toml", DEEP_TOML,
                  ["--task-spec", "{file}", "--task", "t", "--model", "scripted:none", "--quiet",
                   "--out", "{out}"], None),
    "experiment file": ("experiment", "mine.toml", DEEP_TOML, ["{file}", "--out", "{out}"], None),
    "instruction file": ("tasks", "spec/task.md", None,
                         ["--task-spec", "{work}/spec/notebook.toml"], copy_spec),
    "MCPMark meta.json": ("tasks", "task/meta.json", DEEP_JSON, ["--mcpmark", "{work}/task"],
                          copy_task),
}  # fmt: skip


def put_input(work: Path, name: str, kind: str, deep: str, others: Callable[[Path], None] | None
              ) -> None:  # fmt: skip
    """Make the case's files in ``work``: ``others``, then at ``name`` a FIFO, a link to
    /dev/zero or the ``deep`` text."""
    if others is not None:
        others(work)
    path = work / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "FIFO":
        os.mkfifo(path)
    elif kind == "/dev/zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_text(deep)


def input_file_cases() -> list[Case]:
    """Each reader's command given a FIFO, a link to /dev/zero and nesting 5,000 deep (TOML or
    JSON as it reads): one line, exit status 2, nothing run."""
    found = []
    for reader, (verb, name, deep, args, others) in READERS.items():
        for kind in ("FIFO", "/dev/zero", "deep") if deep is not None else ("FIFO", "/dev/zero"):
            files = functools.partial(
                put_input, name=name, kind=kind, deep=deep or "", others=others
            )
            cli = [a.replace("{file}", f"{{work}}/{name}") for a in args]
            label = f"input file, {reader}: {'nested 5000 deep' if kind == 'deep' else kind}"
            found.append(Case(label, "files", cli=cli, status=2, verb=verb, files=files))
    return found


def write_file(work: Path, name: str, text: str) -> None:
    """A command's input file ``name`` in the case's folder ``work``."""
    (work / name).write_text(text)


def cases(mute: Mute, big: BigServer) -> list[Case]:
    """The corpus: at least one case per class, most classes several."""
    cli_base = ["--task", TASK, "--model", "scripted:none", "--quiet"]
    dry = ["--task", TASK, "--model", "scripted:{work}/one.json", "--quiet", "--schedule", "never"]
    one = functools.partial(write_file, name="one.json", text=json.dumps([fenced("print(1)")]))
    panel = functools.partial(
        write_file, name="panel.toml", text=f'tasks = ["{TASK}"]\ndraws = 100000000000\n'
    )
    return [
        # 1. exceptions of parts
        Case("model raises", "exceptions", planner=Raising),
        Case("scripted model runs out", "exceptions", answers=[fenced("print(1)")]),
        Case("reviewer raises", "exceptions", reviewer=RaisingReviewer, schedule="every_boundary",
             answers=[fenced("list_directory(path='/workspace')"), "Done."]),
        Case("server breaks its output schema", "exceptions", env=Misbehaving,
             **block("bad_schema()")),
        Case("server answer nested 300 deep", "exceptions", env=Misbehaving, **block("deep()")),
        Case("frame: tool name is a list", "exceptions", **block(forge(
            b'{"t":"call","tool":["read_text_file"],"args":{},"line":1}'))),
        Case("frame: lone surrogate", "exceptions", **block(forge(
            b'{"t":"call","tool":"read_text_file","args":{"path":"\\ud800"},"line":1}'))),
        Case("frame: 1e999", "exceptions", **block(forge(
            b'{"t":"call","tool":"read_text_file","args":{"path":1e999},"line":1}'))),
        Case("arguments nested 300 deep", "exceptions", **block(DEEP_ARGS)),
        Case("model tool call nested 300 deep", "exceptions", answers=[deep_tool_call()]),
        Case("scripted model runs out (CLI)", "exceptions", status=3, files=one,
             cli=[*dry, "--out", "{out}"]),
        Case("200 MB model answer", "exceptions",
             planner=lambda: OpenAIModel("big-model", base_url=big.base_url)),
        Case("verifier raises", "exceptions", env=BadVerifier, answers=["Done."]),
        # 2. untrusted text in the terminal
        Case("markup in the task id", "markup", cli=["--task", "[/bold]x", "--out", "{out}"],
             status=2),
        Case("markup in the schedule", "markup",
             cli=[*cli_base, "--schedule", "[/bold]", "--out", "{out}"], status=2),
        Case("markup in an endpoint's error", "markup", status=3, cli=[
            "--task", TASK, "--model", "openai:x", "--base-url", "http://127.0.0.1:9/[/bold]",
            "--quiet", "--out", "{out}"]),
        # 3. memory
        Case("fill /dev/shm", "memory", **block(HOARD_SHM)),
        Case("memfd hoard", "memory", **block(HOARD_MEMFD)),
        Case("fill /tmp", "memory", **block(HOARD_TMP)),
        Case("heap growth", "memory", **block(HOARD_HEAP)),
        Case("everything at once", "memory", **block(HOARD_ALL)),
        Case("System V shared memory", "memory", **block(SYSV, "none")),
        Case("pipe buffers", "memory", **block(PIPES)),
        # 4. seccomp
        Case("kill the parent (bwrap)", "seccomp", **block(KILL_PARENT)),
        Case("kill the parent (none)", "seccomp", **block(KILL_PARENT, "none")),
        Case("rt_sigqueueinfo to the parent (none)", "seccomp", **block(SIGQUEUE, "none")),
        Case("unix socket to a host daemon (none)", "seccomp", **block(UNIX, "none")),
        Case("raw fork", "seccomp", **block(FORK)),
        # 5. deadlines
        Case("spinning tool call", "deadlines", env=lambda: Misbehaving(600), exec_s=5, wall_s=60,
             **block("spin(seconds=3600)")),
        Case("silent reviewer", "deadlines", reviewer=Silent, schedule="every_boundary", wall_s=5,
             answers=[fenced("list_directory(path='/workspace')"), "Done."]),
        Case("endpoint that never answers", "deadlines", wall_s=8,
             planner=lambda: OpenAIModel("m", base_url=mute.url)),
        Case("endless loop", "deadlines", exec_s=4, **block("while True:\n  pass")),
        Case("sleep past the budget", "deadlines", exec_s=4,
             **block("import time\ntime.sleep(600)")),
        # 6. agent-made sizes
        Case("30 MB exception message", "sizes", **block("raise ValueError('x' * 30_000_000)")),
        Case("30 MB write_file", "sizes", **block(BIG_WRITE)),
        Case("5 MB print", "sizes", **block("print('y' * 5_000_000)")),
        Case("5 MB tool result", "sizes", env=Misbehaving, **block("huge(chars=5_000_000)")),
        Case("2,000,000-line replacement", "sizes", reviewer=HugeReviewer,
             schedule="every_boundary",
             answers=[fenced("list_directory(path='/workspace')"), "Done."]),
        # 7. agent-made trees
        Case("directory chain 1900 deep", "trees", **block(CHAIN)),
        Case("chain in the worker's /tmp (none)", "trees", **block(LOCAL_CHAIN, "none")),
        Case("chain in the worker's /tmp (bwrap)", "trees", **block(LOCAL_CHAIN)),
        # 8. the log reader
        Case("log is a FIFO", "reader", log=lambda p: os.mkfifo(p)),
        Case("log links to /dev/zero", "reader", log=lambda p: p.symlink_to("/dev/zero")),
        Case("log has an endless line", "reader", log=lambda p: p.write_bytes(b"x" * (40 << 20))),
        # 9. bad options
        Case("--max-calls 0", "options", cli=[*cli_base, "--max-calls", "0", "--out", "{out}"],
             status=2),
        Case("--temperature nan", "options", status=2,
             cli=[*cli_base, "--temperature", "nan", "--out", "{out}"]),
        Case("--out ''", "options", cli=[*cli_base, "--out", ""], status=2),
        Case("--max-wall-seconds inf", "options", status=2,
             cli=[*cli_base, "--max-wall-seconds", "inf", "--out", "{out}"]),
        Case("--worker-memory-mb 1e15", "options", status=2, files=one,
             cli=[*dry, "--worker-memory-mb", "1000000000000000", "--out", "{out}"]),
        Case("--max-seconds 1e9", "options", status=2, files=one,
             cli=[*dry, "--max-seconds", "1e9", "--out", "{out}"]),
        Case("--base-url notaurl", "options", status=2, cli=[
            "--task", TASK, "--model", "openai:m", "--base-url", "notaurl", "--out", "{out}"]),
        Case("branch --draws 1e9", "options", status=2, verb="branch", cli=[
            str(MAIN_JOB), "--at", "0", "--draws", "1000000000", "--out", "{out}"]),
        Case("panel draws = 1e11", "options", status=2, verb="panel", files=panel,
             cli=["{work}/panel.toml", "--out", "{out}"]),
        Case("tasks --mcpmark /", "options", status=2, verb="tasks", cli=["--mcpmark", "/"]),
        Case("view --host ''", "options", status=2, verb="view", cli=["{work}", "--host", ""]),
        Case("model pull --model bogus", "options", status=2, verb="model",
             cli=["pull", "--model", "bogus"]),
        # 10. MCP sessions
        Case("server writes invalid UTF-8", "mcp", env=Misbehaving, **block("bad_utf8()")),
        Case("server writes a non-JSON line", "mcp", env=Misbehaving, **block("bad_json()")),
        Case("server dies, grandchild holds stdout", "mcp", env=Misbehaving,
             **block("spawn()\ndie()")),
        Case("server never starts", "mcp", env=NeverStarts, answers=["Done."]),
        Case("server leaves a grandchild", "mcp", env=Misbehaving, **block("print(spawn())")),
        # 11. panels
        Case("two panels on one folder", "panels", own=two_panels, wall_s=240),
        # 12. files a user names
        *input_file_cases(),
        # 13. what a killed run leaves
        Case("SIGKILL mid-run, then clean", "leftovers", own=killed_run, wall_s=30),
    ]  # fmt: skip


PANEL_PROGRAM = "import time\ntime.sleep(1.5)\nprint(list_directory(path='/workspace'))"


def two_panels(work: Path) -> tuple[bool, str]:
    """Two ``controlscope panel`` commands on one folder: the second must exit 2 in one line
    while the first runs, and the first must finish with every run counted."""
    planner, reviewer = work / "planner.json", work / "reviewer.json"
    planner.write_text(json.dumps({"by": "turn", "answers": [fenced(PANEL_PROGRAM), "Done."]}))
    reviewer.write_text(json.dumps([json.dumps({"reason": "fine", "operation": "keep"})] * 20))
    config = work / "panel.toml"
    config.write_text(
        f'tasks = ["{TASK}"]\nseeds = [0, 1]\nscopes = ["keep", "full"]\nstart = "whole"\n'
        f'[planner]\nmodel = "scripted:{planner}"\n[reviewer]\nmodel = "scripted:{reviewer}"\n'
        "[execution]\nworkers = 1\n"
    )
    folder = work / "panel"
    command = [sys.executable, "-m", "controlscope.cli", "panel", str(config), "--out",
               str(folder), "--quiet"]  # fmt: skip
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list((folder / "runs").rglob("events.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.05)
        second = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        first.communicate(timeout=200)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    plan = cp.read_manifest(folder).plan
    counted = sum(cp.finished(folder, run.id) is not None for run in plan.runs)
    refused = second.returncode == 2 and len(second.stderr.strip().splitlines()) == 1
    clean = "Traceback" not in second.stderr + str(first.stderr)
    recorded = refused and clean and first.returncode == 0 and counted == len(plan.runs)
    return recorded, f"exits {first.returncode}/{second.returncode}, {counted} counted"


# ------------------------------------------------------------------------------- measuring


class MemoryMonitor:
    """Samples the worker's memory (peak RSS plus its tmpfs use) every 50 ms while a case runs."""

    def __init__(self) -> None:
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for pid in descendants(os.getpid()):
                if "marshal.loads" in cmdline(pid):
                    self.peak_mb = max(self.peak_mb, worker_memory_mb(pid))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_mb


def worker_memory_mb(pid: int) -> float:
    """Peak resident memory of one worker plus what its own /tmp and /dev/shm hold (bwrap)."""
    rss_kib = status_kib(pid, "VmHWM")
    try:
        own_root = os.stat(f"/proc/{pid}/root").st_ino != os.stat("/").st_ino
        files = 0
        if own_root:
            for mount in ("tmp", "dev/shm"):
                fs = os.statvfs(f"/proc/{pid}/root/{mount}")
                files += (fs.f_blocks - fs.f_bfree) * fs.f_frsize
    except OSError:
        return 0.0
    return rss_kib / 1024 + files / 2**20


def leftovers(before: set[int], wait_s: float = 5.0) -> list[int]:
    """Processes that appeared during the case and are still alive after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [
            p
            for p in descendants(os.getpid())
            if p not in before and alive(p) and "resource_tracker" not in cmdline(p)
        ]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


# ------------------------------------------------------------------------------- running


def run_case(case: Case, work: Path) -> dict[str, Any]:
    """Run one case; its outcome and measurements."""
    before = set(descendants(os.getpid()))
    monitor = MemoryMonitor()
    started = time.monotonic()
    if case.own is not None:
        recorded, reason = case.own(work)
    elif case.log is not None:
        recorded, reason = _reader_case(case, work)
    elif case.cli is not None:
        recorded, reason = _cli_case(case, work)
    else:
        recorded, reason = _run_case(case, work)
    seconds = time.monotonic() - started
    memory = monitor.stop()
    left = leftovers(before)
    for pid in left:  # so that one case's leftovers do not count against the next
        with _suppress():
            os.kill(pid, 9)
    budget = case.wall_s if case.log is None and case.cli is None else 30.0  # own: wall_s
    return {
        "name": case.name,
        "fault": case.fault,
        "recorded": recorded,
        "end": reason,
        "seconds": round(seconds, 2),
        "within_deadline": seconds <= budget + MARGIN_S,
        "leftovers": len(left),
        "worker_memory_mb": round(memory, 1),
    }


def _run_case(case: Case, work: Path) -> tuple[bool, str]:
    env = case.env()
    planner = case.planner() if case.planner is not None else ScriptedModel(case.answers)
    condition = Condition(
        schedule=case.schedule,
        planner_format="fenced",
        isolation=case.isolation,  # type: ignore[arg-type]
        worker_memory_mb=MEMORY_MB,
        budgets=TaskBudgets(execution_seconds=case.exec_s, wall_seconds=case.wall_s),
    )
    out = work / "run"
    try:
        result = cs.run_trajectory(
            env,
            env.task(TASK),
            seed=0,
            planner=planner,
            reviewer=case.reviewer() if case.reviewer is not None else None,
            condition=condition,
            out_dir=out,
            workspace_root=work / "ws",
        )
    except Exception as err:  # a run that escaped its record: the case failed
        return False, f"raised {type(err).__name__}: {err}"[:200]
    events = read_events(out)
    recorded = (
        events[-1].type == "run_end"
        and (out / SUMMARY_FILE).is_file()
        and not any((work / "ws").iterdir())
    )
    return recorded, result.end_reason


def _cli_case(case: Case, work: Path) -> tuple[bool, str]:
    out = work / "cli"
    args = [a.replace("{out}", str(out)).replace("{work}", str(work)) for a in case.cli or []]
    if case.files is not None:
        case.files(work)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "controlscope.cli", case.verb, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            # a reader that read /dev/zero whole would fail here, not take the machine's memory
            preexec_fn=_bound_memory if case.files is not None else None,
        )
    except subprocess.TimeoutExpired:  # killed: a reader that waits on a FIFO, say
        return False, "no exit in 120 s"
    clean = "Traceback" not in proc.stderr and "MarkupError" not in proc.stderr
    one_line = len(proc.stderr.strip().splitlines()) == 1
    if case.status == 2:
        recorded = proc.returncode == 2 and one_line and not (out / "events.jsonl").exists()
    else:
        recorded = proc.returncode == case.status and (out / SUMMARY_FILE).is_file()
        recorded = recorded and (case.status == 0 or one_line)
    return recorded and clean, f"exit {proc.returncode}"


def _bound_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _reader_case(case: Case, work: Path) -> tuple[bool, str]:
    run_dir = work / "log"
    run_dir.mkdir()
    assert case.log is not None
    case.log(run_dir / "events.jsonl")
    proc = subprocess.run(
        [sys.executable, "-m", "controlscope.record", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode == 2 and "Traceback" not in proc.stderr, f"exit {proc.returncode}"


def killed_run(work: Path) -> tuple[bool, str]:
    """A run killed with SIGKILL while its block sleeps leaves its workspace in its temporary
    folder; ``controlscope clean`` removes it (and says so)."""
    temp, out = work / "temp", work / "killed"
    temp.mkdir()
    script = work / "script.json"
    sleeper = "print('asleep', flush=True)\nimport time\ntime.sleep(60)"
    script.write_text(json.dumps([fenced(sleeper)]))
    env = {**os.environ, "TMPDIR": str(temp)}
    argv = [sys.executable, "-m", "controlscope.cli", "run", "--task", TASK, "--quiet"]
    argv += ["--model", f"scripted:{script}", "--schedule", "never", "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    log = out / "events.jsonl"
    deadline = time.monotonic() + 20
    while not (log.exists() and "asleep" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    below = descendants(proc.pid)
    proc.kill()
    proc.wait()
    left = sorted(p.name for p in temp.glob("cs-ws-@*"))
    cleaned = subprocess.run(
        [sys.executable, "-m", "controlscope.cli", "clean"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    reap_orphans(below)  # the killed run's sandboxes, handed to this subreaper
    lines = cleaned.stdout.splitlines()
    removed = [line.split()[1] for line in lines if line.startswith("removed ")]
    ok = bool(left) and removed == [str(temp / n) for n in left] and not any(temp.iterdir())
    return ok, f"left {len(left)}, clean exit {cleaned.returncode}"


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    args = parser.parse_args()
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come to us
    warnings.simplefilter("ignore")  # the loud warning of isolation "none"
    logging.disable(logging.WARNING)
    mute = Mute()
    big = BigServer("chunked")
    results = []
    with tempfile.TemporaryDirectory(prefix="fault-matrix-") as tmp:
        for i, case in enumerate(c for c in cases(mute, big) if args.only in c.name):
            work = Path(tmp) / f"case{i}"
            work.mkdir()
            outcome = run_case(case, work)
            results.append(outcome)
            print(
                f"{outcome['fault']:>10}  {case.name:<40} {outcome['end']:<28} "
                f"{outcome['seconds']:>6.1f}s  recorded={outcome['recorded']} "
                f"leftovers={outcome['leftovers']} memory={outcome['worker_memory_mb']}",
                flush=True,
            )
    Silent.release.set()
    big.close()
    failed = [
        r["name"]
        for r in results
        if not r["recorded"] or not r["within_deadline"] or r["leftovers"]
    ]
    print(
        json.dumps(
            {
                "cases": len(results),
                "ended_recorded": sum(r["recorded"] for r in results),
                "within_deadline": sum(r["within_deadline"] for r in results),
                "leftover_processes": sum(r["leftovers"] for r in results),
                "max_worker_memory_mb": max((r["worker_memory_mb"] for r in results), default=0),
                "worker_memory_limit_mb": MEMORY_MB,
                "failed": failed,
            }
        )
    )


if __name__ == "__main__":
    main()
