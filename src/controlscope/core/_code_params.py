"""Code-valued tool parameters: which parameters of a tool hold an executable program, read from
the tool's schema (paper section 3.1: "parameters that directly encode executable programs fall
outside the data-argument comparison"). An argument patch may not change them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from controlscope.core._tools import ToolSchema

# fmt: off
#: Name tokens that mark a parameter as a program (after splitting snake/camel/kebab case).
CODE_NAME_TOKENS: frozenset[str] = frozenset({
    "script", "program", "python", "py", "javascript", "js", "typescript", "sql", "shell",
    "bash", "cmd", "command", "commands", "exec", "eval", "lambda", "snippet", "sourcecode",
})
# fmt: on

# fmt: off
#: Qualifiers that make ``..._code`` / "... code" a data value (a zip code is not a program).
DATA_CODE_QUALIFIERS: frozenset[str] = frozenset({
    "access", "activation", "airport", "area", "auth", "authorization", "color", "colour",
    "confirmation", "country", "coupon", "currency", "discount", "error", "exit", "gift",
    "http", "invite", "iso", "language", "lang", "locale", "otp", "postal", "product",
    "promo", "qr", "referral", "region", "reset", "response", "return", "security", "state",
    "status", "tracking", "verification", "voucher", "zip", "bar", "barcode", "pin",
})
# fmt: on

_CODE_MEDIA = re.compile(
    r"^(text|application)/(x-)?(python|javascript|ecmascript|typescript|sql|sh|shellscript|"
    r"x-sh|lua|ruby|perl)$"
)
_CODE_FORMATS: frozenset[str] = frozenset(
    {"code", "python", "javascript", "typescript", "sql", "script", "shell", "command"}
)
_CODE_DESCRIPTION = re.compile(
    r"\b(python|javascript|typescript|sql|bash|powershell)\b"
    r"|\bshell (command|script)s?\b"
    r"|\bsource code\b"
    r"|\b(code|script|program|command|expression|statement)s? (to|that will|which will) "
    r"(run|execute|evaluate|be (run|executed|evaluated))\b"
    r"|\bexecutable\b",
    re.IGNORECASE,
)
_DATA_CODE_DESCRIPTION = re.compile(
    r"\b(" + "|".join(sorted(DATA_CODE_QUALIFIERS)) + r")[ _-]?codes?\b", re.IGNORECASE
)
_NAME_SPLIT = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def _name_tokens(name: str) -> list[str]:
    """Split ``sourceCode``, ``source_code``, ``source-code`` into ``["source", "code"]``."""
    return [part.lower() for part in _NAME_SPLIT.findall(name)]


def is_code_parameter(name: str, prop: Mapping[str, Any] | None = None) -> bool:
    """Decide from schema hints whether a tool parameter holds an executable program.

    Paper section 3.1: "parameters that directly encode executable programs fall outside the
    data-argument comparison". Tools declare such parameters in ``ToolSchema.code_params``; this
    function catches the undeclared ones. A parameter is code-valued when any of these holds:

    - the property says so: ``"x-code": true``, a ``contentMediaType`` of a program
      (``text/x-python``, ``application/javascript``, ``application/sql``...), or a ``format`` of
      ``code``/``python``/``javascript``/``sql``/``script``/``shell``/``command``;
    - its name has a program token (:data:`CODE_NAME_TOKENS`: ``script``, ``program``,
      ``python``, ``sql``, ``command``, ``cmd``, ``shell``, ``exec``, ``eval``...), or it is
      ``code`` / ``source_code`` / ``..._code`` with no data qualifier
      (:data:`DATA_CODE_QUALIFIERS`: ``zip_code``, ``verification_code``, ``country_code`` are
      data);
    - its description names a programming language or says the value is run/executed/evaluated
      (``"Python code to run"``, ``"shell command"``, ``"source code"``).

    A description about a data code (``"the verification code sent by SMS"``) overrides the
    ``code`` name and description hints (not the explicit markers and program-name tokens).

    Patterns are data: a regular expression or glob (``pattern``, ``excludePatterns``) is matched,
    not run, and queries (``query``) are data unless marked as SQL. JSON-schema property
    schemas nested inside the parameter are not inspected (a patch replaces the top-level value).

    Args:
        name: the parameter's name.
        prop: the parameter's JSON-schema property (may be None or empty).

    Returns:
        True when a patch to this parameter must be rejected as ``code_parameter``.
    """
    prop = prop or {}
    if prop.get("x-code") is True:
        return True
    media = prop.get("contentMediaType")
    if isinstance(media, str) and _CODE_MEDIA.match(media.strip().lower()):
        return True
    fmt = prop.get("format")
    if isinstance(fmt, str) and fmt.strip().lower() in _CODE_FORMATS:
        return True
    tokens = _name_tokens(name)
    if any(token in CODE_NAME_TOKENS for token in tokens):
        return True
    texts = [text for key in ("description", "title") if isinstance(text := prop.get(key), str)]
    if any(_DATA_CODE_DESCRIPTION.search(text) for text in texts):
        return False
    if "code" in tokens and not any(token in DATA_CODE_QUALIFIERS for token in tokens):
        return True
    return any(_CODE_DESCRIPTION.search(text) for text in texts)


def code_parameters(tool: ToolSchema) -> frozenset[str]:
    """All code-valued parameters of ``tool``: declared ones plus those found by schema hints.

    Args:
        tool: the tool; its ``input_schema["properties"]`` is inspected with
            :func:`is_code_parameter`.

    Returns:
        The parameter names (declared names are included even when the schema lacks them).
    """
    found = set(tool.code_params)
    properties = tool.input_schema.get("properties")
    if isinstance(properties, Mapping):
        for name, prop in properties.items():
            if is_code_parameter(str(name), prop if isinstance(prop, Mapping) else None):
                found.add(str(name))
    return frozenset(found)
