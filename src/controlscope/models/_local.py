"""The embedded local model: a GGUF run by llama.cpp (``llama-cpp-python``) in child processes.

:class:`LocalModel` implements :class:`~controlscope.core.ChatModel` (README, "The
embedded local model"):

- llama.cpp runs outside the controller: one child process per request purpose (planner,
  reviewer, other), started on first use (:mod:`controlscope.models._local_process`). A native
  crash or an OOM kill of a child is a :class:`ProviderError` of kind ``runtime_crash`` naming
  the signal or exit status and llama.cpp's last output; the child is discarded and the next
  request of that purpose starts a new one, while the other purposes' children (and their KV
  prefixes) are untouched. Every call has one deadline that covers all of it (waiting for the
  purpose's process, loading it, the answer): ``request_timeout_s``, or the run's per-call limit,
  never past the run's wall-clock ceiling (:func:`~controlscope.core.call_seconds`); a child
  still working then is killed and the call fails with ``timeout``, the error saying how far
  the request had got (prompt tokens evaluated, tokens generated), so a slow request can be
  told from a hung one. Children end with
  :meth:`LocalModel.close`, with the model's garbage collection or interpreter exit, or by
  themselves when the controller dies;
- the prompt is the GGUF's own chat template (Qwen2.5's ChatML with tools) rendered in the
  controller with jinja2; only the template's own control tokens (``<|im_start|>``...) are
  control tokens: every text the messages and tools carry is tokenized as literal text
  (:meth:`~controlscope.models._chat_template.ChatTemplate.segments`), so agent output that
  says ``<|im_end|>`` cannot end a turn. Generation stops on every end-of-generation token of the
  vocabulary (llama.cpp's ``is_eog``);
- tool calls are native: Qwen2.5 writes ``<tool_call>{...}</tool_call>``, parsed by
  :mod:`controlscope.models._toolcalls`; with ``tool_choice="required"`` or a named tool the
  call is decoded under a grammar made from the tools' JSON schemas (plain JSON where llama.cpp
  cannot convert one: the tool checks its arguments);
- a ``json_schema`` request is decoded under that schema's grammar, or refused with a
  ``schema_unsupported`` :class:`ProviderError` when the grammar would not enforce all of it
  (:func:`~controlscope.models._grammar.grammar_problem`, or llama.cpp's converter refuses it);
  its answer is validated all the same (``ModelResponse.schema_error``: only an answer cut by
  the token cap can fail);
- an answer depends on its request alone, never on what the purpose's context held before:
  prompts are evaluated in batches of :data:`EVAL_GRID` tokens at fixed offsets, and a request
  keeps from its context only complete batches of the previous prompt that it shares, so every
  prompt token is evaluated exactly as a fresh context would (llama.cpp's own prefix reuse
  re-evaluates the last token alone, whose logits then differ slightly, and keeps generated
  tokens' entries: the same greedy request could answer differently the second time);
- prompt (KV-prefix) reuse: each purpose's child keeps its own llama.cpp context, so planner and
  reviewer never evict each other's prefix; the weights are mmap'd and shared through the OS page
  cache. ``Usage.cached_tokens`` is the number of prompt tokens the library did not evaluate,
  counted from the tokens actually passed to ``Llama.eval``.

Each purpose has its own lock, so a ``LocalModel`` may be shared by threads.
"""

from __future__ import annotations

import json
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from controlscope._extras import require_extra
from controlscope.core import (
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    ToolSpec,
    Usage,
    answer_schema_error,
    call_seconds,
    decode_json,
    provider_error_kind,
)
from controlscope.models._chat_format import message_to_openai, tools_to_openai
from controlscope.models._chat_template import ChatTemplate, Segment
from controlscope.models._grammar import grammar_problem
from controlscope.models._local_process import ModelProcess
from controlscope.models._toolcalls import parse_tool_calls, tool_call_id
from controlscope.models._weights import ensure_weights, resolve_model_name

__all__ = ["PURPOSES", "GenerationStats", "LocalModel", "default_threads"]

PURPOSES = ("planner", "reviewer", "other")
"""The request purposes; each has its own llama.cpp process and KV context."""

DEFAULT_REQUEST_TIMEOUT_S = 600.0
"""Seconds one request may take by default (generous: a 1,024-token answer of the 1.5B model
takes about a minute on 2 busy cores); a run's per-call limit replaces it."""

