"""Third-party commands confined to a workspace (``controlscope.envs._confine``): real bubblewrap,
real subprocesses, a real loopback listener. What a verifier or set-up command can reach and how
long and large it may run."""

from __future__ import annotations

import os
import select
import socket
from pathlib import Path

import pytest

from controlscope import _bwrap
from controlscope._cgroup import PREFIX, cap_problem, pids_hierarchy
from controlscope._proc import cmdline, descendants
from controlscope.core import ToolServerError
from controlscope.envs._confine import (
    AGENT_ROOT,
    ETC_FILES,
    SERVER_PROCESSES,
    CommandLimits,
    CommandOutcome,
    confinement_problem,
    executable_paths,
    run_confined,
    start_confined_server,
)

PYTHON = str(_bwrap.base_interpreter())
LIMITS = CommandLimits(timeout_s=20)


def python(
    code: str,
    workspace: Path,
    *,
    limits: CommandLimits = LIMITS,
    writable: bool = False,
    env: dict[str, str] | None = None,
) -> CommandOutcome:
    return run_confined(
        [PYTHON, "-c", code],
        workspace=workspace,
        writable=writable,
        limits=limits,
        ro_paths=executable_paths(PYTHON),
        env=env,
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("hello\n")
    return root


def test_bubblewrap_confines_commands_here() -> None:
    assert confinement_problem() is None


def test_a_verifier_sees_the_workspace_read_only_at_the_agent_root(workspace: Path) -> None:
    code = (
        "import os,sys\n"
        f"print(open('{AGENT_ROOT}/notes.txt').read().strip(), os.environ['W'])\n"
        f"open('{AGENT_ROOT}/new.txt', 'w')\n"
    )
    out = python(code, workspace, env={"W": "{workspace}"})
    assert out.status == 1 and out.confined
    assert out.output.startswith(f"hello {AGENT_ROOT}\n")
    assert "Read-only file system" in out.output
    assert sorted(p.name for p in workspace.iterdir()) == ["notes.txt"]


def test_nothing_outside_tmp_and_the_workspace_is_writable(workspace: Path) -> None:
    """bwrap's root is a tmpfs as large as half the host's memory: read-only, so a command
    cannot hoard memory in files beside its bounded ``/tmp`` (nor in the folders bwrap made
    for its mounts)."""
    made = Path(executable_paths(PYTHON)[0]).parent  # a folder bwrap made to mount below
    code = (
        "import sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print('wrote', path)\n"
        "    except OSError as err:\n"
        "        print(err.errno, path)\n"
    )
    paths = ["/hoard", f"{made}/hoard", "/tmp/ok", f"{AGENT_ROOT}/ok"]
    for writable in (False, True):
        out = run_confined(
            [PYTHON, "-c", code, *paths],
            workspace=workspace,
            writable=writable,
            limits=LIMITS,
            ro_paths=executable_paths(PYTHON),
        )
        assert out.output.splitlines() == [
            "30 /hoard",
            f"30 {made}/hoard",
            "wrote /tmp/ok",
            f"wrote {AGENT_ROOT}/ok" if writable else f"30 {AGENT_ROOT}/ok",
        ]


def test_a_command_sees_only_the_system_files_it_needs_not_the_hosts_secrets(
    workspace: Path,
) -> None:
    """``/etc`` holds password hashes, host keys and private keys; a confined command sees only
    the files processes need (the loader's, name service, time zone, certificates)."""
    assert Path("/etc/shadow").is_file() and Path("/etc/passwd").is_file()  # on the host
    code = (
        "import os\n"
        "for path in ('/etc/shadow', '/etc/gshadow', '/etc/ssl/private', '/etc/ssh'):\n"
        "    print(path, os.path.exists(path))\n"
        "print('passwd', open('/etc/passwd').read().startswith('root:'))\n"
        "print('visible', sorted(os.listdir('/etc')))\n"
    )
    for writable in (False, True):
        out = python(code, workspace, writable=writable)
        assert out.ok, out.output
        lines = out.output.splitlines()
        assert lines[:5] == [
            "/etc/shadow False",
            "/etc/gshadow False",
            "/etc/ssl/private False",
            "/etc/ssh False",
            "passwd True",
        ]
        visible = set(lines[5].removeprefix("visible ").strip("[]").replace("'", "").split(", "))
        assert "passwd" in visible and visible <= {*ETC_FILES, "ssl", "pki"}


def test_a_set_up_command_may_write_the_workspace(workspace: Path) -> None:
    out = python(f"open('{AGENT_ROOT}/new.txt', 'w').write('x')", workspace, writable=True)
    assert out.ok and (workspace / "new.txt").read_text() == "x"


def test_a_command_reaches_no_network_not_even_this_machines_loopback(workspace: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        f"for host, port in (('127.0.0.1', {port}), ('1.1.1.1', 53)):\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=3)\n"
        "        print('reached', host)\n"
        "    except OSError as err:\n"
        "        print('no', host, err)\n"
    )
    out = python(code, workspace)
    # A connection made would wait in the listener's backlog, accepted or not.
    pending, _, _ = select.select([listener], [], [], 0)
    listener.close()
    assert out.ok, out.output
    assert "reached" not in out.output and pending == []
    assert "Network is unreachable" in out.output  # no interface but its own loopback


def test_a_command_that_hangs_is_killed_with_everything_it_started(workspace: Path) -> None:
    code = (
        "import subprocess, time\n"
        "subprocess.Popen(['sleep', '777'])\n"
        "print('waiting', flush=True)\n"
        "time.sleep(600)\n"
    )
    out = python(code, workspace, limits=CommandLimits(timeout_s=2))
    assert out.timed_out and out.status is None and out.output == "waiting\n"
    assert "did not finish within 2 s" in out.describe(CommandLimits(timeout_s=2))
    left = [pid for pid in descendants(os.getpid()) if "sleep 777" in cmdline(pid)]
    assert left == []


FORK = (
    "import os, sys, time\n"
    "made = 0\n"
    "try:\n"
    "    for _ in range(int(sys.argv[1])):\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(60)\n"
    "            os._exit(0)\n"
    "        made += 1\n"
    "except OSError as err:\n"
    "    print(err.strerror, file=sys.stderr)\n"
    "print('forked', made, file=sys.stderr, flush=True)\n"
)


def test_a_command_or_server_that_forks_without_end_is_capped(workspace: Path) -> None:
    """``RLIMIT_NPROC`` does not bind root; a pids cgroup binds anyone. A fork bomb stops at
    the cap instead of taking every process id of the machine."""
    assert cap_problem() is None
    hierarchy = pids_hierarchy()
    assert hierarchy is not None
    limits = CommandLimits(timeout_s=20, processes=32)
    out = run_confined(
        [PYTHON, "-c", FORK, "200"],
        workspace=workspace,
        writable=False,
        limits=limits,
        ro_paths=executable_paths(PYTHON),
    )
    made = int(out.output.split("forked ")[1].split()[0])
    assert out.ok and "Resource temporarily unavailable" in out.output
    assert 20 <= made < 32  # bwrap and the command's own processes count too
    with pytest.raises(ToolServerError) as failed:
        start_confined_server(
            PYTHON, ["-c", FORK, "2000"], workspace, ro_paths=executable_paths(PYTHON)
        )
    made = int(str(failed.value).split("forked ")[1].split()[0])
    assert SERVER_PROCESSES - 16 <= made < SERVER_PROCESSES
    assert not list(hierarchy.glob(f"{PREFIX}{os.getpid()}-*"))  # every cgroup removed
    assert [pid for pid in descendants(os.getpid()) if "forked" in cmdline(pid)] == []


def test_memory_output_and_environment_are_bounded(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limits = CommandLimits(timeout_s=20, memory_mb=256, output_mb=1)
    big = python("x = bytearray(1024 ** 3)", workspace, limits=limits)
    assert big.status == 1 and "MemoryError" in big.output
    endless = "import sys\nwhile True: sys.stdout.write('y' * 65536)"
    flood = python(endless, workspace, limits=limits)
    assert not flood.ok and flood.output_full
    assert len(flood.output) < 20_000 and "bytes cut" in flood.output
    assert "1 MiB limit" in flood.describe(limits)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-of-the-controller")
    env = python("import os; print(sorted(os.environ.items()))", workspace)
    assert env.ok and "sk-secret" not in env.output and "'HOME', '/tmp'" in env.output


def test_the_variables_a_command_is_given_reach_it_inside_the_sandbox_only(
    workspace: Path, tmp_path: Path
) -> None:
    """A variable given to a command (a task spec's ``env``) never reaches bwrap, which runs on
    the host unconfined: a ``LD_PRELOAD`` there would load host code outside the sandbox. The
    library here is no ELF file: bwrap's loader would say so (``invalid ELF header``); the
    confined command's loader does not see the host's ``/tmp`` at all."""
    library = tmp_path / "preload.so"
    library.write_bytes(b"not a library\n" * 100)
    env = {"LD_PRELOAD": str(library), "GREETING": "hi {workspace}"}
    out = python("import os; print(os.environ['GREETING'])", workspace, env=env)
    assert out.ok and f"hi {AGENT_ROOT}" in out.output
    assert "cannot open shared object file" in out.output  # the command's own loader
    assert "invalid ELF header" not in out.output  # bwrap's loader: never given it
    server = "import os, sys; sys.stderr.write('env ' + os.environ['GREETING'] + chr(10))"
    with pytest.raises(ToolServerError) as failed:
        start_confined_server(
            PYTHON, ["-c", server], workspace, ro_paths=executable_paths(PYTHON), env=env
        )
    assert f"env hi {AGENT_ROOT}" in str(failed.value)
    # Its messages name the command as it runs inside (agent code sees them in a call's error):
    # never bwrap's options nor the host's workspace, which differs between branches.
    assert str(failed.value).startswith(f"{Path(PYTHON).name} -c import os")
    assert str(workspace) not in str(failed.value) and "--unshare-all" not in str(failed.value)
    assert "cannot open shared object file" in str(failed.value)
    assert "invalid ELF header" not in str(failed.value)


def test_a_command_killed_by_a_signal_is_described_by_it(workspace: Path) -> None:
    """Under bubblewrap a command killed by a signal ends bwrap with 128 + its number; the
    reason names the signal and its usual cause, as it does without bubblewrap."""
    crash = python("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", workspace)
    assert crash.describe(LIMITS) == (
        "exit 139: killed by SIGSEGV, a crash (perhaps its 1024 MiB memory limit)"
    )
    killed = python("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", workspace)
    assert killed.describe(LIMITS) == "exit 137: killed by SIGKILL, killed"
    plain = python("raise SystemExit(3)", workspace)
    assert plain.describe(LIMITS) == "exit 3"


@pytest.mark.parametrize(
    "limit", [{"timeout_s": 1e300}, {"memory_mb": 10**15}, {"output_mb": 10**15}, {"tmp_mb": 0}]
)
def test_limits_the_kernel_cannot_take_are_refused(limit: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(limit))):
        CommandLimits(**limit)


def test_a_command_that_cannot_start_says_why(workspace: Path) -> None:
    out = run_confined(
        [str(workspace / "missing")], workspace=workspace, writable=False, limits=LIMITS
    )
    assert not out.ok and out.status not in (0, None)
    assert "missing" in out.output  # bwrap's own words: it cannot exec the command
