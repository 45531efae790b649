"""The run settings, each declared once: what specs, panels and experiments resolve to is what
the recorded version resolved them to (``tests/fixtures/settings_v1``, written before the
settings had one schema) and a panel folder that version wrote resumes; every setting is an
option of ``run`` with its description and default, and a key of the panel file
(``request_timeout_s`` too); a request tells what it states from what it leaves out."""

from __future__ import annotations

import argparse
import enum
import importlib.util
import json
import pickle
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import ValidationError

import controlscope as cs
from controlscope import panel as cp
from controlscope.cli import build_parser
from controlscope.cli import main as cli
from controlscope.cli._run_args import spec_from_args
from controlscope.cli._settings_args import flag
from controlscope.core import RunStartEvent, setting_info

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
        for option, was in options.items():
            now = found[verb].get(option)
            assert now is not None, f"{verb} {option} is gone"
            assert now["choices"] == was["choices"], (verb, option)
            if verb != "run":  # run's namespace is read by the spec alone (the specs above)
                assert (now["dest"], now["default"]) == (was["dest"], was["default"]), option


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


# --- one declaration per setting: Python, the command line and the panel file ------------------


def test_every_run_setting_is_an_option_of_run_with_its_description_and_default() -> None:
    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    run = {a.option_strings[0]: a for a in verbs.choices["run"]._actions if a.option_strings}
    for name, field in cs.RunSettings.model_fields.items():
        assert field.description, f"{name} has no description"
        option = run.get(flag(name, field))
        assert option is not None, f"run has no option for {name}"
        assert option.help is not None and option.help.startswith(field.description), name
        default = field.get_default(call_default_factory=True)
        shown = setting_info(field).shown_default
        if shown is None and default not in (None, {}) and not isinstance(default, bool):
            shown = default.name.lower() if isinstance(default, enum.Enum) else str(default)
        if shown is not None:
            words = option.help.replace(",", "")
            assert f"default: {shown.replace(',', '')}" in words, (name, option.help)
    assert run["--isolation"].choices == ["auto", "bwrap", "none"]


def test_the_isolation_option_reaches_the_spec(tmp_path: Path) -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["run", "--task", record.TASK, "--isolation", "none", "--out", str(tmp_path / "r")]
    )
    spec = spec_from_args(args)
    assert spec.isolation == "none" and "isolation" in spec.model_fields_set


def test_a_request_timeout_of_zero_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r"
    argv = ["run", "--task", record.TASK, "--request-timeout-s", "0", "--out", str(out)]
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--request-timeout-s" in err and "greater than 0" in err
    assert not out.exists()


def _keep_panel(tmp_path: Path, budgets: str) -> Path:
    script = tmp_path / "planner.json"
    script.write_text(json.dumps(["Done."]))
    path = tmp_path / "panel.toml"
    path.write_text(
        f'tasks = ["{record.TASK}"]\nscopes = ["keep"]\n'
        f'[planner]\nmodel = "scripted:{script}"\n[budgets]\n{budgets}\n'
        "[execution]\nworkers = 1\n"
    )
    return path


def test_a_panel_sets_request_timeout_s_and_it_reaches_run_start(tmp_path: Path) -> None:
    config = cp.load_config(_keep_panel(tmp_path, "request_timeout_s = 5"))
    assert config.budgets.request_timeout_s == 5.0
    result = cp.run_panel(config, tmp_path / "panel")
    assert result.complete
    [keep] = result.plan.runs
    [start] = [
        e for e in cs.read_events(cp.run_dir(tmp_path / "panel", keep.id)) if e.type == "run_start"
    ]
    assert isinstance(start, RunStartEvent) and start.config["request_timeout_s"] == 5.0
    written = json.loads((tmp_path / "panel" / cp.MANIFEST_FILE).read_text())
    assert written["config"]["budgets"]["request_timeout_s"] == 5.0
    plain = cp.load_config(_keep_panel(tmp_path, ""))
    with pytest.raises(cp.PanelError, match="request_timeout_s"):  # another experiment
        cp.open_panel(tmp_path / "panel", plain, cp.plan_panel(plain))


