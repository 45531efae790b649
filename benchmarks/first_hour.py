"""Benchmark of a new user's first hour (README, "Set-up and the two commands", "A served model
on a CPU" and "Installing from a wheel").

Measures, in one run on this machine:

- ``served_cpu_first_answer_s``: ``controlscope run`` of the demo's task (the student-database
  task "English-talent selection", 25 students, seed 0) with ``--model openai:qwen`` against
  ``llama_cpp.server`` on loopback, serving the cached Qwen2.5-Coder-1.5B-Instruct weights with
  2 threads, started as the README says; seconds from starting the command until its log holds
  the first ``block_start`` (the planner's first answer read and its program started; null
  when the call failed, e.g. past its deadline: ``served_run_detail`` says how, with the tokens
  received). One
  planning turn (``--max-turns 1``) and no reviews, so the planner's request is the only one;
- ``served_curl_answer_s``: the same request (the body the client sends, read back from the
  run's log) sent once directly with ``urllib`` to a freshly started server (no prompt prefix
  left from the run), streamed like the client's, until the answer ends. Target:
  ``served_cpu_first_answer_s`` within 1.2x of it;
- ``served_abandoned_attempts``: attempts the server was still computing after the run ended:
  the server's CPU time is sampled for 5 s after the command returned (busy: over 5% of a
  core); a busy server counts the run's failed planner calls (at least 1), an idle one 0.
  Target: 0;
- ``pip_run_ok``: a wheel built from this tree (``pip wheel --no-deps``)
  installed into a fresh virtual environment in a temporary folder as the README says
  (``pip install 'controlscope[local]'``, here the wheel's path), then ``controlscope setup``,
  then ``controlscope run`` of a scripted task (``scripted:FILE``) to a verdict (exit 0, a
  ``summary.json`` with ``success`` true).

Also printed: the planner's prompt and answer tokens, the server's command, the load average
before and after. CPU-heavy (a 1.5B model on 2 threads, twice; a wheel install): run it alone.
``--skip-served`` or ``--skip-pip`` leaves a part out (its numbers are then null);
``--request-timeout-s`` sets the run's deadline (default 1,800 s; a short one cuts the planner's
call, to see whether the server goes on computing it).

The last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TASK = ["--task", "student_database/english_talent", "--students", "25", "--seed", "0"]
THREADS = 2
N_CTX = 8192
MAX_TOKENS = 1024
REQUEST_TIMEOUT_S = 1800
SOLVE = """
root = "/workspace"
text = read_text_file(path=root + "/large_file.txt")
lines = text.splitlines()
per = len(lines) // 5
create_directory(path=root + "/split")
for i in range(5):
    chunk = lines[i * per:(i + 1) * per]
    write_file(path=f"{root}/split/part_{i + 1:02d}.txt", content="\\n".join(chunk) + "\\n")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(weights: Path, port: int) -> list[str]:
    """The README's ``llama_cpp.server`` command for 2 cores."""
    return [
        sys.executable, "-m", "llama_cpp.server", "--model", str(weights),
        "--model_alias", "qwen", "--n_threads", str(THREADS), "--n_threads_batch", str(THREADS),
        "--n_ctx", str(N_CTX), "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip


@contextmanager
def served(weights: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A fresh ``llama_cpp.server`` on loopback; its base URL and process."""
    port = free_port()
    log = tempfile.TemporaryFile()  # noqa: SIM115
    proc = subprocess.Popen(server_command(weights, port), stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(url + "/models", timeout=5):
                    break
            except OSError as err:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    tail = log.read()[-2000:]
                    raise RuntimeError(f"the server did not start: {tail!r}") from err
                time.sleep(0.5)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def cpu_seconds(pid: int) -> float:
    """A process's user and system CPU time (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busy(pid: int, window_s: float = 5.0) -> bool:
    """Whether the process used more than 5% of a core over ``window_s`` (an idle server uses
    none; one computing on a loaded machine may get a small share of a core)."""
    before = cpu_seconds(pid)
    time.sleep(window_s)
    return cpu_seconds(pid) - before > 0.05 * window_s


def events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line being written
    return out


def served_run(weights: Path, tmp: Path) -> dict[str, Any]:
    """``controlscope run`` against a fresh server until the block starts, then the same
    request sent directly to another fresh server."""
    out = tmp / "served-run"
    with served(weights) as (url, server):
        argv = [sys.executable, "-m", "controlscope.cli", "run", *TASK, "--model", "openai:qwen"]
        argv += ["--base-url", url, "--max-tokens", str(MAX_TOKENS), "--schedule", "never"]
        argv += ["--request-timeout-s", f"{REQUEST_TIMEOUT_S:g}", "--max-turns", "1", "--quiet"]
        argv += ["--out", str(out)]
        env = {**os.environ, "OPENAI_API_KEY": "none", "PYTHONPATH": str(ROOT / "src")}
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        first_answer = None
        while proc.poll() is None:
            if first_answer is None and any(e["type"] == "block_start" for e in events(out)):
                first_answer = time.monotonic() - started
            time.sleep(0.2)
        if first_answer is None and any(e["type"] == "block_start" for e in events(out)):
            first_answer = time.monotonic() - started  # the block started in the last poll
        stdout, stderr = proc.communicate()
        failed = [
            e for e in events(out) if e["type"] == "model_call" and e.get("error") is not None
        ]
        abandoned = max(1, len(failed)) if busy(server.pid) else 0
    calls = [e for e in events(out) if e["type"] == "model_call" and e["role"] == "planner"]
    answer = (calls[0].get("response") or {}) if calls else {}
    usage = answer.get("usage") or {}
    result = {
        "served_cpu_first_answer_s": round(first_answer, 1) if first_answer else None,
        "served_run_exit": proc.returncode,
        "served_run_end": (json.loads((out / "summary.json").read_text()) or {}).get("end_reason")
        if (out / "summary.json").exists()
        else None,
        "served_run_detail": next(
            (e.get("detail") for e in events(out) if e["type"] == "run_end"), None
        ),
        "served_abandoned_attempts": abandoned,
        "planner_prompt_tokens": usage.get("input_tokens"),
        "planner_answer_tokens": usage.get("output_tokens"),
        "planner_latency_s": answer.get("latency_s"),
        "served_run_stderr": stderr.decode("utf-8", "replace")[-500:],
        "server_command": " ".join(server_command(weights, 0)[1:]),
    }
    del stdout
    print(json.dumps(result), file=sys.stderr, flush=True)  # the run's part, before the next
    if calls:
        result["served_curl_answer_s"] = direct(weights, calls[0]["request"])
    return result


def direct(weights: Path, recorded: dict[str, Any]) -> float | None:
    """Seconds for the recorded planner request sent once, streamed, to a fresh server (None:
    no whole answer within the run's deadline, :data:`REQUEST_TIMEOUT_S`)."""
    from controlscope.core import ModelRequest
    from controlscope.models._openai import request_to_openai
    from controlscope.models._streamed import STREAM_FIELDS

    body = {"model": "qwen", **request_to_openai(ModelRequest.model_validate(recorded))}
    body.update(STREAM_FIELDS)
    data = json.dumps(body).encode()
    with served(weights) as (url, _):
        request = urllib.request.Request(
            url + "/chat/completions", data=data, headers={"Content-Type": "application/json"}
        )
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                while response.readline():
                    if time.monotonic() - started > REQUEST_TIMEOUT_S:
                        return None
        except TimeoutError:
            return None
        return round(time.monotonic() - started, 1)


def pip_run(tmp: Path) -> dict[str, Any]:
    """A wheel of this tree in a fresh virtual environment, the README's pip set-up, and a
    scripted task run to a verdict."""
    wheels, venv = tmp / "wheels", tmp / "venv"
    started = time.monotonic()
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps"]
    subprocess.run([*build, "-w", str(wheels), str(ROOT)], check=True, capture_output=True)
    wheel = next(wheels.glob("controlscope-*.whl"))
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = venv / "bin"
    home = tmp / "home"  # the user's controlscope directory: nothing from this machine's
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update({"CONTROLSCOPE_HOME": str(home), "PATH": f"{bin_dir}:{env.get('PATH', '')}"})
    steps = [
        [str(bin_dir / "pip"), "install", "-q", f"controlscope[local] @ {wheel.as_uri()}"],
        [str(bin_dir / "controlscope"), "setup"],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, env=env, cwd=tmp)
        if done.returncode != 0:
            return {"pip_run_ok": False, "pip_failed_step": step[1:], "pip_err": done.stderr[-800:]}
    installed_s = time.monotonic() - started
    answers = tmp / "planner.json"
    answers.write_text(json.dumps([f"```python\n{SOLVE}\n```", "Done."]))
    run = [str(bin_dir / "controlscope"), "run", "--task", "file_context/file_splitting"]
    run += ["--model", f"scripted:{answers}", "--schedule", "never", "--out", str(tmp / "r")]
    done = subprocess.run(run, capture_output=True, text=True, env=env, cwd=tmp, timeout=600)
    summary = tmp / "r" / "summary.json"
    verdict = json.loads(summary.read_text()).get("success") if summary.exists() else None
    return {
        "pip_run_ok": done.returncode == 0 and verdict is True,
        "pip_install_and_setup_s": round(installed_s, 1),
        "pip_run_exit": done.returncode,
        "pip_run_out": done.stdout.strip().splitlines()[:1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-served", action="store_true")
    parser.add_argument("--skip-pip", action="store_true")
    parser.add_argument(
        "--request-timeout-s",
        type=float,
        default=REQUEST_TIMEOUT_S,
        help="the run's per-call deadline (a short one checks that a cut attempt is abandoned)",
    )
    args = parser.parse_args()
    globals()["REQUEST_TIMEOUT_S"] = args.request_timeout_s
    sys.path.insert(0, str(ROOT / "src"))
    from controlscope.models import ensure_weights

    result: dict[str, Any] = {
        "served_cpu_first_answer_s": None,
        "served_curl_answer_s": None,
        "served_abandoned_attempts": None,
        "pip_run_ok": None,
        "loadavg_before": os.getloadavg()[0],
    }
    with tempfile.TemporaryDirectory(prefix="first-hour-") as folder:
        tmp = Path(folder)
        if not args.skip_served:
            result.update(served_run(ensure_weights("1.5b"), tmp))
            first, curl = result["served_cpu_first_answer_s"], result["served_curl_answer_s"]
            if first and curl:
                result["served_ratio_vs_curl"] = round(first / curl, 2)
        if not args.skip_pip:
            result.update(pip_run(tmp))
        shutil.rmtree(tmp / "venv", ignore_errors=True)
    result["loadavg_after"] = os.getloadavg()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
