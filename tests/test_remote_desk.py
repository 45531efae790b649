"""The review desk reached over HTTP (:class:`controlscope.review.RemoteDesk`, what a panel's
runs post their boundaries to): against the real desk served by the viewer, and against a
loopback server answering badly (errors, no JSON, nothing at all), where every wait is bounded
and ends in :class:`~controlscope.review.DeskUnreachable`."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import controlscope as cs
from controlscope import view
from controlscope.core import Condition, OperationSet
from controlscope.review import (
    DESK_VARIABLE,
    DeskAddress,
    DeskUnreachable,
    RemoteDesk,
    ReviewDesk,
    share_desk,
)
from test_human_review import _state


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ReviewDesk, view.ViewServer]]:
    desk = ReviewDesk()
    with view.ViewServer(tmp_path, desk=desk) as server:
        yield desk, server


def remote(desk: ReviewDesk, server: view.ViewServer, **kw: Any) -> RemoteDesk:
    return RemoteDesk(DeskAddress(server.url, desk.secret), **kw)


def until(check: Any, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the condition did not come"
        time.sleep(0.02)


def in_thread(target: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = target()
        except Exception as err:  # handed to the test
            out["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_a_posted_boundary_is_decided_on_the_desk_and_its_operation_comes_back(
    served: tuple[ReviewDesk, view.ViewServer],
) -> None:
    """The boundary is on the desk (its page lists it); a refused try is answered at the desk
    and reported back; the accepted patch arrives as the operation, recorded as a person's."""
    desk, server = served
    reviewer = cs.HumanReviewer(remote=remote(desk, server, poll_s=0.5), label="run a")
    condition = Condition(scope="arg", schedule="continuous", view="with_feedback")
    thread, out = in_thread(lambda: reviewer.propose(_state("read_text_file", 1), condition))
    until(lambda: len(desk.pending()) == 1)
    pending = desk.pending()[0]
    assert pending.label == "run a" and pending.state.boundary.tool == "read_text_file"
    with urllib.request.urlopen(f"{server.url}review", timeout=30) as page:
        assert pending.ticket in page.read().decode()
    assert desk.decide(
        pending.ticket, desk.secret, "replace_workflow", {"code": "x = 1"}
    ).answer == ("refused")
    answer = desk.decide(
        pending.ticket, desk.secret, "patch_arguments", {"arguments": {"path": "/workspace/b.txt"}}
    )
    assert answer.answer == "accepted"
    thread.join(30)
    proposal = out["value"]
    assert proposal.operation.kind == "patch_arguments"
    assert proposal.operation.arguments == {"path": "/workspace/b.txt"}
    assert proposal.human.where == f"{server.url}review" and len(proposal.human.refused) == 1
    assert not proposal.human.timed_out and desk.pending() == []


def test_no_decision_in_time_withdraws_the_boundary_and_is_a_timeout(
    served: tuple[ReviewDesk, view.ViewServer],
) -> None:
    desk, server = served
    reviewer = cs.HumanReviewer(remote=remote(desk, server, poll_s=0.3), timeout_s=1.0)
    condition = Condition(scope="arg", schedule="continuous", view="with_feedback")
    proposal = reviewer.propose(_state("read_text_file", 1), condition)
    assert proposal.operation is None and proposal.human is not None
    assert proposal.human.timed_out and proposal.error is None
    assert desk.pending() == []  # withdrawn: the page no longer offers it


def test_a_desk_shut_mid_wait_ends_the_wait_at_once_as_an_error(
    served: tuple[ReviewDesk, view.ViewServer],
) -> None:
    desk, server = served
    client = remote(desk, server, poll_s=5.0, retries=1, request_s=2.0)
    reviewer = cs.HumanReviewer(remote=client)
    condition = Condition(scope="arg", schedule="continuous", view="with_feedback")
    thread, out = in_thread(lambda: reviewer.propose(_state("read_text_file", 1), condition))
    until(lambda: len(desk.pending()) == 1)
    started = time.monotonic()
    server.stop()
    thread.join(60)
    assert not thread.is_alive() and time.monotonic() - started < 60
    proposal = out["value"]
    assert proposal.operation is None and proposal.error_kind == "connection"
    assert proposal.error and proposal.human is not None
    with pytest.raises(DeskUnreachable):  # gone for this run: later boundaries fail at once
        client.post(_state("write_file", 2), OperationSet.of("arg"))


