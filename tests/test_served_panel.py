"""Panels against a served model (paper 3.2, 4), on real parts: a loopback OpenAI-compatible
endpoint holding every request for a latency (``fixtures/served_endpoint.py``), the npm
filesystem server, the isolated worker and the panel's real processes.

The endpoint's planner answers a ten-call program, then ``Done.``; every review keeps. The
panel's runs wait on the endpoint, so how many requests it holds at once is bounded by
``[planner] max_connections``, not by the machine's cores.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import controlscope as cs
from _process_support import sigint_as
from controlscope import panel as cp
from controlscope._proc import alive, cmdline, descendants
from controlscope.cli import main as cli
from controlscope.models import EndpointGate, GateStats
from fixtures.served_endpoint import ServedEndpoint

TASKS = [
    "file_context/uppercase",
    "file_context/file_merging",
    "desktop/music_report",
    "papers/find_math_paper",
]


@pytest.fixture
def endpoint() -> Iterator[ServedEndpoint]:
    served = ServedEndpoint(latency_s=1.0)
    yield served
    served.close()


def config(endpoint: ServedEndpoint, tasks: list[str], **planner: Any) -> dict[str, Any]:
    return {
        "env": "filesystem",
        "tasks": tasks,
        "seeds": [0],
        "scopes": ["keep", "arg", "full"],
        "planner": {"model": "openai:served", "base_url": endpoint.base_url, **planner},
    }


def test_a_served_panel_keeps_more_requests_in_flight_than_cores_never_more_than_allowed(
    endpoint: ServedEndpoint, tmp_path: Path
) -> None:
    result = cp.run_panel(
        cp.parse_config(config(endpoint, TASKS, max_connections=4)), tmp_path / "panel"
    )
    assert result.complete and len(result.records) == 12
    assert all(r.status == "done" for r in result.records.values())
    assert 2 < endpoint.peak <= 4, endpoint.peak
    counted = result.status.endpoint
    assert counted is not None and counted.requests == endpoint.requests
    assert 2 < counted.peak <= 4 and counted.inflight == 0
    assert counted.busy_s >= endpoint.requests * 1.0 * 0.9  # each held about a second


def write_toml(path: Path, data: dict[str, Any]) -> Path:
    planner = data.pop("planner")
    lines = [f"{key} = {json.dumps(value)}" for key, value in data.items()]
    lines += ["[planner]", *(f"{key} = {json.dumps(value)}" for key, value in planner.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_interrupted_served_panel_ends_every_run_recorded_and_leaves_no_process(
    endpoint: ServedEndpoint, tmp_path: Path
) -> None:
    """Ctrl-C while runs wait on the endpoint on threads of the panel's processes: each run
    ends recorded as interrupted (not finished: it runs again on resumption), the command
    exits 130 and no process of it is left."""
    path = write_toml(tmp_path / "panel.toml", config(endpoint, TASKS, max_connections=4))
    folder = tmp_path / "panel"
    with sigint_as("terminal"):  # Ctrl-C reaches it however this session was started
        proc = subprocess.Popen(
            [sys.executable, "-m", "controlscope.cli", "panel", str(path), "--out", str(folder),
             "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while endpoint.inflight < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert endpoint.inflight >= 2, "no two runs ever waited on the endpoint at once"
        below = descendants(proc.pid)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in below) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {pid: cmdline(pid) for pid in below if alive(pid)}
    assert not left, f"processes outlived their panel: {left}"
    logs = list((folder / cp.RUNS_DIR).rglob("events.jsonl"))
    assert len(logs) >= 2
    for log in logs:
        summary = cs.read_summary(log.parent)
        if not (log.parent / cp.RUN_MARKER).exists():
            assert summary.end_reason == "interrupted", log


def test_a_rate_limit_pauses_every_run_and_the_panel_reports_the_wait(
    endpoint: ServedEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint.rate_limit(1, 3.0)
    path = write_toml(tmp_path / "panel.toml", config(endpoint, TASKS[:3], max_connections=4))
    out = ["--out", str(tmp_path / "panel"), "--quiet"]
    assert cli(["panel", str(path), *out, "--max-connections", "3"]) == 0
    assert endpoint.peak <= 3  # the option, over the file's 4
    limited = [at for at, status in endpoint.arrivals if status == 429]
    assert len(limited) == 1
    paused = [at for at, _ in endpoint.arrivals if limited[0] + 0.5 < at < limited[0] + 2.8]
    assert paused == []  # no run sent a request while the endpoint asked for a pause
    assert any(at >= limited[0] + 2.8 for at, _ in endpoint.arrivals)
    printed = capsys.readouterr().out
    assert "waited 3.0 s on rate limits (1 rate-limit answer)" in printed
    # the wait is kept in the panel folder: the report of the finished panel says it
    assert cli(["report", str(tmp_path / "panel"), "--resamples", "100"]) == 0
    printed = capsys.readouterr().out
    line = next(x for x in printed.splitlines() if x.startswith("endpoint: "))
    assert line.endswith("waited 3.0 s on rate limits (1 rate-limit answer)"), line
    assert line.startswith(f"endpoint: {endpoint.requests} requests, at most ")
    document = (tmp_path / "panel" / "report" / "report.md").read_text()
    assert "waited 3.0 s on rate limits (1 rate-limit answer)" in document
    saved = json.loads((tmp_path / "panel" / "report" / "report.json").read_text())["endpoint"]
    assert saved["rate_limits"] == 1 and 2.9 <= saved["rate_limited_s"] <= 3.0
    assert saved["requests"] == endpoint.requests and len(saved["sessions"]) == 1


def test_the_endpoints_counts_add_up_over_panel_commands_and_survive_a_bad_file(
    tmp_path: Path,
) -> None:
    """Each panel command adds its session to ``endpoint.json``; the report sums them. An
    unreadable file is a problem line in the report, and the next command keeps it aside."""
    from controlscope.panel.testing import SyntheticRun, write_synthetic_panel

    folder = tmp_path / "panel"
    write_synthetic_panel(
        folder, [SyntheticRun(unit="u", category="c", scope="keep", success=True)]
    )
    for limits, waited in ((1, 2.0), (2, 4.5)):
        cp.EndpointRecorder(folder, 8).update(
            GateStats(peak=5, requests=40, busy_s=30.0, rate_limited_s=waited, rate_limits=limits)
        )
    built = cs.report(folder, write=False)
    assert [s.rate_limits for s in built.endpoint] == [1, 2]
    assert built.endpoint_line == (
        "endpoint: 80 requests over 2 panel commands, at most 5 in flight, 60 s waiting on "
        "answers; waited 6.5 s on rate limits (3 rate-limit answers)"
    )
    (folder / cp.ENDPOINT_FILE).write_text("{not json")
    built = cs.report(folder, write=False)
    assert built.endpoint == [] and built.endpoint_line is None
    assert built.problems[-1].startswith("endpoint.json cannot be read, its waits are not counted")
    cp.EndpointRecorder(folder, 8).update(GateStats(requests=3))
    assert (folder / "endpoint.json.unreadable").read_text() == "{not json"
    assert [s.requests for s in cp.read_endpoint(folder)] == [3]


def test_max_connections_out_of_range_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "panel.toml"
    path.write_text('tasks = ["file_context/uppercase"]\n[planner]\nmodel = "openai:m"\n')
    assert cli(["panel", str(path), "--out", str(tmp_path / "p"), "--max-connections", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "controlscope panel: argument --max-connections: expected an integer from 1 to 1,024, "
        "not '0'"
    )
    path.write_text(path.read_text() + "max_connections = 0\n")
    assert cli(["panel", str(path), "--out", str(tmp_path / "p"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "planner.max_connections" in err, err


def test_the_live_line_shows_requests_in_flight_their_rate_waits_and_time_left() -> None:
    status = cp.PanelStatus(total=10, finished=4, running=3, elapsed_s=100.0)
    status.endpoint = GateStats(
        inflight=12, peak=16, requests=400, busy_s=310.4, rate_limited_s=3.0, rate_limits=1
    )
    line = cp.PanelProgress.render(status).plain
    assert line == (
        "runs 4/10  running 3  failed 0  | requests 12 in flight  4.0/s  waited 310 s on "
        "answers  paused 3 s by rate limits  | 1m40s elapsed, about 2m30s left"
    )
    status.endpoint = None
    assert cp.PanelProgress.render(status).plain.endswith(
        "  failed 0  | 1m40s elapsed, about 2m30s left"
    )


def test_a_served_panel_on_ray_runs_many_runs_per_actor_within_the_connections(
    endpoint: ServedEndpoint, tmp_path: Path
) -> None:
    """Many runs per actor, and the actors' endpoint counts (a rate limit's wait included)
    gathered into the panel's status, its ``endpoint.json`` and the report."""
    import ray

    endpoint.rate_limit(1, 2.0)
    data = config(endpoint, TASKS[:2], max_connections=4)
    folder = tmp_path / "panel"
    result = cp.run_panel(cp.parse_config({**data, "execution": {"backend": "ray"}}), folder)
    assert not ray.is_initialized()  # the instance it started is shut down
    assert result.complete and all(r.status == "done" for r in result.records.values())
    assert 2 < endpoint.peak <= 4, endpoint.peak
    counted = result.status.endpoint
    assert counted is not None and counted.requests == endpoint.requests, counted
    assert counted.inflight == 0 and 1 <= counted.peak <= 4 and counted.rate_limits == 1
    assert counted.busy_s >= (endpoint.requests - 1) * 1.0 * 0.9  # the answered held a second
    [session] = cp.read_endpoint(folder)
    assert session.max_connections == 4 and session.requests == endpoint.requests
    assert session.rate_limits == 1 and 1.9 <= session.rate_limited_s <= 2.0
    built = cs.report(folder, write=False, resamples=100)
    assert built.endpoint_line is not None
    assert built.endpoint_line.startswith(f"endpoint: {endpoint.requests} requests, at most ")
    assert built.endpoint_line.endswith("waited 2.0 s on rate limits (1 rate-limit answer)")


