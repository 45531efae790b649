"""Which JSON schemas llama.cpp's grammar converter enforces in full.

llama.cpp constrains an answer to a JSON schema by converting the schema to a grammar
(``json_schema_to_gbnf``; ``llama-cpp-python`` ships the same converter in Python). The converter
reads one branch of each schema node (``$ref``, then ``anyOf``, a list ``type``, ``const``,
``enum``, an object with ``properties``, an array with ``items``, a string ``pattern``, a string
``format``, string lengths, then a primitive ``type``) and ignores every other keyword of that
node; it raises on some constructs (a ``pattern`` without ``^...$``); and where it cannot convert
a schema, llama-cpp-python and ``llama_cpp.server`` decode plain JSON instead, silently. So an
answer "under a schema" may break it with no error.

:func:`grammar_problem` says, before anything is decoded, what of a schema such a grammar would
not enforce, so the request can be refused loudly (a ``schema_unsupported``
:class:`~controlscope.core.ProviderError`) rather than answered unconstrained. It is deliberately
strict: ``oneOf`` (the grammar cannot enforce "exactly one"), ``allOf``, numeric bounds and any
keyword of a node that its branch does not read are refused. Annotations (``title``,
``description``, ``default``, ``examples``...) are ignored. Answers are validated against their
schema all the same (:func:`controlscope.core.answer_schema_error`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from controlscope.core import schema_validator

__all__ = ["grammar_problem"]

ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$defs",
        "definitions",
    }
)
"""Keywords that constrain nothing (or only hold subschemas reached through ``$ref``)."""

PRIMITIVE_TYPES = frozenset({"string", "number", "integer", "boolean", "null", "object", "array"})
STRING_FORMATS = frozenset({"uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5", "date", "time"})
STRING_FORMATS_ALL = STRING_FORMATS | {"date-time"}

_Branch = tuple[str, frozenset[str]]
"""A converter branch's name and the keywords it reads (besides ``type``)."""


def _branch(node: Mapping[str, Any]) -> _Branch:
    """The converter's branch for ``node`` (the order of ``SchemaConverter.visit``)."""
    kind = node.get("type")
    if "$ref" in node:
        return "ref", frozenset({"$ref"})
    if "oneOf" in node or "anyOf" in node:
        return "anyOf", frozenset({"anyOf", "oneOf"})
    if isinstance(kind, list):
        return "types", frozenset()
    if "const" in node:
        return "const", frozenset({"const"})
    if "enum" in node:
        return "enum", frozenset({"enum"})
    additional = node.get("additionalProperties", True)
    if kind in (None, "object") and ("properties" in node or additional is not True):
        return "object", frozenset({"properties", "required", "additionalProperties"})
    if kind in (None, "object") and "allOf" in node:
        return "allOf", frozenset({"allOf"})
    if kind in (None, "array") and ("items" in node or "prefixItems" in node):
        if isinstance(node.get("items") or node.get("prefixItems"), list):
            return "tuple", frozenset({"items", "prefixItems"})
        return "array", frozenset({"items", "minItems", "maxItems"})
    if kind in (None, "string") and "pattern" in node:
        return "pattern", frozenset({"pattern"})
    if kind in (None, "string") and node.get("format") in STRING_FORMATS_ALL:
        return "format", frozenset({"format"})
    if kind == "string" and ("minLength" in node or "maxLength" in node):
        return "length", frozenset({"minLength", "maxLength"})
    if kind == "object" or not node:
        return "any_object", frozenset()
    return "primitive", frozenset()


def grammar_problem(schema: object) -> str | None:
    """What of ``schema`` llama.cpp's grammar would not enforce (the first such place), or None
    when a grammar made from it admits exactly answers that satisfy it (or stricter ones: an
    object grammar never writes properties the schema does not name).

    Args:
        schema: a JSON schema (a dict).

    Returns:
        None, or ``path: what`` (for example ``properties/id/pattern: a pattern must start with
        ^ and end with $``); a schema that is not a valid JSON schema (an invalid ``pattern``
        included) is a problem too.
    """
    if isinstance(schema, Mapping):
        checked = schema_validator(dict(schema))
        if isinstance(checked, str):
            return f"(schema): not a valid JSON schema: {checked}"
    return _Walk(schema).problem()


_QUANTIFIER = re.compile(r"\{(\d*)(?:,(\d*))?\}")


def _pattern_problem(pattern: str) -> str | None:
    """What of a regular expression llama.cpp's converter cannot turn into a grammar (it raises,
    loops for ever, or reads it otherwise): no ``^...$`` around it, ``(?...)`` groups,
    back-references, a class that starts with ``]``, unbalanced brackets, a ``{`` that is not a
    quantifier."""
    if not (pattern.startswith("^") and pattern.endswith("$")):
        return f"a pattern must start with ^ and end with $, got {pattern!r}"
    body, depth, i = pattern[1:-1], 0, 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            if body[i + 1 : i + 2].isdigit():
                return f"back-references are not supported, got {pattern!r}"
            i += 2
            continue
        if c == "[":
            j = i + 2 if body[i + 1 : i + 2] == "^" else i + 1
            if body[j : j + 1] == "]":
                return f"a character class may not start with ], got {pattern!r}"
            while j < len(body) and body[j] != "]":
                j += 2 if body[j] == "\\" else 1
            if j >= len(body):
                return f"unbalanced [ in {pattern!r}"
            i = j + 1
            continue
        if c == "(" and body[i + 1 : i + 2] == "?":
            return f"groups with (?...) are not supported, got {pattern!r}"
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth < 0:
            return f"unbalanced ) in {pattern!r}"
        if c == "{":
            match = _QUANTIFIER.match(body, i)
            if match is None or not (match.group(1) or match.group(2)):
                return f"a {{ that is not a quantifier {{n}}, {{n,}} or {{n,m}} in {pattern!r}"
            i = match.end()
            continue
        i += 1
    return f"unbalanced ( in {pattern!r}" if depth else None


