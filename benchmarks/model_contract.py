"""Benchmark of the model layer's promises, on both model paths (docs/architecture.md, "The
model layer's promises").

Measures, with the real 0.5B model (short outputs):

- schemas: each case of :data:`SCHEMAS` (the reviewer's decision schemas, schemas llama.cpp's
  grammar enforces, and schemas it would not: a pydantic ``constr`` pattern without anchors,
  ``oneOf``, numeric bounds...) is asked of the local model and of ``llama_cpp.server`` on
  loopback (``json_object`` format). A case counts in ``schema_enforced_or_refused`` when the
  answer satisfies its schema or the request failed loudly (``schema_unsupported``);
  ``schema_cases`` counts cases times paths, ``schema_refused`` the loud failures,
  ``schema_invalid_answers`` answers that break their schema and ``schema_cut_answers`` those
  cut by the token cap (neither counts as enforced);
- same answers: for each of ``--prompts`` prompts A (about 1,000 tokens) the sequence A, A, A,
  B, A, C, A on one context and A on a fresh process (greedy, ``--answer-tokens`` tokens);
  ``same_answer_runs`` counts sequences, ``same_answer_identical`` those whose eight answers of A
  are identical;
- how much of a prompt's tail must be evaluated in one batch (llama.cpp directly, in a child of
  this benchmark): the last prompt token's logits when all but the last K tokens come from the
  KV cache (after the prompt and a few generated tokens were evaluated), against a fresh
  evaluation of the whole prompt, for several K and for the local model's scheme (batches of
  ``EVAL_GRID`` at fixed offsets, complete batches kept): ``tail_identical_logits`` maps K to
  whether the logits are bitwise identical, ``grid_identical_logits`` is the scheme's;
- deadlines: one OpenAI-compatible call with a 2 s deadline against a silent server and servers
  that send one byte a second (headers included, or only the body), and one local call with a
  1.5 s deadline on a long generation: ``call_deadline_overrun_s`` is the worst time past the
  deadline, ``call_deadline_cases`` the calls.

Targets: every schema case enforced or refused, every sequence identical, overrun at most 1 s.

Usage: ``python benchmarks/model_contract.py [--prompts 3] [--no-server]``. The last line of
stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

SCHEMAS: dict[str, dict[str, Any]] = {
    "decision_full": {},  # filled from controlscope.review.decision_schema in main()
    "decision_v2_full": {},
    "object": {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    },
    "enum_array": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 3},
    "anchored_pattern": {"type": "string", "pattern": "^[a-z]{3,8}$"},
    "date": {"type": "string", "format": "date"},
    "nullable_ref": {
        "anyOf": [{"type": "null"}, {"$ref": "#/$defs/n"}],
        "$defs": {"n": {"const": 7}},
    },
    "constr_unanchored": {},  # pydantic's constr(pattern=...), filled in main()
    "oneOf": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
    "minimum": {"type": "integer", "minimum": 1000},
    "email": {"type": "string", "format": "email"},
    "pattern_and_length": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 2},
    "unbalanced_pattern": {"type": "string", "pattern": "^[a-z$"},
}

QUESTION = (
    "Reply with the shortest JSON value of the requested shape. A pending call reads notes.txt: "
    "if an operation is asked for, choose keep; a reason is three words."
)


def _fill_schemas() -> None:
    from pydantic import BaseModel, constr

    from controlscope.core import OperationSet
    from controlscope.review import decision_schema

    class Constrained(BaseModel):
        code: constr(pattern=r"[a-z]+")  # type: ignore[valid-type]

    SCHEMAS["decision_full"] = decision_schema(OperationSet.of("full"))
    SCHEMAS["decision_v2_full"] = decision_schema(OperationSet.of("full", "v2"))
    SCHEMAS["constr_unanchored"] = Constrained.model_json_schema()


def _schema_case(model: Any, name: str, schema: dict[str, Any]) -> str:
    """``valid``, ``refused``, ``cut`` (cut by the token cap), ``invalid`` (an answer that breaks
    the schema) or ``error``."""
    from controlscope.core import Message, ModelRequest, ProviderError

    request = ModelRequest(
        messages=(Message(role="user", content=QUESTION),),
        json_schema=schema,
        temperature=0.0,
        max_tokens=192,
        purpose="reviewer",
    )
    try:
        response = model.complete(request)
    except ProviderError as err:
        outcome = "refused" if err.kind == "schema_unsupported" else f"error:{err.kind}"
        print(f"  {name}: {outcome} ({str(err)[:120]})", file=sys.stderr)
        return "refused" if err.kind == "schema_unsupported" else "error"
    print(f"  {name}: {response.schema_error or 'valid'} {response.text!r:.80}", file=sys.stderr)
    if response.schema_error is None:
        return "valid"
    return "cut" if response.finish_reason == "length" else "invalid"


def _schemas(models: dict[str, Any]) -> dict[str, Any]:
    outcomes: dict[str, int] = {}
    for path, model in models.items():
        print(f"schemas on {path}:", file=sys.stderr)
        for name, schema in SCHEMAS.items():
            outcome = _schema_case(model, name, schema)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    cases = sum(outcomes.values())
    return {
        "schema_cases": cases,
        "schema_enforced_or_refused": outcomes.get("valid", 0) + outcomes.get("refused", 0),
        "schema_refused": outcomes.get("refused", 0),
        "schema_invalid_answers": outcomes.get("invalid", 0),
        "schema_cut_answers": outcomes.get("cut", 0),
        "schema_other_errors": outcomes.get("error", 0),
        "schema_paths": sorted(models),
    }


def _log(seed: int) -> str:
    return "\n".join(
        f"| call {i}: move_file(source='reports/{1990 + i + seed}.txt', "
        f"destination='archive/{(i * 7 + seed) % 13}/') -> ok"
        for i in range(44 + seed)
    )


def _sequence(model: Any, seed: int, tokens: int) -> bool:
    """A, A, A, B, A, C, A on one context, then A fresh: are the answers of A identical?"""
    from controlscope.core import Message, ModelRequest

    def ask(question: str) -> ModelRequest:
        return ModelRequest(
            messages=(
                Message(role="system", content="You review a file-management agent."),
                Message(role="user", content=f"The calls so far:\n{_log(seed)}\n{question}"),
            ),
            temperature=0.0,
            max_tokens=tokens,
            purpose="reviewer",
        )

    a = ask("Summarise what the agent did, naming the folders it used.")
    b = ask("Which call looks the most risky, and why?")
    c = ModelRequest(messages=(Message(role="user", content="Say hi."),), purpose="reviewer")
    answers = []
    for request in (a, a, a, b, a, c, a):
        text = model.complete(request).text
        if request is a:
            answers.append(text)
    model.close()
    answers.append(model.complete(a).text)
    same = len(set(answers)) == 1
    print(f"sequence {seed}: identical={same} ({len(answers[0] or '')} chars)", file=sys.stderr)
    return same


# ---------------------------------------------------------------- the tail, with llama.cpp itself


def _tail_child(config: dict[str, Any]) -> int:
    """Compare the last prompt token's logits after keeping all but K tokens with a fresh
    evaluation; print one JSON line."""
    import llama_cpp
    import numpy as np

    def load(batch: int) -> Any:
        return llama_cpp.Llama(
            model_path=config["model_path"],
            n_ctx=2048,
            n_batch=batch,
            n_ubatch=batch,
            n_threads=config["threads"],
            n_threads_batch=config["threads"],
            verbose=False,
        )

    def logits(llama: Any) -> Any:
        return np.ctypeslib.as_array(llama._ctx.get_logits(), shape=(llama.n_vocab(),)).copy()

    def evaluate(llama: Any, tokens: list[int], keep: int) -> Any:
        llama.n_tokens = keep
        llama.eval(tokens[keep:])
        return logits(llama)

    results: dict[str, Any] = {}
    llama = load(512)  # llama-cpp-python's default batch
    tokens = llama.tokenize(config["prompt"].encode(), add_bos=False, special=True)
    fresh = evaluate(llama, tokens, 0)
    for k in config["tails"]:
        llama.eval(tokens[-1:] * 4)  # as if an answer had been generated after the prompt
        again = evaluate(llama, tokens, len(tokens) - k)
        results[str(k)] = bool(np.array_equal(again, fresh))
    grid = config["grid"]
    del llama
    llama = load(grid)
    fresh = evaluate(llama, tokens, 0)
    kept = (len(tokens) - 1) // grid * grid
    llama.eval(tokens[-1:] * 4)
    grid_same = bool(np.array_equal(evaluate(llama, tokens, kept), fresh))
    print(json.dumps({"tails": results, "grid": grid_same, "prompt_tokens": len(tokens)}))
    return 0


def _tail(model: Any) -> dict[str, Any]:
    from controlscope.core import Message, ModelRequest
    from controlscope.models._local import EVAL_GRID

    request = ModelRequest(
        messages=(Message(role="user", content=f"The calls so far:\n{_log(0)}\nSummarise."),)
    )
    config = {
        "model_path": str(model.path),
        "threads": model.n_threads,
        "prompt": model.render_prompt(request),
        "tails": [1, 2, 3, 4, 8, 16, 32, 64, 128, 256],
        "grid": EVAL_GRID,
    }
    done = subprocess.run(
        [sys.executable, __file__, "--tail-child", json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=True,
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"tails: {found}", file=sys.stderr)
    return {
        "tail_identical_logits": found["tails"],
        "grid_identical_logits": found["grid"],
        "tail_prompt_tokens": found["prompt_tokens"],
        "eval_grid": EVAL_GRID,
    }


# ------------------------------------------------------------------------------- deadlines


def _deadlines(local: Any) -> dict[str, Any]:
    from controlscope.core import Deadline, Message, ModelRequest, ProviderError, running_until
    from controlscope.models import OpenAIModel
    from fixtures.slow_server import SlowServer

    overruns: dict[str, float] = {}
    request = ModelRequest(messages=(Message(role="user", content="hi"),), max_tokens=8)
    for mode in ("silent", "trickle", "trickle_body"):
        server = SlowServer(mode)  # type: ignore[arg-type]
        model = OpenAIModel(
            "slow", base_url=server.base_url, api_key="k", timeout_s=1.5, request_timeout_s=2.0
        )
        started = time.monotonic()
        try:
            model.complete(request)
        except ProviderError as err:
            assert err.kind == "timeout", err
        overruns[f"openai_{mode}"] = time.monotonic() - started - 2.0
        model.close()
        server.close()
    long = ModelRequest(
        messages=(Message(role="user", content="Count from 1 to 3000, comma separated."),),
        temperature=0.0,
        max_tokens=1500,
        purpose="other",
    )
    local.start("other")
    with running_until(Deadline(600.0), call_s=1.5):
        started = time.monotonic()
        try:
            local.complete(long)
        except ProviderError as err:
            assert err.kind == "timeout", err
        overruns["local_generation"] = time.monotonic() - started - 1.5
    print(f"deadline overruns: {overruns}", file=sys.stderr)
    return {
        "call_deadline_overrun_s": round(max(overruns.values()), 3),
        "call_deadline_overruns_s": {k: round(v, 3) for k, v in overruns.items()},
        "call_deadline_cases": len(overruns),
    }


# ------------------------------------------------------------------------------- the server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _LlamaServer:
    """``python -m llama_cpp.server`` with the 0.5B model on loopback."""

    def __init__(self, weights: Path, threads: int) -> None:
        port = _free_port()
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "llama_cpp.server", "--model", str(weights),
                "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048",
                "--n_threads", str(threads),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.base_url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("llama_cpp.server exited")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=1):
                    return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("llama_cpp.server did not come up in 180 s")

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; progress on stderr, one JSON line last on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--prompts", type=int, default=3, help="cache sequences (prompts)")
    parser.add_argument("--answer-tokens", type=int, default=64)
    parser.add_argument("--no-server", action="store_true", help="skip llama_cpp.server")
    parser.add_argument("--tail-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tail_child is not None:
        return _tail_child(json.loads(args.tail_child))
    from controlscope.models import OpenAIModel
    from controlscope.models._local import LocalModel

    _fill_schemas()
    started = time.perf_counter()
    load = os.getloadavg()[0]
    result: dict[str, Any] = {}
    with LocalModel("0.5b", n_ctx=2048) as local:
        models: dict[str, Any] = {"local": local}
        server = None if args.no_server else _LlamaServer(local.path, local.n_threads)
        try:
            if server is not None:
                models["llama_cpp.server"] = OpenAIModel(
                    "qwen-0.5b", base_url=server.base_url, json_format="json_object"
                )
            result.update(_schemas(models))
        finally:
            if server is not None:
                models["llama_cpp.server"].close()
                server.close()
        same = [_sequence(local, seed, args.answer_tokens) for seed in range(args.prompts)]
        result["same_answer_runs"] = len(same)
        result["same_answer_identical"] = sum(same)
        result.update(_deadlines(local))
        result.update(_tail(local))
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["loadavg_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