EVAL_GRID = 64
"""Tokens per prompt-evaluation batch. Prompts are evaluated in batches starting at multiples of
it and only complete batches of the previous prompt are kept, so an answer never depends on
what the context held before (``benchmarks/model_contract.py`` measures the alternatives; the
cost is re-evaluating less than one grid of the kept prefix per request)."""

DEFAULT_START_TIMEOUT_S = 120.0
"""Seconds a new process may take to load the weights (about 2 s when they are in the page
cache)."""

_FORCED_PREFIX = "<tool_call>\n"
_FORCED_SUFFIX = "\n</tool_call>"


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
        peak_rss_mb: peak resident set of the process that served it, in MiB (its own copy of
            the repacked weights and its KV context; mmap'd weights counted as touched).
    """

    purpose: str
    prompt_tokens: int = 0
    evaluated_prompt_tokens: int = 0
    output_tokens: int = 0
    prompt_s: float = 0.0
    gen_s: float = 0.0
    peak_rss_mb: float = 0.0


@dataclass
class _Slot:
    """The process serving one purpose (None until first use or after a failure) and its lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    process: ModelProcess | None = None


def _close_slots(slots: dict[str, _Slot]) -> None:
    """End every purpose's process (the model's finalizer; also run at interpreter exit)."""
    for slot in slots.values():
        process, slot.process = slot.process, None
        if process is not None:
            process.close()


class LocalModel:
    """A GGUF chat model run by llama.cpp in child processes, usable as planner and reviewer.

    Args:
        path_or_name: a known model (``1.5b`` default, ``0.5b``, optionally ``local:``-prefixed)
            or a path to a ``.gguf`` file. Known weights are assembled and verified on first use
            (:func:`~controlscope.models._weights.ensure_weights`).
        n_ctx: context size in tokens, per purpose context.
        n_threads: CPU threads of each process; default :func:`default_threads`.
        seed: base sampling seed; a request without ``seed`` samples with
            ``seed + 1_000_003 * draw`` so separately drawn reviews differ while a repeated
            request is reproducible. It is not part of :attr:`model_id`: the request carries
            it (:meth:`sampling_seed`, recorded in the log and keyed on by the cache).
        verbose: let llama.cpp log to this process's stderr (otherwise its log is kept apart and
            its tail quoted in ``runtime_crash`` errors).
        request_timeout_s: seconds one call may take, all of it counted; a run's per-call limit
            replaces it and its wall-clock ceiling caps it. A process that has not answered by
            then is killed and the call fails with ``timeout``.
        start_timeout_s: seconds a new process may take to load the weights.

    The processes start on first use; :meth:`close` (or ``with LocalModel(...) as model:``)
    ends them, and they also end when the model is garbage-collected, at interpreter exit, or
    by themselves within a fraction of a second when this process dies.

    Raises:
        controlscope.MissingExtra: ``llama_cpp`` is not installed (the ``local`` extra); checked
            before the weights are fetched.
        controlscope.models._weights.WeightsError: missing or corrupt weights (names the
            expected SHA-256).
        ValueError: ``n_ctx``, ``n_threads`` or a timeout below 1 (seconds: not positive).
    """

    def __init__(
        self,
        path_or_name: str = "1.5b",
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        seed: int = 0,
        verbose: bool = False,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    ) -> None:
        require_extra("local", "llama_cpp", "the embedded local model")
        if n_ctx < 1:
            raise ValueError(f"n_ctx must be positive, got {n_ctx}")
        threads = default_threads() if n_threads is None else n_threads
        if threads < 1:
            raise ValueError(f"n_threads must be positive, got {threads}")
        if not (request_timeout_s > 0 and start_timeout_s > 0):
            raise ValueError(
                f"timeouts must be positive, got request_timeout_s={request_timeout_s}, "
                f"start_timeout_s={start_timeout_s}"
            )
        self._path: Path = ensure_weights(path_or_name, progress=True)
        known = resolve_model_name(path_or_name)
        self._model_id = (
            known.model_id if known else "local:" + self._path.name.removesuffix(".gguf")
        )
        self._n_ctx = n_ctx
        self._n_threads = threads
        self._seed = seed
        self._verbose = verbose
        self.request_timeout_s = request_timeout_s
        """Seconds one call may take when the run sets no limit (settable)."""
        self._start_timeout_s = start_timeout_s
        self._slots = {purpose: _Slot() for purpose in PURPOSES}
        self._template: ChatTemplate | None = None
        self._eog: frozenset[int] = frozenset()
        self._controls: tuple[str, ...] = ()
        self._runtime_info = ""
        self._finalizer = weakref.finalize(self, _close_slots, self._slots)
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
    def seed(self) -> int:
        """The base sampling seed (see :meth:`sampling_seed`)."""
        return self._seed

    @property
    def n_ctx(self) -> int:
        """Context size in tokens of every purpose context."""
        return self._n_ctx

    @property
    def n_threads(self) -> int:
        """CPU threads used by llama.cpp in each process."""
        return self._n_threads

    @property
    def eog_tokens(self) -> frozenset[int]:
        """Token ids that end generation (starts the ``other`` process if none has run)."""
        self._ensure_started()
        return self._eog

    @property
    def runtime_info(self) -> str:
        """llama.cpp's ``llama_print_system_info()`` in the model's processes: the instruction
        sets and buffer types the build uses, e.g. ``CPU : SSE3 = 1 | ... | AVX512 = 1 | ...``
        (starts the ``other`` process if none has run)."""
        self._ensure_started()
        return self._runtime_info

    @property
    def pids(self) -> dict[str, int]:
        """Process ids of the running processes by purpose."""
        return {
            purpose: slot.process.pid
            for purpose, slot in self._slots.items()
            if slot.process is not None and not slot.process.closed
        }

    def close(self) -> None:
        """End every process (each closes on end of input; killed after a few seconds).

        A later request starts a new process; closing twice is harmless.
        """
        _close_slots(self._slots)

    def __enter__(self) -> LocalModel:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _slot(self, purpose: str) -> _Slot:
        slot = self._slots.get(purpose)
        if slot is None:
            raise ValueError(f"unknown purpose {purpose!r}; expected one of {PURPOSES}")
        return slot

    def _process(self, purpose: str, deadline: float | None = None) -> ModelProcess:
        """The purpose's running process, started if needed (caller holds the slot's lock).

        Args:
            purpose: the purpose.
            deadline: the call's deadline (``time.monotonic``); loading waits at most until
                then (and at most ``start_timeout_s``).

        Raises:
            ProviderError: ``runtime_crash`` when a new process dies or hangs while loading;
                ``timeout`` when the deadline passes while it loads; ``other`` when llama.cpp
                cannot load the weights.
        """
        slot = self._slots[purpose]
        if slot.process is not None and slot.process.owner != os.getpid():
            slot.process = None  # a forked process (a branch by fork) starts its own
        if slot.process is None or slot.process.closed:
            slot.process = None
            config = {
                "model_path": str(self._path),
                "n_ctx": self._n_ctx,
                "n_threads": self._n_threads,
                "grid": EVAL_GRID,
                "seed": self._seed,
                "verbose": self._verbose,
            }
            wait, late = self._start_timeout_s, "runtime_crash"
            if deadline is not None and deadline - time.monotonic() < wait:
                wait, late = max(deadline - time.monotonic(), 0.001), "timeout"
            slot.process = ModelProcess(
                purpose,
                config,
                start_timeout_s=wait,
                capture_stderr=not self._verbose,
                late=late,  # type: ignore[arg-type]
            )
            if self._template is None:
                ready = slot.process.ready
                self._eog = frozenset(int(t) for t in ready["eog"])
                self._controls = tuple(str(t) for t in ready["controls"])
                self._runtime_info = str(ready["system_info"]).strip()
                self._template = ChatTemplate(
                    ready["template"], bos_token=ready["bos_text"], eos_token=ready["eos_text"]
                )
        return slot.process

    def _call(
        self,
        purpose: str,
        message: dict[str, Any],
        deadline: float | None = None,
        limit_s: float | None = None,
    ) -> dict[str, Any]:
        """Send one message to the purpose's process and return its successful answer.

        Args:
            purpose: the purpose whose process answers.
            message: the message.
            deadline: when the call must be answered (``time.monotonic``); None:
                ``request_timeout_s`` from now. Waiting for another thread's request of the
                same purpose, loading the weights and the answer all count.
            limit_s: the call's whole limit in seconds, for errors.

        Raises:
            ProviderError: ``timeout`` when the deadline passes (the process is discarded),
                ``runtime_crash`` (the same), or the kind the child reported
                (``context_length``, ``schema_unsupported``, ``server``...).
        """
        if deadline is None:
            limit_s = self.request_timeout_s
            deadline = time.monotonic() + limit_s
        slot = self._slot(purpose)
        if not slot.lock.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            raise ProviderError(
                f"timeout: the local model's {purpose} process was still busy with another "
                "request when the call's deadline passed",
                kind="timeout",
            )
        try:
            process = self._process(purpose, deadline)
            try:
                answer = process.exchange(
                    message,
                    max(deadline - time.monotonic(), 0.001),
                    doing=f"answering a {message['op']} request",
                    late="timeout",
                    limit_s=limit_s,
                )
            finally:
                if process.closed:
                    slot.process = None
        finally:
            slot.lock.release()
        if not answer.get("ok"):
            raise ProviderError(
                str(answer.get("message")), kind=provider_error_kind(answer.get("kind"))
            )
        return answer

    def start(self, purpose: str = "other") -> None:
        """Start the purpose's process now (load the weights) rather than at its first request.

        Raises:
            ValueError: for an unknown purpose.
            ProviderError: ``runtime_crash`` when the process dies or hangs while loading;
                ``other`` when llama.cpp cannot load the weights.
        """
        slot = self._slot(purpose)
        with slot.lock:
            self._process(purpose)

    def _ensure_started(self, purpose: str = "other") -> ChatTemplate:
        if self._template is None:
            self.start(purpose)
        assert self._template is not None
        return self._template

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        """Token ids of ``text`` as a prompt is tokenized (a BOS token where the model adds
        one); ``special``: parse special-token texts such as ``<|im_end|>`` as those tokens.

        Raises:
            ProviderError: when the ``other`` process fails.
        """
        answer = self._call("other", {"op": "tokenize", "text": text, "special": special})
        return [int(t) for t in answer["tokens"]]

    def clear_prefix(self, purpose: str) -> None:
        """Empty the purpose's KV context, so its next prompt is evaluated in full (for
        benchmarks; requests never need it). Does nothing when the process has not started.

        Raises:
            ValueError: for an unknown purpose.
        """
        slot = self._slot(purpose)
        if slot.process is not None and not slot.process.closed:
            self._call(purpose, {"op": "clear"})

    def render_prompt(self, request: ModelRequest) -> str:
        """Return the prompt text for ``request`` (chat template, tools, forced-call prefix).

        Starts the request's process if none has run yet (the template comes from the GGUF).
        """
        return "".join(text for _, text in self.prompt_segments(request))

    def prompt_segments(self, request: ModelRequest) -> list[Segment]:
        """The prompt of ``request`` cut into the template's own control tokens and literal
        text (:meth:`ChatTemplate.segments`): only the template's control tokens become
        control tokens; whatever the messages and tools hold is tokenized as text.

        Raises:
            ProviderError: ``bad_request`` for a named tool that is not offered.
            ValueError: when the chat template raises.
        """
        template = self._ensure_started(request.purpose)
        offered = request.tools if request.tool_choice != "none" else ()
        messages = [message_to_openai(m, chat_template=True) for m in request.messages]
        suffix = _FORCED_PREFIX if _forced_tools(request) else ""
        tools = tools_to_openai(offered) or None
        return template.segments(messages, tools, self._controls, suffix=suffix)

    def prompt_tokens(self, request: ModelRequest) -> list[int]:
        """The prompt tokens :meth:`complete` evaluates for ``request`` (for checks and
        benchmarks; tokenized by the ``other`` process).

        Raises:
            ProviderError: when the ``other`` process fails.
        """
        segments = self.prompt_segments(request)
        answer = self._call("other", {"op": "prompt_tokens", "segments": segments})
        return [int(t) for t in answer["tokens"]]

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one request with the local model.

        Sampling follows the request: ``temperature`` (0 is greedy), ``top_p``, ``seed`` (see the
        class), ``max_tokens`` clamped to the room left in the context. ``provider_options`` may
        set llama.cpp's ``top_k`` (default 0, off), ``min_p`` (default 0.0) and
        ``repeat_penalty`` (default 1.0, off). The answer depends on the request alone, never on
        what the purpose's context held before (see :data:`EVAL_GRID`).

        Returns:
            ``text`` (JSON text for a ``json_schema`` request; None when a forced tool call is
            returned), ``tool_calls``, ``finish_reason`` (``stop``, ``length`` or
            ``tool_calls``), ``usage`` whose ``cached_tokens`` counts the prompt tokens kept
            from the purpose context's previous request, and for a ``json_schema`` request
            ``schema_error`` (None when the answer satisfies the schema; it can fail only when
            the token cap cut it).

        Raises:
            ProviderError: ``bad_request`` when the token cap is below 1 or a named tool is not
                offered; ``schema_unsupported`` for a ``json_schema`` that llama.cpp's grammar
                would not enforce in full (:func:`~controlscope.models._grammar.grammar_problem`,
                or the converter refuses it); ``context_length`` when the prompt does not fit
                the context; ``timeout`` when the call's deadline passes (the call's limit,
                ``request_timeout_s`` or the run's, :func:`~controlscope.core.call_seconds`;
                the process is killed and the next request starts a new one);
                ``runtime_crash`` when the purpose's process dies or exits (the same);
                ``server`` when llama.cpp reports a failure.
        """
        started = time.perf_counter()
        limit = call_seconds(self.request_timeout_s)
        if limit <= 0:
            raise ProviderError(
                "timeout: the run's wall-clock ceiling has passed; the request was not sent",
                kind="timeout",
            )
        deadline = time.monotonic() + limit
        forced = _forced_tools(request)
        answer = self._call(request.purpose, self._message(request, forced), deadline, limit)
        stats = GenerationStats(
            purpose=request.purpose,
            prompt_tokens=int(answer["prompt_tokens"]),
            evaluated_prompt_tokens=int(answer["evaluated"]),
            output_tokens=int(answer["output_tokens"]),
            prompt_s=float(answer["prompt_s"]),
            gen_s=float(answer["gen_s"]),
            peak_rss_mb=int(answer["peak_rss_kb"]) / 1024,
        )
        self.last_stats = stats
        text, calls = self._interpret(request, str(answer["text"]), forced)
        finish = str(answer["finish"])
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
            schema_error=None
            if request.json_schema is None
            else answer_schema_error(text, request.json_schema, finish_reason=finish),
        )

    def _message(self, request: ModelRequest, forced: tuple[ToolSpec, ...]) -> dict[str, Any]:
        """The ``complete`` message for the child (see :mod:`._local_child`).

        Raises:
            ProviderError: ``bad_request`` for a token cap below 1; ``schema_unsupported`` for
                a ``json_schema`` llama.cpp's grammar would not enforce in full.
        """
        if request.max_tokens < 1:
            raise ProviderError(
                f"max_tokens must be at least 1, got {request.max_tokens}", kind="bad_request"
            )
        schema = request.json_schema
        if schema is not None:
            problem = grammar_problem(schema)
            if problem is not None:
                raise ProviderError(
                    "schema_unsupported: llama.cpp's grammar would not enforce the answer's "
                    f"schema ({problem})",
                    kind="schema_unsupported",
                )
        elif forced:
            schema = _tool_call_schema(forced)
        return {
            "op": "complete",
            "segments": self.prompt_segments(request),
            **self._sampling(request),
            # keep property order: the model writes fields in this order
            "schema": json.dumps(schema) if schema is not None else None,
            "strict": request.json_schema is not None,
        }

    def _sampling(self, request: ModelRequest) -> dict[str, Any]:
        """The request's sampling settings as the child takes them (see :meth:`complete`)."""
        options = request.provider_options
        return {
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p if request.top_p is not None else 1.0,
            "top_k": int(options.get("top_k", 0)),
            "min_p": float(options.get("min_p", 0.0)),
            "repeat_penalty": float(options.get("repeat_penalty", 1.0)),
            "seed": self.sampling_seed(request),
        }

    def sampling_seed(self, request: ModelRequest) -> int:
        """The seed ``request`` is sampled with: its ``seed``, else ``seed + 1_000_003 * draw``
        of this model's base seed (:class:`~controlscope.core.SeededModel`: the controller and
        the reviewer record the request with it, and the exact-request cache keys on it)."""
        return request.seed if request.seed is not None else self._seed + 1_000_003 * request.draw

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
                        id=tool_call_id(raw, 0, forced[0].name),
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


def _valid_json_text(raw: str) -> str:
    """Return ``raw`` as strict JSON text when it decodes (the grammar admits raw control
    characters inside strings; those are re-serialised); otherwise ``raw`` unchanged."""
    try:
        json.loads(raw)
        return raw
    except json.JSONDecodeError:
        pass
    try:
        value = decode_json(raw)
    except json.JSONDecodeError:
        return raw  # cut off by the token cap; finish_reason says "length"
    return json.dumps(value, ensure_ascii=False)
