"""Evidence that cannot be silently altered or raced (issue 25 §1, §2): a log edited by hand, or
re-chained after an edit, is refused by ``ctxlite report`` naming the first bad record; ``ctxlite
verify --head`` catches a whole rewrite; a log without a chain is reported but never resumed; two
writers of one ``--out`` never interleave, and a writer killed with -9 does not block the next."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from tests.logtools import edit_log, rechain
from tests.paths import DATA

CLASSIFY = DATA / "classify_sample.jsonl"
NOTES = [
    (
        "a",
        "Clinic note. Patient: Dana Whitcombe, DOB 04/09/1971. Prescribed lisinopril 10 mg daily.",
        "What was prescribed?",
        "Lisinopril 10 mg daily.",
    ),
    (
        "b",
        "Visit summary. Arjun Patel, MRN 5521-8830, reports migraines; started sumatriptan 50 mg.",
        "Which drug was started?",
        "Sumatriptan 50 mg.",
    ),
]


def _run(args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _proc(args) -> list[str]:
    return [sys.executable, "-m", "ctxlite", *map(str, args)]


def _error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("ctxlite: error:")]


def _refused(r, *fragments: str) -> str:
    """``r`` exited 4 with exactly one error line holding every fragment."""
    assert r.exit_code == 4, r.output
    [line] = _error_lines(r.stderr)
    assert all(f in line for f in fragments), line
    return line


def _copy(src: Path, dst: Path) -> Path:
    dst.write_bytes(src.read_bytes())
    return dst


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ---------------------------------------------------------------------------
# score logs: per-example influences edited


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "notes.jsonl"
    rows = [{"id": i, "context": c, "query": q, "response": r} for i, c, q, r in NOTES]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def score_args(data: Path, out: Path, *extra) -> list:
    """A small score run: 4-gram ablations at one λ (``--doc``: document level only)."""
    ngram = [] if "--doc" in extra else ["--ngram", "4"]
    return ["score", "--data", data, *ngram, "--lam", "1", "--out", out, *extra]


@pytest.fixture(scope="module")
def score_log(tmp_path_factory, data):
    """A finished two-example score log, its largest τ_i, and the head its run reported."""
    log = tmp_path_factory.mktemp("score") / "run.jsonl"
    r = _run(score_args(data, log, "--json"))
    assert r.exit_code == 0, r.output
    worst = max(
        g["influence"]
        for line in _lines(log)
        if line.get("type") == "example"
        for res in line["result"]["results"]
        for g in res["ngrams"]
        if g.get("above_noise") is not False
    )
    assert worst > 0
    return log, worst, json.loads(r.stdout).get("log_head")


def _cap_influences(cap: float):
    """An edit that caps every n-gram's influence at ``cap`` (what the issue reproduced with 1.0)."""

    def edit(lines):
        for line in lines:
            for res in line.get("result", {}).get("results", []):
                for g in res.get("ngrams", []) + res.get("top_spans", []):
                    g["influence"] = min(g["influence"], cap)
                res["max_ngram_influence"] = min(res["max_ngram_influence"], cap)
        return lines

    return edit


@pytest.mark.model
def test_an_untampered_score_log_trips_its_gate_and_names_its_head(score_log, tmp_path):
    log, worst, head = score_log
    junit = tmp_path / "gate.xml"
    r = _run(["report", log, "--fail-above-influence", worst / 2, "--junit", junit, "--json"])
    assert r.exit_code == 8, r.output
    assert r.stderr.splitlines()[-1].endswith(f"[log head {head}]")  # the verdict line
    assert json.loads(r.stdout)["chain"] == {"chained": True, "head": head, "lines": 4}
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert props["log.head"] == head
    v = _run(["verify", log, "--head", head])
    assert v.exit_code == 0 and v.stdout.strip() == head, v.output


@pytest.mark.model
def test_capped_influences_break_the_chain_at_the_first_record(score_log, tmp_path):
    """Issue 25 §1: capping τ_i made the gate pass (exit 0) though the log trips it."""
    log, worst, _ = score_log
    bad = _copy(log, tmp_path / "capped.jsonl")
    edit_log(bad, _cap_influences(worst / 4), chain=False)
    r = _run(["report", bad, "--fail-above-influence", worst / 2])
    _refused(r, f"{bad}:2:", "hash chain breaks at record 'a'")


@pytest.mark.model
def test_capped_influences_rechained_disagree_with_the_end_line(score_log, tmp_path):
    """The same edit with every hash recomputed: the summary the end line holds is not the records'."""
    log, worst, head = score_log
    bad = _copy(log, tmp_path / "capped.jsonl")
    edit_log(bad, _cap_influences(worst / 4))
    r = _run(["report", bad, "--fail-above-influence", worst / 2])
    _refused(r, f"{bad}:4:", "the end line disagrees with the records: summary.")
    assert _run(["verify", bad]).exit_code == 0  # a re-chained log is consistent: only a kept head tells
    v = _run(["verify", bad, "--head", head])
    _refused(v, f"not the kept {head}")


