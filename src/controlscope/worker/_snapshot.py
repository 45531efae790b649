"""Bounded views of agent state: variable snapshots and captured printed output (paper A.1).

STANDARD LIBRARY ONLY: this module is part of the worker runtime bundle (see ``_runtime.py``),
run by a bare interpreter inside the sandbox; the controller imports it too.
"""

from __future__ import annotations

import io
import json
import math
import sys
from typing import Any

_ModuleType = type(sys)
WIRE_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""The one JSON encoding of the worker channel, both ways, and of snapshot sizes: compact,
UTF-8, standard JSON only (no ``NaN`` or ``Infinity``; the channel refuses them on receipt)."""

#: Snapshot bounds: characters of one string, items of one container, JSON characters of one
#: value, JSON characters of all variables of one scope.
STR_CHARS = 1000
CONTAINER_ITEMS = 50
VALUE_CHARS = 2000
SCOPE_CHARS = 30_000
MAX_DEPTH = 4


def _jsonable(value: Any, depth: int) -> Any:
    t = type(value)
    if value is None or t is bool or t is int:
        return value
    if t is float:
        return value if math.isfinite(value) else repr(value)
    if issubclass(t, str):
        s = _clean(str.__getitem__(value, slice(0, STR_CHARS)))
        n = str.__len__(value)
        return s if n <= STR_CHARS else f"{s}…[+{n - STR_CHARS} chars]"
    if depth >= MAX_DEPTH:
        return f"<{t.__name__}>"
    if issubclass(t, list | tuple):
        seq = (
            list.__getitem__(value, slice(0, CONTAINER_ITEMS))
            if issubclass(t, list)
            else (tuple.__getitem__(value, slice(0, CONTAINER_ITEMS)))
        )
        n = list.__len__(value) if issubclass(t, list) else tuple.__len__(value)
        out = [_jsonable(v, depth + 1) for v in seq]
        if n > CONTAINER_ITEMS:
            out.append(f"…[+{n - CONTAINER_ITEMS} items]")
        return out
    if issubclass(t, dict):
        d: dict[str, Any] = {}
        n = dict.__len__(value)
        for i, (k, v) in enumerate(dict.items(value)):
            if i >= CONTAINER_ITEMS:
                d["…"] = f"+{n - CONTAINER_ITEMS} items"
                break
            tk = type(k)
            if tk is str:
                key = k
            elif k is None or tk in (bool, int, float):
                key = json.dumps(k)
            else:
                return f"<{t.__name__}>"
            d[key] = _jsonable(v, depth + 1)
        return d
    return f"<{t.__name__}>"


def snapshot(variables: dict[str, Any], hidden: set[str]) -> dict[str, Any]:
    """JSON-serialisable view of a scope's variables, bounded (paper section A.1).

    Names starting with ``__``, modules, and the names in ``hidden`` (proxies, the agent-facing
    exception classes) are left out. A value is shown as JSON with strings cut at
    :data:`STR_CHARS` and containers at :data:`CONTAINER_ITEMS`; a value whose JSON exceeds
    :data:`VALUE_CHARS` becomes its truncated JSON text; other objects appear as
    ``"<TypeName>"``. Once the scope's JSON exceeds :data:`SCOPE_CHARS`, the remaining names are
    summarised under the key ``"…"``.
    """
    out: dict[str, Any] = {}
    total = 0
    names = [k for k in dict.keys(variables) if type(k) is str]
    for i, name in enumerate(names):
        if name.startswith("__") or name in hidden:
            continue
        value = dict.get(variables, name)
        if issubclass(type(value), _ModuleType):
            continue
        try:
            shown = _jsonable(value, 0)
            t = type(shown)
            if t is str:  # already bounded by STR_CHARS < VALUE_CHARS
                size = len(shown) + 2
            elif shown is None or t is bool or t is int or t is float:
                size = len(repr(shown))
            else:
                text = WIRE_JSON.encode(shown)
                size = len(text)
                if size > VALUE_CHARS:
                    shown = text[:VALUE_CHARS] + f"…[+{size - VALUE_CHARS} chars]"
                    size = len(shown) + 2
        except Exception:  # a pathological object: show its type only
            shown = f"<{type(value).__name__}>"
            size = len(shown)
        total += size + len(name) + 4
        if total > SCOPE_CHARS:
            out["…"] = f"{len(names) - i} more variables omitted (snapshot bound)"
            break
        out[name] = shown
    return out


# --------------------------------------------------------------------------------------------
# Output capture


class _Capture(io.TextIOBase):
    """A bounded text sink for agent ``print``: keeps the first ``limit`` characters per block.

    ``sink``, when set, is called after every write (the runtime sends the new output at once,
    so that it survives a block killed later).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.kept = 0
        self.dropped = 0
        self.sent = 0
        self.sink: Any = None

    def reset(self) -> None:
        self.parts, self.kept, self.dropped, self.sent = [], 0, 0, 0

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def write(self, s: str) -> int:
        if type(s) is not str:
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        room = self.limit - self.kept
        if room >= len(s):
            self.parts.append(s)
            self.kept += len(s)
        else:
            if room > 0:
                self.parts.append(s[:room])
                self.kept += room
            self.dropped += len(s) - max(room, 0)
        if self.sink is not None:
            self.sink()
        return len(s)

    def pending(self) -> tuple[str, int]:
        """The output not yet sent and the mark to :meth:`commit` once it has been."""
        return _clean("".join(self.parts[self.sent :])), len(self.parts)

    def commit(self, mark: int) -> None:
        self.sent = mark

    def delta(self) -> str:
        text, mark = self.pending()
        self.commit(mark)
        return text


def _clean(text: str) -> str:
    """``text`` made encodable: lone surrogates become visible ``\\udcff``-style escapes."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