def test_a_desk_nobody_listens_on_fails_after_the_bounded_retries(tmp_path: Path) -> None:
    listening = view.listen_on("127.0.0.1", 0)
    port = listening.getsockname()[1]
    listening.close()  # nothing listens there now
    client = RemoteDesk(DeskAddress(f"http://127.0.0.1:{port}/", "s"), retries=2)
    started = time.monotonic()
    with pytest.raises(DeskUnreachable, match=r"did not answer.*\(3 tries\)"):
        client.post(_state("read_text_file", 1), OperationSet.of("arg"))
    assert time.monotonic() - started < 30


def test_a_wrong_secret_is_refused_and_posts_nothing(
    served: tuple[ReviewDesk, view.ViewServer],
) -> None:
    desk, server = served
    client = RemoteDesk(DeskAddress(server.url, "not-the-secret"))
    with pytest.raises(DeskUnreachable, match="secret"):
        client.post(_state("read_text_file", 1), OperationSet.of("arg"))
    assert desk.pending() == []
    for path, body in (("_review/post", b"{}"), ("_review/withdraw", b"{}")):
        request = urllib.request.Request(server.url + path, body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 403
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(server.url + "_review/outcome?t=x", timeout=30)
    assert refused.value.code == 403


class BadDesk(http.server.BaseHTTPRequestHandler):
    """A desk answering each request with :attr:`answer` (status, body) or not at all."""

    answer: ClassVar[tuple[int, bytes] | None] = None
    requests: ClassVar[list[str]] = []

    def _reply(self) -> None:
        BadDesk.requests.append(self.path)
        if self.answer is None:
            time.sleep(3)  # longer than the client waits
            return
        status, body = self.answer
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _reply

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def bad_desk() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), BadDesk)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    BadDesk.requests = []
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ((200, b"<html>not json</html>"), "did not answer"),
        ((200, b"[1, 2]"), "not a JSON object"),
        ((503, b"{}"), "HTTP 503"),
        ((404, b"{}"), "HTTP 404"),
        ((200, b'{"ticket": ""}'), "without a ticket"),
        (None, "timed out"),
    ],
)
def test_bad_answers_end_in_a_bounded_error(
    bad_desk: str, answer: tuple[int, bytes] | None, why: str
) -> None:
    BadDesk.answer = answer
    client = RemoteDesk(DeskAddress(bad_desk, "s"), poll_s=0.2, retries=1, request_s=0.5)
    started = time.monotonic()
    with pytest.raises(DeskUnreachable, match=why):
        client.post(_state("read_text_file", 1), OperationSet.of("arg"))
    assert time.monotonic() - started < 30
    retried = answer is None or answer[0] >= 500 or answer[1].startswith((b"<", b"["))
    assert len(BadDesk.requests) == (2 if retried else 1)  # a 4xx is not retried


def test_an_outcome_that_is_no_operation_or_forgotten_ends_the_wait(bad_desk: str) -> None:
    client = RemoteDesk(DeskAddress(bad_desk, "s"), poll_s=0.2, retries=0, request_s=0.5)
    BadDesk.answer = (200, b'{"ticket": "t1"}')
    pending = client.post(_state("read_text_file", 1), OperationSet.of("arg"))
    BadDesk.answer = (200, json.dumps({"status": "decided", "operation": {"kind": "?"}}).encode())
    with pytest.raises(DeskUnreachable, match="no operation"):
        client.wait(pending, None)
    client = RemoteDesk(DeskAddress(bad_desk, "s"), poll_s=0.2, retries=0, request_s=0.5)
    BadDesk.answer = (200, b'{"status": "gone"}')
    with pytest.raises(DeskUnreachable, match="no longer holds"):
        client.wait(pending, None)


def test_the_desk_reaches_child_processes_in_their_environment_only_once(tmp_path: Path) -> None:
    """:func:`share_desk` hands the address to processes started inside it; a process claims
    it once and removes it from its environment (its own children never see it)."""
    address = DeskAddress("http://127.0.0.1:1/", "the-secret")
    child = (
        "import os, subprocess, sys\n"
        "from controlscope.review import claim_desk\n"
        "a = claim_desk()\n"
        "print(a.url, a.secret, claim_desk() == a)\n"
        "grand = 'import os; print(%r in os.environ)' % sys.argv[1]\n"
        "seen = subprocess.run([sys.executable, '-c', grand], capture_output=True, text=True)\n"
        "print(seen.stdout)\n"
    )
    env_path = str(Path(cs.__file__).parents[1])
    with share_desk(address):
        assert DESK_VARIABLE in os.environ
        env = {**os.environ, "PYTHONPATH": env_path}
        out = subprocess.run(
            [sys.executable, "-c", child, DESK_VARIABLE], capture_output=True, text=True, env=env
        )
    assert out.stdout.split() == ["http://127.0.0.1:1/", "the-secret", "True", "False"], out.stderr
    assert DESK_VARIABLE not in os.environ
