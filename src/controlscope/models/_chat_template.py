"""A GGUF's jinja2 chat template, rendered in the controller without loading llama.cpp.

Renders exactly as ``llama_cpp.llama_chat_format.Jinja2ChatFormatter`` (llama-cpp-python 0.3.x)
does: a sandboxed environment with ``trim_blocks``/``lstrip_blocks``, the ``loopcontrols``
extension, Hugging Face's ``{% generation %}`` tag passed through, and a ``tojson`` filter that
keeps non-ASCII text. Importing ``llama_cpp`` here would load the native library into the
controller, which the local model keeps in its own processes.
"""

from __future__ import annotations

import json
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
