"""JSON schemas as checks: a schema's validator, and why a value or a model's answer breaks one.

One validator per schema (cached) serves every check of the run: a tool's input schema against
patched arguments (``controlscope.scope``) and a request's ``json_schema`` against the answer
(every model path sets ``ModelResponse.schema_error`` with :func:`answer_schema_error`; the
reviewer turns a violation into a ``malformed`` fallback). Schemas are read with the draft they
declare (``$schema``), Draft 2020-12 when they declare none; references are never fetched.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema
import jsonschema.protocols
import jsonschema.validators
import referencing.exceptions

from controlscope.core._bounds import clip_text
from controlscope.core._text import decode_json

_MESSAGE_CHARS = 300
"""A violation's message quotes the value, which may be huge; it is clipped to this length."""


@functools.lru_cache(maxsize=256)
def _cached_validator(schema_json: str) -> jsonschema.protocols.Validator | str:
    schema = json.loads(schema_json)
    validator_class = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator
    )
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return str(exc.message)
    return validator_class(schema)


def schema_validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator | str:
    """A validator for ``schema``, or why ``schema`` is not a valid JSON schema.

    Cached by the schema's sorted JSON text: meta-validating a schema costs far more than
    validating a value with it.
    """
    return _cached_validator(json.dumps(schema, sort_keys=True))


def violation_text(error: jsonschema.ValidationError, *, root: str = "(value)") -> str:
    """One violation as ``path: message`` (``root`` names the value itself), clipped."""
    where = "/".join(str(p) for p in error.absolute_path) or root
    return f"{where}: {clip_text(error.message, _MESSAGE_CHARS)}"


def _telling(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """The violation that says most: for a value no branch of an ``anyOf``/``oneOf`` admits,
    the violation inside the one branch whose ``const``/``enum`` the value matches (the branch
    it was meant for), when there is exactly one such branch."""
    if not error.context:
        return error
    branches: dict[object, list[jsonschema.ValidationError]] = {}
    for sub in error.context:
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    meant = [
        errors
        for errors in branches.values()
        if not any(e.validator in ("const", "enum") for e in errors)
    ]
    if len(meant) != 1:
        return error
    return _telling(jsonschema.exceptions.best_match(meant[0]) or error)


def schema_problem(value: Any, schema: dict[str, Any]) -> str | None:
    """Why ``value`` breaks ``schema`` (its first violation, ``path: message``), or None.

    An invalid schema or a reference that cannot be resolved is a problem too (then nothing
    can satisfy it).
    """
    checked = schema_validator(schema)
    if isinstance(checked, str):
        return f"the schema itself is invalid: {clip_text(checked, _MESSAGE_CHARS)}"
    try:
        error = next(iter(checked.iter_errors(value)), None)
    except referencing.exceptions.Unresolvable as exc:  # never fetched: no network
        return f"the schema has a reference that cannot be resolved: {exc}"
    return None if error is None else violation_text(_telling(error))


def answer_schema_error(
    text: str | None, schema: dict[str, Any], *, finish_reason: str = "stop"
) -> str | None:
    """Why a model's answer to a request with ``json_schema`` does not satisfy it, or None.

    Args:
        text: the answer's text (None when the model sent none).
        schema: the request's ``json_schema``.
        finish_reason: the response's; ``length`` says the token cap cut the answer.

    Returns:
        None for JSON text that satisfies ``schema``; else ``no text``, ``cut off by the token
        cap``, ``not JSON: ...`` or the first violation (``path: message``), prefixed with
        ``the answer breaks its schema``.
    """
    if text is None or not text.strip():
        return "the answer breaks its schema: no text"
    try:
        value = decode_json(text)
    except json.JSONDecodeError as exc:
        if finish_reason == "length":
            return "the answer breaks its schema: cut off by the token cap"
        return f"the answer breaks its schema: not JSON ({exc})"
    problem = schema_problem(value, schema)
    return None if problem is None else f"the answer breaks its schema: {problem}"
