"""Command-line options generated from run settings: one option per field of a settings model
(:class:`~controlscope.core.RunSettings`' sections, :class:`~controlscope.run.RunSpec`, a panel's
execution section), so a setting declared once appears with its name, type, choices,
description, range and default in every verb that takes it."""

from __future__ import annotations

import argparse
import enum
import inspect
import json
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from controlscope.cli._console import NumberOption, path_option
from controlscope.core import setting_info

M = TypeVar("M", bound=BaseModel)


def flag(name: str, field: FieldInfo) -> str:
    """The option of the field ``name``: ``--name-with-dashes``; a dict field is given one
    ``KEY=JSON`` item at a time, under its singular (``--planner-option``)."""
    dashed = name.replace("_", "-")
    return f"--{dashed.removesuffix('s')}" if _kind(field) is dict else f"--{dashed}"


def _value_type(field: FieldInfo) -> Any:
    """The field's type with its range (``Annotated``), an ``X | None`` read as ``X``."""
    given = field.annotation
    if typing.get_origin(given) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(given) if a is not type(None)]
        given = members[0] if len(members) == 1 else given
    if field.metadata and typing.get_origin(given) is not Annotated:
        return Annotated[(given, *field.metadata)]
    return given


def _kind(field: FieldInfo) -> Any:
    """The field's plain type: ``int``, ``float``, ``str``, ``bool``, ``dict``, ``Path``, a
    ``Literal`` or an enum."""
    plain = _value_type(field)
    if typing.get_origin(plain) is Annotated:
        plain = typing.get_args(plain)[0]
    origin = typing.get_origin(plain)
    return origin if origin in (dict, Literal) else plain


def _choices(field: FieldInfo) -> list[str] | None:
    plain = _value_type(field)
    if typing.get_origin(plain) is Annotated:
        plain = typing.get_args(plain)[0]
    if typing.get_origin(plain) is Literal:
        return [str(a) for a in typing.get_args(plain)]
    if isinstance(plain, type) and issubclass(plain, enum.Enum):
        return [m.name.lower() for m in plain]
    return None


