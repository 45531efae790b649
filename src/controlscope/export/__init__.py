"""Recorded runs in other tools' formats: Inspect AI eval logs.

Reads logs only (the run directory's ``events.jsonl``, a panel's manifest): nothing here runs
anything. :func:`export_inspect` writes a run directory, an executor's session or a panel
folder as one Inspect AI eval log (optional extra ``inspect``: ``pip install
'controlscope[inspect]'``), one sample per run; :data:`INSPECT_EVENTS` and
:data:`NOT_EXPORTED` say what each event kind of the log becomes; :class:`ExportError` is bad
input (one line).

Public API::

    from controlscope.export import export_inspect
    export_inspect("runs/demo", "demo.eval")   # then: inspect view --log-dir .
"""

from controlscope.export._inspect import FORMATS, export_inspect
from controlscope.export._mapping import INSPECT_EVENTS, NOT_EXPORTED, event_kinds
from controlscope.export._runs import ExportError

__all__ = [
    "FORMATS",
    "INSPECT_EVENTS",
    "NOT_EXPORTED",
    "ExportError",
    "event_kinds",
    "export_inspect",
]
