"""Branches started by fork (paper 3.1, A.4: every branch from the same ``(h, s)``), on real
parts (the npm filesystem server, the isolated worker and its fork supervisor) with scripted
models: the prefix replayed once, the trajectory paused at the boundary forked once per branch.

A forked branch must be what a replayed branch of the same prefix is: the same first review
request, the same workspace at the boundary and, when it goes on the same way, the same
terminal files; a branch that changes the workspace or whose process dies must not reach the
next branch.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

import controlscope as cs
from _process_support import sigint_as
from controlscope import replay
from controlscope._proc import alive, cmdline, descendants
from controlscope.cli import main as cli
from controlscope.core import (
    BranchPointEvent,
    Condition,
    Event,
    Keep,
    ModelRequest,
    ModelResponse,
    PrimitiveCallEvent,
    RealizedOperationEvent,
    ReplaceWorkflow,
    RunEndEvent,
    RunStartEvent,
    ToolServerError,
    remaining_seconds,
)
from controlscope.envs.filesystem.environment import FilesystemEnvironment
from controlscope.models import ScriptedModel
from controlscope.record import LogError
from controlscope.record import iter_events as record_iter_events
from controlscope.review import ModelReviewer, Proposal, PublicState, Reviewer
from controlscope.run import _trajectory as trajectory
from controlscope.run._fork import BRANCH_INTERRUPT, ForkPoint, interruptible_branch
from controlscope.worker import WorkerSession
from test_api import SOLVE, script
from test_replay import KEEP, after_point, fenced, first_review_request, record

JUNK = """
write_file(path="/workspace/junk.txt", content="not the task")
"""
REPLACE_JUNK = json.dumps({"reason": "other", "operation": "replace_workflow", "code": JUNK})


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Keep run of a correct program (7 calls; it succeeds)."""
    tmp = tmp_path_factory.mktemp("fork-source")
    return record(tmp, "keep", [fenced(SOLVE), "Done."], [], scope="keep", schedule="never")


def branches(source: Path, out: Path, mechanism: str, **options: object) -> replay.BranchSet:
    settings: dict[str, object] = {
        "at": 2,
        "scopes": ["full", "keep"],
        "planner": ScriptedModel(["Done."] * 5),
        "reviewer": ModelReviewer(ScriptedModel([REPLACE_JUNK] * 5)),
    }
    settings.update(options)
    return replay.branch(source, out=out, mechanism=mechanism, **settings)  # type: ignore[arg-type]


def test_forked_branches_are_what_replayed_branches_are(source: Path, tmp_path: Path) -> None:
    """The same first review request, the same workspace at the boundary and the same
    terminal files as branches that each replay the prefix; the Full branch's replacement
    (which writes a file the task never asks for) does not reach the Keep branch after it."""
    forked = branches(source, tmp_path / "fork", "fork")
    replayed = branches(source, tmp_path / "replay", "replay")
    assert forked.ok and replayed.ok, (forked.divergence, replayed.divergence)
    assert (forked.mechanism, replayed.mechanism) == ("fork", "replay")
    assert forked.request_hash == replayed.request_hash is not None
    for f, r in zip(forked.branches, replayed.branches, strict=True):
        assert (f.scope, f.mechanism, r.mechanism) == (r.scope, "fork", "replay")
        assert (f.state_hash, f.files) == (r.state_hash, r.files)
        assert f.summary is not None and r.summary is not None
        assert f.summary.file_hashes == r.summary.file_hashes
        assert f.summary.primitive_calls == r.summary.primitive_calls
        if f.scope != "keep":  # Keep asks no reviewer
            assert first_review_request(f.run_dir) == first_review_request(r.run_dir)
    full, keep = forked.branches
    assert full.summary is not None and "junk.txt" in full.summary.file_hashes
    recorded = replay.Recording.load(source).final
    assert keep.summary is not None and recorded is not None
    assert keep.summary.file_hashes == recorded.file_hashes and keep.summary.success


