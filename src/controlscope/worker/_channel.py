"""Controller side of the worker channel: length-prefixed JSON over two pipes, with deadlines.

The worker is untrusted, so every read is bounded in time (the caller's deadline) and in size
(:data:`MAX_MESSAGE_BYTES`), writes never block forever, and anything that is not a well-formed
message raises :class:`ProtocolViolation`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import time
from typing import Any

from controlscope.core import finite_json_float, refuse_json_constant
from controlscope.worker._runtime import HEADER, MAX_MESSAGE_BYTES
from controlscope.worker._snapshot import WIRE_JSON

#: A ``\\uD800``-``\\uDFFF`` escape: the runtime never writes one (it sends UTF-8), so a message
#: that has one is checked for lone surrogates, which no log can record.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


class ChannelTimeout(Exception):
    """No complete message arrived before the deadline."""


class WorkerGone(Exception):
    """The worker closed its end of the channel (it exited or was killed)."""


class ProtocolViolation(Exception):
    """The worker sent something that is not a well-formed message."""


class Channel:
    """Framed JSON messages over a read fd and a write fd (both owned, closed by :meth:`close`)."""

    def __init__(self, rfd: int, wfd: int, *, spin_s: float = 0.0) -> None:
        """Own ``rfd`` (worker to controller) and ``wfd`` (controller to worker).

        ``spin_s``: seconds :meth:`recv` polls the pipe (yielding the CPU between tries) before
        it sleeps in ``poll``; a worker that answers within that time is read without a
        wake-up, which on a virtual machine costs tens of microseconds.
        """
        self.rfd, self.wfd = rfd, wfd
        self.spin_s = spin_s
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        self._buf = bytearray()
        self._poll_r = select.poll()
        self._poll_r.register(rfd, select.POLLIN)
        self._poll_w = select.poll()
        self._poll_w.register(wfd, select.POLLOUT)

    def send(self, msg: dict[str, Any], timeout: float = 30.0) -> None:
        """Send one message.

        Raises:
            WorkerGone: the worker's end is closed.
            ChannelTimeout: the worker did not drain the pipe within ``timeout`` seconds.
        """
        data = WIRE_JSON.encode(msg).encode()
        self.send_raw(HEADER.pack(len(data)) + data, timeout)

    def send_raw(self, frame: bytes, timeout: float = 30.0) -> None:
        """Send bytes already framed (see :meth:`send`; same errors)."""
        view = memoryview(frame)
        deadline = time.monotonic() + timeout
        while view:
            try:
                n = os.write(self.wfd, view)
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0 or not self._poll_w.poll(left * 1000):
                    raise ChannelTimeout("the worker does not read its channel") from None
                continue
            except (BrokenPipeError, OSError) as exc:
                raise WorkerGone(str(exc)) from None
            view = view[n:]

    def recv(self, timeout: float | None) -> dict[str, Any]:
        """Receive one message, waiting at most ``timeout`` seconds (None: forever).

        Raises:
            ChannelTimeout: nothing complete arrived in time.
            WorkerGone: end of file on the channel.
            ProtocolViolation: oversize, non-JSON or non-object message.
        """
        if timeout is not None and timeout <= 0:
            # No time left (a spent budget): not even a message already waiting is taken.
            raise ChannelTimeout("no time left to receive")
        deadline = None if timeout is None else time.monotonic() + timeout
        buf = self._buf
        while True:
            if len(buf) >= 4:
                (n,) = HEADER.unpack_from(buf)
                if n > MAX_MESSAGE_BYTES:
                    raise ProtocolViolation(f"message of {n} bytes exceeds {MAX_MESSAGE_BYTES}")
                if len(buf) >= 4 + n:
                    data = bytes(buf[4 : 4 + n])
                    del buf[: 4 + n]
                    return _decode(data)
            buf += self._read(deadline)

    def _read(self, deadline: float | None) -> bytes:
        """The next bytes: polled for ``spin_s``, then waited for until ``deadline``
        (``time.monotonic()`` seconds; None: forever)."""
        spin_until = time.monotonic() + self.spin_s
        while True:
            # The deadline is checked before every read, so a worker that keeps the pipe full
            # cannot keep a spent budget alive.
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise ChannelTimeout("no message before the deadline")
            try:
                chunk = os.read(self.rfd, 1 << 20)
            except BlockingIOError:
                if now < spin_until:
                    os.sched_yield()
                    continue
                # readable, or the deadline passed: the next turn reads or raises
                self._poll_r.poll(None if deadline is None else (deadline - now) * 1000)
                continue
            except OSError as exc:
                raise WorkerGone(str(exc)) from None
            if not chunk:
                raise WorkerGone("end of file on the worker channel")
            return chunk

    def close(self) -> None:
        """Close both fds (idempotent)."""
        for fd in (self.rfd, self.wfd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.rfd = self.wfd = -1


def _decode(data: bytes) -> dict[str, Any]:
    """One message: a JSON object of UTF-8 text with finite numbers only.

    Raises:
        ProtocolViolation: anything else (not JSON, ``NaN``, ``1e999``, a lone surrogate...).
    """
    try:
        msg = json.loads(data, parse_constant=refuse_json_constant, parse_float=finite_json_float)
    except (ValueError, RecursionError) as exc:
        raise ProtocolViolation(f"message is not JSON: {exc!r}") from None
    if not isinstance(msg, dict):
        raise ProtocolViolation("message is not a JSON object")
    if _SURROGATE_ESCAPE.search(data):
        try:
            WIRE_JSON.encode(msg).encode("utf-8")
        except UnicodeEncodeError:
            raise ProtocolViolation("message holds a lone surrogate (not Unicode text)") from None
    return msg
