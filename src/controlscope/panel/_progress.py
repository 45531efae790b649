"""A panel's live progress on the terminal (``rich``): runs done, running, failed; for served
models the endpoint's requests in flight, requests per second, the time spent waiting on its
answers and on its rate limits; the time elapsed and an estimate of the rest; and the
successes per condition so far."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.text import Text

from controlscope.panel._runner import PanelStatus


class PanelProgress:
    """A live status line fed with :class:`PanelStatus` (pass it as ``run_panel``'s
    ``observer``); use it as a context manager.

    Args:
        console: where to draw (stderr by default).
    """

    def __init__(self, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self._live = Live(Text("panel: starting"), console=self._console, refresh_per_second=4)
        self.last: PanelStatus | None = None

    def __enter__(self) -> PanelProgress:
        self._live.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._live.stop()

    def __call__(self, status: PanelStatus) -> None:
        """Show ``status``."""
        self.last = status
        self._live.update(self.render(status))

    @staticmethod
    def render(status: PanelStatus) -> Text:
        """The status as one line, e.g. ``runs 5/9 (2 skipped)  running 2  failed 0 |
        requests 12 in flight  3.9/s  waited 310 s on answers | 1m20s elapsed, about 2m05s
        left | successes: keep 2/3 ...`` (the requests for served models only)."""
        return _line(status)


def _line(status: PanelStatus) -> Text:
    line = (
        f"runs {status.finished}/{status.total}"
        + (f" ({status.skipped} skipped)" if status.skipped else "")
        + f"  running {status.running}  failed {status.failed}"
        + (f"  ineligible {status.ineligible}" if status.ineligible else "")
    )
    endpoint = status.endpoint
    if endpoint is not None:
        line += (
            f"  | requests {endpoint.inflight} in flight  {status.requests_per_s:.1f}/s  "
            f"waited {endpoint.busy_s:.0f} s on answers"
            + (
                f"  paused {endpoint.rate_limited_s:.0f} s by rate limits"
                if endpoint.rate_limits
                else ""
            )
        )
    if status.elapsed_s > 0:
        left = status.remaining_s
        line += f"  | {_duration(status.elapsed_s)} elapsed" + (
            f", about {_duration(left)} left" if left is not None else ""
        )
    conditions = "  ".join(
        f"{label} {status.successes.get(label, 0)}/{seen}"
        for label, seen in status.verdicts.items()
    )
    return Text(line + (f"  | successes: {conditions}" if conditions else ""))


def _duration(seconds: float) -> str:
    """``42s``, ``3m05s`` or ``2h03m``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
