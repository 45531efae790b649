"""The process that runs llama.cpp for one purpose context of a :class:`LocalModel`.

Started by :mod:`controlscope.models._local_process` as ``python -m
controlscope.models._local_child``; never imported by the controller. It speaks line-delimited
JSON: one object per line on stdin (the first is the configuration), one answer per line on the
protocol channel (the original stdout). File descriptor 1 is pointed at stderr before llama.cpp
is loaded, so nothing a C library prints can corrupt the protocol.

Messages (parent -> child), each answered by exactly one line:

- configuration ``{"model_path", "n_ctx", "n_threads", "seed", "verbose", "parent_pid"}``:
  answered by ``{"ok": true, "ready": true, "eog": [...], "bos_text", "eos_text", "template",
  "system_info"}`` or ``{"ok": false, "kind", "message"}`` (weights llama.cpp cannot load);
- ``{"op": "complete", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p",
  "repeat_penalty", "seed", "schema"}`` (``schema``: JSON-schema text or null): answered by
  ``{"ok": true, "text", "finish", "prompt_tokens", "evaluated", "output_tokens", "prompt_s",
  "gen_s", "peak_rss_kb"}``; ``finish`` is ``stop`` or ``length``;
- ``{"op": "tokenize", "text", "special"}``: ``{"ok": true, "tokens": [...]}``;
- ``{"op": "clear"}`` (forget the KV prefix): ``{"ok": true}``.

Errors the parent should report are answered as ``{"ok": false, "kind", "message"}`` with a
:class:`~controlscope.core.ProviderError` kind. End of stdin ends the process. It also
ends itself when its parent dies (it polls its parent id: a parent killed by SIGKILL cannot close
anything; ``PR_SET_PDEATHSIG`` is not used because it fires when the parent *thread* that started
the child ends, and any controller thread may start one), and it ignores SIGINT, so Ctrl-C in a
terminal reaches the controller, which decides. A native crash prints the Python stack
(``faulthandler``) to stderr, whose tail the controller quotes.
"""

from __future__ import annotations

import faulthandler
import json
import os
import resource
import signal
import sys
import threading
import time
from typing import IO, Any

_PARENT_POLL_S = 0.2


