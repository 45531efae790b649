"""The run settings: what specs, panels and experiments resolve to is what the recorded version
resolved them to (``tests/fixtures/settings_v1``, written before the settings had one schema),
and a panel folder that version wrote resumes."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from controlscope import panel as cp

GOLDEN = Path(__file__).parent / "fixtures" / "settings_v1"


def _load_recorder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("settings_record", GOLDEN / "record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


record = _load_recorder()
recorded: dict[str, Any] = json.loads((GOLDEN / "settings.json").read_text())


@pytest.mark.parametrize("name", sorted(record.SPEC_CASES))
def test_a_run_spec_dumps_states_and_prepares_as_recorded(tmp_path: Path, name: str) -> None:
    assert record.spec_result(name, tmp_path) == recorded["specs"][name]


def test_panel_configurations_and_their_runs_resolve_as_recorded(tmp_path: Path) -> None:
    found = record.panel_results(tmp_path)
    assert found.keys() == recorded["panels"].keys()
    for name, value in found.items():
        for part in ("dump", "identity", "specs"):
            assert value[part] == recorded["panels"][name][part], (name, part)


def test_packaged_experiments_hash_as_recorded() -> None:
    assert record.experiment_hashes() == recorded["experiments"]


def test_run_options_give_the_recorded_specs() -> None:
    assert record.cli_results()["specs"] == recorded["cli"]["specs"]


def test_every_recorded_option_is_there_with_its_destination_and_choices() -> None:
    found = record.cli_results()["options"]
    for verb, options in recorded["cli"]["options"].items():
        for flag, was in options.items():
            now = found[verb].get(flag)
            assert now is not None, f"{verb} {flag} is gone"
            assert now["choices"] == was["choices"], (verb, flag)
            if verb != "run":  # run's namespace is read by the spec alone (the specs above)
                assert (now["dest"], now["default"]) == (was["dest"], was["default"]), (verb, flag)


def test_a_panel_folder_of_the_recorded_version_resumes(tmp_path: Path) -> None:
    folder = tmp_path / "panel"
    shutil.copytree(record.PANEL_FOLDER, folder)
    config = cp.parse_config(record.panel_matrix()["sectioned"])
    plan = cp.plan_panel(config, check_models=False)
    found = cp.open_panel(folder, config, plan)  # refused if the identity differed
    assert found.config.identity() == config.identity()
    fresh = tmp_path / "fresh"
    record.write_panel_folder(fresh)
    written = json.loads((fresh / cp.MANIFEST_FILE).read_text())
    assert written == json.loads((record.PANEL_FOLDER / cp.MANIFEST_FILE).read_text())