def test_a_forked_branch_records_its_prefix_and_its_origin(source: Path, tmp_path: Path) -> None:
    found = branches(source, tmp_path / "b", "auto", scopes=["arg"], draws=2)
    assert found.ok and found.mechanism == "fork" and found.mechanism_note == ""
    assert [b.run_dir.name for b in found.branches] == ["arg-d0", "arg-d1"]
    replayed = branches(source, tmp_path / "r", "replay", scopes=["arg"])
    wanted = [e.type for e in cs.read_events(replayed.branches[0].run_dir)]
    for b in found.branches:
        log = cs.read_events(b.run_dir)
        start = log[0]
        assert isinstance(start, RunStartEvent) and start.branch is not None
        assert (start.branch.mechanism, start.branch.purpose) == ("fork", "branch")
        assert start.branch.prefix_hash == found.prefix_hash
        assert start.scope.name.lower() == "arg" and start.config["draw"] == b.draw
        assert [e.seq for e in log] == list(range(len(log)))
        assert [e.type for e in log] == wanted  # the same events as a replayed branch
        assert sum(isinstance(e, BranchPointEvent) for e in log) == 1
    trunk = cs.read_summary(tmp_path / "b" / "prefix")
    assert trunk.end_reason == "prefix_end" and trunk.complete
    data = json.loads((tmp_path / "b" / replay.BRANCHES_FILE).read_text())
    assert data["mechanism"] == "fork" and {b["mechanism"] for b in data["branches"]} == {"fork"}


class ReplacesFirst:
    """A Python reviewer that keeps state: it replaces the rest of the block at its first
    review and keeps at every later one."""

    def __init__(self) -> None:
        self.reviews = 0

    def propose(self, state: PublicState, condition: Condition) -> Proposal:
        self.reviews += 1
        if self.reviews == 1:
            return Proposal(operation=ReplaceWorkflow(code=JUNK), raw="replace")
        return Proposal(operation=Keep(), raw="keep")


@pytest.mark.parametrize("kind", ["scripted model", "python reviewer"])
def test_both_mechanisms_give_each_branch_the_reviewer_as_it_was_at_the_boundary(
    source: Path, tmp_path: Path, kind: str
) -> None:
    """A reviewer that keeps state (a scripted model's next answer, a Python reviewer's
    count) gives each branch what it gave the first, whether the branches were forked or
    each replayed its prefix: both draws replace, and the branches of both mechanisms are
    equal."""

    def reviewer() -> Reviewer:
        if kind == "python reviewer":
            return ReplacesFirst()
        return ModelReviewer(ScriptedModel([REPLACE_JUNK, *[KEEP] * 5]))

    found = {
        mechanism: branches(
            source, tmp_path / mechanism, mechanism, scopes=["full"], draws=2,
            reviewer=reviewer(),
        )
        for mechanism in ("fork", "replay")
    }  # fmt: skip
    assert [f.mechanism for f in found.values()] == ["fork", "replay"]
    for mechanism, branch_set in found.items():
        assert branch_set.ok, (mechanism, branch_set.divergence)
        for b in branch_set.branches:
            realized = [e.operation.kind for e in after_point(b.run_dir)
                        if isinstance(e, RealizedOperationEvent)]  # fmt: skip
            assert realized == ["replace_workflow"], (mechanism, b.draw)
            assert b.summary is not None and "junk.txt" in b.summary.file_hashes
    forked, replayed = (found[m].branches for m in ("fork", "replay"))
    for f, r in zip(forked, replayed, strict=True):
        assert f.summary is not None and r.summary is not None
        assert f.summary.file_hashes == r.summary.file_hashes
        assert f.summary.primitive_calls == r.summary.primitive_calls


class DiesOnce:
    """A planner whose first answer, in whichever process asks first, kills that process."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker
        self.model_id = "scripted:dies-once"

    def complete(self, request: ModelRequest) -> ModelResponse:
        if not self.marker.exists():
            self.marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return ModelResponse(text="Done.")


@pytest.mark.parametrize("mechanism", ["fork", "replay"])
def test_a_branch_whose_process_dies_is_counted_and_the_next_is_unharmed(
    source: Path, tmp_path: Path, mechanism: str
) -> None:
    """A replayed branch runs in a process of its own too: its death is the branch's, not the
    command's."""
    planner = DiesOnce(tmp_path / "died")
    found = branches(source, tmp_path / "b", mechanism, scopes=["keep", "arg"], planner=planner)
    assert found.mechanism == mechanism
    died, alive = found.branches
    assert died.problem is not None and "signal 9" in died.problem
    assert died.summary is not None and not died.summary.complete  # recorded, not lost
    assert int((tmp_path / "died").read_text()) != os.getpid()  # it died in its own process
    assert alive.problem is None and alive.summary is not None and alive.summary.complete
    assert (alive.state_hash, alive.files) == (died.state_hash, died.files)
    assert found.ok


