"""Prompt templates with a context slot and a query slot (context influence, Flemings et al., ACL 2025).

A template such as ``"Document: {context}\\nQuestion: {query}\\nAnswer:"`` is
split at ``{context}`` into a prefix and a suffix; the prompt *without* the
context is the same template with an empty slot, never the bare query (as the
authors' code does, ``template_empty_input`` in
github.com/james-flemings/context_influence). Built-in
templates live in ``ctxlite/data/templates/score_templates.json``.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ctxlite.errors import InvalidParameter


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
    """A prompt with exactly one ``{context}`` slot and at most one ``{query}`` slot."""

    text: str
    name: str = "custom"

    def __post_init__(self):
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

    def parts(self, query: str = "") -> tuple[str, str]:
        """``(prefix, suffix)`` around the context slot, with the query filled in."""
        cut = self._context_offset()
        prefix, suffix = self.text[:cut], self.text[cut + len("{context}") :]
        return prefix.format(query=query), suffix.format(query=query)

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

    def render(self, context: str, query: str = "") -> str:
        prefix, suffix = self.parts(query)
        return prefix + context + suffix


def get_template(name_or_text: str) -> PromptTemplate:
    """A built-in template by name, a path to a text file, or a literal template."""
    builtins = builtin_templates()
    if name_or_text in builtins:
        return PromptTemplate(builtins[name_or_text], name=name_or_text)
    if "{context}" not in name_or_text:
        path = Path(name_or_text)
        if path.is_file():
            try:
                return PromptTemplate(path.read_text(encoding="utf-8"), name=path.name)
            except UnicodeDecodeError:
                raise InvalidParameter(f"template file {path} is not UTF-8 text") from None
        raise InvalidParameter(
            f"unknown template {name_or_text!r}: use one of {', '.join(sorted(builtins))}, "
            "a file, or a literal containing {context}"
        )
    return PromptTemplate(name_or_text)