def test_a_newer_panel_key_is_left_out_of_the_identity_while_it_is_its_default() -> None:
    data = {"tasks": [record.TASK], "budgets": {"max_calls": 5}}
    plain = cp.parse_config(data)
    assert "request_timeout_s" not in plain.identity()["budgets"]
    assert "request_timeout_s" not in plain.model_dump(mode="json")["budgets"]
    timed = cp.parse_config({**data, "budgets": {"max_calls": 5, "request_timeout_s": 9}})
    assert timed.identity()["budgets"]["request_timeout_s"] == 9.0
    assert timed.settings().stated() == {"max_calls": 5, "request_timeout_s": 9.0}


# --- what a request states ----------------------------------------------------------------------


def test_an_unstated_resolved_setting_reads_its_default_and_dumps_as_none(tmp_path: Path) -> None:
    spec = cs.RunSpec(task=record.TASK, out=tmp_path, max_tokens=None, temperature=0.2)
    assert spec.max_tokens == 16384 and "max_tokens" not in spec.model_fields_set
    assert spec.model_dump()["max_tokens"] is None and spec.model_dump()["temperature"] == 0.2
    assert spec.stated_settings() == {"temperature": 0.2}
    again = spec.replace(seed=3)
    assert again.stated_settings() == {"temperature": 0.2} and again.seed == 3
    copied = pickle.loads(pickle.dumps(spec))
    assert copied.model_fields_set == spec.model_fields_set
    stated = spec.model_copy(update={"max_tokens": 300})
    assert stated.stated_settings() == {"temperature": 0.2, "max_tokens": 300}


def test_a_reviewer_protocol_checks_only_what_is_stated(tmp_path: Path) -> None:
    fast = cs.RunSpec(task=record.TASK, out=tmp_path, reviewer_protocol="fast")
    assert fast.stated_settings()["reviewer_tool_choice"] == "required"
    with pytest.raises(ValidationError, match="reviewer protocol has reviewer_tool_choice"):
        cs.RunSpec(
            task=record.TASK, out=tmp_path, reviewer_protocol="fast", reviewer_tool_choice="auto"
        )


def test_panel_sections_read_panel_keys_and_answer_them_as_written() -> None:
    config = cp.parse_config(
        {
            "tasks": [record.TASK],
            "planner": {"format": "fenced", "temperature": 0.4},
            "reviewer": {"mode": "json", "options": {"k": 1}, "max_tokens": 99},
        }
    )
    planner, reviewer = config.planner, config.reviewer
    assert (planner.planner_format, planner.format) == ("fenced", "fenced")
    assert (planner.planner_temperature, planner.temperature) == (0.4, 0.4)
    assert (planner.planner_options, planner.options) == ({}, None)  # left out of the file
    assert (reviewer.review_mode, reviewer.mode, reviewer.tool_choice) == ("json", "json", None)
    assert (reviewer.reviewer_options, reviewer.max_tokens, reviewer.model) == ({"k": 1}, 99, None)
    with pytest.raises(cp.ConfigError, match=r"planner\.planner_format: unknown key"):
        cp.parse_config({"tasks": [record.TASK], "planner": {"planner_format": "tools"}})
    assert config.settings().stated() == {
        "planner_format": "fenced",
        "planner_temperature": 0.4,
        "review_mode": "json",
        "reviewer_max_tokens": 99,
        "reviewer_options": {"k": 1},
    }


def test_the_readme_lists_every_panel_key() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    keys = readme[readme.index("- Keys: every run setting") :].split("\n- ", 1)[0]
    sections = {
        "top level": cs.core.ConditionSettings,
        "[planner]": cp.PlannerSettings,
        "[reviewer]": cp.ReviewerSettings,
        "[budgets]": cp.BudgetSettings,
        "[execution]": cp.ExecutionSettings,
    }
    for where, section in sections.items():
        assert where in keys
        for name, field in section.model_fields.items():
            assert f"`{field.alias or name}`" in keys, (where, name)
