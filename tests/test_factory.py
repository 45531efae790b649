"""Tests of controlscope.models._factory.make_model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from controlscope.core import ChatModel, Message, ModelRequest, ModelResponse
from controlscope.models import OpenAIModel, ReplayModel, ScriptedModel, make_model


def test_openai_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_model(
        "openai:gpt-x", base_url="http://127.0.0.1:9/v1", api_key="k", timeout_s=3, max_retries=0
    )
    assert isinstance(model, OpenAIModel)
    assert (model.model, model.timeout_s, model.max_retries) == ("gpt-x", 3.0, 0)
    assert model.model_id == "openai:gpt-x"  # replicas at other URLs share cache entries
    monkeypatch.setenv("CONTROLSCOPE_MODEL", "from-env")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    from_env = make_model("openai", n_ctx=None)  # None-valued options are ignored
    assert isinstance(from_env, OpenAIModel) and from_env.model == "from-env"


def test_scripted_and_replay_specs(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["hello"]))
    scripted = make_model(f"scripted:{script}")
    assert isinstance(scripted, ScriptedModel)
    request = ModelRequest(messages=(Message(role="user", content="x"),))
    assert scripted.complete(request).text == "hello"

    event = {
        "type": "model_call",
        "role": "reviewer",
        "request": request.model_dump(),
        "response": ModelResponse(text="r").model_dump(),
    }
    (tmp_path / "events.jsonl").write_text(json.dumps(event) + "\n")
    replay = make_model(f"replay:{tmp_path}", role="reviewer")
    assert isinstance(replay, ReplayModel) and isinstance(replay, ChatModel)
    assert replay.complete(request).text == "r"


@pytest.mark.parametrize(
    ("spec", "kwargs", "message"),
    [
        ("gpt-4", {}, "unknown model spec 'gpt-4'"),
        ("anthropic:claude", {}, "unknown model spec"),
        ("replay:/nowhere", {}, "needs a role"),
        ("scripted:", {}, "needs a path"),
        ("local", {"base_url": "http://x"}, "apply only to openai"),
        ("openai:m", {"n_ctx": 4096}, r"\['n_ctx'\] do not apply to openai"),
        ("local:0.5b", {"timeout_s": 3}, r"\['timeout_s'\] do not apply to local"),
    ],
)
def test_bad_specs_are_clear_errors(spec: str, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_model(spec, **kwargs)  # type: ignore[arg-type]


def test_missing_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        make_model(f"scripted:{tmp_path / 'absent.json'}")
    with pytest.raises(FileNotFoundError, match=r"events\.jsonl"):
        make_model(f"replay:{tmp_path}", role="planner")


def test_importing_the_package_stays_cheap() -> None:
    """``controlscope.models`` (and the CLI module in it) must not import openai or llama_cpp."""
    code = (
        "import sys, controlscope.models, controlscope.models._factory;"
        "print(sorted(m for m in ('openai', 'llama_cpp') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
@pytest.mark.needs_weights
def test_local_specs_build_the_local_model() -> None:
    from controlscope.models import LocalModel, ensure_weights

    model = make_model("local:0.5b", n_ctx=512, n_threads=1)
    assert isinstance(model, LocalModel)
    assert "0.5b" in model.model_id
    path = ensure_weights("0.5b")
    by_path = make_model(str(path), n_ctx=512, n_threads=1)
    assert isinstance(by_path, LocalModel)
