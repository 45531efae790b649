"""Benchmark of the embedded local model against raw llama.cpp (README, "The embedded local model").

Measures, in one run on this machine:

- ``load_s``: constructing :class:`LocalModel` (weights located and verified) and starting the
  reviewer's process (interpreter, llama.cpp, weights loaded and repacked);
- ``prefix_reuse_ratio``: over ``--requests`` successive review requests from one trajectory (a
  stable system prompt, the reviewer's operation tools, a history growing by one boundary and one
  answer per request), ``1 - prompt tokens evaluated / prompt tokens sent``, where "evaluated" is
  counted from the tokens llama.cpp was actually given;
- ``prompt_tok_s`` / ``gen_tok_s``: through :meth:`LocalModel.complete` on a prompt made of the
  trajectory's first ``--throughput-turns`` turns and a code-writing request, with the context
  emptied first (so the whole prompt is evaluated), end to end as the controller sees it (template
  rendering, the pipe to the model process and tokenisation included in the prompt time);
- ``raw_prompt_tok_s`` / ``raw_gen_tok_s``: ``llama_cpp.Llama`` with its default settings (same
  weights, context size and threads) in a child process of this benchmark, given the same prompt
  text: ``eval`` of the prompt, then ``Llama.generate``'s own greedy loop; interleaved with ours,
  medians of ``--reps`` repetitions; ``gen_tok_s_ratio_vs_raw`` and ``prompt_tok_s_ratio_vs_raw``
  are ours over raw (targets: at least 0.9);
- ``peak_rss_mb``: the largest peak resident set of one model process (each holds its own
  repacked weights and KV context), ``raw_peak_rss_mb`` the raw baseline's;
- ``runtime_info``: llama.cpp's system info (instruction sets; AMX must be absent on a CPU that
  has it), ``loadavg_1m``: the machine's load before and after.

``--raw-python`` runs the raw baseline under another interpreter (e.g. a virtual environment with
another build of llama-cpp-python) and ``--raw-no-repack`` sets ``use_extra_bufts = False`` (no
CPU weight repacking, no AMX buffer) there: both only to compare builds.

The last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

SYSTEM = (
    "You review a file-management agent at each primitive call before it runs. You see the goal, "
    "the calls so far with their observations, and the pending call. Choose one operation: keep "
    "(the call runs as written), patch_arguments (change the pending call's data arguments), or "
    "replace_workflow (replace the rest of the program). Answer with JSON: a short reason first, "
    "then the operation."
)
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reason": {"type": "string", "maxLength": 120},
        "operation": {"enum": ["keep", "patch_arguments", "replace_workflow"]},
    },
    "required": ["reason", "operation"],
}
GEN_PROMPT = "Write a long Python module with many small, documented utility functions for paths."


def _raw_child(config: dict[str, Any]) -> int:
    """The raw baseline: answer ``{"prompt", "n_gen"}`` lines with timings (stdlib + llama_cpp
    only, so it runs under any interpreter that has llama-cpp-python)."""
    import llama_cpp

    if config["no_repack"]:
        default_params = llama_cpp.llama_cpp.llama_model_default_params

        def no_repack() -> Any:
            params = default_params()
            params.use_extra_bufts = False
            return params

        llama_cpp.llama_cpp.llama_model_default_params = no_repack
    llama = llama_cpp.Llama(
        model_path=config["model_path"],
        n_ctx=config["n_ctx"],
        n_threads=config["n_threads"],
        n_threads_batch=config["n_threads"],
        verbose=False,
    )
    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()
    print(json.dumps({"system_info": info}), flush=True)
    for line in sys.stdin:
        msg = json.loads(line)
        tokens = llama.tokenize(msg["prompt"].encode(), add_bos=True, special=True)
        llama.reset()
        start = time.perf_counter()
        llama.eval(tokens)
        prompt_s = time.perf_counter() - start
        # generate() re-evaluates one prompt token to refresh the logits; excluded from gen time
        gen = llama.generate(tokens, temp=0.0, top_k=0, top_p=1.0, min_p=0.0)
        next(gen)
        start = time.perf_counter()
        for _ in range(msg["n_gen"] - 1):
            next(gen)
        gen_s = time.perf_counter() - start
        gen.close()
        answer = {
            "prompt_tokens": len(tokens),
            "prompt_tok_s": len(tokens) / prompt_s,
            "gen_tok_s": (msg["n_gen"] - 1) / gen_s,
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        }
        print(json.dumps(answer), flush=True)
    return 0


class _Raw:
    """The raw baseline's process (a child of this benchmark)."""

    def __init__(self, python: str, config: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [python, os.path.abspath(__file__), "--raw-child", json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.system_info = str(self._read()["system_info"])

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise RuntimeError(f"the raw llama.cpp process ended (exit status {code})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def run(self, prompt: str, n_gen: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"prompt": prompt, "n_gen": n_gen}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _boundary(k: int) -> str:
    return (
        f"Boundary {k}. Goal: move every report older than 2020 into archive/.\n"
        f"Previous observation: reports/r{k - 1:03d}.txt moved.\n"
        f'Pending call: move_file(source="reports/r{k:03d}.txt", '
        f'destination="archive/r{k:03d}.txt")'
    )


def _operation_tools() -> tuple[Any, ...]:
    from controlscope.core import ToolSpec

    return (
        ToolSpec(name="keep", description="Let the pending call run as written.", parameters={}),
        ToolSpec(
            name="patch_arguments",
            description="Replace the pending call's data arguments.",
            parameters={
                "type": "object",
                "properties": {"arguments": {"type": "object"}},
                "required": ["arguments"],
            },
        ),
        ToolSpec(
            name="replace_workflow",
            description="Cancel the pending call and run this Python code instead.",
            parameters={
                "type": "object",
                "properties": {"code": {"type": "string"}},
                "required": ["code"],
            },
        ),
    )


def _review_trajectory(model: Any, n: int, max_tokens: int) -> tuple[int, int, list[Any]]:
    """Run ``n`` review requests with a growing history; return (sent, evaluated, history)."""
    from controlscope.core import Message, ModelRequest

    history: list[Message] = []
    sent = evaluated = 0
    for k in range(1, n + 1):
        history.append(Message(role="user", content=_boundary(k)))
        request = ModelRequest(
            messages=(Message(role="system", content=SYSTEM), *history),
            tools=_operation_tools(),
            json_schema=SCHEMA,
            temperature=0.0,
            max_tokens=max_tokens,
            purpose="reviewer",
        )
        response = model.complete(request)
        stats = model.last_stats
        sent += response.usage.input_tokens
        evaluated += stats.evaluated_prompt_tokens
        history.append(Message(role="assistant", content=response.text))
        print(
            f"review {k:2d}: sent {response.usage.input_tokens:5d} "
            f"evaluated {stats.evaluated_prompt_tokens:4d} out {response.usage.output_tokens:3d}",
            file=sys.stderr,
        )
    return sent, evaluated, history


def _ours(model: Any, request: Any) -> tuple[float, float, int]:
    """Through LocalModel with an empty context: (prompt tok/s, gen tok/s, prompt tokens)."""
    model.clear_prefix(request.purpose)
    start = time.perf_counter()
    model.complete(request)
    total = time.perf_counter() - start
    stats = model.last_stats
    assert stats.evaluated_prompt_tokens == stats.prompt_tokens
    prompt_s = total - stats.gen_s
    gen_rate = (stats.output_tokens - 1) / stats.gen_s if stats.output_tokens > 1 else 0.0
    return stats.prompt_tokens / prompt_s, gen_rate, int(stats.prompt_tokens)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", default="1.5b", help="known model name or .gguf path")
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--review-tokens", type=int, default=48)
    parser.add_argument("--gen-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--throughput-turns",
        type=int,
        default=4,
        help="boundaries of the trajectory's history in the throughput prompt",
    )
    parser.add_argument("--raw-python", default=sys.executable, help="interpreter of the raw run")
    parser.add_argument("--raw-no-repack", action="store_true", help="raw: use_extra_bufts=False")
    parser.add_argument("--raw-child", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _throughput(model: Any, history: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    """Ours and raw llama.cpp, interleaved, on a prompt from the trajectory (its first turns) plus
    a generation turn; medians and the raw baseline's system info and peak RSS."""
    from controlscope.core import Message, ModelRequest

    request = ModelRequest(
        messages=(
            Message(role="system", content=SYSTEM),
            *history[: 2 * args.throughput_turns],
            Message(role="user", content=GEN_PROMPT),
        ),
        tools=_operation_tools(),
        tool_choice="none",
        temperature=0.0,
        max_tokens=args.gen_tokens,
        purpose="other",
    )
    prompt = model.render_prompt(request)
    config = {
        "model_path": str(model.path),
        "n_ctx": model.n_ctx,
        "n_threads": model.n_threads,
        "no_repack": args.raw_no_repack,
    }
    raw = _Raw(args.raw_python, config)
    ours_p, ours_g, raw_p, raw_g = [], [], [], []
    try:
        for rep in range(args.reps):
            p, g, n_prompt = _ours(model, request)
            ours_p.append(p)
            ours_g.append(g)
            theirs = raw.run(prompt, args.gen_tokens)
            assert theirs["prompt_tokens"] == n_prompt, (theirs, n_prompt)
            raw_p.append(theirs["prompt_tok_s"])
            raw_g.append(theirs["gen_tok_s"])
            print(
                f"rep {rep}: prompt {n_prompt} tok; ours {p:.1f}/{g:.1f} tok/s, "
                f"raw {raw_p[-1]:.1f}/{raw_g[-1]:.1f} tok/s",
                file=sys.stderr,
            )
    finally:
        raw.close()
    med = statistics.median
    return {
        "prompt_tok_s": round(med(ours_p), 2),
        "gen_tok_s": round(med(ours_g), 2),
        "raw_prompt_tok_s": round(med(raw_p), 2),
        "raw_gen_tok_s": round(med(raw_g), 2),
        "prompt_tok_s_ratio_vs_raw": round(med(ours_p) / med(raw_p), 3),
        "gen_tok_s_ratio_vs_raw": round(med(ours_g) / med(raw_g), 3),
        "raw_peak_rss_mb": round(theirs["peak_rss_kb"] / 1024, 1),
        "throughput_prompt_tokens": n_prompt,
        "raw_runtime_info": raw.system_info,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print progress on stderr and one JSON line last on stdout."""
    args = _parse(argv)
    if args.raw_child is not None:
        return _raw_child(json.loads(args.raw_child))
    from controlscope.models._local import LocalModel

    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    model = LocalModel(args.model, n_ctx=args.n_ctx, n_threads=args.threads)
    model.start("reviewer")
    load_s = time.perf_counter() - start
    try:
        sent, evaluated, history = _review_trajectory(model, args.requests, args.review_tokens)
        review_rss = model.last_stats.peak_rss_mb
        speeds = _throughput(model, history, args)
        peak_rss = max(review_rss, model.last_stats.peak_rss_mb)
        runtime_info = model.runtime_info
    finally:
        model.close()
    result = {
        "model": model.model_id,
        "n_threads": model.n_threads,
        "n_ctx": model.n_ctx,
        "load_s": round(load_s, 3),
        **{k: v for k, v in speeds.items() if k != "raw_runtime_info"},
        "peak_rss_mb": round(peak_rss, 1),
        "prefix_reuse_ratio": round(1 - evaluated / sent, 4),
        "review_requests": args.requests,
        "review_prompt_tokens_sent": sent,
        "review_prompt_tokens_evaluated": evaluated,
        "reps": args.reps,
        "runtime_info": runtime_info,
        "raw_runtime_info": speeds["raw_runtime_info"],
        "raw_is_this_interpreter": args.raw_python == sys.executable,
        "raw_no_repack": args.raw_no_repack,
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
