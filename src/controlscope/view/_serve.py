"""Serving the viewer on loopback with uvicorn, in a thread of this process; the same server
for the command line, for Python callers and for the tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import uvicorn

from controlscope.review import ReviewDesk
from controlscope.view._app import build_app, is_loopback
from controlscope.view._folders import ViewError

DEFAULT_HOST = "127.0.0.1"
"""The viewer listens on loopback unless told otherwise."""

START_TIMEOUT_S = 15.0
"""How long :meth:`ViewServer.start` waits for the server to listen."""


class ViewServer:
    """The viewer of one folder, served over HTTP in a background thread.

    The socket is bound when the server is made (so ``port=0`` picks a free port and
    :attr:`url` is known at once); :meth:`start` begins serving. Use it as a context manager.
    On a loopback address it answers only requests naming this machine (see
    :func:`controlscope.view.build_app`); on any other (``0.0.0.0``...) it answers every name
    the machine is reached by, and :attr:`loopback` is False.

    Args:
        path: a run directory, a branch set, a panel or a folder of runs.
        host: the address to listen on (loopback by default; not blank: an empty host
            would listen on every interface).
        port: the port; 0 picks a free one.
        desk: boundaries a person decides at: the server then has the review page
            (:attr:`review_url`), and the desk records where it is served.

    Raises:
        ViewError: a blank host, or the address cannot be bound (the port is taken, the host
            is not local).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        host: str = DEFAULT_HOST,
        port: int = 0,
        desk: ReviewDesk | None = None,
    ) -> None:
        if not host.strip():
            raise ViewError("an empty host would listen on every interface; name an address")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
        except OSError as err:
            self._socket.close()
            raise ViewError(f"cannot listen on {host}:{port}: {err.strerror}") from None
        self._socket.listen(64)
        bound_host, bound_port = self._socket.getsockname()[:2]
        self.loopback = is_loopback(bound_host)
        """Whether the server listens on loopback only."""
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        config = uvicorn.Config(
            build_app(path, self.loopback, desk),
            log_level="warning",
            access_log=False,
            lifespan="off",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )
        self.url = f"http://{shown}:{bound_port}/"
        """The viewer's address (``http://127.0.0.1:PORT/``)."""
        self._desk = desk
        self.review_url: str | None = None
        """The review page's address with the desk's secret (``.../review#key=SECRET``: only
        this address can decide), when the server has a desk."""
        if desk is not None:
            desk.where = f"{self.url}review"
            self.review_url = f"{desk.where}#key={desk.secret}"

    def start(self) -> ViewServer:
        """Serve in a background thread; return once the server listens.

        Raises:
            ViewError: it did not start within :data:`START_TIMEOUT_S`.
        """
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise ViewError(f"the viewer did not start at {self.url}")
            time.sleep(0.02)
        return self

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C raises ``KeyboardInterrupt`` here)."""
        while self._thread.is_alive():
            self._thread.join(0.5)

    def stop(self) -> None:
        """Stop serving and close the socket (waits at most :data:`START_TIMEOUT_S`)."""
        if self._desk is not None:
            self._desk.shut()  # the review page's waits answer now
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(START_TIMEOUT_S)
        self._socket.close()

    def __enter__(self) -> ViewServer:
        return self.start() if not self._thread.is_alive() else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def serve(
    path: str | Path,
    *,
    host: str = DEFAULT_HOST,
    port: int = 0,
    on_ready: Callable[[str], None] = print,
) -> None:
    """Serve the viewer of ``path`` until interrupted (what ``controlscope view`` does).

    Args:
        path: a run directory, a branch set, a panel or a folder of runs.
        host: the address to listen on (loopback by default).
        port: the port; 0 picks a free one.
        on_ready: called with the URL once the server listens (prints it by default).

    Raises:
        ViewError: see :class:`ViewServer`.
        KeyboardInterrupt: on Ctrl-C or SIGTERM, after the server stopped.
    """
    with ViewServer(path, host=host, port=port) as server:
        on_ready(server.url)
        server.wait()