def test_branches_replay_their_prefix_where_a_fork_cannot_be_used(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(WorkerSession, "forks", property(lambda self: False))
    found = branches(source, tmp_path / "auto", "auto", scopes=["keep"])
    assert found.ok and found.mechanism == "replay"
    assert "forks are not supervised" in found.mechanism_note
    assert found.branches[0].summary is not None and found.branches[0].summary.success
    with pytest.raises(replay.ReplayError, match="cannot be forked"):
        branches(source, tmp_path / "forced", "fork", scopes=["keep"])
    assert not (tmp_path / "forced").exists()  # refused: nothing is left of the attempt
    (tmp_path / "given").mkdir()
    (tmp_path / "given" / "notes.txt").write_text("the user's")
    with pytest.raises(replay.ReplayError, match="cannot be forked"):
        branches(source, tmp_path / "given", "fork", scopes=["keep"])
    assert [p.name for p in (tmp_path / "given").iterdir()] == ["notes.txt"]
    monkeypatch.undo()
    monkeypatch.setattr(FilesystemEnvironment, "state_in_workspace", False)
    found = branches(source, tmp_path / "env", "auto", scopes=["keep"])
    assert found.mechanism == "replay" and "workspace directory" in found.mechanism_note
    assert not (tmp_path / "env" / "prefix").exists()  # nothing ran for the fork
    with pytest.raises(replay.ReplayError, match="workspace directory"):
        branches(source, tmp_path / "env-forced", "fork", scopes=["keep"])
    assert not (tmp_path / "env-forced").exists()


def test_the_cli_says_how_branches_started(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["branch", str(source), "--at", "2", "--scope", "keep"]
    argv += ["--model", script(tmp_path, "Done.")]
    assert cli([*argv, "--out", str(tmp_path / "f")]) == 0
    assert "mechanism: fork" in capsys.readouterr().out
    assert cli([*argv, "--mechanism", "replay", "--out", str(tmp_path / "r")]) == 0
    assert "mechanism: prefix replay" in capsys.readouterr().out
    assert cli([*argv, "--mechanism", "sideways", "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


def test_a_branch_whose_server_does_not_start_ends_recorded_in_its_own_process(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure while a forked process takes over ends that branch, recorded; the process
    never goes on as the trunk (the branch set is built once, here)."""
    trunk = os.getpid()
    start = FilesystemEnvironment.start_server

    def start_in_trunk_only(self: FilesystemEnvironment, workspace: Path) -> object:
        if os.getpid() != trunk:
            raise ToolServerError("no server in a branch")
        return start(self, workspace)

    monkeypatch.setattr(FilesystemEnvironment, "start_server", start_in_trunk_only)
    (tmp_path / "ws").mkdir()
    found = branches(source, tmp_path / "b", "fork", workspace_root=tmp_path / "ws")
    assert found.mechanism == "fork" and len(found.branches) == 2
    for b in found.branches:
        assert b.problem is None and b.summary is not None and b.summary.complete
        assert b.summary.end_reason == "environment_error"
    assert list((tmp_path / "ws").iterdir()) == []  # no workspace or boundary copy is left


class TimedReviewer:
    """A reviewer model that notes, in its process, how much of the run's wall-clock ceiling
    is left when it is first asked; in whichever process asks first it then takes
    ``slow_s`` to answer."""

    def __init__(self, folder: Path, slow_s: float) -> None:
        self.folder, self.slow_s = folder, slow_s
        self.model_id = "scripted:timed"

    def complete(self, request: ModelRequest) -> ModelResponse:
        left = remaining_seconds()
        note = self.folder / f"left-{os.getpid()}"
        if not note.exists():
            note.write_text(f"{time.monotonic()} {left}")
            if len(list(self.folder.glob("left-*"))) == 1:
                time.sleep(self.slow_s)
        return ModelResponse(text=REPLACE_JUNK)


def test_each_forked_branch_has_the_wall_clock_budget_left_at_the_boundary(
    source: Path, tmp_path: Path
) -> None:
    """A branch's wall-clock ceiling is its own, as for a replayed branch: what the trunk had
    left at the boundary, not what is left once the branches before it have run."""
    slow_s = 6.0
    reviewer = ModelReviewer(TimedReviewer(tmp_path, slow_s))
    found = branches(source, tmp_path / "b", "fork", scopes=["full"], draws=2, reviewer=reviewer)
    assert found.ok and found.mechanism == "fork"
    notes = sorted(
        (float(t), float(left))
        for t, left in (p.read_text().split() for p in tmp_path.glob("left-*"))
    )
    assert len(notes) == 2  # one per branch's process
    (first_t, first_left), (second_t, second_left) = notes
    assert second_t - first_t > slow_s  # the second branch ran after the first's slow review
    assert second_left > first_left - slow_s / 2


RUNNING = "/tmp/the-replacement-runs"
"""What the sleeping replacement creates in its worker's ``/tmp`` once it runs."""
SLEEPER = f'open("{RUNNING}", "w").close()\nimport time\ntime.sleep(120)'


def replacement_runs(pid: int) -> bool:
    """Whether a worker below ``pid`` runs the sleeping replacement: its ``/tmp`` (private to
    its sandbox, seen through ``/proc``) holds :data:`RUNNING`."""
    return any(Path(f"/proc/{p}/root{RUNNING}").exists() for p in descendants(pid))


def start_branching(
    source: Path,
    tmp_path: Path,
    sigint: Literal["terminal", "ignored"] = "terminal",
    mechanism: str = "auto",
) -> tuple[subprocess.Popen[str], Path]:
    """``controlscope branch`` (two Full branches whose replacement sleeps), its temporary
    folder ``tmp_path/temp``, started with SIGINT as ``sigint`` says (:func:`sigint_as`), once
    its first branch's replacement runs (its log says it started, its worker says it runs);
    the command's process and its ``--out``."""
    temp = tmp_path / "temp"
    temp.mkdir()
    out = tmp_path / "b"
    argv = [sys.executable, "-m", "controlscope.cli", "branch", str(source), "--at", "2"]
    argv += ["--scope", "full", "--draws", "2", "--out", str(out), "--mechanism", mechanism]
    argv += ["--model", script(tmp_path, "Done."), "--reviewer-model"]
    argv.append(script(tmp_path, json.dumps({**json.loads(REPLACE_JUNK), "code": SLEEPER})))
    with sigint_as(sigint):
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, "TMPDIR": str(temp)},
        )
    log = out / "full-d0" / "events.jsonl"
    deadline = time.monotonic() + 60
    while not (log.exists() and '"replaces":' in log.read_text() and replacement_runs(proc.pid)):
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("the branch's replacement never started")
        time.sleep(0.1)
    return proc, out


@pytest.mark.parametrize("mechanism", ["fork", "replay"])
@pytest.mark.parametrize(
    ("how", "sigint"),
    [
        ("SIGTERM to the command", "terminal"),
        ("SIGTERM to the command", "ignored"),
        ("Ctrl-C to its process group", "terminal"),
    ],
)
def test_an_interrupted_branch_command_records_the_running_branch_and_leaves_nothing(
    source: Path, tmp_path: Path, how: str, sigint: Literal["terminal", "ignored"], mechanism: str
) -> None:
    """Interrupted while a branch runs in its own process (forked at the boundary, or before
    it replays its prefix), the command ends (130), the running branch's log and the trunk's
    end recorded with their summaries, and no process or workspace of it is left (however the
    interrupt reaches it: to the command alone, or to its group; a command started with SIGINT
    ignored, in the background of a script, is interrupted by SIGTERM all the same)."""
    proc, out = start_branching(source, tmp_path, sigint, mechanism)
    try:
        children = {pid: cmdline(pid) for pid in descendants(proc.pid)}
        if how.startswith("SIGTERM"):
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    for run in ("prefix", "full-d0") if mechanism == "fork" else ("full-d0",):
        summary = cs.read_summary(out / run)
        assert summary.complete and summary.end_reason == "interrupted", run
    assert not (out / "full-d1").exists()  # never started
    assert {pid: cmd for pid, cmd in children.items() if alive(pid)} == {}
    assert list((tmp_path / "temp").iterdir()) == []


@pytest.mark.parametrize("mechanism", ["fork", "replay"])
@pytest.mark.parametrize("sigint", ["terminal", "ignored"])
def test_a_branch_whose_trunk_is_killed_records_its_interruption_and_leaves_nothing(
    source: Path, tmp_path: Path, sigint: Literal["terminal", "ignored"], mechanism: str
) -> None:
    """A trunk killed outright (SIGKILL: it records nothing more) takes the branch it is
    running with it: that branch records its end as interrupted (not as a run that went on
    after its worker died), and neither it, its processes nor the boundary's copies outlive
    it (also when SIGINT was ignored, as in the background of a script)."""
    proc, out = start_branching(source, tmp_path, sigint, mechanism)
    try:
        children = {pid: cmdline(pid) for pid in descendants(proc.pid)}
        proc.kill()
        proc.communicate(timeout=60)
        deadline = time.monotonic() + 60
        while any(alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        survivors = {pid: cmd for pid, cmd in children.items() if alive(pid)}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert survivors == {}
    summary = cs.read_summary(out / "full-d0")
    assert summary.complete and summary.end_reason == "interrupted"
    assert list((tmp_path / "temp").iterdir()) == []


@pytest.mark.parametrize("sigint", ["terminal", "ignored"])
def test_a_forked_branch_takes_its_first_interrupt_and_only_that(
    tmp_path: Path, sigint: Literal["terminal", "ignored"]
) -> None:
    """A branch's process is interrupted by its trunk's signal whatever it inherited for
    SIGINT, keeps ignoring a Ctrl-C when it was started ignoring it, and records its end
    whole when its trunk forwards an interrupt it already got (a Ctrl-C to the group)."""
    ended = tmp_path / "ended"
    with sigint_as(sigint):
        pid = os.fork()
        if pid == 0:  # a branch's process, as ForkPoint.fork makes it
            status = 1
            try:
                interruptible_branch()
                os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C: taken unless ignored
                os.kill(os.getpid(), BRANCH_INTERRUPT)  # the trunk's
                time.sleep(30)
            except KeyboardInterrupt as interrupt:
                os.kill(os.getpid(), BRANCH_INTERRUPT)  # forwarded while the end is recorded
                ended.write_text(str(interrupt))
                status = 0
            finally:
                os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    taken = signal.SIGINT if sigint == "terminal" else BRANCH_INTERRUPT
    assert ended.read_text() == f"signal {int(taken)}"


MARKS = """
import os
seen = sorted(p for p in ("/tmp/mark", "/dev/shm/mark", "/tmp/new/mark") if os.path.exists(p))
for path in ("/tmp/mark", "/dev/shm/mark"):
    with open(path, "w") as f:
        f.write("branch")
os.makedirs("/tmp/new", exist_ok=True)
open("/tmp/new/mark", "w").close()
os.remove("/tmp/kept")
write_file(path="/workspace/seen.txt", content=repr(seen))
"""


def written(run_dir: Path) -> list[str]:
    """The contents of a run's ``write_file`` calls, in order."""
    return [
        e.call.arguments["content"]
        for e in cs.read_events(run_dir)
        if isinstance(e, PrimitiveCallEvent) and e.call.tool == "write_file"
    ]


def three_full_branches_each_way(
    source: Path, tmp_path: Path, code: str
) -> Iterator[tuple[str, replay.BranchResult]]:
    """Three Full branches of ``source`` at its second call whose reviewer replaces the rest
    with ``code``, started by fork and then by prefix replay: (mechanism, branch) each."""
    replace = json.dumps({**json.loads(REPLACE_JUNK), "code": code})
    reviewer = ModelReviewer(ScriptedModel([replace] * 5))
    for mechanism in ("fork", "replay"):
        found = branches(
            source, tmp_path / mechanism, mechanism, scopes=["full"], draws=3, reviewer=reviewer
        )
        assert found.ok and found.mechanism == mechanism
        for b in found.branches:
            yield mechanism, b


def test_a_forked_branch_does_not_see_what_an_earlier_branch_left_in_the_worker_tmp(
    tmp_path: Path,
) -> None:
    """The worker's ``/tmp`` and ``/dev/shm`` are part of the state at the boundary: each
    forked branch starts with them as they were there (a file made before the boundary kept,
    nothing an earlier branch wrote), as a branch that replays its prefix does."""
    program = 'open("/tmp/kept", "w").write("prefix")\n' + SOLVE
    source = record(tmp_path, "src", [fenced(program), "Done."], [], scope="keep")
    for mechanism, b in three_full_branches_each_way(source, tmp_path, MARKS):
        assert written(b.run_dir)[-1:] == ["[]"], (mechanism, b.draw)  # and /tmp/kept was there
        assert b.summary is not None and b.summary.end_reason == "final_answer"


def test_a_file_agent_code_holds_open_is_at_its_boundary_position_in_each_branch(
    tmp_path: Path,
) -> None:
    """A file opened before the boundary is at the position it had there in every forked
    branch, as in a replayed one (a fork shares open files' positions with its parent, so an
    earlier branch's reads moved them for the branches after it)."""
    opened = 'f = open("/tmp/data", "w+")\nf.write("abcdef")\nf.seek(2)\n'
    source = record(tmp_path, "src", [fenced(opened + SOLVE), "Done."], [], scope="keep")
    reads = 'write_file(path="/workspace/read.txt", content=f.read())'
    for mechanism, b in three_full_branches_each_way(source, tmp_path, reads):
        assert written(b.run_dir)[-1:] == ["cdef"], (mechanism, b.draw)


def test_an_interrupt_reaching_a_branch_before_its_log_is_its_own_stays_out_of_the_trunks(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C that reaches a forked process before it has switched to its branch's log
    (it still holds the trunk's) is recorded in the branch's log, not appended to the
    trunk's."""
    take_over = ForkPoint.take_over

    def interrupted(self: ForkPoint, *args: Any, **kwargs: Any) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # only a forked process takes over
        take_over(self, *args, **kwargs)

    monkeypatch.setattr(ForkPoint, "take_over", interrupted)
    with sigint_as("terminal"):  # a Ctrl-C interrupts, however this session was started
        found = branches(source, tmp_path / "b", "fork", scopes=["keep", "arg"])
    trunk = cs.read_events(tmp_path / "b" / "prefix")
    assert [e.seq for e in trunk] == list(range(len(trunk)))
    ends = [e for e in trunk if isinstance(e, RunEndEvent)]
    assert [e.end_reason for e in ends] == ["prefix_end"]
    assert cs.read_summary(tmp_path / "b" / "prefix").end_reason == "prefix_end"
    for b in found.branches:
        assert b.summary is not None and b.summary.end_reason == "interrupted", b.scope


def test_a_branch_that_fails_before_its_log_is_its_own_leaves_the_trunks_log_alone(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forked process that fails while it switches to its branch's log (here: reading the
    prefix's events) ends recorded in its own log; nothing of it reaches the trunk's log."""
    trunk_pid = os.getpid()
    real = record_iter_events  # what the trajectory module reads logs with

    def unreadable_in_a_branch(run_dir: Path) -> Iterator[Event]:
        if os.getpid() != trunk_pid:
            raise LogError("the prefix's log cannot be read here")
        return real(run_dir)

    monkeypatch.setattr(trajectory, "iter_events", unreadable_in_a_branch)
    found = branches(source, tmp_path / "b", "fork", scopes=["keep"])
    trunk = cs.read_events(tmp_path / "b" / "prefix")
    assert [e.seq for e in trunk] == list(range(len(trunk)))
    ends = [e for e in trunk if isinstance(e, RunEndEvent)]
    assert [e.end_reason for e in ends] == ["prefix_end"]
    (keep,) = found.branches  # its own log says how it ended
    assert keep.summary is not None and keep.summary.end_reason == "error"
    assert "cannot be read here" in cs.read_events(keep.run_dir)[-1].model_dump_json()
