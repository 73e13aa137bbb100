"""A score data set: one :class:`~ctxlite.influence.scorer.Example` per line of a JSONL file."""

from __future__ import annotations

import os

from ctxlite.errors import DataError
from ctxlite.influence.scorer import Example
from ctxlite.records import read_jsonl

FIELDS = ("id", "context", "query", "response", "source", "answer")
"""The fields of a line: ``context`` (required), ``query``, ``response``, ``source``, ``answer``, ``id``."""


def load_examples(path: str | os.PathLike, limit: int | None = None) -> list[Example]:
    """The examples of a JSONL data set (the first ``limit``), validated whole: each line an object
    with a non-empty ``context``, its text fields strings; an example's id is its ``id`` field, else
    ``line-N``, and two lines may not share one (``DataError`` naming the file and line)."""
    lines = read_jsonl(path, required=("context",), strings=FIELDS)
    seen, out = set(), []
    for line in lines:
        d = line.data
        key = str(d.get("id") or f"line-{line.number}")
        if key in seen:
            raise DataError(f"{path}:{line.number}: duplicate id {key!r}")
        seen.add(key)
        try:
            example = Example(
                context=d["context"],
                query=d.get("query") or "",
                response=d.get("response"),
                source=d.get("source"),
                id=key,
                answer=d.get("answer"),
            )
        except DataError as exc:
            raise DataError(f"{path}:{line.number}: {exc}") from None
        out.append(example)
    return out[:limit]