def _shown(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return value.name.lower()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _help(field: FieldInfo, span: str, extra: str | None) -> str:
    """Description; range; default (or its words; a replay's recording first where it
    decides); extra words (a list of forms)."""
    parts = [field.description or ""]
    parts += [span] if span else []
    info = setting_info(field)
    shown = info.shown_default
    default = field.get_default(call_default_factory=True)
    plain = default is not None and not isinstance(default, bool) and default != {}
    if shown is None and plain and not field.is_required():
        shown = _shown(default)
    if shown and info.resolved is not None:
        shown = f"{shown} (a replay: the recording's)"
    parts += [f"default: {shown}"] if shown else []
    parts += [extra] if extra else []
    return "; ".join(p for p in parts if p).replace("%", "%%")


def _option(
    field: FieldInfo, *, keep_default: bool, checked: bool, extra: str | None
) -> dict[str, Any]:
    """``add_argument``'s keyword arguments for ``field``."""
    kind = _kind(field)
    options: dict[str, Any] = {}
    span = ""
    if kind is bool:
        options["action"] = "store_true"
    elif kind is dict:
        options.update(action="append", metavar="KEY=JSON")
    elif kind in (int, float):
        number = NumberOption(_value_type(field))
        span = number.span
        options["type"] = number if checked else kind
    elif kind is Path:
        options["type"] = path_option
    choices = _choices(field)
    if choices is not None:
        options["choices"] = choices
    if field.is_required():
        options["required"] = True
    elif not keep_default:
        options["default"] = argparse.SUPPRESS
    elif kind is not bool:
        options["default"] = [] if kind is dict else field.get_default(call_default_factory=True)
    options["help"] = _help(field, span, extra)
    return options


def add_settings(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    *,
    fields: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    title: str | None = None,
    titles: Mapping[str, str] | None = None,
    keep_defaults: bool = False,
    checked: bool = False,
    extra_help: Mapping[str, str] | None = None,
) -> dict[str, argparse._ArgumentGroup]:
    """Add one option per field of ``model`` (:func:`flag`; a ``Literal`` or enum field gets
    its choices, a bool one is a switch, a dict one takes ``KEY=JSON`` items, a path is read
    by :func:`~controlscope.cli._console.path_option`), its help the field's description,
    range and default.

    Args:
        parser: the verb's parser.
        model: the settings model whose fields become options.
        fields: the fields to add, in this order; None: every field, grouped by section.
        exclude: fields left to the verb's own options.
        title: one group for every option; None: a group per section (the class that
            declares the field: its ``group``, else ``titles``).
        titles: field name -> group title, over the section's.
        keep_defaults: an option not given holds its field's default (the verb reads the
            namespace); otherwise it is left out of the namespace, so only what is given
            reaches the model (:func:`settings_from_args`).
        checked: a number is checked against its range as it is read (one line, exit
            status 2: for numbers a verb hands to a function); otherwise the model checks it.
        extra_help: field name -> words added to its help (the forms a value takes).

    Returns:
        The groups, by title, for the verb's own options.
    """
    if fields is None:
        left = [n for n in model.model_fields if n not in set(exclude)]
        fields = sorted(left, key=_by_section(model, titles or {}))
    groups: dict[str, argparse._ArgumentGroup] = {}
    for name in fields:
        field = model.model_fields[name]
        group_title = title or (titles or {}).get(name) or _section_title(model, name)
        if group_title not in groups:
            groups[group_title] = parser.add_argument_group(group_title)
        options = _option(
            field,
            keep_default=keep_defaults,
            checked=checked,
            extra=(extra_help or {}).get(name),
        )
        groups[group_title].add_argument(flag(name, field), dest=name, **options)
    return groups


def _declaring(model: type[BaseModel], name: str) -> type[BaseModel]:
    """The class in ``model``'s bases that declares the field ``name``."""
    for cls in model.__mro__:
        if issubclass(cls, BaseModel) and name in inspect.get_annotations(cls):
            return cls
    return model


def _section_title(model: type[BaseModel], name: str) -> str:
    title = getattr(_declaring(model, name), "group", "options")
    return title if isinstance(title, str) else "options"


def _by_section(model: type[BaseModel], titles: Mapping[str, str]) -> Any:
    """A sort key of field names: by group (the model's own first, then the sections'
    in :data:`controlscope.core.SECTIONS` order, then the titles given apart), then in the
    model's field order."""
    from controlscope.core import SECTIONS

    order = [getattr(model, "group", "options"), *(s.group for s in SECTIONS)]
    order += list(titles.values())
    names = list(model.model_fields)

    def key(name: str) -> tuple[int, int]:
        title = titles.get(name) or _section_title(model, name)
        return order.index(title), names.index(name)

    return key


def key_values(option: str, items: list[str], *, json_values: bool) -> dict[str, Any]:
    """``KEY=VALUE`` items as a dict; values read as JSON when they parse, else as text (or,
    without ``json_values``, as integers when they look like one).

    Raises:
        ValueError: an item without ``=`` or a key.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{option} expects KEY=VALUE, got {item!r}")
        if json_values:
            try:
                out[key] = json.loads(value)
            except json.JSONDecodeError:
                out[key] = value
        else:
            out[key] = int(value) if value.lstrip("-").isdigit() else value
    return out


def settings_from_args(args: argparse.Namespace, model: type[M], **fixed: Any) -> M:
    """The ``model`` the given options describe (those :func:`add_settings` added), with
    ``fixed`` values on top.

    Raises:
        ValueError: a malformed ``KEY=JSON`` item.
        pydantic.ValidationError: a value out of range or of the wrong form.
    """
    given: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if name in fixed or not hasattr(args, name):
            continue
        value = getattr(args, name)
        if _kind(field) is dict:
            value = key_values(flag(name, field), value, json_values=True) or None
        given[name] = value
    return model(**given, **fixed)
