"""The embedded local model: a GGUF run in-process by llama.cpp (``llama-cpp-python``).

:class:`LocalModel` implements :class:`~controlscope.models.types.ChatModel` (issue 3, "Embedded
local model"):

- the prompt is the GGUF's own chat template (Qwen2.5's ChatML with tools) rendered with jinja2;
  generation stops on every end-of-generation token of the vocabulary (llama.cpp's ``is_eog``);
- tool calls are native: Qwen2.5 writes ``<tool_call>{...}</tool_call>``, parsed by
  :mod:`controlscope.models.toolcall_parse`; with ``tool_choice="required"`` or a named tool the
  call is decoded under a grammar made from the tools' JSON schemas; a ``json_schema`` request is
  decoded under that schema's grammar and always returns valid JSON text (or ``finish_reason``
  ``length`` when the token cap cut it);
- prompt (KV-prefix) reuse: each ``request.purpose`` (planner, reviewer, other) has its own
  llama.cpp context, so planner and reviewer never evict each other's prefix; the weights are
  mmap'd once by the OS page cache. Within a context llama.cpp keeps the longest common token
  prefix of successive prompts; ``Usage.cached_tokens`` is the number of prompt tokens the library
  did not evaluate, counted from the tokens actually passed to ``Llama.eval``.

``llama_cpp`` is imported only when a context is first created. Each context has its own lock, so a
``LocalModel`` may be shared by threads.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlscope.core import (
    Message,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    ToolSpec,
    Usage,
)
from controlscope.models.toolcall_parse import parse_tool_calls, tool_call_id
from controlscope.models.weights import ensure_weights, resolve_model_name

__all__ = ["GenerationStats", "LocalModel", "default_threads"]

_FORCED_PREFIX = "<tool_call>\n"
_FORCED_SUFFIX = "\n</tool_call>"

_CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""Used only for a GGUF that carries no chat template."""


def default_threads() -> int:
    """Return ``$CONTROLSCOPE_THREADS`` if set, else the number of CPU cores this process may use.

    Raises:
        ValueError: when ``CONTROLSCOPE_THREADS`` is not a positive integer.
    """
    env = os.environ.get("CONTROLSCOPE_THREADS")
    if env:
        try:
            value = int(env)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"CONTROLSCOPE_THREADS must be a positive integer, got {env!r}")
        return value
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass
class GenerationStats:
    """Measurements of one request, for benchmarks and logs.

    Attributes:
        purpose: the context that served it.
        prompt_tokens: prompt tokens sent.
        evaluated_prompt_tokens: prompt tokens llama.cpp evaluated (the rest came from the KV
            prefix kept in the context).
        output_tokens: tokens generated (end-of-generation token excluded).
        prompt_s: seconds from the start of generation to the first sampled token (prompt
            evaluation).
        gen_s: seconds spent generating after the first token was sampled.
    """

    purpose: str
    prompt_tokens: int = 0
    evaluated_prompt_tokens: int = 0
    output_tokens: int = 0
    prompt_s: float = 0.0
    gen_s: float = 0.0


@dataclass
class _Context:
    """One llama.cpp context (a ``Llama`` instance) and its lock and eval counter."""

    llama: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    evaluated: int = 0


