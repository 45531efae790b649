"""An experiment resolved into its panels' configurations: base, size, the panel's ``set`` and
the caller's overrides deep-merged, the roles' models filled in, each checked by the panel
layer's own :func:`controlscope.panel.parse_config` (paper 4, A.5: the panels share one
exact-request cache, so a task's source programs are the same in every panel)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from controlscope.core import ModelSpec
from controlscope.experiments._config import SIZES, Experiment, ExperimentError, Size
from controlscope.panel import (
    ConfigError,
    PanelConfig,
    anchor_paths,
    lending_difference,
    parse_config,
)

DEFAULT_MODEL = "local"
"""Every role's model unless given: the embedded model."""

SHARED_CACHE = "cache.sqlite"
"""The experiment's exact-request cache, in its output folder."""

PANEL_CACHE = f"../../{SHARED_CACHE}"
"""The shared cache as a panel names it (from ``OUT/panels/NAME/``)."""


def deep_merge(base: Mapping[str, Any], *layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """``base`` with each layer merged in turn: tables merge key by key, any other value
    (a list, a string) replaces the one below. Nothing given is modified."""
    out: dict[str, Any] = copy.deepcopy(dict(base))
    for layer in layers:
        for key, value in (layer or {}).items():
            if isinstance(value, Mapping) and isinstance(out.get(key), dict):
                out[key] = deep_merge(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out


def role_models(experiment: Experiment, models: Mapping[str, str] | None) -> dict[str, str]:
    """Every role's model spec: the given ones, the rest the embedded model.

    Args:
        experiment: the experiment.
        models: role -> spec; the key ``*`` sets every role not named.

    Raises:
        ExperimentError: a role the experiment does not use, or an empty spec.
    """
    given = dict(models or {})
    every = given.pop("*", DEFAULT_MODEL)
    roles = experiment.experiment.roles
    for role, spec in given.items():
        if role not in roles:
            raise ExperimentError(
                f"model role {role!r} is not used by {experiment.name}; its roles: "
                + ", ".join(roles)
            )
        if not spec.strip():
            raise ExperimentError(f"model role {role!r}: give a model spec")
    if not every.strip():
        raise ExperimentError("give a model spec")
    return {role: given.get(role, every).strip() for role in roles}


def role_options(
    experiment: Experiment, options: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    """The roles' provider options, checked: role -> options passed with every request of
    that role (a reasoning mode for the ``reasoning`` role, e.g. ``{"reasoning_effort":
    "high"}``; paper 4, M18). A panel's own ``reviewer.options`` in the file win.

    Raises:
        ExperimentError: a role the experiment does not use, or options that are not a table.
    """
    out: dict[str, dict[str, Any]] = {}
    roles = experiment.experiment.roles
    for role, given in (options or {}).items():
        if role not in roles:
            raise ExperimentError(
                f"options of role {role!r}: {experiment.name} does not use it; its roles: "
                + ", ".join(roles)
            )
        if not isinstance(given, Mapping):
            raise ExperimentError(f"options of role {role!r}: give a table of provider options")
        out[role] = copy.deepcopy(dict(given))
    return out


def resolve(
    experiment: Experiment,
    size: Size = "quick",
    models: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    base_url: str | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[tuple[str, PanelConfig]]:
    """Each panel's configuration, checked (nothing runs; tasks are checked against the
    environment by :func:`controlscope.panel.plan_panel` when a panel runs).

    A panel's keys are, in order: the roles' models (the planner role plans, the panel's
    ``reviewer`` role reviews), ``base``, the size's keys, the panel's ``set``, the panel's
    own keys for the size, then ``overrides``: a model the file names itself (a frozen
    source program's or candidate's scripted model) wins over its role's. A panel that does
    not name its ``execution.keep_from`` takes its Keep runs from the first earlier panel that
    can lend them (:func:`~controlscope.panel.lending_difference`: one Keep run per unit of
    an experiment, paper 4, A.5). Relative paths
    (scripted models, environments named with a path) are read from the experiment file's
    folder.

    Args:
        experiment: the experiment.
        size: ``quick`` or ``paper``.
        models: role -> model spec (see :func:`role_models`).
        overrides: panel keys deep-merged last into every panel (tests shrink an experiment
            with them).
        base_url: the OpenAI-compatible endpoint of ``openai`` specs.
        options: role -> provider options (see :func:`role_options`): the planner role's
            go with every planning request, a panel's reviewer role's with its reviews.

    Returns:
        ``(panel name, configuration)`` in the experiment's order.

    Raises:
        ExperimentError: an unknown size or role, options of a role not used, or a panel
            that does not check (one line: the panel and key named).
    """
    if size not in SIZES:
        raise ExperimentError(f"unknown size {size!r}; sizes: {', '.join(SIZES)}")
    specs = role_models(experiment, models)
    extra = role_options(experiment, options)
    sized = deep_merge(experiment.base, experiment.sizes.get(size))
    out: list[tuple[str, PanelConfig]] = []
    for entry in experiment.panels:
        roles: dict[str, Any] = {
            "planner": {"model": specs["planner"]},
            "reviewer": {"model": specs[entry.reviewer]},
            "execution": {"cache_file": PANEL_CACHE},
        }
        if base_url is not None:
            roles["planner"]["base_url"] = base_url
        for part, role in (("planner", "planner"), ("reviewer", entry.reviewer)):
            if role in extra:
                roles[part]["options"] = extra[role]
        if entry.sources is not None:
            roles["sources"] = entry.sources
        data = deep_merge(roles, sized, entry.set, entry.sizes.get(size), overrides)
        data = anchor_paths(data, experiment.path.parent)
        source = f"{experiment.name}: panel {entry.name}"
        try:
            config = parse_config(data, source=source)
            lender = _keep_lender(config, out)
            if lender is not None:
                data = deep_merge(data, {"execution": {"keep_from": f"../{lender}"}})
                config = parse_config(data, source=source)
        except ConfigError as err:
            raise ExperimentError(str(err)) from None
        out.append((entry.name, config))
    return out


def _keep_lender(config: PanelConfig, earlier: list[tuple[str, PanelConfig]]) -> str | None:
    """The first earlier panel whose Keep runs ``config``'s panel reuses (one Keep run per
    unit of an experiment, paper 4, A.5: :func:`~controlscope.panel.lending_difference`);
    None when it names its own ``keep_from`` or none can lend."""
    if config.execution.keep_from is not None:
        return None
    return next(
        (name for name, c in earlier if lending_difference(c, config, keep=True) is None), None
    )


def unserved(configs: list[tuple[str, PanelConfig]]) -> list[str]:
    """What the models could not serve, one line each: panels under the reasoning protocol
    whose reviewer has no reasoning options (the embedded model, a scripted model, or an
    endpoint given no ``reviewer.options``): they ran with the protocol's settings (automatic
    tool choice, 16,384 tokens, Keep after an invalid review) but no reasoning mode (paper 4,
    M18). A model takes reasoning options when its spec does
    (:attr:`~controlscope.core.ModelSpec.takes_provider_options`: an ``openai`` model).

    Raises:
        ValueError: a reasoning reviewer's spec that names no model (``ModelSpec.parse``).
    """
    lines = []
    for name, config in configs:
        reviewer = config.reviewer
        spec = reviewer.model or config.planner.model
        if reviewer.protocol != "reasoning":
            continue
        if not ModelSpec.parse(spec).takes_provider_options:
            why = "has no reasoning options"
        elif not reviewer.options:
            why = "was given no reasoning options (reviewer.options)"
        else:
            continue
        lines.append(
            f"panel {name}: the reasoning reviewer {spec} {why}; it ran under the reasoning "
            "protocol's settings without a reasoning mode"
        )
    return lines
