"""The job of a compliance tool that embeds ctxlite, in a few lines of its public API: score a JSONL data
set with a resumable log, refuse a log of other inputs, gate, write JUnit and ctxlite's own HTML report;
the same for an audit. Each job's log, JUnit file and HTML report are byte for byte those of
``ctxlite score|audit ... --out ... --fail-above-... --junit ...`` then ``ctxlite report ... --html``:
the library and the command line run the same thing (issue 26). Real model, small inputs."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.errors import DataError
from tests.paths import DATA

pytestmark = pytest.mark.model


def score_job(data, log, junit, html):
    """What an embedding tool writes: every line public API (``ctxlite``, ``ctxlite.reporting``)."""
    from ctxlite import Engine, InfluenceGate, load_examples, report_log, run_score
    from ctxlite.reporting import write_html, write_junit

    with Engine() as engine:
        run = run_score(engine, load_examples(data), out=log, gate=InfluenceGate(5.0))
    write_junit(junit, run.verdict)
    write_html(html, report_log(log))
    return run


def audit_job(data, log, junit, html, resume=False):
    """The model loaded only once the log is checked (a ``LocalModel``: a refused log loads nothing)."""
    from ctxlite import AuditSettings, EpsilonGate, LocalModel, load_records, report_log, run_audit
    from ctxlite.reporting import write_html, write_junit

    settings = AuditSettings(trials=4, queries_per_trial=2, utility_queries=1, reference_runs=1)
    records = load_records(data, "classify")
    run = run_audit(LocalModel(), records, settings, out=log, resume=resume, gate=EpsilonGate(1.0))
    write_junit(junit, run.verdict)
    write_html(html, report_log(log))
    return run


def test_each_job_is_at_most_15_lines():
    for job in (score_job, audit_job):
        lines = [line for line in inspect.getsource(job).splitlines()[1:] if line.strip()]
        code = [line for line in lines if not line.strip().startswith(('"""', "#"))]
        assert len(code) <= 15, (job.__name__, len(code))


def _small_data(path: Path) -> Path:
    """Two short examples with responses (scoring them generates nothing)."""
    lines = [json.loads(line) for line in (DATA / "score_sample.jsonl").read_text().splitlines() if line.strip()]
    out = []
    for d in [d for d in lines if d.get("response")][:2]:
        d["context"] = d["context"][: d["context"].index(". ", 60) + 1]
        d["response"] = " ".join(d["response"].split()[:6])
        out.append(json.dumps(d))
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def _outputs(folder: Path, log: str) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in (log, "junit.xml", "report.html")}


def test_the_embedders_score_job_is_the_command_lines(tmp_path):
    data = _small_data(tmp_path / "data.jsonl")
    lib, cli = tmp_path / "lib", tmp_path / "cli"
    lib.mkdir(), cli.mkdir()
    run = score_job(data, lib / "scores.jsonl", lib / "junit.xml", lib / "report.html")
    ids = [json.loads(line)["id"] for line in data.read_text().splitlines()]
    assert run.keys == ids and len(ids) == 2 and run.scored == run.keys and run.summary is not None
    assert (
        run.verdict.gate is not None
        and run.log.head == json.loads((lib / "scores.jsonl").read_text().splitlines()[-1])["chain"]
    )
    args = ["score", "--data", str(data), "--out", str(cli / "scores.jsonl"), "--fail-above-influence", "5"]
    r = CliRunner().invoke(main, [*args, "--junit", str(cli / "junit.xml")])
    assert r.exit_code in (0, 8, 10) and r.exit_code == {"pass": 0, "fail": 8}.get(run.verdict.outcome.value, 10)
    r = CliRunner().invoke(main, ["report", str(cli / "scores.jsonl"), "--html", str(cli / "report.html")])
    assert r.exit_code == 0, r.output
    assert _outputs(lib, "scores.jsonl") == _outputs(cli, "scores.jsonl")
    # resumable: the same job again reads every result from its log (and writes nothing new)
    again = score_job(data, lib / "scores.jsonl", lib / "junit.xml", lib / "report.html")
    assert (
        again.reused == run.keys
        and again.scored == []
        and _outputs(lib, "scores.jsonl") == _outputs(cli, "scores.jsonl")
    )
    # a log of other inputs (no example's input unchanged) is refused, and left as it was
    changed = tmp_path / "changed.jsonl"
    edited = [{**d, "context": d["context"] + " Edited."} for d in map(json.loads, data.read_text().splitlines())]
    changed.write_text("".join(json.dumps(d) + "\n" for d in edited), encoding="utf-8")  # same ids, other inputs
    with pytest.raises(DataError, match="holds results for other inputs"):
        score_job(changed, lib / "scores.jsonl", lib / "junit.xml", lib / "report.html")
    assert _outputs(lib, "scores.jsonl") == _outputs(cli, "scores.jsonl")


