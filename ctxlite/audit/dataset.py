"""The private record set of an audit: read from JSONL and validated for the task."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ctxlite.audit.mechanisms import TaskFormat
from ctxlite.audit.settings import Task
from ctxlite.errors import DataError
from ctxlite.records import read_jsonl


def check_records(records: Sequence[dict], task: Task, where: Sequence[str] | None = None) -> list[dict]:
    """Validate records for ``task`` (fields present and non-empty strings, known labels)."""
    task = Task.parse(task)
    fmt = TaskFormat.for_task(task.value)
    if not records:
        raise DataError("the private set is empty")
    need = (fmt.input_field, fmt.output_field)
    out = []
    for i, r in enumerate(records):
        at = where[i] if where else f"record {i + 1}"
        for k in need:
            v = r.get(k) if isinstance(r, dict) else None
            if not isinstance(v, str) or not v.strip():
                raise DataError(f"{at}: field {k!r} is missing, empty or not a string ({task.value} needs {need})")
        if task is Task.CLASSIFY and r["label"] not in fmt.labels:
            raise DataError(f"{at}: unknown label {r['label']!r}: the classification template knows {list(fmt.labels)}")
        out.append({k: r[k] for k in need})
    return out


def load_records(path: str | os.PathLike, task) -> list[dict]:
    """Read and validate a private set (JSONL) for ``task``; errors name file and line."""
    task = Task.parse(task)
    fmt = TaskFormat.for_task(task.value)
    lines = read_jsonl(path, required=(fmt.input_field, fmt.output_field), strings=(fmt.input_field, fmt.output_field))
    return check_records([l.data for l in lines], task, [f"{path}:{l.number}" for l in lines])