class LocalModel:
    """A GGUF chat model run in-process, usable as planner and reviewer.

    Args:
        path_or_name: a known model (``1.5b`` default, ``0.5b``, optionally ``local:``-prefixed)
            or a path to a ``.gguf`` file. Known weights are assembled and verified on first use
            (:func:`~controlscope.models.weights.ensure_weights`).
        n_ctx: context size in tokens, per purpose context.
        n_threads: CPU threads; default :func:`default_threads`.
        seed: base sampling seed; a request without ``seed`` samples with
            ``seed + 1_000_003 * draw`` so separately drawn reviews differ while a repeated
            request is reproducible.
        verbose: let llama.cpp log to stderr.

    Raises:
        controlscope.models.weights.WeightsError: missing or corrupt weights (names the
            expected SHA-256).
        ValueError: ``n_ctx`` or ``n_threads`` below 1.
    """

    def __init__(
        self,
        path_or_name: str = "1.5b",
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        seed: int = 0,
        verbose: bool = False,
    ) -> None:
        if n_ctx < 1:
            raise ValueError(f"n_ctx must be positive, got {n_ctx}")
        threads = default_threads() if n_threads is None else n_threads
        if threads < 1:
            raise ValueError(f"n_threads must be positive, got {threads}")
        self._path: Path = ensure_weights(path_or_name, progress=True)
        known = resolve_model_name(path_or_name)
        self._model_id = (
            known.model_id if known else "local:" + self._path.name.removesuffix(".gguf")
        )
        self._n_ctx = n_ctx
        self._n_threads = threads
        self._seed = seed
        self._verbose = verbose
        self._contexts: dict[str, _Context] = {}
        self._contexts_lock = threading.Lock()
        self._grammars: dict[str, Any] = {}
        self._grammars_lock = threading.Lock()
        self._eog: frozenset[int] = frozenset()
        self._formatter: Any = None
        self._bos_text = ""
        self.last_stats: GenerationStats | None = None
        """Measurements of the most recent request (any purpose)."""

    @property
    def model_id(self) -> str:
        """``local:`` + the GGUF's file stem, e.g. ``local:qwen2.5-coder-1.5b-instruct-q4_k_m``."""
        return self._model_id

    @property
    def path(self) -> Path:
        """The verified GGUF file."""
        return self._path

    @property
    def n_ctx(self) -> int:
        """Context size in tokens of every purpose context."""
        return self._n_ctx

    @property
    def n_threads(self) -> int:
        """CPU threads used by llama.cpp."""
        return self._n_threads

    @property
    def eog_tokens(self) -> frozenset[int]:
        """Token ids that end generation (loads the first context if needed)."""
        self.context("other")
        return self._eog

    def context(self, purpose: str = "other") -> Any:
        """Return the ``llama_cpp.Llama`` serving ``purpose``, creating it on first use.

        Exposed for benchmarks and tests (raw llama.cpp calls on the same weights); callers must
        not use it while a request for the same purpose is running.
        """
        return self._context(purpose).llama

    def _context(self, purpose: str) -> _Context:
        with self._contexts_lock:
            ctx = self._contexts.get(purpose)
            if ctx is None:
                ctx = self._new_context()
                self._contexts[purpose] = ctx
            return ctx

    def _new_context(self) -> _Context:
        """Load a ``Llama`` on the weights (caller holds ``_contexts_lock``)."""
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        try:
            llama = llama_cpp.Llama(
                model_path=str(self._path),
                n_ctx=self._n_ctx,
                n_threads=self._n_threads,
                n_threads_batch=self._n_threads,
                seed=self._seed,
                verbose=self._verbose,
            )
        except (ValueError, RuntimeError) as exc:
            raise ProviderError(f"llama.cpp could not load {self._path}: {exc}") from exc
        ctx = _Context(llama=llama)
        original_eval = llama.eval

        def counting_eval(tokens: Any) -> Any:
            ctx.evaluated += len(tokens)
            return original_eval(tokens)

        llama.eval = counting_eval  # type: ignore[method-assign]
        if self._formatter is None:
            vocab = llama._model.vocab
            n_vocab = int(llama.n_vocab())
            self._eog = frozenset(
                i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)
            )
            bos, eos = int(llama.token_bos()), int(llama.token_eos())
            self._bos_text = llama._model.token_get_text(bos) if bos >= 0 else ""
            eos_text = llama._model.token_get_text(eos) if eos >= 0 else ""
            template = llama.metadata.get("tokenizer.chat_template") or _CHATML_TEMPLATE
            self._formatter = Jinja2ChatFormatter(
                template=template, eos_token=eos_text, bos_token=self._bos_text
            )
        return ctx

    def _grammar(self, schema: dict[str, Any]) -> Any:
        """Return a llama.cpp grammar for ``schema`` (cached; generic JSON if unsupported)."""
        from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

        text = json.dumps(schema)  # keep property order: the model writes fields in this order
        with self._grammars_lock:
            grammar = self._grammars.get(text)
            if grammar is None:
                try:
                    grammar = LlamaGrammar.from_json_schema(text, verbose=False)
                except Exception:  # the converter rejects some schema features
                    grammar = LlamaGrammar.from_string(JSON_GBNF, verbose=False)
                self._grammars[text] = grammar
            return grammar

    def render_prompt(self, request: ModelRequest) -> str:
        """Return the prompt text for ``request`` (chat template, tools, forced-call prefix)."""
        self.context(request.purpose)
        tools = _tools_for_template(request.tools) if request.tool_choice != "none" else None
        rendered = self._formatter(messages=_messages_for_template(request.messages), tools=tools)
        prompt: str = rendered.prompt
        if _forced_tools(request):
            prompt += _FORCED_PREFIX
        return prompt

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one request with the local model.

        Sampling follows the request: ``temperature`` (0 is greedy), ``top_p``, ``seed`` (see the
        class), ``max_tokens`` clamped to the room left in the context. ``provider_options`` may
        set llama.cpp's ``top_k`` (default 0, off), ``min_p`` (default 0.0) and
        ``repeat_penalty`` (default 1.0, off).

        Returns:
            ``text`` (JSON text for a ``json_schema`` request; None when a forced tool call is
            returned), ``tool_calls``, ``finish_reason`` (``stop``, ``length`` or
            ``tool_calls``), and ``usage`` whose ``cached_tokens`` counts the prompt tokens kept
            from the purpose context's previous request.

        Raises:
            ProviderError: ``bad_request`` when the prompt does not fit the context, the token cap
                is below 1 or a named tool is not offered; ``server`` when llama.cpp fails.
        """
        started = time.perf_counter()
        forced = _forced_tools(request)
        if request.max_tokens < 1:
            raise ProviderError(
                f"max_tokens must be at least 1, got {request.max_tokens}", kind="bad_request"
            )
        ctx = self._context(request.purpose)
        grammar = None
        if request.json_schema is not None:
            grammar = self._grammar(request.json_schema)
        elif forced:
            grammar = self._grammar(_tool_call_schema(forced))
        prompt = self.render_prompt(request)
        llama = ctx.llama
        with ctx.lock:
            add_bos = not (self._bos_text and prompt.startswith(self._bos_text))
            tokens: list[int] = llama.tokenize(
                prompt.encode("utf-8"), add_bos=add_bos, special=True
            )
            room = self._n_ctx - len(tokens)
            if room < 1:
                raise ProviderError(
                    f"prompt of {len(tokens)} tokens does not fit the local model's context of "
                    f"{self._n_ctx} tokens",
                    kind="context_length",
                )
            max_new = min(request.max_tokens, room)
            stats, out, finish = self._generate(ctx, request, tokens, max_new, grammar)
        self.last_stats = stats
        raw = llama.detokenize(out).decode("utf-8", errors="replace")
        text, calls = self._interpret(request, raw, forced)
        if calls and finish == "stop":
            finish = "tool_calls"
        return ModelResponse(
            text=text,
            tool_calls=calls,
            finish_reason=finish,
            usage=Usage(
                input_tokens=stats.prompt_tokens,
                output_tokens=stats.output_tokens,
                cached_tokens=stats.prompt_tokens - stats.evaluated_prompt_tokens,
            ),
            model=self._model_id,
            latency_s=time.perf_counter() - started,
        )

    def _generate(
        self,
        ctx: _Context,
        request: ModelRequest,
        tokens: list[int],
        max_new: int,
        grammar: Any,
    ) -> tuple[GenerationStats, list[int], str]:
        """Run llama.cpp's generation loop (caller holds ``ctx.lock``)."""
        llama = ctx.llama
        options = request.provider_options
        seed = request.seed if request.seed is not None else self._seed + 1_000_003 * request.draw
        llama.set_seed(seed & 0xFFFFFFFF)
        stats = GenerationStats(purpose=request.purpose, prompt_tokens=len(tokens))
        out: list[int] = []
        finish = "length"
        ctx.evaluated = 0
        t0 = time.perf_counter()
        t_first = t0
        gen = llama.generate(
            tokens,
            temp=max(request.temperature, 0.0),
            top_p=request.top_p if request.top_p is not None else 1.0,
            top_k=int(options.get("top_k", 0)),
            min_p=float(options.get("min_p", 0.0)),
            repeat_penalty=float(options.get("repeat_penalty", 1.0)),
            grammar=grammar,
        )
        first = True
        try:
            for token in gen:
                if first:  # the prompt has been evaluated and one token sampled
                    first = False
                    t_first = time.perf_counter()
                    stats.evaluated_prompt_tokens = ctx.evaluated
                if token in self._eog:
                    finish = "stop"
                    break
                out.append(int(token))
                if len(out) >= max_new:
                    break
        except (RuntimeError, ValueError) as exc:
            raise ProviderError(f"llama.cpp generation failed: {exc}", kind="server") from exc
        finally:
            gen.close()
        t_end = time.perf_counter()
        stats.output_tokens = len(out)
        stats.prompt_s = t_first - t0
        stats.gen_s = t_end - t_first
        return stats, out, finish

    def _interpret(
        self, request: ModelRequest, raw: str, forced: tuple[ToolSpec, ...]
    ) -> tuple[str | None, tuple[ToolCall, ...]]:
        """Turn generated text into (text, tool calls) according to the request's mode."""
        if request.json_schema is not None:
            return _valid_json_text(raw), ()
        if forced:
            _, calls = parse_tool_calls(_FORCED_PREFIX + raw + _FORCED_SUFFIX, request.tools)
            if not calls:  # cannot happen with the prefix, but keep the raw text if it does
                calls = (
                    ToolCall(
                        id=tool_call_id(raw, 0),
                        name=forced[0].name,
                        arguments=raw,
                        error="no tool call in the constrained answer",
                    ),
                )
            return None, calls
        if request.tools and request.tool_choice != "none":
            return parse_tool_calls(raw, request.tools)
        return raw, ()


