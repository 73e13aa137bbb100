"""Chat templates: a model's own conversation format, applied the way llama.cpp applies it.

``chat_template(model)`` reads the GGUF's ``tokenizer.chat_template`` (a Jinja
template written by the model's trainers); ``render_chat(engine, messages)``
formats a conversation with it through ``llama_chat_apply_template``, which
does not run Jinja: it recognises the template among the formats llama.cpp
knows (ChatML, Llama-3, Gemma, ...) by markers in its text and writes that
format itself. For a system + user conversation that is exactly what the
template's Jinja gives (the tests compare the two); where a template does more
than its format (SmolLM2's adds a default system prompt to a conversation
without one), llama.cpp's rendering is the format alone.

A base model without a template (the default Gemma-3-270M) is refused with
``InvalidParameter``: a chat format guessed for it would be a format it never
saw in training.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import llama_cpp as _llama

from ctxlite.errors import InvalidParameter
from ctxlite.runtime.backend import ChatModel, require
from ctxlite.runtime.engine import Engine, model_metadata
from ctxlite.runtime.models import verified_entry

TEMPLATE_KEY = "tokenizer.chat_template"


def _model_name(engine: Engine) -> str:
    path = Path(engine.model_path)
    entry = verified_entry(path)
    return entry.name if entry else path.name


def chat_template(engine_or_model: Engine | str | os.PathLike) -> str | None:
    """The model's chat template (its GGUF's ``tokenizer.chat_template``), or None when it has none.

    Takes a loaded :class:`~ctxlite.runtime.engine.Engine` (any backend with the model's metadata,
    :class:`~ctxlite.runtime.backend.ChatModel`), a registry name or a GGUF path (read without
    loading the weights).
    """
    if isinstance(engine_or_model, (str, os.PathLike)):
        return model_metadata(engine_or_model, TEMPLATE_KEY)
    require(engine_or_model, [ChatModel], "a chat template")
    return engine_or_model.metadata(TEMPLATE_KEY)


def _messages(messages: Sequence[Mapping[str, str]]) -> list[tuple[bytes, bytes]]:
    if isinstance(messages, (str, bytes, Mapping)) or not messages:
        raise InvalidParameter("messages must be a non-empty list of {'role': ..., 'content': ...} objects")
    out = []
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, Mapping) else None
        content = m.get("content") if isinstance(m, Mapping) else None
        if not isinstance(role, str) or not role or not isinstance(content, str):
            raise InvalidParameter(f"message {i} needs a non-empty string 'role' and a string 'content', got {m!r}")
        if "\0" in role or "\0" in content:
            raise InvalidParameter(f"message {i} contains a NUL character")
        out.append((role.encode("utf-8"), content.encode("utf-8")))
    return out


def render_chat(engine: Engine, messages: Sequence[Mapping[str, str]], add_assistant: bool = True) -> str:
    """``messages`` (``[{"role": "system"|"user"|"assistant", "content": str}, ...]``) as the text
    the model was trained on, ending with the assistant's turn opened when ``add_assistant``.

    The text carries the format's special-token markers (``<|im_start|>`` ...); tokenize it with
    ``special=True`` so they become the special tokens.
    """
    template = chat_template(engine)
    if template is None:
        raise InvalidParameter(
            f"{_model_name(engine)} has no chat template ({TEMPLATE_KEY}): "
            f"use a chat model such as smollm2-135m-instruct, or leave chat off"
        )
    encoded = _messages(messages)
    chat = (_llama.llama_chat_message * len(encoded))(*(_llama.llama_chat_message(r, c) for r, c in encoded))
    tmpl = template.encode("utf-8")
    size = 2 * sum(len(r) + len(c) for r, c in encoded) + 256
    for _ in range(2):
        buf = ctypes.create_string_buffer(size)
        n = _llama.llama_chat_apply_template(tmpl, chat, len(encoded), add_assistant, buf, size)
        if n < 0:
            raise InvalidParameter(
                f"llama.cpp does not recognise the chat template of {_model_name(engine)} "
                f"(llama_chat_apply_template returned {n}): use a plain format"
            )
        if n <= size:
            return buf.raw[:n].decode("utf-8")
        size = n  # the buffer was too small: n is what it needs
    raise AssertionError("llama_chat_apply_template asked for a larger buffer twice")  # pragma: no cover
