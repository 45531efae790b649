"""Model specs parsed once (``controlscope.core.ModelSpec``): every form the model factory
accepts, its words for the forms it refuses, and a configuration file's relative paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controlscope.core import DEFAULT_MAX_TOKENS, MODEL_SPEC_FORMS, ModelSpec
from controlscope.experiments import unserved
from controlscope.models import make_model
from controlscope.panel import PanelConfig, anchor_paths, default_workers, parse_config
from controlscope.panel import _runner as panel_runner
from controlscope.run import build_models

# text -> (kind, arg, is_local, names_path, path, takes_provider_options, canonical text)
FORMS: dict[str, tuple[str, str, bool, bool, Path | None, bool, str]] = {
    "local": ("local", "", True, False, None, False, "local"),
    "local:1.5b": ("local", "1.5b", True, False, None, False, "local:1.5b"),
    "local:0.5b": ("local", "0.5b", True, False, None, False, "local:0.5b"),
    "local:/w/q.gguf": ("local", "/w/q.gguf", True, False, Path("/w/q.gguf"), False, ""),
    "models/q.gguf": ("local", "models/q.gguf", True, False, Path("models/q.gguf"), False, ""),
    "Q.GGUF": ("local", "Q.GGUF", True, False, Path("Q.GGUF"), False, "local:Q.GGUF"),
    "openai": ("openai", "", False, False, None, True, "openai"),
    "openai:gpt-4o": ("openai", "gpt-4o", False, False, None, True, "openai:gpt-4o"),
    # only the first colon separates the kind; a served model named like a GGUF is not local
    "openai:org/m:q4.gguf": ("openai", "org/m:q4.gguf", False, False, None, True, ""),
    "scripted:a.json": ("scripted", "a.json", False, True, Path("a.json"), False, ""),
    "replay:runs/a": ("replay", "runs/a", False, True, Path("runs/a"), False, ""),
    "  replay:runs/a \n": ("replay", "runs/a", False, True, Path("runs/a"), False, "replay:runs/a"),
}


@pytest.mark.parametrize("text", FORMS)
def test_every_form_parses_to_its_kind_and_argument(text: str) -> None:
    kind, arg, is_local, names_path, path, provider, canonical = FORMS[text]
    spec = ModelSpec.parse(text)
    assert (spec.kind, spec.arg) == (kind, arg)
    assert (spec.is_local, spec.names_path, spec.path) == (is_local, names_path, path)
    assert spec.takes_provider_options is provider
    assert str(spec) == (canonical or f"{kind}:{arg}")
    assert ModelSpec.parse(str(spec)) == spec  # the canonical text reads back as itself


# Refused by the factory today; the parsed spec refuses them with the same words.
BAD = [
    "",
    "   ",
    "gpt-4",
    "anthropic:claude",
    "Local",  # kinds are lower case
    "C:/w/q.gguf",  # the kind is what precedes the first colon
    "scripted:",
    "replay:",
    " replay:  ",
]


@pytest.mark.parametrize("text", BAD)
def test_bad_specs_are_refused_in_the_factorys_words(text: str) -> None:
    with pytest.raises(ValueError) as parsed:
        ModelSpec.parse(text)
    with pytest.raises(ValueError) as built:
        make_model(text)
    assert str(parsed.value) == str(built.value)
    message = str(parsed.value)
    assert message.endswith(f"expected one of: {MODEL_SPEC_FORMS}") or "needs a path" in message


def test_the_constructor_checks_what_parse_checks() -> None:
    with pytest.raises(ValueError, match=r"scripted spec needs a path: scripted:PATH"):
        ModelSpec("scripted")
    with pytest.raises(ValueError, match="unknown model spec 'mystery:x'"):
        ModelSpec("mystery", "x")  # type: ignore[arg-type]
    assert ModelSpec("openai") == ModelSpec.parse("openai")


SPECS_IN_A_FILE = [
    "scripted:answers.json",
    "replay:../runs/a",
    "replay:~/runs/b",
    "replay:/abs/runs/c",
    "local:q.gguf",
    "q.gguf",
    "openai:m",
    "local",
]


@pytest.mark.parametrize("text", SPECS_IN_A_FILE)
def test_anchored_reads_a_relative_path_from_the_files_folder_as_panels_do(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    folder = tmp_path / "panels"
    anchored = ModelSpec.parse(text).anchored(folder)
    by_panel = anchor_paths({"planner": {"model": text}}, folder)["planner"]["model"]
    assert anchored == ModelSpec.parse(by_panel)
    if anchored.names_path:
        assert anchored.path is not None and anchored.path.is_absolute()
    else:
        assert anchored == ModelSpec.parse(text)


def test_anchored_paths() -> None:
    folder = Path("/srv/panels")
    assert str(ModelSpec.parse("replay:../runs/a").anchored(folder)) == "replay:/srv/runs/a"
    assert str(ModelSpec.parse("scripted:s.json").anchored(folder)) == "scripted:/srv/panels/s.json"


def test_a_served_model_named_like_a_gguf_runs_on_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``openai:NAME.gguf`` names a model behind an endpoint: it gets the served models'
    formats and budgets, lets a panel run one run per core, and takes reasoning options; a
    GGUF file (``local:PATH.gguf``, ``PATH.gguf``) runs here, one run at a time."""
    served = "openai:org/m:q4.gguf"
    models = build_models(planner=served, reviewer=None, base_url="http://127.0.0.1:9/v1")
    assert (models.planner_format, models.review_mode) == ("tools", "tools")
    assert (models.max_tokens, models.view_limits) == (DEFAULT_MAX_TOKENS, None)
    assert models.reviewer is models.planner  # one spec, one model

    def config(model: str, **reviewer: Any) -> PanelConfig:
        keys = {"tasks": ["file_context/file_splitting"], "scopes": ["keep", "full"]}
        planner = {"model": "openai:planner"}
        return parse_config({**keys, "planner": planner, "reviewer": {"model": model, **reviewer}})

    monkeypatch.setattr(panel_runner, "machine_cores", lambda: 8)
    assert default_workers(config(served)) == 8
    assert default_workers(config("q4.gguf")) == default_workers(config("local:q4.gguf")) == 1

    reasoning = {"protocol": "reasoning", "options": {"reasoning_effort": "high"}}
    assert unserved([("p", config(served, **reasoning))]) == []
    [line] = unserved([("p", config("local:q4.gguf", **reasoning))])
    assert "the reasoning reviewer local:q4.gguf has no reasoning options" in line