def test_the_embedders_audit_job_is_the_command_lines(tmp_path):
    data = DATA / "classify_sample.jsonl"
    lib, cli = tmp_path / "lib", tmp_path / "cli"
    lib.mkdir(), cli.mkdir()
    run = audit_job(data, lib / "audit.jsonl", lib / "junit.xml", lib / "report.html")
    assert run.report.rows and run.verdict.gate is not None
    args = ["audit", "--data", str(data), "--trials", "4", "--queries-per-trial", "2", "--utility-queries", "1"]
    args += ["--reference-runs", "1", "--out", str(cli / "audit.jsonl"), "--fail-above-epsilon", "1"]
    r = CliRunner().invoke(main, [*args, "--junit", str(cli / "junit.xml")])
    assert r.exit_code == {"pass": 0, "fail": 8}.get(run.verdict.outcome.value, 10), r.output
    r = CliRunner().invoke(main, ["report", str(cli / "audit.jsonl"), "--html", str(cli / "report.html")])
    assert r.exit_code == 0, r.output
    assert _outputs(lib, "audit.jsonl") == _outputs(cli, "audit.jsonl")
    # resumable: the same job again with resume reads every trial back and appends only an end line,
    # as `ctxlite audit ... --resume` does to the command line's log
    again = audit_job(data, lib / "audit.jsonl", lib / "junit.xml", lib / "report.html", resume=True)
    r = CliRunner().invoke(main, [*args, "--resume", "--junit", str(cli / "junit.xml")])
    assert r.exit_code == {"pass": 0, "fail": 8}.get(again.verdict.outcome.value, 10), r.output
    r = CliRunner().invoke(main, ["report", str(cli / "audit.jsonl"), "--html", str(cli / "report.html")])
    assert r.exit_code == 0 and again.report.rows == run.report.rows, r.output
    assert _outputs(lib, "audit.jsonl") == _outputs(cli, "audit.jsonl")
    # other private records (one text edited) are refused, and the log left as it was
    changed = tmp_path / "changed.jsonl"
    lines = data.read_text(encoding="utf-8").splitlines(keepends=True)
    changed.write_text(lines[0].replace('"text": "', '"text": "Edited. ', 1) + "".join(lines[1:]), encoding="utf-8")
    assert changed.read_text(encoding="utf-8") != data.read_text(encoding="utf-8")
    with pytest.raises(DataError, match=r"was written by a different run \(data differ\)"):
        audit_job(changed, lib / "audit.jsonl", lib / "junit.xml", lib / "report.html", resume=True)
    assert _outputs(lib, "audit.jsonl") == _outputs(cli, "audit.jsonl")


def test_a_library_audit_with_the_default_engine_is_resumed_by_the_command_line(tmp_path):
    """A library caller's default ``Engine()`` writes a trial log that ``ctxlite audit --resume`` continues:
    the engine settings that are part of the identity (kv_slots among them) are the library's defaults
    on both sides. Written against the game-level API (``RecordLog`` and ``ctxlite.audit.run_audit``),
    so it runs on the code before the run layer too, where it was refused (kv_slots 2 against 4)."""
    from ctxlite.audit import AuditSettings, load_records, run_audit
    from ctxlite.audit.settings import audit_identity
    from ctxlite.records import RecordLog
    from ctxlite.runtime.engine import Engine

    data, log = DATA / "classify_sample.jsonl", tmp_path / "audit.jsonl"
    settings = AuditSettings(trials=4, queries_per_trial=2, utility_queries=0, reference_runs=1)
    records = load_records(data, "classify")
    with Engine() as engine:
        identity = audit_identity(engine.identity(), settings, records)
        with RecordLog(log, identity, kind="audit") as trials:
            run_audit(engine, records, settings, trials)
    args = ["audit", "--data", str(data), "--trials", "4", "--queries-per-trial", "2", "--utility-queries", "0"]
    r = CliRunner().invoke(main, [*args, "--reference-runs", "1", "--out", str(log), "--resume"])
    assert r.exit_code == 0, r.output
