"""The local model's processes, against the real 0.5B weights and real signals: a crash or an OOM
kill of a model process is a ``runtime_crash`` ProviderError, a hang a ``timeout`` at the call's
deadline (``runtime_crash`` while loading); either costs only that purpose's process, and no
process outlives its controller on any exit path."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from _process_support import SignalWhenBusy, alive, sigint_as, wait_for, wait_until_busy
from controlscope.core import Message, ModelRequest, ProviderError, ToolSpec
from controlscope.models._chat_template import ChatTemplate
from controlscope.models._local import EVAL_GRID, PURPOSES, LocalModel

pytestmark = [pytest.mark.slow, pytest.mark.needs_weights]

MODEL = "0.5b"


def _request(purpose: str, text: str = "Say OK.", max_tokens: int = 4) -> ModelRequest:
    return ModelRequest(
        messages=(Message(role="user", content=text),),
        temperature=0.0,
        max_tokens=max_tokens,
        purpose=purpose,  # type: ignore[arg-type]
    )


def _long_request(purpose: str) -> ModelRequest:
    """A prompt of about 1,500 tokens: seconds of prompt evaluation to interrupt."""
    text = " ".join(f"item{i}" for i in range(500))
    return _request(purpose, f"Sort these: {text}", max_tokens=8)


def test_prompt_rendering_matches_llama_cpp_python() -> None:
    """The controller renders the GGUF's template itself, exactly as llama-cpp-python would."""
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    with LocalModel(MODEL, n_ctx=512) as model:
        vocab = Llama(model_path=str(model.path), vocab_only=True, verbose=False)
        template = vocab.metadata["tokenizer.chat_template"]
        theirs = Jinja2ChatFormatter(template=template, eos_token="<|im_end|>", bos_token="")
        ours = ChatTemplate(template, bos_token="", eos_token="<|im_end|>")
        tool = ToolSpec(name="move_file", description="Move a file. ünïcode")
        tools = [{"type": "function", "function": tool.model_dump()}]
        messages = [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Move a.txt to b/ [now] {please}"},
        ]
        expected = theirs(messages=messages, tools=tools).prompt
        assert ours.render(messages, tools) == expected
        assert "ünïcode" in expected  # tojson keeps non-ASCII text
        request = ModelRequest(
            messages=tuple(Message(**m) for m in messages),
            tools=(tool,),
        )
        assert model.render_prompt(request) == theirs(messages=messages, tools=tools).prompt


@pytest.mark.parametrize(
    ("sig", "words"),
    [
        (signal.SIGSEGV, "killed by signal SIGSEGV (11)"),
        (signal.SIGKILL, "out-of-memory killer"),
    ],
)
def test_a_process_killed_mid_request_is_a_runtime_crash_of_that_purpose_only(
    sig: signal.Signals, words: str
) -> None:
    with LocalModel(MODEL, n_ctx=2048) as model:
        colours = "Colours are everywhere around us. " * 12 + "Name three colours."
        first = model.complete(_request("planner", colours))
        model.complete(_request("reviewer"))
        planner_pid, reviewer_pid = model.pids["planner"], model.pids["reviewer"]

        killer = SignalWhenBusy(reviewer_pid, sig)
        killer.start()
        with pytest.raises(ProviderError) as info:
            model.complete(_long_request("reviewer"))
        killer.join(5)
        assert killer.error is None and killer.sent, "the signal must land mid-request"
        err = info.value
        assert err.kind == "runtime_crash"
        assert f"reviewer process (pid {reviewer_pid})" in str(err) and words in str(err)
        assert "while answering a complete request" in str(err)
        assert not alive(reviewer_pid)
        assert model.pids == {"planner": planner_pid}

        # the planner's process and its KV prefix are untouched
        again = model.complete(_request("planner", colours))
        assert again.usage.cached_tokens == first.usage.input_tokens // EVAL_GRID * EVAL_GRID > 0
        # the reviewer gets a new process on its next request
        answer = model.complete(_request("reviewer", "Say OK.", max_tokens=8))
        assert answer.text and model.pids["reviewer"] != reviewer_pid
        assert model.pids["planner"] == planner_pid


def test_a_hung_process_is_killed_at_the_calls_deadline() -> None:
    with LocalModel(MODEL, n_ctx=512) as model:
        model.complete(_request("other"))
        pid = model.pids["other"]
        model.request_timeout_s = 2.0
        os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(ProviderError) as info:
            model.complete(_request("other"))
        waited = time.monotonic() - started
        assert 2.0 <= waited < 15.0, waited
        assert info.value.kind == "timeout"
        assert "did not answer within the call's deadline of 2 s and was killed" in str(info.value)
        assert "by then it had not started on the prompt" in str(info.value)  # hung, not slow
        assert not alive(pid) and model.pids == {}
        model.request_timeout_s = 300.0
        assert model.complete(_request("other", max_tokens=8)).text
        assert model.pids["other"] != pid