@pytest.mark.model
def test_a_whole_rewrite_passes_report_but_not_verify_against_the_kept_head(score_log, tmp_path):
    """What a chain does not protect against: records and end line edited alike, every hash
    recomputed. ``report`` cannot tell; the head kept from the run can."""
    from ctxlite.influence.analysis import summarize
    from ctxlite.influence.results import ExampleResult

    log, worst, head = score_log
    bad = _copy(log, tmp_path / "rewritten.jsonl")

    def rewrite(lines):
        lines = _cap_influences(worst / 4)(lines)
        results = [ExampleResult.from_dict(line["result"]) for line in lines[1:-1]]
        lines[-1]["end"]["summary"] = summarize(results).to_dict()
        return lines

    edit_log(bad, rewrite)
    assert _run(["report", bad, "--fail-above-influence", worst / 2]).exit_code == 0
    _refused(_run(["verify", bad, "--head", head]), "not the kept")


@pytest.mark.model
def test_a_log_without_a_chain_is_reported_read_only_and_never_resumed(score_log, data, tmp_path):
    """A log written before chains: reported with a note (same verdict), refused for writing."""
    log, worst, _ = score_log
    old = _copy(log, tmp_path / "old.jsonl")
    edit_log(old, lambda lines: [{k: v for k, v in line.items() if k != "chain"} for line in lines], chain=False)
    before = old.read_bytes()
    r = _run(["report", old, "--fail-above-influence", worst / 2, "--json"])
    assert r.exit_code == 8 and "has no hash chain" in r.stderr, r.output
    assert json.loads(r.stdout)["chain"] == {"chained": False, "head": None, "lines": 4}
    again = _run(score_args(data, old))
    _refused(again, "written before ctxlite chained its logs", "never resumed")
    _refused(_run(["verify", old]), "has no hash chain")
    assert old.read_bytes() == before


# ---------------------------------------------------------------------------
# audit logs: the end line and the trials edited


def audit_args(out: Path, *extra) -> list:
    return [
        "audit",
        "--data",
        CLASSIFY,
        "--trials",
        "8",
        "--shots",
        "4",
        "--queries-per-trial",
        "4",
        "--reference-runs",
        "1",
        "--utility-queries",
        "0",
        "--out",
        out,
        *extra,
    ]


@pytest.fixture(scope="module")
def audit_log(tmp_path_factory):
    log = tmp_path_factory.mktemp("audit") / "audit.jsonl"
    r = _run(audit_args(log, "--json"))
    assert r.exit_code == 0, r.output
    return log, json.loads(r.stdout)


def _end_row(lines):
    return lines[-1]["end"]["report"]["rows"][0]