def _watch_parent(parent_pid: int) -> None:
    """Exit this process as soon as ``parent_pid`` is no longer its parent (daemon thread)."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(0)
        time.sleep(_PARENT_POLL_S)


class _Runtime:
    """A loaded ``llama_cpp.Llama`` and the state kept between requests."""

    def __init__(self, config: dict[str, Any]) -> None:
        import llama_cpp

        self.n_ctx = int(config["n_ctx"])
        self.seed = int(config["seed"])
        self.llama: Any = llama_cpp.Llama(
            model_path=str(config["model_path"]),
            n_ctx=self.n_ctx,
            n_threads=int(config["n_threads"]),
            n_threads_batch=int(config["n_threads"]),
            seed=self.seed,
            verbose=bool(config["verbose"]),
        )
        self.evaluated = 0
        original_eval = self.llama.eval

        def counting_eval(tokens: Any) -> Any:
            self.evaluated += len(tokens)
            return original_eval(tokens)

        self.llama.eval = counting_eval  # type: ignore[method-assign]
        vocab = self.llama._model.vocab
        self.eog = frozenset(
            i for i in range(int(self.llama.n_vocab())) if llama_cpp.llama_vocab_is_eog(vocab, i)
        )
        bos, eos = int(self.llama.token_bos()), int(self.llama.token_eos())
        self.bos_text: str = self.llama._model.token_get_text(bos) if bos >= 0 else ""
        self.eos_text: str = self.llama._model.token_get_text(eos) if eos >= 0 else ""
        self.template: str | None = self.llama.metadata.get("tokenizer.chat_template")
        self.system_info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
        self.grammars: dict[str, Any] = {}

    def ready(self) -> dict[str, Any]:
        return {
            "ok": True,
            "ready": True,
            "eog": sorted(self.eog),
            "bos_text": self.bos_text,
            "eos_text": self.eos_text,
            "template": self.template,
            "system_info": self.system_info,
        }

    def grammar(self, schema: str) -> Any:
        """A llama.cpp grammar for JSON-schema text (cached; generic JSON if unsupported)."""
        from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

        grammar = self.grammars.get(schema)
        if grammar is None:
            try:
                grammar = LlamaGrammar.from_json_schema(schema, verbose=False)
            except Exception:  # the converter rejects some schema features
                grammar = LlamaGrammar.from_string(JSON_GBNF, verbose=False)
            self.grammars[schema] = grammar
        return grammar

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        """Tokens of ``text``; a BOS token is added unless the text starts with its text."""
        add_bos = not (self.bos_text and text.startswith(self.bos_text))
        tokens: list[int] = self.llama.tokenize(
            text.encode("utf-8"), add_bos=add_bos, special=special
        )
        return tokens

    def complete(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Generate for one ``complete`` message (see the module docstring)."""
        tokens = self.tokenize(msg["prompt"], special=True)
        room = self.n_ctx - len(tokens)
        if room < 1:
            return {
                "ok": False,
                "kind": "context_length",
                "message": f"prompt of {len(tokens)} tokens does not fit the local model's "
                f"context of {self.n_ctx} tokens",
            }
        max_new = min(int(msg["max_tokens"]), room)
        grammar = self.grammar(msg["schema"]) if msg.get("schema") is not None else None
        self.llama.set_seed(int(msg["seed"]) & 0xFFFFFFFF)
        try:
            out, finish, evaluated, prompt_s, gen_s = self._generate(msg, tokens, max_new, grammar)
        except (RuntimeError, ValueError) as exc:
            return {"ok": False, "kind": "server", "message": f"llama.cpp generation failed: {exc}"}
        return {
            "ok": True,
            "text": self.llama.detokenize(out).decode("utf-8", errors="replace"),
            "finish": finish,
            "prompt_tokens": len(tokens),
            "evaluated": evaluated,
            "output_tokens": len(out),
            "prompt_s": prompt_s,
            "gen_s": gen_s,
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        }

    def _generate(
        self, msg: dict[str, Any], tokens: list[int], max_new: int, grammar: Any
    ) -> tuple[list[int], str, int, float, float]:
        """llama.cpp's own loop: (tokens out, finish, prompt tokens evaluated, prompt s, gen s)."""
        out: list[int] = []
        finish = "length"
        evaluated = 0
        self.evaluated = 0
        t0 = time.perf_counter()
        t_first = t0
        gen = self.llama.generate(
            tokens,
            temp=max(float(msg["temperature"]), 0.0),
            top_p=float(msg["top_p"]),
            top_k=int(msg["top_k"]),
            min_p=float(msg["min_p"]),
            repeat_penalty=float(msg["repeat_penalty"]),
            grammar=grammar,
        )
        first = True
        try:
            for token in gen:
                if first:  # the prompt has been evaluated and one token sampled
                    first = False
                    t_first = time.perf_counter()
                    evaluated = self.evaluated
                if token in self.eog:
                    finish = "stop"
                    break
                out.append(int(token))
                if len(out) >= max_new:
                    break
        finally:
            gen.close()
        return out, finish, evaluated, t_first - t0, time.perf_counter() - t_first

    def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        op = msg.get("op")
        if op == "complete":
            return self.complete(msg)
        if op == "tokenize":
            return {"ok": True, "tokens": self.tokenize(msg["text"], special=bool(msg["special"]))}
        if op == "clear":
            self.llama.reset()
            return {"ok": True}
        return {"ok": False, "kind": "other", "message": f"unknown operation {op!r}"}


def _send(channel: IO[str], msg: dict[str, Any]) -> None:
    channel.write(json.dumps(msg) + "\n")
    channel.flush()


def main() -> int:
    """Serve one purpose context until stdin ends; returns the exit status."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.enable(all_threads=False)  # a native crash leaves its Python stack on stderr
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # stray prints of C code go to stderr, never into the protocol
    line = sys.stdin.readline()
    if not line:
        return 0
    config = json.loads(line)
    parent_pid = int(config["parent_pid"])
    if os.getppid() != parent_pid:
        return 0
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    try:
        runtime = _Runtime(config)
    except (ValueError, RuntimeError, OSError) as exc:
        message = f"llama.cpp could not load {config['model_path']}: {exc}"
        _send(channel, {"ok": False, "kind": "other", "message": message})
        return 1
    _send(channel, runtime.ready())
    for line in sys.stdin:
        _send(channel, runtime.handle(json.loads(line)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
