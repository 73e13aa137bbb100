"""Every log the test suite writes follows the log format's JSON Schema (``ctxlite/data/log.schema.json``).

:func:`problems` checks one log line by line against the schema, by its kind (a score log's records and
end line, or an audit log's); :func:`sweep` checks every ctxlite log (a header with ``schema_version``)
under a folder. ``tests/conftest.py`` sweeps each test's ``tmp_path`` after the test and the whole
session's temporary folder at its end, so no test can write a log of another shape unnoticed. A log
whose hash chain no longer holds was edited by its test on purpose (an attacker's edit) and is left
out; a test that writes hand-made logs of another shape says so with ``@pytest.mark.hand_made_logs``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import jsonschema

from ctxlite.errors import DataError
from ctxlite.logformat import schema
from ctxlite.records import read_run_log

LINES = {
    "score-run": ("example_record", "score_end"),
    "audit": (("reference_record", "trial_record"), "audit_end"),
    "serve": (("serve_reservation", "serve_response"), "serve_end"),  # the end line of a clean stop
    "target-audit": (("target_probe", "target_trial", "target_reference"), "target_end"),
}


@cache
def _validator(kind: str) -> jsonschema.Draft202012Validator:
    defs = schema()["$defs"]
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{kind}", "$defs": defs})


def _check(obj: dict, kinds) -> list[str]:
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    errors = [list(_validator(k).iter_errors(obj)) for k in kinds]
    if any(not e for e in errors):
        return []
    best = min(errors, key=len)
    return [f"{'/'.join(map(str, e.absolute_path)) or '(line)'}: {e.message[:300]}" for e in best[:3]]


def problems(path: Path) -> list[str]:
    """What in the log at ``path`` does not follow the schema (``path:line: where: why``); [] if it does."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")[:-1]  # complete lines (a torn one is not a line)
    header = json.loads(lines[0])
    records, end = LINES[header["type"]]
    out = [f"{path}:1: {p}" for p in _check(header, "header")]
    for number, raw in enumerate(lines[1:], start=2):
        if raw.strip():
            obj = json.loads(raw)
            out += [f"{path}:{number}: {p}" for p in _check(obj, end if "end" in obj else records)]
    return out


def is_intact_run_log(path: Path) -> bool:
    """Whether ``path`` is a score or audit log of this format (a ``schema_version`` header) whose chain holds
    (a test's toy log of another kind, made with ``RecordLog`` directly, is not a run's)."""
    try:
        with open(path, encoding="utf-8") as f:
            header = json.loads(f.readline())
        if not isinstance(header, dict) or "schema_version" not in header or header.get("type") not in LINES:
            return False
        run = read_run_log(path)
    except (OSError, ValueError, DataError):
        return False
    return run.chained  # a log of this format is chained: one without is an older one a test made


def sweep(folder: Path, skip=()) -> list[str]:
    """:func:`problems` of every intact log of this format under ``folder`` (but under the folders ``skip``)."""
    out = []
    skip = [Path(s) for s in skip]
    for path in sorted(Path(folder).rglob("*.jsonl")):
        if any(path.is_relative_to(s) for s in skip):
            continue
        if path.is_file() and is_intact_run_log(path):
            out += problems(path)
    return out