@pytest.mark.model
def test_the_report_of_an_audit_log_is_recomputed_from_its_trials(audit_log):
    log, first = audit_log
    r = _run(["report", log, "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["rows"] == first["rows"]  # the same numbers, from the records
    assert out["chain"]["head"] == first["log_head"] == _lines(log)[-1]["chain"]


@pytest.mark.model
def test_an_edited_lower_bound_in_the_end_line_is_refused(audit_log, tmp_path):
    """Issue 25 §1: ε_lb set to 5 in the end line was printed as "certified ε ≥ 5.000"."""
    log, _ = audit_log
    n = len(_lines(log))

    def five(lines):
        _end_row(lines)["epsilon_lower_bound"] = 5.0
        return lines

    bad = _copy(log, tmp_path / "five.jsonl")
    edit_log(bad, five, chain=False)
    _refused(_run(["report", bad]), f"{bad}:{n}:", "hash chain breaks at the end line")
    edit_log(bad, five)  # re-chained: the trials give another bound
    _refused(_run(["report", bad]), f"{bad}:{n}:", "report.rows[0].epsilon_lower_bound is 5.0 there")


@pytest.mark.model
def test_an_edited_trial_rechained_disagrees_with_the_end_line(audit_log, tmp_path):
    """Trial edits were ignored (report replayed the end line); now the rows are recomputed from them."""
    log, _ = audit_log

    def flip(lines):
        trial = next(line for line in lines if line.get("type") == "trial")
        trial["z"] = 1 - trial["z"]
        return lines

    bad = _copy(log, tmp_path / "flipped.jsonl")
    edit_log(bad, flip)
    _refused(_run(["report", bad]), "the end line disagrees with the records: report.rows[0].")


@pytest.mark.model
def test_an_appended_copy_of_a_trial_is_refused_by_resume(audit_log, tmp_path):
    """Issue 25 §1: a copy of trial 0 with z flipped, appended, was accepted by --resume (IN/OUT moved)."""
    log, _ = audit_log

    def append_copy(lines):
        trial = dict(next(line for line in lines if line.get("type") == "trial"))
        trial["z"] = 1 - trial["z"]
        trial.pop("chain", None)
        return lines + [trial]

    bad = _copy(log, tmp_path / "appended.jsonl")
    edit_log(bad, append_copy, chain=False)
    before = bad.read_bytes()
    n = len(_lines(bad))
    _refused(_run(audit_args(bad, "--resume")), f"{bad}:{n}:", "hash chain breaks at record 'eps=inf/trial=0'")
    bad.write_text(rechain(bad.read_text(encoding="utf-8")), encoding="utf-8")
    before = bad.read_bytes()
    _refused(_run(audit_args(bad, "--resume")), f"{bad}:{n}:", "duplicate record 'eps=inf/trial=0'")
    _refused(_run(["report", bad]), "duplicate record 'eps=inf/trial=0'")
    assert bad.read_bytes() == before


# ---------------------------------------------------------------------------
# one writer per log: real processes


def _wait_for_pid(lock: Path, proc: subprocess.Popen) -> int:
    """The PID ``proc`` wrote into the lock file (it is running and holds the lock then)."""
    deadline = time.monotonic() + 600  # a guard against a hang, not a threshold
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        text = lock.read_text(encoding="ascii").strip() if lock.exists() else ""
        if text == str(proc.pid):
            return proc.pid
        time.sleep(0.02)
    raise AssertionError("the run never took its lock")


HOLD = (
    "import sys\n"
    "from ctxlite.lock import LogLock\n"
    "lock = LogLock(sys.argv[1]).acquire()\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"  # until the test closes stdin
    "lock.release()\n"
)


@pytest.mark.model
@pytest.mark.parametrize("command", ["score", "audit"])
def test_a_second_writer_exits_11_naming_the_holder_and_touches_nothing(command, data, tmp_path):
    """While another process holds the log's lock, a run on the same --out exits at once (no model
    is loaded), one line naming the holder's PID, and neither the log nor the lock is touched."""
    out = tmp_path / "run.jsonl"
    out.write_bytes(b'{"type": "score-run", "identity": {}}\n{"key": "in-progress"}\n')  # a run's log so far
    before = out.read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        args = score_args(data, out) if command == "score" else audit_args(out, "--resume")
        r = subprocess.run(_proc(args), capture_output=True, text=True, timeout=600)
        assert r.returncode == 11, r.stderr
        assert _error_lines(r.stderr) == [
            f"ctxlite: error: {out} is being written by another ctxlite run (PID {holder.pid}): wait for it "
            "to finish or choose another --out"
        ]
        assert out.read_bytes() == before
        assert (tmp_path / "run.jsonl.lock").read_text().strip() == str(holder.pid)
        assert holder.poll() is None
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert not (tmp_path / "run.jsonl.lock").exists()  # released: removed by its holder


@pytest.mark.model
@pytest.mark.parametrize("command", ["score", "audit"])
def test_two_runs_started_together_never_interleave_their_records(command, data, tmp_path):
    """Issue 25 §2: two runs on the same --out both exited 0 and left a half-written record. Now
    each exits 0 (the later one resumed the finished log) or 11 naming the other, and the log is whole."""
    out = tmp_path / "same.jsonl"
    args = _proc(score_args(data, out, "--doc") if command == "score" else audit_args(out, "--resume"))
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p, *p.communicate(timeout=600)) for p in procs]
    codes = sorted(p.returncode for p, _, _ in results)
    assert codes in ([0, 0], [0, 11]), [(p.returncode, err) for p, _, err in results]
    for p, _, err in results:
        if p.returncode == 11:
            other = next(q for q, _, _ in results if q is not p)
            assert f"(PID {other.pid})" in _error_lines(err)[0]
    lines = _lines(out)
    keys = [line["key"] for line in lines if "key" in line]
    assert len(keys) == len(set(keys)) and "end" in lines[-1]  # each record once, the run finished
    assert len(keys) == (2 if command == "score" else 2 + 8)  # the examples, or the reference runs and trials
    r = _run(["verify", out])
    assert r.exit_code == 0, r.output


@pytest.mark.model
def test_a_writer_killed_with_sigkill_does_not_block_the_next_run(data, tmp_path):
    out = tmp_path / "run.jsonl"
    args = score_args(data, out, "--doc")
    first = subprocess.Popen(_proc(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for_pid(tmp_path / "run.jsonl.lock", first)
    while not out.read_bytes().endswith(b"\n"):  # its header is written: killed in the middle of the run
        assert first.poll() is None
        time.sleep(0.02)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=60)
    assert (tmp_path / "run.jsonl.lock").read_text().strip() == str(first.pid)  # stale: its holder is dead
    r = subprocess.run(_proc(args), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert _run(["verify", out]).exit_code == 0
    assert not (tmp_path / "run.jsonl.lock").exists()


@pytest.mark.model
def test_examples_an_end_line_does_not_list_are_named_not_hidden(score_log, data, tmp_path):
    """A later run of the same log on fewer inputs (``--limit 1``) ends listing only those: the report
    says the log holds more, rather than passing over them in silence."""
    log, _, _ = score_log
    fewer = _copy(log, tmp_path / "fewer.jsonl")
    r = _run(score_args(data, fewer, "--limit", "1"))
    assert r.exit_code == 0, r.output
    rep = _run(["report", fewer])
    assert rep.exit_code == 0 and "also holds 1 example(s) its last run did not list ('b')" in rep.stderr, rep.output
