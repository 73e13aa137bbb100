"""A score data set: one :class:`~ctxlite.influence.scorer.Example` per line of a JSONL file."""

from __future__ import annotations

import os

from ctxlite.errors import DataError
from ctxlite.influence.scorer import Example
from ctxlite.influence.units import join_passages
from ctxlite.records import read_jsonl

FIELDS = ("id", "context", "query", "response", "source", "answer", "separator")
"""The text fields of a line: ``context`` (required unless ``passages`` are given), ``query``,
``response``, ``source``, ``answer``, ``id``, and the ``separator`` of ``passages``; besides them
``passages`` (a list of strings: the context is their join) and ``spans`` (``[[start, end,
"label"], ...]``), for units (``ctxlite.influence.units``)."""


def load_examples(path: str | os.PathLike, limit: int | None = None) -> list[Example]:
    """The examples of a JSONL data set (the first ``limit``), validated whole: each line an object
    with a non-empty ``context``, its text fields strings; an example's id is its ``id`` field, else
    ``line-N``, and two lines may not share one (``DataError`` naming the file and line)."""
    lines = read_jsonl(path, strings=FIELDS)
    seen, out = set(), []
    for line in lines:
        d = line.data
        passages = d.get("passages")
        if passages is not None:
            if not isinstance(passages, list) or not passages or not all(isinstance(p, str) for p in passages):
                raise DataError(f"{path}:{line.number}: field 'passages' must be a non-empty list of strings")
            if d.get("context") is None:
                d = {**d, "context": join_passages(passages, d.get("separator"))}
        elif d.get("separator") is not None:
            raise DataError(f"{path}:{line.number}: field 'separator' goes with 'passages'")
        context = d.get("context")
        if context is None or not context.strip():
            raise DataError(f"{path}:{line.number}: field 'context' is missing or empty")
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
                passages=passages,
                separator=d.get("separator"),
                spans=d.get("spans"),
            )
        except DataError as exc:
            raise DataError(f"{path}:{line.number}: {exc}") from None
        out.append(example)
    return out[:limit]