def test_a_run_leaves_no_thread_of_its_endpoint_client_behind(
    endpoint: ServedEndpoint, tmp_path: Path
) -> None:
    """A served panel's process runs hundreds of runs: none may leave its client's event loop
    (and its connection) behind."""
    settings = cp.parse_config(config(endpoint, TASKS[:1]))
    keep = cp.plan_panel(settings).runs[0]
    before = {thread.ident for thread in threading.enumerate()}
    record = cp.execute(cp.RunJob(tmp_path, settings, keep))
    assert record.status == "done" and endpoint.requests == 2
    new = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    left = [name for name in new if "process_request_thread" not in name]  # not the endpoint's
    assert left == []


def test_a_served_panel_goes_on_in_its_other_process_when_one_dies(
    endpoint: ServedEndpoint, tmp_path: Path
) -> None:
    """One of the panel's processes killed while its runs wait: those runs are reported (and
    their units' reviewing runs blocked); every later run goes to the living process, and the
    connections the dead one held are given back to it."""
    killed: list[float] = []
    measured: list[float] = []

    def kill_one(status: cp.PanelStatus) -> None:
        if not killed and status.running >= 4 and endpoint.inflight == 2:
            victim = multiprocessing.active_children()[0]
            killed.append(time.monotonic())
            os.kill(victim.pid or 0, signal.SIGKILL)
        elif killed and not measured and time.monotonic() > killed[0] + 1.5:
            measured.append(time.monotonic())  # the dead one's requests have been answered
            endpoint.peak = endpoint.inflight

    settings = cp.parse_config(config(endpoint, TASKS, max_connections=2))
    result = cp.run_panel(settings, tmp_path / "panel", observer=kill_one)
    assert killed
    errors = [r.detail for r in result.records.values() if r.status == "error"]
    lost = [d for d in errors if d.startswith("its process ended")]
    assert 1 <= len(lost) <= 2, errors  # the runs the killed process held
    blocked = [d for d in errors if d.startswith("the unit's Keep run could not run")]
    assert len(lost) + len(blocked) == len(errors), errors
    assert len(result.records) - len(errors) >= 6
    assert measured and endpoint.peak == 2  # both connections in use after the death


def _hold_a_connection(gate: EndpointGate, ready: Any) -> None:
    """In a process of its own: take one of the gate's connections as member 1 and keep it."""
    import anyio

    async def hold() -> None:
        async with gate.slot():
            ready.set()
            await anyio.sleep(600)

    gate.join(1)
    anyio.run(hold)


def test_the_connections_a_dead_process_held_are_given_back() -> None:
    import anyio

    context = multiprocessing.get_context("spawn")
    gate = EndpointGate(2, context, members=2)
    ready = context.Event()
    holder = context.Process(target=_hold_a_connection, args=(gate, ready))
    holder.start()
    try:
        assert ready.wait(60)
        assert gate.stats().inflight == 1
    finally:
        holder.kill()
        holder.join(30)
    assert gate.reclaim(1) == 1 and gate.reclaim(1) == 0
    assert gate.stats().inflight == 0

    async def both() -> None:
        with anyio.fail_after(30):  # both connections, at once
            async with gate.slot(), gate.slot():
                assert gate.stats().inflight == 2

    anyio.run(both)
