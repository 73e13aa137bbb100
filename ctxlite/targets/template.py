"""Request templates and answer paths of a target file, JSON-safe.

A body template is a JSON value (a TOML table) whose strings may hold placeholders. A string that
*is* one placeholder is replaced by its value with its JSON type (``"{records}"`` by the list of
records, ``"{seed}"`` by an integer); a placeholder inside a longer string is replaced by its
text. The value is substituted into the parsed structure, never into JSON text, so a query with
quotes or newlines cannot break or change the request's shape. Header values take
``${VARIABLE}`` from the environment (secrets stay out of the target file and out of the log).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

from ctxlite.errors import InvalidParameter, TargetError

_PLACEHOLDER = re.compile(r"\{(records|records_json|query|seed|history)\}")
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def fill(template, values: Mapping[str, object]):
    """``template`` (a JSON value) with its placeholders replaced by ``values``' (by name)."""
    if isinstance(template, dict):
        return {k: fill(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, values) for v in template]
    if not isinstance(template, str):
        return template
    whole = _PLACEHOLDER.fullmatch(template)
    if whole is not None:
        return values[whole.group(1)]

    def text(m: re.Match) -> str:
        value = values[m.group(1)]
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    return _PLACEHOLDER.sub(text, template)


def placeholders(template) -> set[str]:
    """The placeholder names ``template`` uses."""
    if isinstance(template, dict):
        return set().union(*(placeholders(v) for v in template.values())) if template else set()
    if isinstance(template, list):
        return set().union(*(placeholders(v) for v in template)) if template else set()
    return set(_PLACEHOLDER.findall(template)) if isinstance(template, str) else set()


def environ_headers(headers: Mapping[str, str], where: str) -> dict[str, str]:
    """``headers`` with every ``${VAR}`` read from the environment; a variable not set is refused."""
    out = {}
    for name, value in headers.items():
        if not isinstance(value, str):
            raise InvalidParameter(f"{where}: header {name!r} must be a string")

        def env(m: re.Match, name=name) -> str:
            var = m.group(1)
            if var not in os.environ:
                raise InvalidParameter(f"{where}: header {name!r} needs the environment variable {var}: it is not set")
            return os.environ[var]

        out[name] = _ENV.sub(env, value)
    return out


_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def parse_path(path: str) -> list[str | int]:
    """A JSON path's steps: ``$.answer``, ``answer.text``, ``choices[0].message.content``."""
    text = path.strip()
    text = text[1:] if text.startswith("$") else text
    text = text[1:] if text.startswith(".") else text
    steps: list[str | int] = []
    at = 0
    while at < len(text):
        m = _STEP.match(text, at)
        if m is None:
            raise InvalidParameter(f"answer path {path!r}: cannot read it at {text[at:]!r} (use $.a.b or a.b[0].c)")
        steps.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
        at = m.end()
        if at < len(text) and text[at] == ".":
            at += 1
    if not steps:
        raise InvalidParameter(f"answer path {path!r} names nothing (use $.answer, answer.text or items[0].text)")
    return steps


def follow(body, path: str, where: str) -> str:
    """The text at ``path`` in the JSON ``body``; ``TargetError`` naming the first missing step."""
    value = body
    done = "$"
    for step in parse_path(path):
        if isinstance(step, int):
            ok = isinstance(value, list) and step < len(value)
        else:
            ok = isinstance(value, dict) and step in value
        if not ok:
            head = json.dumps(body, ensure_ascii=False)[:120]
            raise TargetError(f"{where}: its answer has no {path} ({done} has no {step!r}): {head}")
        value = value[step]
        done += f"[{step}]" if isinstance(step, int) else f".{step}"
    if not isinstance(value, str):
        raise TargetError(f"{where}: its answer's {path} is a {type(value).__name__}, not text")
    return value
