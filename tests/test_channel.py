"""The controller's channel: framing, deadlines and the spin-then-sleep wait, over real pipes."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

import pytest

from controlscope.worker._channel import Channel, ChannelTimeout, ProtocolViolation, WorkerGone
from controlscope.worker._runtime import HEADER, MAX_MESSAGE_BYTES


@pytest.fixture(params=[0.0, 0.2], ids=["sleep", "spin"])
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[Channel, int]]:
    """A channel reading from a pipe whose write end the test holds (and a dummy send pipe)."""
    r, w = os.pipe()
    sr, sw = os.pipe()
    chan = Channel(r, sw, spin_s=request.param)
    yield chan, w
    chan.close()
    for fd in (w, sr):
        with contextlib.suppress(OSError):
            os.close(fd)


def frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


def write_later(fd: int, data: bytes, delay_s: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        os.write(fd, data)

    t = threading.Thread(target=run)
    t.start()
    return t


@pytest.mark.parametrize("delay_s", [0.0, 0.05, 0.4])
def test_message_written_during_or_after_the_spin_is_received(
    pair: tuple[Channel, int], delay_s: float
) -> None:
    chan, w = pair
    t = write_later(w, frame(b'{"t":"call","n":1}'), delay_s)
    assert chan.recv(5.0) == {"t": "call", "n": 1}
    t.join()


def test_message_split_across_writes(pair: tuple[Channel, int]) -> None:
    chan, w = pair
    data = frame(b'{"t":"end","out":"' + b"x" * 5000 + b'"}')
    os.write(w, data[:3])
    t = write_later(w, data[3:], 0.05)
    msg = chan.recv(5.0)
    assert msg["t"] == "end" and len(msg["out"]) == 5000
    t.join()


def test_deadline_shorter_than_the_spin_is_kept() -> None:
    """A 0.05 s deadline ends a wait whose spin alone would last 5 s."""
    r, w = os.pipe()
    sr, sw = os.pipe()
    chan = Channel(r, sw, spin_s=5.0)
    try:
        t0 = time.monotonic()
        with pytest.raises(ChannelTimeout):
            chan.recv(0.05)
        assert time.monotonic() - t0 < 2.5  # not the spin's 5 s
    finally:
        chan.close()
        os.close(w)
        os.close(sr)


def test_no_time_left_means_no_message_even_one_waiting(pair: tuple[Channel, int]) -> None:
    """A spent budget stays spent: a worker that keeps its next message queued cannot run on."""
    chan, w = pair
    os.write(w, frame(b'{"t":"call"}'))
    with pytest.raises(ChannelTimeout):
        chan.recv(0.0)
    assert chan.recv(1.0) == {"t": "call"}  # with time left it is read


def test_a_full_pipe_does_not_outlast_the_deadline(pair: tuple[Channel, int]) -> None:
    """Bytes keep arriving but no message completes: the deadline still ends the wait."""
    chan, w = pair
    stop = threading.Event()

    def trickle() -> None:  # the largest message allowed: seconds of trickling to complete
        os.write(w, HEADER.pack(MAX_MESSAGE_BYTES))
        while not stop.is_set():
            os.write(w, b"x" * 4096)
            time.sleep(0.001)

    t = threading.Thread(target=trickle)
    t.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(ChannelTimeout):
            chan.recv(0.2)
        assert time.monotonic() - t0 < 2.0  # the deadline plus a margin, not the message's end
    finally:
        stop.set()
        t.join()


def test_end_of_file_is_worker_gone(pair: tuple[Channel, int]) -> None:
    chan, w = pair
    os.close(w)
    with pytest.raises(WorkerGone):
        chan.recv(5.0)


def test_malformed_messages_are_protocol_violations(pair: tuple[Channel, int]) -> None:
    chan, w = pair
    os.write(w, frame(b"[1, 2]"))
    with pytest.raises(ProtocolViolation, match="not a JSON object"):
        chan.recv(1.0)
    os.write(w, frame(b"{nope"))
    with pytest.raises(ProtocolViolation, match="not JSON"):
        chan.recv(1.0)
    for constant in (b"NaN", b"Infinity", b"-Infinity"):  # what the runtime never sends
        os.write(w, frame(b'{"t":"call","variables":{"x":' + constant + b"}}"))
        with pytest.raises(ProtocolViolation, match="not JSON"):
            chan.recv(1.0)
    os.write(w, HEADER.pack(2**31))
    with pytest.raises(ProtocolViolation, match="exceeds"):
        chan.recv(1.0)
