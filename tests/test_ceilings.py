"""Every numeric setting has a ceiling, declared once (``controlscope.core``'s annotated types),
stated in the option's help and checked before anything runs: on the command line (every verb),
in panel and experiment files, and in the Python spec (``RunSpec``, ``Condition``,
``TaskBudgets``, a panel's configuration, the functions that take numbers)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

import controlscope as cs
from controlscope import core
from controlscope.analysis import report
from controlscope.cli import build_parser, main
from controlscope.panel import ConfigError, parse_config, run_panel
from controlscope.replay import Recording, ReplayError, branch

FIXTURE = Path(__file__).parent / "fixtures" / "main_job"
TASK = "file_context/file_splitting"


def _script(tmp_path: Path) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(["Done."]))
    return f"scripted:{path}"


def _number_options() -> list[tuple[str, argparse.Action]]:
    """Every option of every verb whose value is a number."""
    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for verb, sub in verbs.choices.items():
        parsers = [sub]
        for action in sub._actions:  # model pull|list
            if isinstance(action, argparse._SubParsersAction):
                parsers += list(action.choices.values())
        for each in parsers:
            for action in each._actions:
                kind = action.type
                numeric = kind in (int, float) or getattr(kind, "__name__", "") in (
                    "integer",
                    "number",
                )
                if numeric and action.option_strings:
                    found.append((verb, action))
    return found


def test_every_number_option_states_its_range_in_its_help() -> None:
    options = _number_options()
    assert len(options) >= 25  # run's budgets and sampling, branch, replay, panel, report...
    missing = [
        f"{verb} {action.option_strings[0]}: {action.help!r}"
        for verb, action in options
        if not any(word in (action.help or "") for word in (" to ", "at most", "below"))
    ]
    assert missing == []
    helps = {a.option_strings[0]: a.help or "" for _, a in options}
    assert f"{core.MAX_WORKER_MEMORY_MB:,}" in helps["--worker-memory-mb"]
    assert f"{core.MAX_DRAWS:,}" in helps["--draws"]


RUN_CASES = [
    ("--worker-memory-mb", "1000000000000000", "1048576"),
    ("--max-seconds", "1e9", "604800"),
    ("--max-wall-seconds", "1e9", "604800"),
    ("--block-exec-s", "1e9", "604800"),
    ("--request-timeout-s", "1e9", "604800"),
    ("--max-calls", "100001", "100000"),
    ("--max-turns", "100001", "100000"),
    ("--max-repairs", "1001", "1000"),
    ("--max-blocks", "100001", "100000"),
    ("--max-block-requests", "100001", "100000"),
    ("--max-tokens", "10000000", "1048576"),
    ("--reviewer-max-tokens", "10000000", "1048576"),
    ("--draw", "1000", "1000"),
    ("--source-program", "100", "100"),
    ("--seed", str(2**63), str(2**63 - 1)),
]


@pytest.mark.parametrize(("option", "value", "ceiling"), RUN_CASES)
def test_run_refuses_a_number_over_its_ceiling_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, ceiling: str
) -> None:
    out = tmp_path / "r"
    argv = ["run", "--task", TASK, "--model", _script(tmp_path), "--schedule", "never"]
    code = main([*argv, "--quiet", option, value, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and option in err and ceiling in err, err
    assert not out.exists()


def _panel_file(tmp_path: Path, **keys: object) -> Path:
    lines = [
        f"tasks = [{TASK!r}]",
        'scopes = ["keep"]',
        "[planner]",
        f"model = {_script(tmp_path)!r}",
    ]
    top = [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    path = tmp_path / "panel.toml"
    path.write_text("\n".join([*top, *lines]) + "\n")
    return path


@pytest.mark.parametrize(
    ("argv", "option", "ceiling"),
    [
        (["branch", str(FIXTURE), "--at", "0", "--scope", "keep", "--model", "recorded",
          "--draws", "1000000000", "--out", "{out}"], "--draws", "1,000"),
        (["replay", str(FIXTURE), "--until", "100000", "--out", "{out}"], "--until", "99,999"),
        (["replay", str(FIXTURE), "--operation", "100000", "--endpoint", "candidate",
          "--out", "{out}"], "--operation", "99,999"),
        (["panel", "{panel}", "--workers", "1025", "--out", "{out}"], "--workers", "1,024"),
        (["experiment", "table1_sustained", "--workers", "1025", "--out", "{out}"],
         "--workers", "1,024"),
        (["report", "{out}", "--resamples", "1000001"], "--resamples", "1,000,000"),
        (["report", "{out}", "--seed", str(2**63)], "--seed", "9,223,372,036,854,775,807"),
        (["report", "{out}", "--level", "1"], "--level", "below 1"),
        (["view", "{out}", "--port", "65536"], "--port", "65,535"),
    ],
)  # fmt: skip
def test_every_verb_refuses_a_number_over_its_ceiling_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], option: str, ceiling: str
) -> None:
    out = tmp_path / "out"
    panel = _panel_file(tmp_path)
    given = [a.replace("{out}", str(out)).replace("{panel}", str(panel)) for a in argv]
    code = main(given)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and option in err and ceiling in err, err
    assert not out.exists()


def test_a_panel_file_over_a_ceiling_is_refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p"
    code = main(["panel", str(_panel_file(tmp_path, draws=100_000_000_000)), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "draws" in err and "1000" in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    ("keys", "where"),
    [
        ({"draws": 1001}, "draws"),
        ({"source_programs": 101}, "source_programs"),
        ({"seeds": [2**63]}, "seeds"),
        ({"sources": [100]}, "sources"),
        ({"budgets": {"worker_memory_mb": 10**15}}, "budgets.worker_memory_mb"),
        ({"budgets": {"max_seconds": 1e9}}, "budgets.max_seconds"),
        ({"budgets": {"max_calls": 100_001}}, "budgets.max_calls"),
        ({"planner": {"max_tokens": 10**7}}, "planner.max_tokens"),
        ({"reviewer": {"temperature": 2.5}}, "reviewer.temperature"),
        ({"execution": {"workers": 1025}}, "execution.workers"),
        ({"execution": {"cpus_per_run": 1e6}}, "execution.cpus_per_run"),
    ],
)
def test_panel_configuration_keys_have_the_options_ceilings(
    keys: dict[str, object], where: str
) -> None:
    with pytest.raises(ConfigError, match=where):
        parse_config({"tasks": [TASK], **keys})


def test_experiment_cells_have_ceilings() -> None:
    from controlscope.experiments._config import Cell

    for bad in ({"draw": 1000}, {"source": 100}, {"program": 100}, {"k": 100_001}):
        with pytest.raises(ValidationError):
            Cell.model_validate({"metric": "within", "panel": "p", "k": 1, **bad})
    Cell.model_validate({"metric": "within", "panel": "p", "k": 20, "draw": 999, "source": 99})


def test_the_python_spec_has_the_same_ceilings_as_the_command_line() -> None:
    over = {
        "worker_memory_mb": core.MAX_WORKER_MEMORY_MB + 1,
        "max_seconds": core.MAX_SECONDS * 2,
        "max_wall_seconds": core.MAX_SECONDS * 2,
        "request_timeout_s": core.MAX_SECONDS * 2,
        "max_calls": core.MAX_CALLS + 1,
        "max_tokens": core.MAX_TOKENS + 1,
        "draw": core.MAX_DRAWS,
        "source_program": core.MAX_SOURCE_PROGRAMS,
    }
    for name, value in over.items():
        with pytest.raises(ValidationError, match=name):
            cs.RunSpec(task=TASK, out="runs/x", **{name: value})  # type: ignore[arg-type]
    at = cs.RunSpec(task=TASK, out="runs/x", worker_memory_mb=core.MAX_WORKER_MEMORY_MB)
    assert at.worker_memory_mb == core.MAX_WORKER_MEMORY_MB
    for bad in (
        {"worker_memory_mb": 10**15},
        {"draw": core.MAX_DRAWS},
        {"max_tokens": core.MAX_TOKENS + 1},
        {"request_timeout_s": 1e12},
    ):
        with pytest.raises(ValidationError):
            core.Condition(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        core.TaskBudgets(wall_seconds=core.MAX_SECONDS + 1)
    with pytest.raises(ValidationError):
        core.TaskBudgets(primitive_calls=core.MAX_CALLS + 1)


def test_functions_that_take_numbers_check_their_ranges_before_anything_runs(
    tmp_path: Path,
) -> None:
    config = parse_config({"tasks": [TASK], "scopes": ["keep"], "planner": {"model": "x"}})
    with pytest.raises(ConfigError, match="workers"):
        run_panel(config, tmp_path / "p", workers=core.MAX_WORKERS + 1)
    assert not (tmp_path / "p").exists()
    with pytest.raises(ReplayError, match="draws"):
        branch(
            Recording.load(FIXTURE),
            at=0,
            scopes=["keep"],
            out=tmp_path / "b",
            planner=None,
            reviewer=None,
            draws=10**9,
        )
    assert not (tmp_path / "b").exists()
    for bad in ({"resamples": core.MAX_RESAMPLES + 1}, {"seed": -1}, {"level": 1.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            report(tmp_path, **bad)  # type: ignore[arg-type]
    assert core.range_problem("draws", core.Draws, core.MAX_DRAWS) is None
    assert "draws" in (core.range_problem("draws", core.Draws, True) or "")  # not a number


def _numeric_panel_keys() -> list[tuple[str | None, str, object]]:
    """Every key of a panel file that takes a number (or a list of them), found from the
    schema: (section or None for the top level, key, a value it accepts)."""
    from controlscope.panel import PanelConfig

    found: list[tuple[str | None, str, object]] = []
    sections = {None: PanelConfig}
    for name, field in PanelConfig.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            sections[name] = field.annotation
    for section, model in sections.items():
        for name, field in model.model_fields.items():
            key = field.alias or name
            if section is None and key in sections:
                continue
            for good in (1.5, [0], 1, 2048):
                data = {key: good}
                try:
                    parse_config({"tasks": [TASK], **({section: data} if section else data)})
                except ConfigError:
                    continue
                found.append((section, key, good))
                break
    return found


def test_every_numeric_panel_key_is_found() -> None:
    keys = {f"{s}.{k}" if s else k for s, k, _ in _numeric_panel_keys()}
    for key in ("draws", "seeds", "sources", "budgets.max_calls", "budgets.max_seconds",
                "planner.max_tokens", "reviewer.temperature", "execution.workers",
                "budgets.worker_memory_mb", "execution.cpus_per_run",
                "planner.max_connections"):  # fmt: skip
        assert key in keys, sorted(keys)


@pytest.mark.parametrize("loose", [True, "5", 5.0])
def test_a_panel_file_refuses_loose_numbers_as_the_command_line_does(loose: object) -> None:
    accepted = []
    for section, key, good in _numeric_panel_keys():
        value: object = loose
        if isinstance(good, float) and isinstance(loose, float):
            continue  # 5.0 is a float: only an integer key refuses it
        if isinstance(good, list):
            value = [loose]
        data = {key: value}
        try:
            parse_config({"tasks": [TASK], **({section: data} if section else data)})
        except ConfigError as err:
            assert key in str(err) and "\n" not in str(err), err
            continue
        accepted.append(f"{section}.{key} = {value!r}")
    assert not accepted


@pytest.mark.parametrize(
    ("keys", "where"),
    [
        ({"python_allowed_only": 1}, "python_allowed_only"),
        ({"execution": {"cache": "yes"}}, "execution.cache"),
        ({"params": {TASK: {"students": True}}}, "params"),
        ({"params": {TASK: {"students": 2.0}}}, "params"),
    ],
)
def test_a_panel_file_refuses_loose_flags_and_parameters(
    keys: dict[str, object], where: str
) -> None:
    with pytest.raises(ConfigError, match=where):
        parse_config({"tasks": [TASK], **keys})


def test_a_loose_number_in_a_panel_file_is_one_line_naming_key_and_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "panel.toml"
    path.write_text(f'tasks = ["{TASK}"]\n[budgets]\nmax_calls = true\n')
    out = tmp_path / "p"
    code = main(["panel", str(path), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert str(path) in err and "budgets.max_calls" in err, err
    assert not out.exists()


def test_the_python_spec_refuses_loose_numbers_and_flags() -> None:
    loose: dict[str, object] = {
        "max_calls": True,
        "max_turns": "5",
        "max_tokens": 5.0,
        "worker_memory_mb": 2048.0,
        "temperature": "0.5",
        "max_seconds": False,
        "seed": 1.0,
        "draw": True,
        "allow_network": 1,
        "params": {"students": True},
    }
    for name, value in loose.items():
        with pytest.raises(ValidationError, match=name):
            cs.RunSpec(task=TASK, out="runs/x", **{name: value})  # type: ignore[arg-type]
    spec = cs.RunSpec(task=TASK, out="runs/x", max_seconds=60, temperature=1)
    assert spec.max_seconds == 60.0 and spec.temperature == 1.0  # an integer is a float
    with pytest.raises(ValidationError):
        core.TaskBudgets(primitive_calls=True)  # type: ignore[arg-type]


def test_experiment_cells_refuse_loose_numbers() -> None:
    from controlscope.experiments._config import Cell

    for bad in ({"draw": True}, {"source": "1"}, {"k": 20.0}, {"program": False}):
        with pytest.raises(ValidationError):
            Cell.model_validate({"metric": "within", "panel": "p", "k": 1, **bad})
