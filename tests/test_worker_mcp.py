"""WorkerSession against the real npm MCP filesystem server on a temporary workspace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controlscope.core import (
    BlockResult,
    Boundary,
    Keep,
    PatchArguments,
    PatchBlockData,
    PrimitiveCall,
    ReplaceWorkflow,
)
from controlscope.core import Operation as Decision
from controlscope.envs._mcp import McpToolServer
from controlscope.envs.filesystem.server import start_filesystem_server
from controlscope.worker import Limits, WorkerSession


class Recorder:
    """A BoundaryHandler that records everything and decides with ``decide``."""

    def __init__(self, decide: object = None) -> None:
        self.decide = decide if callable(decide) else (lambda b: Keep())
        self.boundaries: list[Boundary] = []
        self.calls: list[PrimitiveCall] = []
        self.ends: list[BlockResult] = []

    def on_block_start(self, block_id: str, code: str, replaces: str | None) -> None:
        pass

    def on_boundary(self, boundary: Boundary) -> Decision:
        self.boundaries.append(boundary)
        decision: Decision = self.decide(boundary)
        return decision

    def on_call(self, call: PrimitiveCall) -> None:
        self.calls.append(call)

    def on_block_end(self, result: BlockResult) -> None:
        self.ends.append(result)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "notes").mkdir(parents=True)
    for i in range(1, 6):
        (ws / "notes" / f"n{i}.txt").write_text(f"note {i}\n")
    (ws / "secret.txt").write_text("host-only-secret\n")
    return ws


@pytest.fixture
def server(workspace: Path) -> Iterator[McpToolServer]:
    srv = start_filesystem_server(workspace, timeout_s=30)
    yield srv
    srv.close()


@pytest.fixture
def session(server: McpToolServer) -> Iterator[WorkerSession]:
    with WorkerSession(server, Limits(block_exec_s=20)) as s:
        yield s


FIVE_READS = (
    "texts = []\n"
    "for i in range(1, 6):\n"
    "    texts.append(read_text_file(path=f'notes/n{i}.txt').strip())\n"
    "print(texts)\n"
)


def test_five_calls_run_to_the_end_under_keep(session: WorkerSession) -> None:
    rec = Recorder()
    (result,) = session.run_reply([("b1", FIVE_READS)], rec)
    assert session.isolation == "bwrap"
    assert result.status == "completed", result.error
    assert result.calls == 5 and session.calls_made == 5
    assert result.output == "['note 1', 'note 2', 'note 3', 'note 4', 'note 5']\n"
    assert [c.result.text.strip() for c in rec.calls] == [f"note {i}" for i in range(1, 6)]
    assert rec.boundaries[4].module_vars["texts"] == ["note 1", "note 2", "note 3", "note 4"]


def test_patch_at_third_call_changes_what_is_read(session: WorkerSession) -> None:
    def decide(b: Boundary) -> Decision:
        if b.block_call_index == 2:
            assert b.arguments == {"path": "notes/n3.txt"}
            return PatchArguments(arguments={"path": "secret.txt"})
        return Keep()

    rec = Recorder(decide)
    (result,) = session.run_reply([("b1", FIVE_READS)], rec)
    assert result.status == "completed"
    assert "'note 1', 'note 2', 'host-only-secret', 'note 4'" in result.output
    assert rec.calls[2].arguments == {"path": "secret.txt"}


def test_replacement_at_second_call_uses_old_variables_and_cancels_queue(
    session: WorkerSession, workspace: Path
) -> None:
    code = (
        "first = read_text_file('notes/n1.txt').strip()\n"
        "second = read_text_file('notes/n2.txt')\n"
        "write_file('old.txt', 'old path')\n"
    )
    replacement = "write_file('new.txt', first + ' via replacement')\nprint('wrote', first)\n"

    def decide(b: Boundary) -> Decision:
        if b.block_id == "b1" and b.block_call_index == 1:
            return ReplaceWorkflow(code=replacement)
        return Keep()

    rec = Recorder(decide)
    results = session.run_reply([("b1", code), ("b2", "write_file('queued.txt', 'queued')\n")], rec)
    assert [(r.block_id, r.status) for r in results] == [
        ("b1", "cancelled"),
        ("b2", "cancelled"),
        ("b1.r1", "completed"),
    ]
    assert results[0].replaced_by == "b1.r1" and results[1].replaced_by == "b1.r1"
    assert results[2].output == "wrote note 1\n"
    assert (workspace / "new.txt").read_text() == "note 1 via replacement"
    assert not (workspace / "old.txt").exists() and not (workspace / "queued.txt").exists()
    assert [c.tool for c in rec.calls] == ["read_text_file", "write_file"]


def test_patch_block_data_rewrites_later_literals(session: WorkerSession, workspace: Path) -> None:
    code = (
        "a = read_text_file('notes/n1.txt')\n"
        "write_file('out.txt', a.upper())\n"
        "print(read_text_file('out.txt'))\n"
    )
    new = code.replace("notes/n1.txt", "notes/n4.txt").replace("'out.txt'", "'patched.txt'")

    def decide(b: Boundary) -> Decision:
        return PatchBlockData(code=new) if b.block_call_index == 0 else Keep()

    (result,) = session.run_reply([("b1", code)], Recorder(decide))
    assert result.status == "completed", result.error
    assert result.output == "NOTE 4\n\n"
    assert (workspace / "patched.txt").read_text() == "NOTE 4\n"
    assert not (workspace / "out.txt").exists()


def test_tool_error_from_the_real_server(session: WorkerSession) -> None:
    code = (
        "try:\n    read_text_file('/etc/passwd')\nexcept ToolError as e:\n    print('denied:', e)\n"
    )
    (result,) = session.run_reply([("b1", code)], Recorder())
    assert result.status == "completed"
    assert result.output.startswith("denied:") and "root:" not in result.output


def test_budgets_with_the_real_server(server: McpToolServer) -> None:
    with WorkerSession(server, Limits(primitive_calls=2, block_exec_s=1.0)) as session:
        results = session.run_reply(
            [("b1", FIVE_READS), ("b2", "while True:\n    pass\n"), ("b3", "print('up')")],
            Recorder(),
        )
    assert [r.status for r in results] == ["budget_exhausted", "timeout", "completed"]
    assert results[0].calls == 2 and "BudgetExhausted" in (results[0].error or "")
    assert results[2].fresh_worker


def test_agent_code_cannot_see_the_workspace(session: WorkerSession, workspace: Path) -> None:
    code = (
        "import os\n"
        f"ws = {str(workspace)!r}\n"
        "print(os.path.exists(ws), os.path.exists(ws + '/secret.txt'))\n"
        "try:\n"
        "    open(ws + '/secret.txt').read()\n"
        "except OSError as e:\n"
        "    print('blocked', type(e).__name__)\n"
        "print(sorted(os.listdir('/')))\n"
    )
    (result,) = session.run_reply([("b1", code)], Recorder())
    assert result.status == "completed", result.error
    lines = result.output.splitlines()
    assert lines[0] == "False False"
    assert lines[1] == "blocked FileNotFoundError"
    assert "work" not in lines[2] and "home" not in lines[2]
    assert "host-only-secret" not in result.output
