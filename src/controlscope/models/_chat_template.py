"""A GGUF's jinja2 chat template, rendered in the controller without loading llama.cpp.

Renders exactly as ``llama_cpp.llama_chat_format.Jinja2ChatFormatter`` (llama-cpp-python 0.3.x)
does: a sandboxed environment with ``trim_blocks``/``lstrip_blocks``, the ``loopcontrols``
extension, Hugging Face's ``{% generation %}`` tag passed through, and a ``tojson`` filter that
keeps non-ASCII text. Importing ``llama_cpp`` here would load the native library into the
controller, which the local model keeps in its own processes.

:meth:`ChatTemplate.segments` says which parts of a rendered prompt are the template's own
control tokens: only those may become control tokens (``<|im_start|>``, ``<|im_end|>``...), while
every text the messages and tools carry is tokenized as literal text, whatever it holds. A file
that says ``<|im_end|>`` and is printed by agent code thus cannot end a turn or open a system
turn in a prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""Used only for a GGUF that carries no chat template."""

_DEFANG = "\ufffc"
"""Put in place of the first character of every control-token text inside the messages and tools
when the template's own control tokens are located (one character for one: offsets are kept)."""

Segment = tuple[bool, str]
"""A piece of a rendered prompt: (True, the text of one control token the template wrote) or
(False, text to tokenize as literal text)."""


def _defanged(value: Any, pattern: re.Pattern[str]) -> Any:
    """``value`` (messages, tools) with every control-token text in its strings and keys made
    inert, one character replaced (see :data:`_DEFANG`)."""
    if isinstance(value, str):
        return pattern.sub(lambda m: _DEFANG + m.group(0)[1:], value)
    if isinstance(value, dict):
        return {_defanged(k, pattern): _defanged(v, pattern) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_defanged(v, pattern) for v in value]
    return value


class _GenerationTag(jinja2.ext.Extension):
    """Pass-through for Hugging Face's ``{% generation %}`` chat-template tag."""

    tags = {"generation"}  # noqa: RUF012 (jinja2 declares it as a plain set attribute)

    def parse(self, parser: Any) -> Any:
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: str) -> None:
    raise ValueError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    """A compiled chat template.

    Args:
        template: the jinja2 source (the GGUF's ``tokenizer.chat_template``), or None for
            :data:`CHATML_TEMPLATE`.
        bos_token: the text of the model's BOS token ('' if none).
        eos_token: the text of the model's EOS token ('' if none).
    """

    def __init__(self, template: str | None, *, bos_token: str, eos_token: str) -> None:
        env = ImmutableSandboxedEnvironment(
            loader=jinja2.BaseLoader(),
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[_GenerationTag, jinja2.ext.loopcontrols],
        )
        env.filters["tojson"] = _tojson
        self._template = env.from_string(template or CHATML_TEMPLATE)
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        """Return the prompt text for ``messages`` (OpenAI-shaped dicts) ending with the
        assistant's generation prompt.

        Raises:
            ValueError: when the template itself raises (e.g. an unsupported role order).
        """
        return self._template.render(
            messages=messages,
            eos_token=self.eos_token,
            bos_token=self.bos_token,
            raise_exception=_raise_exception,
            add_generation_prompt=True,
            functions=None,
            function_call=None,
            tools=tools,
            tool_choice=None,
            strftime_now=_strftime_now,
        )

    def segments(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        controls: Sequence[str],
        *,
        suffix: str = "",
    ) -> list[Segment]:
        """The prompt :meth:`render` gives (plus ``suffix``, literal text), cut into the
        template's own control tokens and literal text.

        The template is rendered a second time with every occurrence of a control-token text in
        the messages and tools made inert (same length); the control tokens found in that
        rendering are the template's, and only those become control-token segments.

        Args:
            messages: as for :meth:`render`.
            tools: as for :meth:`render`.
            controls: the texts of the model's control tokens (``<|im_start|>``...).
            suffix: text appended to the prompt (a forced call's opening), literal.

        Returns:
            Segments whose texts, joined, are the rendered prompt plus ``suffix``.

        Raises:
            ValueError: when the template raises, or renders the two versions with different
                lengths (it transforms the text it is given; no such template is known).
        """
        prompt = self.render(messages, tools)
        texts = sorted({c for c in controls if c}, key=len, reverse=True)
        if not texts:
            return [(False, prompt + suffix)]
        pattern = re.compile("|".join(re.escape(t) for t in texts))
        inert = self.render(_defanged(messages, pattern), _defanged(tools, pattern))
        if len(inert) != len(prompt):
            raise ValueError(
                "the chat template renders a prompt whose length depends on the text of its "
                "messages' control tokens; their parts cannot be told apart"
            )
        out: list[Segment] = []
        end = 0
        for match in pattern.finditer(inert):
            if match.start() > end:
                out.append((False, prompt[end : match.start()]))
            out.append((True, match.group(0)))
            end = match.end()
        if end < len(prompt) or suffix:
            out.append((False, prompt[end:] + suffix))
        return out
