"""A panel's live progress on the terminal (``rich``): runs done, running, failed, and the
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
        successes: keep 2/3 ...``."""
        return _line(status)


def _line(status: PanelStatus) -> Text:
    line = (
        f"runs {status.finished}/{status.total}"
        + (f" ({status.skipped} skipped)" if status.skipped else "")
        + f"  running {status.running}  failed {status.failed}"
        + (f"  ineligible {status.ineligible}" if status.ineligible else "")
    )
    conditions = "  ".join(
        f"{label} {status.successes.get(label, 0)}/{seen}"
        for label, seen in status.verdicts.items()
    )
    return Text(line + (f"  | successes: {conditions}" if conditions else ""))
