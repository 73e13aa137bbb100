"""Run identity: a logged result is reused only for the exact input, model and settings
that produced it (real model, through the CLI as a user runs it)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.identity import content_hash, differences, normalise

pytestmark = pytest.mark.model

CLASSIFY = "ctxlite/data/classify_sample.jsonl"


def _run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


PEOPLE = ["Dana Whitcombe", "Ravi Okafor", "Lena Marsh", "Tomas Quill", "Ines Duarte", "Kofi Mensah"]


def _rows(k, start=0):
    """Short examples (a few dozen tokens each) so that every run below costs seconds."""
    return [
        {
            "id": f"p{i}",
            "context": f"{PEOPLE[i]} takes lisinopril {10 + i} mg daily; review in {i + 2} weeks.",
            "query": "What is prescribed?",
            "response": f"Lisinopril {10 + i} mg.",
        }
        for i in range(start, start + k)
    ]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _scored_keys(stdout: str) -> list[str]:
    """The examples a --data run scored (the others it read from its log), from its JSON."""
    return json.loads(stdout)["scored"]


SCORE = ["score", "--doc", "--lam", "1"]


def test_hashes_are_canonical():
    assert content_hash({"b": 1, "a": (1, 2)}) == content_hash({"a": [1, 2], "b": 1})
    assert content_hash({"a": "é"}) != content_hash({"a": "e"})
    assert normalise({"e": (1.0, float("inf"))}) == {"e": [1.0, "inf"]}
    assert differences({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}, "d": 0}) == ["a.c", "d"]


def test_score_log_of_another_data_file_is_refused(tmp_path):
    a = _write(tmp_path / "a.jsonl", _rows(2))
    b = _write(tmp_path / "b.jsonl", _rows(2, start=2))
    log = tmp_path / "log.jsonl"
    assert _run(SCORE + ["--data", str(a), "--out", str(log)]).exit_code == 0
    before = log.read_bytes()
    r = _run(SCORE + ["--data", str(b), "--out", str(log)])
    assert r.exit_code == 4, r.output
    assert "holds results for other inputs" in r.stderr and str(b) in r.stderr
    assert r.stdout == "" and log.read_bytes() == before


def test_score_log_of_another_single_example_is_refused(tmp_path):
    note = tmp_path / "note.txt"
    note.write_text("Dana takes lisinopril 10 mg daily for hypertension.", encoding="utf-8")
    log = tmp_path / "log.jsonl"
    one = SCORE + ["--context", str(note), "-q", "What?", "--out", str(log)]
    assert _run(one + ["-r", "Lisinopril."]).exit_code == 0
    r = _run(one + ["-r", "Ten milligrams."])  # same context, another response
    assert r.exit_code == 4 and "holds results for other inputs" in r.stderr
    note.write_text("Dana takes aspirin 10 mg daily for hypertension.", encoding="utf-8")
    r = _run(one + ["-r", "Lisinopril."])  # another context, same response
    assert r.exit_code == 4 and "holds results for other inputs" in r.stderr


def test_editing_one_character_recomputes_exactly_that_example(tmp_path):
    rows = _rows(3)
    data = _write(tmp_path / "d.jsonl", rows)
    log = tmp_path / "log.jsonl"
    first = _run(SCORE + ["--data", str(data), "--out", str(log)])
    assert first.exit_code == 0 and len(_scored_keys(first.stdout)) == 3
    again = _run(SCORE + ["--data", str(data), "--out", str(log)])
    assert again.exit_code == 0 and _scored_keys(again.stdout) == []  # nothing changed: all reused
    key = rows[1]["id"]
    ctx = rows[1]["context"]
    i = ctx.index(" ") + 1
    rows[1]["context"] = ctx[:i] + ("X" if ctx[i] != "X" else "Y") + ctx[i + 1 :]
    _write(data, rows)
    edited = _run(SCORE + ["--data", str(data), "--out", str(log)])
    assert edited.exit_code == 0, edited.output
    assert _scored_keys(edited.stdout) == [key]
    assert f"{key}: its input changed" in edited.stderr
    # the log now holds the edited example's result under its new input hash, and a re-run reuses it
    assert _scored_keys(_run(SCORE + ["--data", str(data), "--out", str(log)]).stdout) == []


def test_score_log_with_other_settings_or_model_settings_is_refused(tmp_path):
    data = _write(tmp_path / "d.jsonl", _rows(1))
    log = tmp_path / "log.jsonl"
    assert _run(SCORE + ["--data", str(data), "--out", str(log)]).exit_code == 0
    header = json.loads(log.read_text(encoding="utf-8").splitlines()[0])
    ident = header["identity"]
    assert ident["model"]["sha256"].startswith("a5fd3b62") and ident["software"]["ctxlite"]
    assert ident["software"]["llama_cpp_python"] and "{context}" in ident["template"]
    assert ident["engine"]["n_batch"] == 512 and "n_threads" not in ident["engine"]
    for extra, named in [
        (["--lam", "0.5"], "settings.lambdas"),
        (["-b", "256"], "engine.n_batch"),
        (["--template", "notes"], "template"),
        (["-c", "1024"], "engine.n_ctx"),
    ]:
        r = _run(SCORE + ["--data", str(data), "--out", str(log)] + extra)
        assert r.exit_code == 4, (extra, r.output)
        assert named in r.stderr and "different run" in r.stderr


def _audit(data, out, *extra):
    return _run(
        [
            "audit",
            "--data",
            str(data),
            "--mechanism",
            "none",
            "--trials",
            "8",
            "--queries-per-trial",
            "4",
            "--reference-runs",
            "2",
            "--utility-queries",
            "0",
            "--out",
            str(out),
            *extra,
        ]
    )


def test_audit_resume_on_another_data_file_is_refused(tmp_path):
    lines = open(CLASSIFY, encoding="utf-8").read().splitlines()
    a = tmp_path / "a.jsonl"
    a.write_text("\n".join(lines) + "\n", encoding="utf-8")
    b = tmp_path / "b.jsonl"
    b.write_text("\n".join(lines[1:] + lines[:1]) + "\n", encoding="utf-8")  # the same records, another order
    log = tmp_path / "audit.jsonl"
    assert _audit(a, log).exit_code == 0
    before = log.read_bytes()
    r = _audit(b, log, "--resume")
    assert r.exit_code == 4, r.output
    assert "data differ" in r.stderr and r.stdout == ""
    assert log.read_bytes() == before
    r = _audit(a, log, "--resume", "--canary", "semantic")
    assert r.exit_code == 4 and "settings.canary" in r.stderr
    ok = _audit(a, log, "--resume")  # the same audit resumes (and re-reports without running a trial)
    assert (
        ok.exit_code == 0 and json.loads(ok.stdout)["rows"][0]["n_in"] + json.loads(ok.stdout)["rows"][0]["n_out"] == 8
    )


def test_audit_trial_of_another_canary_is_refused(tmp_path, engine):
    """A log whose trials name another canary than the one this audit plays is refused by run_audit."""
    from ctxlite.audit.dataset import load_records
    from ctxlite.audit.game import run_audit
    from ctxlite.audit.settings import AuditSettings, audit_identity
    from ctxlite.errors import DataError
    from ctxlite.records import RecordLog
    from tests.logtools import rechain

    records = load_records(CLASSIFY, "classify")
    s = AuditSettings(trials=4, queries_per_trial=2, reference_runs=1, utility_queries=0)
    ident = audit_identity(engine.identity(), s, records)
    path = tmp_path / "a.jsonl"
    with RecordLog(path, ident, kind="audit") as log:
        run_audit(engine, records, s, log)
    text = path.read_text(encoding="utf-8")
    trial = next(json.loads(l) for l in text.splitlines() if '"trial"' in l and '"z"' in l and '"canary"' in l)
    edited = text.replace(f'"canary": "{trial["canary"]}"', '"canary": "another"')
    path.write_text(rechain(edited), encoding="utf-8")  # chained again: the canary check itself must refuse it
    with RecordLog(path, ident, kind="audit") as log, pytest.raises(DataError, match="played with canary"):
        run_audit(engine, records, s, log)
    other = AuditSettings(trials=5, queries_per_trial=2, reference_runs=1, utility_queries=0)
    with RecordLog(tmp_path / "b.jsonl", ident, kind="audit") as log, pytest.raises(DataError, match="another audit"):
        run_audit(engine, records, other, log)  # a log opened with another audit's identity
