"""Benchmark of the embedded local model (issue 3, "Numbers").

Measures, in one run on this machine:

- ``load_s``: constructing :class:`LocalModel` (weights located and verified) and loading one
  llama.cpp context;
- ``prefix_reuse_ratio``: over ``--requests`` successive review requests from one trajectory (a
  stable system prompt, the reviewer's operation tools, a history growing by one boundary and one
  answer per request), ``1 - prompt tokens evaluated / prompt tokens sent``, where "evaluated" is
  counted from the tokens llama.cpp was actually given;
- ``prompt_tok_s`` / ``gen_tok_s``: through :meth:`LocalModel.complete` on a prompt made of the
  trajectory's first ``--throughput-turns`` turns and a code-writing request, with the context
  emptied first (so the whole prompt is evaluated), end to end (template
  rendering and tokenisation included in the prompt time);
- ``raw_prompt_tok_s`` / ``raw_gen_tok_s``: ``llama_cpp.Llama`` called directly with the same
  tokens (``eval`` of the prompt, then ``Llama.generate``'s own greedy loop), interleaved with
  ours, medians of ``--reps`` repetitions;
- ``peak_rss_mb``: the process's peak resident set (file-mapped weights counted per context).

The last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from typing import Any

from controlscope.core import Message, ModelRequest, ToolSpec
from controlscope.models.local import LocalModel

SYSTEM = (
    "You review a file-management agent at each primitive call before it runs. You see the goal, "
    "the calls so far with their observations, and the pending call. Choose one operation: keep "
    "(the call runs as written), patch_arguments (change the pending call's data arguments), or "
    "replace_workflow (replace the rest of the program). Answer with JSON: a short reason first, "
    "then the operation."
)
OPERATION_TOOLS = (
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
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reason": {"type": "string", "maxLength": 120},
        "operation": {"enum": ["keep", "patch_arguments", "replace_workflow"]},
    },
    "required": ["reason", "operation"],
}
GEN_PROMPT = "Write a long Python module with many small, documented utility functions for paths."


def _boundary(k: int) -> str:
    return (
        f"Boundary {k}. Goal: move every report older than 2020 into archive/.\n"
        f"Previous observation: reports/r{k - 1:03d}.txt moved.\n"
        f'Pending call: move_file(source="reports/r{k:03d}.txt", '
        f'destination="archive/r{k:03d}.txt")'
    )


def _review_trajectory(
    model: LocalModel, n: int, max_tokens: int
) -> tuple[int, int, list[Message]]:
    """Run ``n`` review requests with a growing history; return (sent, evaluated, history)."""
    history: list[Message] = []
    sent = evaluated = 0
    for k in range(1, n + 1):
        history.append(Message(role="user", content=_boundary(k)))
        request = ModelRequest(
            messages=(Message(role="system", content=SYSTEM), *history),
            tools=OPERATION_TOOLS,
            json_schema=SCHEMA,
            temperature=0.0,
            max_tokens=max_tokens,
            purpose="reviewer",
        )
        response = model.complete(request)
        stats = model.last_stats
        assert stats is not None
        sent += response.usage.input_tokens
        evaluated += stats.evaluated_prompt_tokens
        history.append(Message(role="assistant", content=response.text))
        print(
            f"review {k:2d}: sent {response.usage.input_tokens:5d} "
            f"evaluated {stats.evaluated_prompt_tokens:4d} out {response.usage.output_tokens:3d}",
            file=sys.stderr,
        )
    return sent, evaluated, history


def _ours(model: LocalModel, request: ModelRequest) -> tuple[float, float, int]:
    """Through LocalModel with an empty context: (prompt tok/s, gen tok/s, prompt tokens)."""
    model.context(request.purpose).reset()
    start = time.perf_counter()
    response = model.complete(request)
    total = time.perf_counter() - start
    stats = model.last_stats
    assert stats is not None and stats.evaluated_prompt_tokens == stats.prompt_tokens
    prompt_s = total - stats.gen_s
    gen_rate = (stats.output_tokens - 1) / stats.gen_s if stats.output_tokens > 1 else 0.0
    return stats.prompt_tokens / prompt_s, gen_rate, response.usage.input_tokens


def _raw(llama: Any, tokens: list[int], n_gen: int) -> tuple[float, float]:
    """llama.cpp directly on the same context: ``eval`` the prompt after emptying the context,
    then generate ``n_gen`` greedy tokens with ``Llama.generate`` (its own loop, no template,
    no stop checks, no parsing)."""
    llama.reset()
    start = time.perf_counter()
    llama.eval(tokens)
    prompt_s = time.perf_counter() - start
    # generate() re-evaluates one prompt token to refresh the logits; excluded from gen time
    gen = llama.generate(tokens, temp=0.0, top_k=0, top_p=1.0, min_p=0.0)
    next(gen)
    start = time.perf_counter()
    for _ in range(n_gen - 1):
        next(gen)
    gen_s = time.perf_counter() - start
    gen.close()
    return len(tokens) / prompt_s, (n_gen - 1) / gen_s


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print progress on stderr and one JSON line last on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", default="1.5b", help="known model name or .gguf path")
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--review-tokens", type=int, default=48)
    parser.add_argument("--gen-tokens", type=int, default=48)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--throughput-turns",
        type=int,
        default=4,
        help="boundaries of the trajectory's history in the throughput prompt",
    )
    args = parser.parse_args(argv)

    start = time.perf_counter()
    model = LocalModel(args.model, n_ctx=args.n_ctx, n_threads=args.threads)
    model.context("reviewer")
    load_s = time.perf_counter() - start

    sent, evaluated, history = _review_trajectory(model, args.requests, args.review_tokens)

    # throughput on a prompt from the trajectory (its first turns), plus a generation turn
    request = ModelRequest(
        messages=(
            Message(role="system", content=SYSTEM),
            *history[: 2 * args.throughput_turns],
            Message(role="user", content=GEN_PROMPT),
        ),
        tools=OPERATION_TOOLS,
        tool_choice="none",
        temperature=0.0,
        max_tokens=args.gen_tokens,
        purpose="other",
    )
    llama = model.context("other")
    tokens = llama.tokenize(model.render_prompt(request).encode(), add_bos=True, special=True)
    ours_p, ours_g, raw_p, raw_g = [], [], [], []
    for rep in range(args.reps):
        p, g, n_prompt = _ours(model, request)
        assert n_prompt == len(tokens)
        ours_p.append(p)
        ours_g.append(g)
        rp, rg = _raw(llama, tokens, args.gen_tokens)
        raw_p.append(rp)
        raw_g.append(rg)
        print(
            f"rep {rep}: prompt {len(tokens)} tok; ours {p:.1f}/{g:.1f} tok/s, "
            f"raw {rp:.1f}/{rg:.1f} tok/s",
            file=sys.stderr,
        )
    result = {
        "model": model.model_id,
        "n_threads": model.n_threads,
        "n_ctx": model.n_ctx,
        "load_s": round(load_s, 3),
        "prompt_tok_s": round(statistics.median(ours_p), 2),
        "gen_tok_s": round(statistics.median(ours_g), 2),
        "raw_prompt_tok_s": round(statistics.median(raw_p), 2),
        "raw_gen_tok_s": round(statistics.median(raw_g), 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "prefix_reuse_ratio": round(1 - evaluated / sent, 4),
        "review_requests": args.requests,
        "review_prompt_tokens_sent": sent,
        "review_prompt_tokens_evaluated": evaluated,
        "throughput_prompt_tokens": len(tokens),
        "reps": args.reps,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
