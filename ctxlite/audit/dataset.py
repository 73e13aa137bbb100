"""The private record set of an audit: read from JSONL and validated against the prompt format."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ctxlite.audit.formats import AuditFormat, Task, load_format
from ctxlite.errors import DataError
from ctxlite.records import read_jsonl


def check_records(records: Sequence[dict], fmt, where: Sequence[str] | None = None) -> list[dict]:
    """Validate records for ``fmt`` (a format, a built-in name or a :class:`Task`): every field its
    record uses present, input and output non-empty strings, outputs among the format's labels.
    Returns the records reduced to those fields."""
    fmt = load_format(fmt)
    if not records:
        raise DataError("the private set is empty")
    need = fmt.fields
    out = []
    for i, r in enumerate(records):
        at = where[i] if where else f"record {i + 1}"
        if not isinstance(r, dict):
            raise DataError(f"{at}: a record must be a JSON object")
        for k in need:
            v = r.get(k)
            if k in (fmt.input, fmt.output) and (not isinstance(v, str) or not v.strip()):
                raise DataError(f"{at}: field {k!r} is missing, empty or not a string (format {fmt.name} needs {need})")
            if not isinstance(v, (str, int, float)) or isinstance(v, bool):
                raise DataError(f"{at}: field {k!r} is missing or not a string or number (format {fmt.name})")
        if fmt.task is Task.CLASSIFY and fmt.labels and r[fmt.output] not in fmt.labels:
            raise DataError(f"{at}: unknown label {r[fmt.output]!r}: format {fmt.name} knows {list(fmt.labels)}")
        out.append({k: r[k] for k in need})
    return out


def load_records(path: str | os.PathLike, fmt) -> list[dict]:
    """Read and validate a private set (JSONL) for ``fmt``; errors name file and line."""
    fmt = load_format(fmt)
    lines = read_jsonl(path, required=(fmt.input, fmt.output), strings=(fmt.input, fmt.output))
    return check_records([l.data for l in lines], fmt, [f"{path}:{l.number}" for l in lines])


def resolve_format(fmt, records: Sequence[dict]) -> AuditFormat:
    """``fmt`` loaded, with its labels resolved against ``records`` (see ``AuditFormat.with_labels``)."""
    return load_format(fmt).with_labels(records)