def _forced_tools(request: ModelRequest) -> tuple[ToolSpec, ...]:
    """Return the tools one of which must be called (empty when the choice is free).

    Raises:
        ProviderError: ``bad_request`` when ``tool_choice`` names a tool that is not offered or
            demands a call with no tools offered.
    """
    choice = request.tool_choice
    if choice in ("auto", "none") or request.json_schema is not None:
        return ()
    if choice == "required":
        if not request.tools:
            raise ProviderError("tool_choice 'required' with no tools offered", kind="bad_request")
        return request.tools
    named = tuple(t for t in request.tools if t.name == choice)
    if not named:
        offered = [t.name for t in request.tools]
        raise ProviderError(
            f"tool_choice names {choice!r}, which is not among the offered tools {offered}",
            kind="bad_request",
        )
    return named


def _tool_call_schema(tools: tuple[ToolSpec, ...]) -> dict[str, Any]:
    """JSON schema of Qwen's tool-call object ``{"name": ..., "arguments": {...}}``."""
    alternatives = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool.name},
                "arguments": tool.parameters or {"type": "object"},
            },
            "required": ["name", "arguments"],
        }
        for tool in tools
    ]
    return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}


def _tools_for_template(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            },
        }
        for t in tools
    ]


def _messages_for_template(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Messages as the chat template expects them (content never None; calls as objects)."""
    rendered: list[dict[str, Any]] = []
    for m in messages:
        item: dict[str, Any] = {"role": m.role, "content": m.content or ""}
        if m.tool_calls:
            item["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": c.parsed if c.parsed is not None else c.arguments,
                    },
                }
                for c in m.tool_calls
            ]
        if m.tool_call_id is not None:
            item["tool_call_id"] = m.tool_call_id
        if m.name is not None:
            item["name"] = m.name
        rendered.append(item)
    return rendered


def _valid_json_text(raw: str) -> str:
    """Return ``raw`` as strict JSON text when it decodes (the grammar admits raw control
    characters inside strings; those are re-serialised); otherwise ``raw`` unchanged."""
    try:
        json.loads(raw)
        return raw
    except json.JSONDecodeError:
        pass
    try:
        value = json.loads(raw, strict=False)
    except json.JSONDecodeError:
        return raw  # cut off by the token cap; finish_reason says "length"
    return json.dumps(value, ensure_ascii=False)
