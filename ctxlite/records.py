"""JSONL in and out: validated input records and an append-only, resumable result log.

Input: every problem names the file and line (``DataError``): not UTF-8, empty
file, malformed JSON, a line that is not an object, a missing or empty field.

Output: ``RecordLog`` writes one JSON object per line and flushes + fsyncs each
one, so Ctrl-C or a crash loses at most the record in flight. The first line is
a header ``{"type": "run", "params": ...}``; re-opening the same file with the
same params resumes (finished keys are skipped), with different params it is
refused rather than silently mixing two runs. A torn last line is dropped.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from ctxlite.errors import DataError


@dataclass(frozen=True)
class Line:
    """One parsed input record and where it came from."""

    number: int
    data: dict


def read_text(path: str | os.PathLike, what: str = "file") -> str:
    """Read a UTF-8 text file; a clear ``DataError`` if missing or not UTF-8."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{what} not found: {p}") from None
    except IsADirectoryError:
        raise DataError(f"{what} is a directory, not a file: {p}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"{p}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None


def read_jsonl(path: str | os.PathLike, required: Iterable[str] = (), strings: Iterable[str] = ()) -> list[Line]:
    """Parse a JSONL file; each object must have non-empty ``required`` fields;
    fields in ``strings`` (when present) must be strings. Blank lines are skipped."""
    text = read_text(path, "data file")
    required, strings = tuple(required), tuple(strings)
    lines: list[Line] = []
    # split on "\n" only: U+2028 etc. inside JSON strings are data, not line breaks
    for number, raw in enumerate(text.split("\n"), start=1):
        raw = raw.removesuffix("\r")
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number}: malformed JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(data, dict):
            raise DataError(f"{path}:{number}: expected a JSON object, got {type(data).__name__}")
        for key in required:
            value = data.get(key)
            if value is None or (isinstance(value, str) and not value.strip()):
                raise DataError(f"{path}:{number}: field {key!r} is missing or empty")
        for key in strings:
            if key in data and data[key] is not None and not isinstance(data[key], str):
                raise DataError(f"{path}:{number}: field {key!r} must be a string, got {type(data[key]).__name__}")
        lines.append(Line(number, data))
    if not lines:
        raise DataError(f"{path}: no records (the file is empty)")
    return lines


class RecordLog:
    """Append-only JSONL result log that a re-run resumes.

    >>> log = RecordLog("runs/x.jsonl", {"ngram": 8})   # doctest: +SKIP
    >>> if not log.done("ex-1"): log.append("ex-1", {...})
    """

    def __init__(self, path: str | os.PathLike, params: dict, kind: str = "run"):
        self.path = Path(path)
        self.params = json.loads(json.dumps(params))  # normalise (tuples -> lists)
        self.records: dict[str, dict] = {}
        if self.path.exists() and self.path.stat().st_size > 0:
            self._load(kind)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "w", encoding="utf-8") as f:
                f.write(json.dumps({"type": kind, "params": self.params}) + "\n")
                f.flush()
                os.fsync(f.fileno())
        self._file = open(self.path, "a", encoding="utf-8")

    def _load(self, kind: str) -> None:
        text = read_text(self.path, "result log")
        lines = text.split("\n")
        complete, torn = lines[:-1], lines[-1]
        try:
            header = json.loads(complete[0]) if complete else None
        except json.JSONDecodeError:
            header = None
        if not isinstance(header, dict) or header.get("type") != kind or not isinstance(header.get("params"), dict):
            raise DataError(f"{self.path} exists and is not a ctxlite {kind} log: choose another --out")
        if header["params"] != self.params:
            old = header["params"]
            diff = sorted(k for k in set(old) | set(self.params) if old.get(k) != self.params.get(k))
            raise DataError(
                f"{self.path} was written with different parameters ({', '.join(diff)}): "
                "re-run with the same ones to resume, or choose another --out"
            )
        for number, raw in enumerate(complete[1:], start=2):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError:
                rec = None
            if not isinstance(rec, dict) or not isinstance(rec.get("key"), str):
                raise DataError(f"{self.path}:{number}: corrupt record in the result log")
            self.records[rec["key"]] = rec
        if torn.strip():  # only now, for our own log: drop the partial line of an interrupted write
            with open(self.path, "w", encoding="utf-8") as f:
                f.write(text[: len(text) - len(torn)])
                f.flush()
                os.fsync(f.fileno())

    def done(self, key: str) -> bool:
        return key in self.records

    def append(self, key: str, record: dict) -> None:
        """Write one finished record durably (flush + fsync)."""
        record = {"key": key, **record}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.records[key] = record

    def __iter__(self) -> Iterator[dict]:
        return iter(self.records.values())

    def __len__(self) -> int:
        return len(self.records)

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
