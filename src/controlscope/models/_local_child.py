"""The process that runs llama.cpp for one purpose context of a :class:`LocalModel`.

Started by :mod:`controlscope.models._local_process` as ``python -m
controlscope.models._local_child``; never imported by the controller. It speaks line-delimited
JSON: one object per line on stdin (the first is the configuration), one answer per line on the
protocol channel (the original stdout). File descriptor 1 is pointed at stderr before llama.cpp
is loaded, so nothing a C library prints can corrupt the protocol.

Messages (parent -> child), each answered by exactly one line:

- configuration ``{"model_path", "n_ctx", "n_threads", "grid", "seed", "verbose",
  "parent_pid", "progress_fd"}`` (``progress_fd``: an inherited file descriptor, or null, where
  a ``complete`` request's progress is kept, see below): answered by ``{"ok": true, "ready":
  true, "eog": [...], "controls": [...], "bos_text", "eos_text", "template", "system_info"}``
  (``controls``: the texts of the control tokens) or ``{"ok": false, "kind", "message"}``
  (weights llama.cpp cannot load);
- ``{"op": "complete", "segments", "max_tokens", "temperature", "top_p", "top_k", "min_p",
  "repeat_penalty", "seed", "schema", "strict"}`` (``segments``: the prompt as ``[control,
  text]`` pairs, see ``ChatTemplate.segments``; ``schema``: JSON-schema text or null;
  ``strict``: a schema llama.cpp cannot convert is refused, not decoded as plain JSON):
  answered by ``{"ok": true, "text", "finish", "prompt_tokens", "evaluated", "output_tokens",
  "prompt_s", "gen_s", "peak_rss_kb"}``; ``finish`` is ``stop`` or ``length``;
- ``{"op": "tokenize", "text", "special"}`` and ``{"op": "prompt_tokens", "segments"}``:
  ``{"ok": true, "tokens": [...]}``;
- ``{"op": "clear"}`` (forget the KV prefix): ``{"ok": true}``.

While it answers a ``complete`` message the child keeps its progress at offset 0 of the
``progress_fd`` file, rewritten after each evaluation batch and each generated token: four
little-endian signed 64-bit integers (:data:`PROGRESS_FORMAT`): the prompt's tokens, those kept
from the context, those evaluated so far and the tokens generated so far. The parent reads them
when the request fails (its deadline passed, the child died), so a slow request can be told
from a hung one.

Errors the parent should report are answered as ``{"ok": false, "kind", "message"}`` with a
:class:`~controlscope.core.ProviderError` kind. End of stdin ends the process. It also
ends itself when its parent dies (it polls its parent id: a parent killed by SIGKILL cannot close
anything; ``PR_SET_PDEATHSIG`` is not used because it fires when the parent *thread* that started
the child ends, and any controller thread may start one), and it ignores SIGINT, so Ctrl-C in a
terminal reaches the controller, which decides. A native crash prints the Python stack
(``faulthandler``) to stderr, whose tail the controller quotes.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import resource
import signal
import struct
import sys
import threading
import time
from typing import IO, Any

_PARENT_POLL_S = 0.2

PROGRESS_FORMAT = "<4q"
"""The progress record: prompt tokens, kept, evaluated and generated (see the module docstring)."""


def _watch_parent(parent_pid: int) -> None:
    """Exit this process as soon as ``parent_pid`` is no longer its parent (daemon thread)."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(0)
        time.sleep(_PARENT_POLL_S)


