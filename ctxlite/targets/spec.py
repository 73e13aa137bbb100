"""Target files (TOML) and the targets ``ctxlite audit --target KIND`` opens.

An ``http`` target file::

    kind = "http"
    base_url = "http://127.0.0.1:8080"
    timeout = 60            # seconds per request (retried with backoff, ``retries`` times)
    headers = { Authorization = "Bearer ${CLINIC_TOKEN}" }

    [load]                  # POSTed with the records; the optional [reset] is POSTed before it
    url = "/records"
    body = { records = "{records}" }

    [ask]
    url = "/ask"
    body = { question = "{query}", seed = "{seed}" }
    answer = "$.answer"

A ``command`` target file has ``kind = "command"``, ``load = ["prog", "{records_file}"]`` and
``ask = ["prog", "--seed", "{seed}"]`` (the question on standard input, the answer on standard
output), and optionally ``timeout`` and ``cwd`` (relative to the file's folder).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

from ctxlite.errors import DataError, InvalidParameter
from ctxlite.targets.chat import ChatTarget
from ctxlite.targets.command import CommandTarget
from ctxlite.targets.http import HttpTarget, Request, file_hash


class TargetKind(str, enum.Enum):
    """What ``ctxlite audit --target`` audits: an OpenAI-compatible chat endpoint, an application over
    HTTP described by a target file, or commands described by one."""

    CHAT = "chat"
    HTTP = "http"
    COMMAND = "command"


KINDS = tuple(k.value for k in TargetKind)
"""The kinds' names, in the enum's order (the CLI's choices)."""

_TOP = {
    "http": {"kind", "base_url", "timeout", "retries", "backoff", "concurrency", "headers", "load", "ask", "reset"},
    "command": {"kind", "load", "ask", "timeout", "cwd"},
}
_REQUEST = {"url", "body", "method", "answer"}


@dataclass(frozen=True)
class TargetSpec:
    """A parsed target file: its ``kind``, its table and its content's ``sha256``."""

    path: str
    kind: str
    table: dict
    sha256: str


def load_target_file(path: str | os.PathLike) -> TargetSpec:
    """Read and check a target file; ``DataError`` (exit 4) naming what is wrong."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read the target file {p}: {exc.strerror or exc}") from None
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise DataError(f"{p}: not a TOML target file ({exc})") from None
    kind = table.get("kind")
    if kind not in _TOP:
        raise DataError(f'{p}: kind must be "http" or "command", got {kind!r}')
    unknown = sorted(set(table) - _TOP[kind])
    if unknown:
        known = ", ".join(sorted(_TOP[kind]))
        raise DataError(f"{p}: unknown key(s) {', '.join(unknown)} for a {kind} target (it takes {known})")
    return TargetSpec(str(p), kind, table, file_hash(data))


def _request(spec: TargetSpec, name: str, required: bool = True) -> Request | None:
    part = spec.table.get(name)
    if part is None and not required:
        return None
    if not isinstance(part, dict) or not isinstance(part.get("url"), str):
        raise DataError(f"{spec.path}: [{name}] needs a url")
    unknown = sorted(set(part) - _REQUEST)
    if unknown:
        raise DataError(f"{spec.path}: [{name}]: unknown key(s) {', '.join(unknown)} ({', '.join(sorted(_REQUEST))})")
    try:
        return Request(part["url"], part.get("body", {}), part.get("method", "POST"), part.get("answer"))
    except InvalidParameter as exc:
        raise DataError(f"{spec.path}: [{name}]: {exc}") from None


def _number(spec: TargetSpec, name: str, default, kind=float):
    value = spec.table.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(f"{spec.path}: {name} must be a number, got {value!r}")
    return kind(value)


def target_from_file(spec: TargetSpec, sleep=None):
    """The target a parsed file describes."""
    t = spec.table
    try:
        if spec.kind == "http":
            if not isinstance(t.get("base_url"), str):
                raise DataError(f"{spec.path}: an http target needs base_url")
            headers = t.get("headers", {})
            if not isinstance(headers, dict):
                raise DataError(f"{spec.path}: headers must be a table")
            return HttpTarget(
                t["base_url"],
                _request(spec, "load"),
                _request(spec, "ask"),
                _request(spec, "reset", required=False),
                headers=headers,
                timeout=_number(spec, "timeout", 120.0),
                retries=_number(spec, "retries", 4, int),
                backoff=_number(spec, "backoff", 0.5),
                concurrency=_number(spec, "concurrency", 1, int),
                file_sha256=spec.sha256,
                sleep=sleep,
            )
        cwd = t.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise DataError(f"{spec.path}: cwd must be a string")
        return CommandTarget(
            t.get("load") or [],
            t.get("ask") or [],
            timeout=_number(spec, "timeout", 120.0),
            cwd=Path(spec.path).parent / (cwd or "."),
            file_sha256=spec.sha256,
        )
    except InvalidParameter as exc:
        raise DataError(f"{spec.path}: {exc}") from None


def open_target(
    kind: str,
    *,
    target_file: str | os.PathLike | None = None,
    base_url: str | None = None,
    model_name: str | None = None,
    **chat_options,
):
    """The target ``ctxlite audit --target KIND`` audits: ``http`` and ``command`` from their
    ``target_file``, ``chat`` from ``base_url`` (the API root, ``.../v1``) and ``model_name``."""
    if kind not in KINDS:
        raise InvalidParameter(f"--target must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind == "chat":
        if target_file is not None:
            raise InvalidParameter("--target chat takes --base-url and --model-name, not --target-file")
        if not base_url or not model_name:
            raise InvalidParameter("--target chat needs --base-url (the API root, .../v1) and --model-name")
        return ChatTarget(base_url, model_name, **chat_options)
    if target_file is None:
        raise InvalidParameter(f"--target {kind} needs --target-file (a TOML file: docs/targets.md)")
    spec = load_target_file(target_file)
    if spec.kind != kind:
        raise InvalidParameter(f"--target {kind}, but {target_file} describes a {spec.kind} target")
    return target_from_file(spec)