def test_a_request_that_fails_part_way_says_how_far_the_process_had_got() -> None:
    """The process keeps its progress as it goes: killed once it has generated a few tokens, the
    error says it had evaluated the whole prompt and generated at least those."""
    with LocalModel(MODEL, n_ctx=2048) as model:
        model.complete(_request("planner"))
        pid, process = model.pids["planner"], model._slots["planner"].process
        assert process is not None

        def kill_once_generating() -> None:
            wait_for(lambda: process.progress().generated_tokens >= 3, 120, "3 tokens")
            os.kill(pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_once_generating, daemon=True)
        killer.start()
        with pytest.raises(ProviderError) as info:
            model.complete(_request("planner", "Count from 1 to 300, one a line.", 600))
        killer.join(5)
    found = re.search(
        r"by then it had evaluated (\d+) of the (\d+) prompt tokens to evaluate \((\d+) more "
        r"kept from its context\) and generated (\d+) tokens",
        str(info.value),
    )
    assert info.value.kind == "runtime_crash" and found, str(info.value)
    evaluated, to_evaluate, kept, generated = (int(n) for n in found.groups())
    assert evaluated == to_evaluate > 0 and kept % EVAL_GRID == 0 and generated >= 3


def test_a_process_that_cannot_load_in_time_is_a_runtime_crash() -> None:
    with LocalModel(MODEL, n_ctx=512, start_timeout_s=0.05) as model:
        with pytest.raises(ProviderError) as info:
            model.complete(_request("planner"))
        assert info.value.kind == "runtime_crash"
        assert "while loading the weights" in str(info.value)
        assert model.pids == {}


def test_weights_llama_cpp_cannot_load_are_a_load_error(tmp_path: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with LocalModel(str(bad), n_ctx=512) as model:
        with pytest.raises(ProviderError) as info:
            model.complete(_request("planner"))
        assert info.value.kind == "other"
        assert "could not load" in str(info.value) and "broken.gguf" in str(info.value)
        assert model.pids == {}


def test_close_and_the_context_manager_end_every_process() -> None:
    model = LocalModel(MODEL, n_ctx=512)
    for purpose in PURPOSES:
        model.complete(_request(purpose))
    pids = sorted(model.pids.values())
    assert len(pids) == 3 and all(alive(p) for p in pids)
    model.close()
    assert model.pids == {} and not any(alive(p) for p in pids)
    model.close()  # harmless twice
    with model:  # a closed model starts new processes on demand
        model.complete(_request("planner"))
        pid = model.pids["planner"]
        assert pid not in pids
    assert not alive(pid)


_CONTROLLER = textwrap.dedent(
    """
    import sys, time
    from controlscope.models._local import LocalModel
    from controlscope.core import Message, ModelRequest

    mode = sys.argv[1]
    model = LocalModel("0.5b", n_ctx=2048)
    req = lambda text, n: ModelRequest(
        messages=(Message(role="user", content=text),), temperature=0.0, max_tokens=n,
        purpose="planner")
    model.complete(req("Say OK.", 2))
    print(model.pids["planner"], flush=True)
    if mode == "exception":
        raise RuntimeError("the controller fails")
    if mode == "return":
        sys.exit(0)
    words = " ".join(f"item{i}" for i in range(500))
    model.complete(req("Sort these: " + words, 400))
    time.sleep(600)
    """
)


@pytest.mark.parametrize("how", ["return", "exception", "SIGTERM", "SIGKILL", "SIGINT"])
def test_no_process_outlives_its_controller(how: str) -> None:
    """Normal exit and an uncaught exception (no close(): the finalizer at exit), SIGTERM and
    SIGKILL of the controller mid-request (the process notices its parent died), and Ctrl-C
    (SIGINT to the whole process group, as a terminal sends it)."""
    with sigint_as("terminal"):  # Ctrl-C interrupts it, however this session was started
        controller = subprocess.Popen(
            [sys.executable, "-c", _CONTROLLER, "busy" if how.startswith("SIG") else how],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    try:
        assert controller.stdout is not None
        child = int(controller.stdout.readline())
        if how.startswith("SIG"):
            wait_until_busy(child, cpu_s=0.3)
            if how == "SIGINT":
                os.killpg(controller.pid, signal.SIGINT)
            else:
                os.kill(controller.pid, getattr(signal, how))
        controller.wait(timeout=60)
        wait_for(lambda: not alive(child), 5.0, f"model process {child} to end after {how}")
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    stderr = controller.stderr.read() if controller.stderr else ""
    if how == "SIGINT":
        assert "KeyboardInterrupt" in stderr, stderr  # the controller, not the child, decided
    if how == "exception":
        assert "the controller fails" in stderr


def test_runtime_check_decodes_in_a_child_process() -> None:
    """The check setup runs: the configured runtime decodes; on a CPU with AMX it must not use
    AMX kernels (exit status 4 otherwise)."""
    from controlscope.models._runtime_check import cpu_has_amx

    out = subprocess.run(
        [sys.executable, "-m", "controlscope.models._runtime_check", "--model", MODEL],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert out.stdout.startswith("llama.cpp decodes on this CPU")
    if cpu_has_amx():
        assert "AMX" not in out.stdout


def test_model_child_reports_its_configuration_errors_as_json() -> None:
    """The child's protocol: the first line configures it; a missing file is answered, not a
    crash (the controller reports it as a load error)."""
    child = subprocess.run(
        [sys.executable, "-m", "controlscope.models._local_child"],
        input=json.dumps(
            {
                "model_path": "/nonexistent.gguf",
                "n_ctx": 64,
                "n_threads": 1,
                "grid": 64,
                "seed": 0,
                "verbose": False,
                "parent_pid": os.getpid(),
            }
        )
        + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    answer = json.loads(child.stdout.splitlines()[0])
    assert answer["ok"] is False and "nonexistent.gguf" in answer["message"]
    assert child.returncode == 1