class _Runtime:
    """A loaded ``llama_cpp.Llama`` and the state kept between requests.

    Attributes:
        grid: tokens per evaluation batch; prompts are evaluated in batches that start at
            multiples of it (see :meth:`reused`).
        reusable: leading positions of the context whose KV entries came from complete grid
            batches of the last prompt (never from generated tokens).
    """

    def __init__(self, config: dict[str, Any]) -> None:
        import llama_cpp

        self.n_ctx = int(config["n_ctx"])
        self.seed = int(config["seed"])
        self.grid = int(config["grid"])
        self.llama: Any = llama_cpp.Llama(
            model_path=str(config["model_path"]),
            n_ctx=self.n_ctx,
            n_batch=self.grid,
            n_ubatch=self.grid,
            n_threads=int(config["n_threads"]),
            n_threads_batch=int(config["n_threads"]),
            seed=self.seed,
            verbose=bool(config["verbose"]),
        )
        self.reusable = 0
        self.evaluated = 0
        fd = config.get("progress_fd")
        self.progress_fd: int | None = None if fd is None else int(fd)
        self.progress = [0, 0, 0, 0]  # prompt, kept, evaluated, generated (PROGRESS_FORMAT)
        original_eval = self.llama.eval

        def counting_eval(tokens: Any) -> None:
            # One grid batch per call: the batches llama.cpp's own loop makes (n_batch is the
            # grid), each counted when it is done.
            for start in range(0, len(tokens), self.grid):
                batch = tokens[start : start + self.grid]
                original_eval(batch)
                self.evaluated += len(batch)
                if self.progress[3] == 0:  # still the prompt
                    self.report(evaluated=self.evaluated)

        self.llama.eval = counting_eval  # type: ignore[method-assign]
        model = self.llama._model
        vocab = model.vocab
        n_vocab = int(self.llama.n_vocab())
        self.eog = frozenset(i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i))
        control = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
        self.controls = {
            model.token_get_text(i): i
            for i in range(n_vocab)
            if model.token_get_attr(i) & control and model.token_get_text(i)
        }
        bos, eos = int(self.llama.token_bos()), int(self.llama.token_eos())
        self.bos_text: str = model.token_get_text(bos) if bos >= 0 else ""
        self.eos_text: str = model.token_get_text(eos) if eos >= 0 else ""
        self.template: str | None = self.llama.metadata.get("tokenizer.chat_template")
        self.system_info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
        self.grammars: dict[str, Any] = {}

    def report(self, **counts: int) -> None:
        """Update the request's progress (``prompt``, ``kept``, ``evaluated``, ``generated``)
        and rewrite its record in the progress file, if there is one."""
        for name, value in counts.items():
            self.progress[("prompt", "kept", "evaluated", "generated").index(name)] = value
        if self.progress_fd is not None:
            with contextlib.suppress(OSError):
                os.pwrite(self.progress_fd, struct.pack(PROGRESS_FORMAT, *self.progress), 0)

    def ready(self) -> dict[str, Any]:
        return {
            "ok": True,
            "ready": True,
            "eog": sorted(self.eog),
            "controls": sorted(self.controls),
            "bos_text": self.bos_text,
            "eos_text": self.eos_text,
            "template": self.template,
            "system_info": self.system_info,
        }

    def grammar(self, schema: str, *, strict: bool) -> Any:
        """A llama.cpp grammar for JSON-schema text (cached). A schema the converter rejects
        raises ``ValueError`` when ``strict``, else decodes generic JSON (a forced tool call:
        the tool checks its arguments itself)."""
        from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

        grammar = self.grammars.get(schema)
        if grammar is None:
            try:
                grammar = LlamaGrammar.from_json_schema(schema, verbose=False)
            except Exception as exc:  # the converter asserts and raises on what it cannot read
                if strict:
                    raise ValueError(f"{type(exc).__name__}: {exc}") from None
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

    def prompt_tokens(self, segments: list[list[Any]]) -> list[int]:
        """Tokens of a prompt given as segments (see ``ChatTemplate.segments``): a control
        segment is its one token, a text segment is tokenized as literal text (no text it holds
        becomes a control token); a BOS token first where the model adds one."""
        first = segments[0][1] if segments else ""
        bos = int(self.llama.token_bos())
        adds_bos = bool(self.llama._model.add_bos_token()) and bos >= 0
        tokens: list[int] = [bos] if adds_bos and first != self.bos_text else []
        for control, text in segments:
            if control and text in self.controls:
                tokens.append(self.controls[text])
            elif text:
                tokens += self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        return tokens

    def reused(self, tokens: list[int]) -> int:
        """How many leading positions of the context to keep for a prompt of ``tokens``.

        A position's KV entries depend on the batch it was evaluated in, and the last prompt
        token's logits on its batch too, so a prompt's answer would depend on what the context
        held before it (llama.cpp keeps the longest common prefix and evaluates the rest, the
        last token alone when all but it are kept). Prompts are therefore evaluated in batches
        of ``grid`` tokens starting at multiples of ``grid``, and only complete batches of the
        last prompt are kept: every kept position holds what a fresh evaluation of this prompt
        computes, and the rest is evaluated in the same batches a fresh evaluation uses.
        """
        common = 0
        for old, new in zip(self.llama.input_ids[: self.reusable], tokens, strict=False):
            if old != new:
                break
            common += 1
        return min(common, len(tokens) - 1) // self.grid * self.grid

    def complete(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Generate for one ``complete`` message (see the module docstring)."""
        tokens = self.prompt_tokens(msg["segments"])
        room = self.n_ctx - len(tokens)
        if room < 1:
            return {
                "ok": False,
                "kind": "context_length",
                "message": f"prompt of {len(tokens)} tokens does not fit the local model's "
                f"context of {self.n_ctx} tokens",
            }
        max_new = min(int(msg["max_tokens"]), room)
        grammar = None
        if msg.get("schema") is not None:
            try:
                grammar = self.grammar(msg["schema"], strict=bool(msg.get("strict")))
            except ValueError as exc:
                return {
                    "ok": False,
                    "kind": "schema_unsupported",
                    "message": f"llama.cpp cannot make a grammar of the answer's schema: {exc}",
                }
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
        """llama.cpp's own loop on the prompt's unkept tail (see :meth:`reused`): (tokens out,
        finish, prompt tokens evaluated, prompt s, gen s)."""
        out: list[int] = []
        finish = "length"
        evaluated = 0
        keep = self.reused(tokens)
        self.reusable = 0  # until the prompt is evaluated, nothing past ``keep`` is known
        self.llama.n_tokens = keep  # eval() drops the KV entries from here on
        self.evaluated = 0
        self.report(prompt=len(tokens), kept=keep, evaluated=0, generated=0)
        t0 = time.perf_counter()
        t_first = t0
        gen = self.llama.generate(
            tokens[keep:],
            temp=max(float(msg["temperature"]), 0.0),
            top_p=float(msg["top_p"]),
            top_k=int(msg["top_k"]),
            min_p=float(msg["min_p"]),
            repeat_penalty=float(msg["repeat_penalty"]),
            reset=False,
            grammar=grammar,
        )
        first = True
        try:
            for token in gen:
                if first:  # the prompt has been evaluated and one token sampled
                    first = False
                    t_first = time.perf_counter()
                    evaluated = self.evaluated
                    self.reusable = len(tokens) // self.grid * self.grid
                if token in self.eog:
                    finish = "stop"
                    break
                out.append(int(token))
                self.report(generated=len(out))
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
        if op == "prompt_tokens":
            return {"ok": True, "tokens": self.prompt_tokens(msg["segments"])}
        if op == "clear":
            self.llama.reset()
            self.reusable = 0
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
    except (ValueError, RuntimeError, OSError, KeyError, TypeError) as exc:
        message = f"llama.cpp could not load {config['model_path']}: {exc}"
        _send(channel, {"ok": False, "kind": "other", "message": message})
        return 1
    _send(channel, runtime.ready())
    for line in sys.stdin:
        _send(channel, runtime.handle(json.loads(line)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
