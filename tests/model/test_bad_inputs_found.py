"""More of the bad-input catalogue (issue 25, "also found"): a negative seed, control and bidi
characters in what a person reads, a damaged cached model, an empty label list. Each ends in one
clear line (or a visible escape), never a traceback or a silent repair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.gates import Case, Verdict
from ctxlite.influence.results import NgramInfluence
from ctxlite.reporting.junit import write_junit
from ctxlite.reporting.terminal import score_table
from ctxlite.visible import visible
from tests.fake_server import MODEL, FakeServer
from tests.model.test_bad_inputs import CLASSIFY, check_error, ctxlite
from tests.results import example, result

HOSTILE = "\u202e\u2066\u202c\x00\x1b"
"""RIGHT-TO-LEFT OVERRIDE, LEFT-TO-RIGHT ISOLATE, POP DIRECTIONAL FORMATTING, NUL, ESC."""
SHOWN = ("⟨U+202E⟩", "⟨U+2066⟩", "⟨U+202C⟩", "␀", "␛")


def _raw(text: str) -> list[str]:
    return [c for c in HOSTILE if c in text]


def test_a_negative_seed_when_generating_is_a_usage_error(tmp_path):
    note = tmp_path / "note.txt"
    note.write_text("Dana takes lisinopril.", encoding="utf-8")
    err = check_error(ctxlite(["score", "--context", str(note), "-q", "What?", "--seed", "-1", "--doc"]), 2, "--seed")
    assert "-1 is not in the range x>=0" in err


def test_the_visible_escapes():
    assert visible("a" + HOSTILE + "b") == "a" + "".join(SHOWN) + "b"
    assert visible("line\nnext\ttab", keep="\n\t") == "line\nnext\ttab"
    assert visible("é ☕ مرحبا") == "é ☕ مرحبا"  # right-to-left text itself is text, not a control
    assert visible("\u2028\u0085\x7f") == "⟨U+2028⟩⟨U+0085⟩␡"


def test_hostile_characters_are_visible_in_every_place_a_person_reads(tmp_path):
    """An example id and a context holding U+202E, U+2066, U+202C, NUL and ESC: the terminal table
    (id column included), the stderr verdict and headline lines, the HTML report and the JUnit file
    show escapes, never the raw characters (which reorder or drive what is displayed)."""
    data, out = tmp_path / "data.jsonl", tmp_path / "run.jsonl"
    example = {"id": f"ex{HOSTILE}1", "context": f"Alice{HOSTILE} takes 10 mg lisinopril.", "query": "What?"}
    data.write_text(json.dumps({**example, "response": " lisinopril"}) + "\n", encoding="utf-8")
    args = ["score", "--data", str(data), "--template", "{context} Q: {query} A:", "--ngram", "2", "-T", "1"]
    args += ["--out", str(out), "--backend", "openai", "--model-name", MODEL, "--json"]
    with FakeServer() as fake:
        scored = CliRunner().invoke(main, [*args, "--base-url", fake.url])
    assert scored.exit_code == 0, scored.output
    html, junit = tmp_path / "r.html", tmp_path / "r.xml"
    res = CliRunner().invoke(
        main, ["report", str(out), "--fail-above-influence", "0", "--html", str(html), "--junit", str(junit)]
    )
    assert res.exit_code == 8, res.output
    assert "ctxlite: gate tripped: ctxlite score: fail: 1 of 1 case(s)" in res.stderr
    page, xml = html.read_text(encoding="utf-8"), junit.read_text(encoding="utf-8")
    for where, text in (("table", res.stdout), ("stderr", res.stderr), ("HTML", page), ("JUnit", xml)):
        assert _raw(text) == [], (where, _raw(text))
    table = res.stdout.splitlines()
    row = next(i for i, line in enumerate(table) if line.startswith("example"))  # after the verdict lines
    assert "ex" + "".join(SHOWN) + "1" in table[row + 1]  # the id column
    assert "".join(SHOWN) in res.stderr and "".join(SHOWN) in page and "".join(SHOWN) in xml


def test_the_table_and_the_junit_file_alone(tmp_path):
    gram = NgramInfluence(0, 2, 0, 7, f"a{HOSTILE}b", 1.0, [1.0])
    record = example(result(1.0, [gram], context_tokens=2))
    table = score_table([f"id{HOSTILE}"], [record], ansi=False)
    assert _raw(table) == [] and table.splitlines()[1].startswith("id" + "".join(SHOWN))
    write_junit(tmp_path / "j.xml", Verdict("ctxlite score", "g", [Case(f"id{HOSTILE}", True, f"m{HOSTILE}")]))
    assert _raw((tmp_path / "j.xml").read_text(encoding="utf-8")) == []


def test_the_progress_line_shows_an_id_escaped():
    import io

    from ctxlite.cli.progress import ProgressLine

    stream = io.StringIO()
    ProgressLine(stream=stream, enabled=True).step("examples", 0, 2, f"id{HOSTILE}")
    drawn = stream.getvalue().replace("\r\x1b[K", "")  # the line's own redraw sequence
    assert _raw(drawn) == [] and "id" + "".join(SHOWN) in drawn


def test_a_truncated_cached_model_is_rebuilt_and_said_so(tmp_path):
    from ctxlite.runtime.models import pull, registry

    entry = registry()["gemma-3-270m"]
    models = tmp_path / "home" / "models"
    models.mkdir(parents=True)
    with open(pull(), "rb") as f:
        (models / entry.file).write_bytes(f.read(1 << 20))  # the first MiB: a download cut short
    r = ctxlite(["models", "path", "gemma-3-270m"], env={"CTXLITE_HOME": str(tmp_path / "home")})
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert "ctxlite: warning: the cached gemma-3-270m is damaged, re-assembling it from" in err, err
    assert (models / entry.file).stat().st_size == entry.size_bytes
    again = ctxlite(["models", "path", "gemma-3-270m"], env={"CTXLITE_HOME": str(tmp_path / "home")})
    assert again.returncode == 0 and b"damaged" not in again.stderr  # a sound copy is not rebuilt


EMPTY_LABELS = (
    'task = "classify"\ninstruction = "Label each text.\\n"\nrecord = "Text: {text}\\nLabel: {label}\\n"\n'
    'input = "text"\noutput = "label"\nlabels = []\n'
)


def test_an_empty_label_list_is_refused(tmp_path):
    fmt = tmp_path / "f.toml"
    fmt.write_text(EMPTY_LABELS, encoding="utf-8")
    res = CliRunner().invoke(main, ["audit", "--data", CLASSIFY, "--format", str(fmt), "--trials", "4", "--plan"])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert res.output.count("ctxlite: error:") == 1 and "labels = [] lists no labels" in res.output, res.output


def test_an_empty_label_list_is_refused_by_the_library(tmp_path):
    from ctxlite.audit.formats import load_format
    from ctxlite.errors import InvalidParameter

    table = {"task": "classify", "instruction": "", "record": "{text} {label}", "input": "text", "output": "label"}
    (tmp_path / "f.json").write_text(json.dumps({**table, "labels": []}), encoding="utf-8")
    for path in (tmp_path / "f.json", _write(tmp_path / "f.toml", EMPTY_LABELS)):
        with pytest.raises(InvalidParameter, match=r"labels = \[\]"):
            load_format(str(path))
    assert load_format(str(_write(tmp_path / "g.toml", EMPTY_LABELS.replace("labels = []\n", "")))).labels == ()


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
