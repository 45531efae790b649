"""The session's zombie check (``conftest.py``) on a small session of its own: a module that
leaves a child it started un-waited fails, naming the module and the child's command line; an
orphan handed to the session (the subreaper) is reaped and fails nothing; a child of the
session is never reaped by the check (its exit status is its owner's)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent

ZOMBIES = """
import os
from pathlib import Path


def zombie_children() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.append(int(entry.name))
    return found


def wait_for_zombie(pid: int) -> None:
    import time
    deadline = time.monotonic() + 30
    while pid not in zombie_children():
        assert time.monotonic() < deadline, pid
        time.sleep(0.02)
"""

LEAKY = """
import subprocess
from zombies import wait_for_zombie

KEPT = []


def test_starts_a_child_and_never_waits() -> None:
    KEPT.append(subprocess.Popen(["true", "left-unwaited"]))
    wait_for_zombie(KEPT[0].pid)
"""

ORPHANING = """
import subprocess
import sys
from zombies import wait_for_zombie


def test_a_child_dies_before_its_own_child() -> None:
    code = "import subprocess; print(subprocess.Popen(['sleep', '0.3']).pid)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    wait_for_zombie(int(done.stdout))  # handed to the session, then ended
"""

AFTER = """
from test_a_leaky import KEPT
from zombies import zombie_children


def test_the_orphan_was_reaped_and_the_own_child_was_not() -> None:
    assert zombie_children() == [KEPT[0].pid]
"""


def test_the_zombie_check_fails_a_module_that_leaves_a_child_unwaited(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    files = {"zombies": ZOMBIES, "test_a_leaky": LEAKY, "test_b_orphaning": ORPHANING}
    files["test_c_after"] = AFTER
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    path = os.pathsep.join([str(tmp_path), str(TESTS), *sys.path])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
        check=False,
    )
    out = done.stdout
    assert "3 passed, 1 error" in out, out
    assert "ERROR at teardown of test_starts_a_child_and_never_waits" in out, out
    assert "test_a_leaky.py left children it never waited for" in out, out
    assert "true left-unwaited" in out, out
    # the others pass: one module reported, once (the summary may repeat the message)
    assert out.count("ERROR at teardown") == 1, out
    assert "test_b_orphaning.py left children" not in out, out
    assert "test_c_after.py left children" not in out, out