class _Walk:
    """One walk over a schema, following local ``$ref`` once each."""

    def __init__(self, root: object) -> None:
        self.root = root
        self.seen: set[str] = set()

    def problem(self) -> str | None:
        return self.node(self.root, "(schema)")

    def node(self, node: object, path: str) -> str | None:
        if not isinstance(node, Mapping):
            return f"{path}: a schema must be an object, not {node!r}"
        name, reads = _branch(node)
        kind = node.get("type")
        if kind is not None and name not in ("anyOf", "ref"):
            types = kind if isinstance(kind, list) else [kind]
            unknown = [t for t in types if t not in PRIMITIVE_TYPES]
            if unknown:
                return f"{path}/type: unknown type {unknown[0]!r}"
        ignored = sorted(
            key
            for key in node
            if key not in reads and key not in ANNOTATIONS and not (key == "type" and name != "ref")
        )
        if name == "anyOf" and "type" in node:
            ignored = sorted({*ignored, "type"})
        if ignored:
            return f"{path}/{ignored[0]}: not enforced by llama.cpp's grammar next to {name}"
        if name == "primitive" and kind is None:
            return f"{path}: a schema with no type, const, enum, properties or items"
        check = _CHECKS.get(name)
        return self.bounds(node, path) or (check(self, node, path) if check else None)

    def ref(self, node: Mapping[str, Any], path: str) -> str | None:
        ref = node["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return f"{path}/$ref: only local references (#/...) are enforced, not {ref!r}"
        if ref in self.seen:
            return None
        self.seen.add(ref)
        target: object = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                return f"{path}/$ref: {ref!r} cannot be resolved"
            target = target[part]
        if isinstance(target, Mapping) and "$ref" in target:  # the converter fails on these
            return f"{path}/$ref: {ref!r} refers to another reference"
        return self.node(target, ref[2:])

    def bounds(self, node: Mapping[str, Any], path: str) -> str | None:
        """An ``enum`` with no value or bounds no value meets (the grammar would be empty)."""
        if "enum" in node and not node["enum"]:
            return f"{path}/enum: no value can satisfy an empty enum"
        for low, high in (("minItems", "maxItems"), ("minLength", "maxLength")):
            if node.get(low, 0) > node.get(high, float("inf")):
                return f"{path}/{low}: no value can satisfy {low} > {high}"
        return None

    def any_of(self, node: Mapping[str, Any], path: str) -> str | None:
        if "oneOf" in node:
            return f"{path}/oneOf: 'exactly one of' is not enforced by a grammar; use anyOf"
        branches = node["anyOf"]
        if not isinstance(branches, list) or not branches:
            return f"{path}/anyOf: must be a non-empty list"
        return _first(self.node(b, f"{path}/anyOf/{i}") for i, b in enumerate(branches))

    def obj(self, node: Mapping[str, Any], path: str) -> str | None:
        properties = node.get("properties", {})
        if not isinstance(properties, Mapping):
            return f"{path}/properties: must be an object"
        missing = [name for name in node.get("required", []) if name not in properties]
        if missing:
            return f"{path}/required: {missing[0]!r} is required but not among the properties"
        extra = node.get("additionalProperties", True)
        found = _first(self.node(s, f"{path}/properties/{k}") for k, s in properties.items())
        if found is None and isinstance(extra, Mapping):
            found = self.node(extra, f"{path}/additionalProperties")
        return found

    def tuple_(self, node: Mapping[str, Any], path: str) -> str | None:
        if "items" in node and "prefixItems" in node:
            return f"{path}/prefixItems: not enforced next to items"
        items = node.get("items") or node["prefixItems"]
        return _first(self.node(s, f"{path}/items/{i}") for i, s in enumerate(items))

    def array(self, node: Mapping[str, Any], path: str) -> str | None:
        return self.node(node["items"], f"{path}/items")

    def pattern(self, node: Mapping[str, Any], path: str) -> str | None:
        pattern = node["pattern"]
        if not isinstance(pattern, str):
            return f"{path}/pattern: a pattern must be a string"
        problem = _pattern_problem(pattern)
        return None if problem is None else f"{path}/pattern: {problem}"

    def all_of(self, node: Mapping[str, Any], path: str) -> str | None:
        return f"{path}/allOf: only partly enforced by llama.cpp's grammar"


_CHECKS: dict[str, Callable[[_Walk, Mapping[str, Any], str], str | None]] = {
    "ref": _Walk.ref,
    "anyOf": _Walk.any_of,
    "object": _Walk.obj,
    "tuple": _Walk.tuple_,
    "array": _Walk.array,
    "pattern": _Walk.pattern,
    "allOf": _Walk.all_of,
}


def _first(problems: Any) -> str | None:
    return next((p for p in problems if p is not None), None)
