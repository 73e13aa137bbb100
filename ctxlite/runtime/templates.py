"""Prompt templates with a context slot and a query slot (context influence, Flemings et al., ACL 2025).

A template such as ``"Document: {context}\\nQuestion: {query}\\nAnswer:"`` is
split at ``{context}`` into a prefix and a suffix; the prompt *without* the
context is the same template with an empty slot, never the bare query (as the
authors' code does, ``template_empty_input`` in
github.com/james-flemings/context_influence). Built-in
templates live in ``ctxlite/data/templates/score_templates.json``.

A template file (``.toml`` or ``.json``) may also ask for the model's chat template::

    template = "Document: {context}\nQuestion: {query}"   # the user turn
    system = "You answer from the document only."          # optional, plain text
    chat = true

The prompt is then the conversation [system, user] rendered by the model's own chat template
with the assistant turn opened: the context sits in the user turn, the response is the
assistant's answer.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ctxlite.errors import InvalidParameter
from ctxlite.records import read_table


def _load_data(name: str) -> dict:
    return json.loads(resources.files("ctxlite").joinpath("data", "templates", name).read_text(encoding="utf-8"))


def builtin_templates() -> dict[str, str]:
    """Name -> template text of the bundled scoring templates."""
    return _load_data("score_templates.json")


def audit_templates() -> dict:
    """The bundled audit record formats, query candidates and defense prompts."""
    return _load_data("audit_templates.json")


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt with exactly one ``{context}`` slot and at most one ``{query}`` slot; ``chat``: the text
    is the user turn of a conversation rendered by the model's chat template (after ``system``)."""

    text: str
    name: str = "custom"
    chat: bool = False
    system: str = ""

    def __post_init__(self):
        if not isinstance(self.text, str) or not isinstance(self.system, str) or not isinstance(self.chat, bool):
            raise InvalidParameter(f"template {self.name!r}: template and system are strings, chat true or false")
        if self.system and not self.chat:
            raise InvalidParameter(f"template {self.name!r}: a system message needs chat = true")
        try:
            parsed = [(f, conv, spec) for _, f, spec, conv in string.Formatter().parse(self.text) if f is not None]
        except ValueError as exc:
            raise InvalidParameter(
                f"template {self.name!r} is not a valid format string ({exc}); write literal braces as {{{{ }}}}"
            ) from None
        fields = [f for f, _, _ in parsed]
        if any(conv or spec for _, conv, spec in parsed):
            raise InvalidParameter(
                f"template {self.name!r}: slots take no conversion or format spec, found {self.text!r}"
            )
        if fields.count("context") != 1 or self.text.count("{context}") != 1:
            raise InvalidParameter(
                f"template {self.name!r} must contain exactly one {{context}} slot, found fields {fields}"
            )
        unknown = set(fields) - {"context", "query"}
        if unknown or fields.count("query") > 1:
            raise InvalidParameter(
                f"template {self.name!r} may only use {{context}} and one {{query}}, found {sorted(fields)}"
            )

    @property
    def uses_query(self) -> bool:
        return "{query}" in self.text

    def parts(self, query: str = "", render_chat: Callable[[list[dict]], str] | None = None) -> tuple[str, str]:
        """``(prefix, suffix)`` around the context slot, with the query filled in; a chat template's
        parts are those of the conversation ``render_chat`` renders (the model's chat markers included)."""
        cut = self._context_offset()
        prefix, suffix = self.text[:cut].format(query=query), self.text[cut + len("{context}") :].format(query=query)
        if not self.chat:
            return prefix, suffix
        if render_chat is None:
            raise InvalidParameter(f"template {self.name!r} is a chat template: it needs the model's chat template")
        messages = [{"role": "system", "content": self.system}] if self.system else []
        text = render_chat([*messages, {"role": "user", "content": prefix + CONTEXT_MARK + suffix}])
        if text.count(CONTEXT_MARK) != 1:
            raise InvalidParameter(f"the chat template did not keep the context of template {self.name!r} in one place")
        head, tail = text.split(CONTEXT_MARK)
        return head, tail

    def _context_offset(self) -> int:
        """Offset of the real ``{context}`` slot (escaped ``{{context}}`` is literal text)."""
        offset = 0
        for literal, field, _, _ in string.Formatter().parse(self.text):
            offset += len(literal) + literal.count("{") + literal.count("}")  # parse() unescapes {{ and }}
            if field == "context":
                return offset
            if field is not None:
                offset += len("{" + field + "}")
        raise AssertionError("validated template lost its {context} slot")

    def render(self, context: str, query: str = "", render_chat=None) -> str:
        prefix, suffix = self.parts(query, render_chat)
        return prefix + context + suffix


CONTEXT_MARK = "\u27e6ctxlite:context\u27e7"
"""Stands for the context while a chat template is rendered, then split on (no template writes it)."""


def template_file(path: Path) -> PromptTemplate:
    """A template from a file: ``.toml``/``.json`` (``template``, optional ``chat`` and ``system``) or plain text."""
    if path.suffix.lower() not in (".toml", ".json"):
        try:
            return PromptTemplate(path.read_text(encoding="utf-8"), name=path.name)
        except UnicodeDecodeError:
            raise InvalidParameter(f"template file {path} is not UTF-8 text") from None
    data, _ = read_table(path, "template file")
    if "template" not in data or set(data) - {"template", "chat", "system"}:
        raise InvalidParameter(f"template file {path}: expected the keys template, and optionally chat and system")
    return PromptTemplate(data["template"], name=path.name, chat=data.get("chat", False), system=data.get("system", ""))


def get_template(name_or_text: str) -> PromptTemplate:
    """A built-in template by name, a path to a text file, or a literal template."""
    builtins = builtin_templates()
    if name_or_text in builtins:
        return PromptTemplate(builtins[name_or_text], name=name_or_text)
    if "{context}" not in name_or_text:
        path = Path(name_or_text)
        if path.is_file():
            return template_file(path)
        raise InvalidParameter(
            f"unknown template {name_or_text!r}: use one of {', '.join(sorted(builtins))}, "
            "a file, or a literal containing {context}"
        )
    return PromptTemplate(name_or_text)
