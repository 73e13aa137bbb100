"""``ctxlite score --unit`` on the FakeBackend: passages from a data set ranked in the table and the
JSON, the gate over units, the log re-rendered by ``ctxlite report``, and bad unit layouts refused with
exit code 4 (bad data) or 2 (usage) in one line -- without a model."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.influence.results import DESCENT_RULE, ExampleResult, descent_rule
from ctxlite.reporting.page import heat_class
from tests.fake_models import use_fake_models

PASSAGES = ["Dana Whitcombe takes lisinopril daily.", "The clinic opens at nine.", "Parking is free on Sundays."]


@pytest.fixture(autouse=True)
def fake(monkeypatch):
    use_fake_models(monkeypatch)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def write(path, *lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_passages_are_ranked_logged_and_reported(tmp_path):
    data = write(tmp_path / "rag.jsonl", {"id": "r1", "passages": PASSAGES, "query": "What?", "response": PASSAGES[0]})
    out = tmp_path / "s.jsonl"
    r = run("score", "--data", data, "--unit", "passage", "--out", out)
    assert r.exit_code == 0, r.output
    record = ExampleResult.from_dict(json.loads(out.read_text().splitlines()[1])["result"])
    units = record.results[0].units
    assert units[0].label == "passage 1" and sorted(u.label for u in units) == ["passage 1", "passage 2", "passage 3"]
    assert json.loads(out.read_text().splitlines()[0])["identity"]["settings"]["unit"] == "passage"
    report = run("report", out)  # the log re-rendered: the table, units first
    assert report.exit_code == 0, report.output
    table = report.stdout.splitlines()
    head = next(i for i, line in enumerate(table) if line.startswith("example") and "τ_u" in line)
    assert "passage 1" in table[head + 1] and "Dana Whitcombe" in table[head + 1]  # ranked first
    assert head < next(i for i, line in enumerate(table) if "doc τ" in line)  # the unit table comes first
    again = run("score", "--data", data, "--unit", "passage", "--out", out)  # resumed: nothing scored again
    assert again.exit_code == 0 and out.read_text().count('"type": "example"') == 1
    other = run("score", "--data", data, "--unit", "sentence", "--out", out)  # another unit: another run
    assert other.exit_code != 0 and out.read_text().count('"type": "example"') == 1
    report = run("report", out, "--json", "--html", tmp_path / "s.html")
    assert report.exit_code == 0, report.output
    (shown,) = json.loads(report.stdout)["examples"][0]["results"]
    assert [u["label"] for u in shown["units"]] == [u.label for u in units]
    html = (tmp_path / "s.html").read_text(encoding="utf-8")
    assert "Units, largest τ_u first" in html and html.index("passage 1") < html.index("passage 2")
    assert "Dana Whitcombe takes" in html
    assert run("report", out, "--html", tmp_path / "n.html", "--no-text").exit_code == 0
    assert "Dana Whitcombe" not in (tmp_path / "n.html").read_text(encoding="utf-8")  # the private text redacted


def test_the_gate_reads_the_units(tmp_path):
    data = write(tmp_path / "rag.jsonl", {"id": "r1", "passages": PASSAGES, "query": "What?", "response": PASSAGES[0]})
    r = run("score", "--data", data, "--unit", "passage", "--fail-above-influence", "0.001", "--json")
    assert r.exit_code == 8, r.output
    assert "passage 'passage 1'" in r.stdout


@pytest.mark.parametrize(
    "line, message",
    [
        ({"context": "one passage, no blank line", "query": "?", "response": "x"}, "at least two passages"),
        ({"context": "Alice Smith", "query": "?", "response": "x", "spans": [[0, 50, "n"]]}, "span 0"),
        ({"context": "Alice Smith", "query": "?", "response": "x", "spans": [[0, 5], [3, 8]]}, "overlap"),
        ({"passages": "not a list", "query": "?", "response": "x"}, "must be a non-empty list"),
    ],
)
def test_bad_unit_layouts_are_one_line_data_errors(tmp_path, line, message):
    data = write(tmp_path / "bad.jsonl", line)
    unit = "span" if "spans" in line else "passage"
    r = run("score", "--data", data, "--unit", unit)
    assert r.exit_code == 4 and message in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


def test_window_options_are_refused_with_units(tmp_path):
    data = write(tmp_path / "rag.jsonl", {"passages": PASSAGES, "query": "What?", "response": "x"})
    r = run("score", "--data", data, "--unit", "passage", "--ngram", "4")
    assert r.exit_code == 2 and "--ngram: no effect with --unit passage" in r.output


def test_snapping_is_reported(tmp_path):
    """The fake's whole-word tokens (" the", " is", ...) cannot be cut: a span inside one is widened."""
    context = "Alice is the patient."
    data = write(tmp_path / "s.jsonl", {"context": context, "query": "?", "response": "Alice", "spans": [[9, 11, "h"]]})
    r = run("score", "--data", data, "--unit", "span")
    assert r.exit_code == 0, r.output
    assert "1 unit(s) snapped outwards to whole tokens" in r.stderr and "h 9–11 → 8–12" in r.stderr


def test_a_unit_run_writes_format_2_which_a_format_1_reader_refuses(tmp_path, monkeypatch):
    """An n-gram run's log stays format 1 (what the previous ctxlite wrote and reads); a unit run's is
    format 2, so a ctxlite that knows format 1 only refuses it rather than reporting it without its
    units; and a run never resumes a log of the other format."""
    from ctxlite import logformat

    data = write(tmp_path / "rag.jsonl", {"id": "r1", "passages": PASSAGES, "query": "What?", "response": PASSAGES[0]})
    units, ngrams = tmp_path / "units.jsonl", tmp_path / "ngrams.jsonl"
    assert run("score", "--data", data, "--unit", "passage", "--out", units).exit_code == 0
    assert run("score", "--data", data, "--ngram", "4", "--out", ngrams).exit_code == 0
    version = {log: json.loads(log.read_text().splitlines()[0])["schema_version"] for log in (units, ngrams)}
    assert version == {units: 2, ngrams: 1}
    assert run("report", units).exit_code == 0 and run("report", ngrams).exit_code == 0
    monkeypatch.setattr(logformat, "FORMATS", (1,))  # the previous ctxlite's reader
    refused = run("report", units)
    assert refused.exit_code == 4 and "log format 2" in refused.output and "newer ctxlite" in refused.output
    assert run("report", ngrams).exit_code == 0


def test_a_planted_copy_is_removed_with_its_original_in_the_table_json_log_and_page(tmp_path):
    passages = [PASSAGES[0], PASSAGES[1], PASSAGES[0]]
    data = write(tmp_path / "dup.jsonl", {"id": "d1", "passages": passages, "query": "What?", "response": PASSAGES[0]})
    out = tmp_path / "d.jsonl"
    r = run("score", "--data", data, "--unit", "passage", "--out", out)
    assert r.exit_code == 0, r.output
    shown_json = run("report", out, "--json")
    (shown,) = json.loads(shown_json.stdout)["examples"][0]["results"]
    by = {u["label"]: u for u in shown["units"]}
    assert by["passage 1"]["partner"] == "passage 3" and by["passage 3"]["partner"] == "passage 1"
    assert by["passage 1"]["similarity"] == 1.0 and "partner" not in by["passage 2"]
    record = ExampleResult.from_dict(json.loads(out.read_text().splitlines()[1])["result"])
    tau_pair = {u.label: u.pair_influence for u in record.results[0].units}["passage 1"]
    assert by["passage 1"]["pair_influence"] == tau_pair
    assert json.loads(out.read_text().splitlines()[0])["identity"]["settings"]["duplicate_threshold"] == 0.5
    report = run("report", out, "--html", tmp_path / "d.html")
    assert report.exit_code == 0, report.output
    assert f"passage 1 with its near-duplicate passage 3 (similarity 1.00): τ_pair {tau_pair:.2f}" in report.stdout
    assert "λ=λ" not in report.stdout
    assert "near-duplicate passage 3" in (tmp_path / "d.html").read_text(encoding="utf-8")
    off = run("score", "--data", data, "--unit", "passage", "--duplicate-threshold", "0", "--out", tmp_path / "o.jsonl")
    assert off.exit_code == 0 and "partner" not in (tmp_path / "o.jsonl").read_text(encoding="utf-8")


def test_a_fact_stated_three_times_is_a_cluster_in_the_table_json_log_page_and_gate(tmp_path):
    """The issue's layout [P1, P2, P3, P2, P2]: the three copies are one cluster, removed together
    (τ_cluster), shown in the table, the JSON, the log and the page, and gated: a budget above every
    τ_u and τ_pair and below τ_cluster fails (exit 8) on the run and on ``ctxlite report``."""
    passages = [PASSAGES[1], PASSAGES[0], PASSAGES[2], PASSAGES[0], PASSAGES[0]]
    data = write(tmp_path / "x3.jsonl", {"id": "x3", "passages": passages, "query": "What?", "response": PASSAGES[0]})
    out = tmp_path / "x3.log.jsonl"
    assert run("score", "--data", data, "--unit", "passage", "--out", out).exit_code == 0
    (r,) = ExampleResult.from_dict(json.loads(out.read_text().splitlines()[1])["result"]).results
    (cluster,) = r.clusters
    assert cluster.units == ["passage 2", "passage 4", "passage 5"] and cluster.similarity == 1.0
    shown = run("report", out, "--json", "--html", tmp_path / "x3.html")
    (res,) = json.loads(shown.stdout)["examples"][0]["results"]
    assert res["clusters"] == [cluster.to_dict()]
    note = f"passage 2, passage 4, passage 5 removed together (similarity ≥ 1.00): τ_cluster {cluster.influence:.2f}"
    assert note in run("report", out).stdout
    assert note in (tmp_path / "x3.html").read_text(encoding="utf-8")
    singles = max([u.influence for u in r.units] + [u.pair_influence for u in r.units if u.partner])
    floor = r.noise_floor.max
    assert cluster.influence - floor > singles + floor + 1
    budget = f"{(cluster.influence - floor + singles + floor) / 2:.3f}"
    gated = run("score", "--data", data, "--unit", "passage", "--fail-above-influence", budget, "--json")
    assert gated.exit_code == 8, gated.output
    (case,) = json.loads(gated.stdout)["verdict"]["failed"]
    assert "τ_cluster" in case["message"] and "'passage 5'" in case["message"]
    reported = run("report", out, "--fail-above-influence", budget)
    assert reported.exit_code == 8 and "τ_cluster" in reported.stdout, reported.output


@pytest.mark.parametrize("language", ["de-DE", "xx", "", "12", "zh"])
def test_an_unknown_sentence_language_is_refused_in_one_line(tmp_path, language):
    """sentencex segments a code it has no rules for with its English rules: the run recorded the code
    as if it were used (exit 0 before, with the English sentences). Now exit 2 naming the value and
    the list, before any model work."""
    data = write(tmp_path / "s.jsonl", {"id": "s1", "context": "Ein Satz. Noch einer.", "query": "Q?", "response": "x"})
    r = run("score", "--data", data, "--unit", "sentence", "--sentence-language", language, "--out", tmp_path / "o")
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert repr(language) in r.output and "SENTENCE_LANGUAGES" in r.output
    assert not (tmp_path / "o").exists()
    if language == "de-DE":
        assert "did you mean 'de'?" in r.output


def test_a_known_sentence_language_segments_by_its_own_rules(tmp_path):
    """de segments by the German rules (``bzw.`` ends no sentence; in English it does), and the log
    records de."""
    context = "Das ist ein Test. Und bzw. noch einer."
    data = write(tmp_path / "s.jsonl", {"id": "s1", "context": context, "query": "Q?", "response": "Test"})
    out = tmp_path / "de.jsonl"
    r = run("score", "--data", data, "--unit", "sentence", "--sentence-language", "de", "--out", out)
    assert r.exit_code == 0, r.output
    lines = out.read_text().splitlines()
    assert json.loads(lines[0])["identity"]["settings"]["sentence_language"] == "de"
    (res,) = ExampleResult.from_dict(json.loads(lines[1])["result"]).results
    assert sorted(u.text for u in res.units) == ["Das ist ein Test.", "Und bzw. noch einer."]
    assert run("score", "--data", data, "--unit", "sentence", "--out", tmp_path / "en.jsonl").exit_code == 0
    (res,) = ExampleResult.from_dict(json.loads((tmp_path / "en.jsonl").read_text().splitlines()[1])["result"]).results
    assert len(res.units) == 3  # the English rules end a sentence at "bzw."


def test_the_duplicate_threshold_needs_units(tmp_path):
    data = write(tmp_path / "r.jsonl", {"id": "r1", "passages": PASSAGES, "query": "What?", "response": "x"})
    r = run("score", "--data", data, "--duplicate-threshold", "0.7")
    assert r.exit_code == 2 and "--duplicate-threshold: no effect without --unit" in r.output


def test_the_gate_fails_on_a_near_duplicate_pair_and_report_recomputes_it(tmp_path):
    """A budget above each copy's τ_u and below τ_pair: exit 8 from the run and from ``ctxlite report``
    on its log, the verdict naming τ_pair (before, the pair was shown and not gated: exit 10)."""
    passages = [PASSAGES[0], PASSAGES[1], PASSAGES[0]]
    data = write(tmp_path / "dup.jsonl", {"id": "d1", "passages": passages, "query": "What?", "response": PASSAGES[0]})
    out = tmp_path / "d.jsonl"
    assert run("score", "--data", data, "--unit", "passage", "--out", out).exit_code == 0
    (r,) = ExampleResult.from_dict(json.loads(out.read_text().splitlines()[1])["result"]).results
    top_unit, tau_pair = max(u.influence for u in r.units), r.units[0].pair_influence
    assert tau_pair > top_unit + 1
    budget = f"{(top_unit + tau_pair) / 2:.3f}"
    gated = run("score", "--data", data, "--unit", "passage", "--fail-above-influence", budget, "--json")
    assert gated.exit_code == 8, gated.output
    (case,) = json.loads(gated.stdout)["verdict"]["failed"]
    assert "τ_pair" in case["message"] and "near-duplicate" in case["message"]
    reported = run("report", out, "--fail-above-influence", budget)
    assert reported.exit_code == 8 and "τ_pair" in reported.stdout, reported.output
    assert run("report", out, "--fail-above-influence", f"{top_unit + 0.001:.3f}").exit_code == 8
    # τ_pair is flagged against the floor like τ_u: terminal, JSON and page
    assert r.units[0].pair_above_noise is (tau_pair > r.noise_floor.max) is True
    shown = run("report", out, "--json", "--html", tmp_path / "d.html")
    (res,) = json.loads(shown.stdout)["examples"][0]["results"]
    assert [u.get("pair_above_noise") for u in res["units"]] == [True, True, None]
    assert f"τ_pair {tau_pair:.2f}, above floor: yes" in run("report", out).stdout
    assert f"τ_pair {tau_pair:.2f} nats, above the noise floor" in (tmp_path / "d.html").read_text(encoding="utf-8")


def test_a_unit_runs_summary_gives_its_largest_unit_and_its_page_shades_the_context_by_unit(tmp_path):
    """A unit run measures no n-gram: its summary line and the page's data-set table give the largest
    τ_u (example and unit), never an n-gram figure; the page shades each unit of the context by its
    τ_u on the page's scale, in reading order, its τ_u in the tooltip (and no text with --no-text)."""
    lines = [{"id": f"r{i}", "passages": PASSAGES, "query": "What?", "response": PASSAGES[i]} for i in (0, 1)]
    data, out = write(tmp_path / "rag.jsonl", *lines), tmp_path / "s.jsonl"
    r = run("score", "--data", data, "--unit", "passage", "--out", out)
    assert r.exit_code == 0, r.output
    records = [json.loads(x) for x in out.read_text().splitlines()[1:] if '"example"' in x]
    results = {d["key"]: ExampleResult.from_dict(d["result"]).results[0] for d in records}
    key, best = max(((k, u) for k, res in results.items() for u in res.units), key=lambda ku: ku[1].influence)
    assert f"largest passage τ_u {best.influence:.2f} ({key}, {best.label})" in r.stderr, r.stderr
    assert "max-of-mean" not in r.stderr
    assert run("report", out, "--html", tmp_path / "s.html").exit_code == 0
    html = (tmp_path / "s.html").read_text(encoding="utf-8")
    assert "n-gram max of mean" not in html and "largest τ_u" in html and f"{key}: {best.label}" in html
    top = max(max(u.influence for u in res.units) for res in results.values())
    top = max(top, *(t for res in results.values() for t in res.token_influence))  # the page's one scale
    for k, res in results.items():
        section = html[html.index(f'data-example="{k}"') :]
        heat = section[section.index('data-role="unit-heatmap"') :]
        heat = heat[: heat.index("</div>")]
        unit_span = r'<span class="tok (h\d+)[^"]*" tabindex="0" data-unit="([^"]+)"[^>]*title="([^"]*)">'
        shaded = re.findall(unit_span, heat)
        in_order = sorted(res.units, key=lambda u: u.char_start)
        assert [label for _, label, _ in shaded] == [u.label for u in in_order]
        assert [cls for cls, _, _ in shaded] == [heat_class(u.influence, top) for u in in_order]
        assert all(f"τ_u = {u.influence:.4f} nats" in tip for (_, _, tip), u in zip(shaded, in_order))
        assert PASSAGES[0] in heat and heat.count("…") == 2  # the two separators, in no unit
    assert run("report", out, "--html", tmp_path / "n.html", "--no-text").exit_code == 0
    redacted = (tmp_path / "n.html").read_text(encoding="utf-8")
    assert 'data-role="unit-heatmap"' in redacted and "Dana Whitcombe" not in redacted


def test_a_hierarchical_search_reports_every_level_in_the_table_json_log_and_page(tmp_path):
    """--search adaptive with --unit passage: all passages, then the sentences of the top one, then its
    n-grams, exact τ at every level, in the terminal (passages first), the JSON, the format-3 log and
    the page; ``ctxlite report`` re-renders it; field units refuse it, and --ngram is its n-gram size."""
    passages = ["Dana Whitcombe takes lisinopril daily. She lives in Ohio.", PASSAGES[1], PASSAGES[2]]
    line = {"id": "h1", "passages": passages, "query": "What?", "response": "Dana Whitcombe takes lisinopril"}
    data, out = write(tmp_path / "h.jsonl", line), tmp_path / "h.log.jsonl"
    args = ("score", "--data", data, "--unit", "passage", "--search", "adaptive", "--ngram", "4")
    r = run(*args, "--out", out)
    assert r.exit_code == 0, r.output
    header, record = (json.loads(x) for x in out.read_text().splitlines()[:2])
    assert header["schema_version"] == 3
    (lam,) = ExampleResult.from_dict(record["result"]).results
    assert lam.units[0].label == "passage 1"
    d = lam.descent
    assert d.into == ["passage 1", "passage 1 › sentence 1"] and d.rule == descent_rule(True)
    assert [u.label for u in d.ranked_sentences()] == ["passage 1 › sentence 1", "passage 1 › sentence 2"]
    assert all(u.parent == "passage 1" for u in d.sentences)
    first = d.ranked_sentences()[0]
    # every window of the chosen sentence, and copy sources elsewhere (the exact set: test_units_on_fake.py)
    assert {g.start for g in lam.ngrams} >= set(range(0, first.token_end, 4)) and first.token_start == 0
    assert lam.search.ablations == len(lam.units) + len(d.sentences) + len(lam.ngrams)
    table = run("report", out).stdout
    assert table.index("passage 1") < table.index("hierarchical search") < table.index("doc τ")
    assert "descended into passage 1 → passage 1 › sentence 1" in table
    assert f"τ_u {first.influence:.2f}" in table and f"{len(lam.ngrams)} of {d.windows} n-gram windows" in table
    assert d.copy_windows and f"({len(d.copy_windows)} for copy sources alone)" in table
    shown = json.loads(run("report", out, "--json").stdout)["examples"][0]["results"][0]
    assert [u["label"] for u in shown["units"]] == [u.label for u in lam.units]  # passages first
    assert shown["descent"]["into"] == d.into and shown["descent"]["ngrams_measured"] == len(lam.ngrams)
    assert shown["descent"]["sentences"][0]["influence"] == first.influence
    assert shown["descent"]["copy_windows"] == d.copy_windows
    assert run("report", out, "--html", tmp_path / "h.html").exit_code == 0
    html = (tmp_path / "h.html").read_text(encoding="utf-8")
    assert html.index('data-role="units"') < html.index('data-role="descent"') < html.index('data-role="heatmap"')
    assert "passage 1 › sentence 1" in html and f"({len(d.copy_windows)} for copy sources alone)" in html
    refused = run("score", "--data", data, "--unit", "field", "--search", "adaptive")
    assert refused.exit_code == 2 and "no finer units to descend into" in refused.output
    refused = run("score", "--data", data, "--unit", "passage", "--search", "adaptive", "--refine-ratio", "2")
    assert refused.exit_code == 2 and "--refine-ratio: no effect with --unit passage" in refused.output
    refused = run("score", "--data", data, "--unit", "passage", "--no-copy-sources")
    assert refused.exit_code == 2 and "--copy-sources: no effect without a hierarchical search" in refused.output
    # without copy sources: the chosen sentence's windows only, a rule that says so, and a log of its own
    r = run(*args, "--no-copy-sources", "--out", out)
    assert r.exit_code == 4 and "settings.copy_sources" in r.output  # not resumed into the log with them
    r = run(*args, "--no-copy-sources", "--out", tmp_path / "plain.jsonl")
    assert r.exit_code == 0, r.output
    (plain,) = ExampleResult.from_dict(
        json.loads((tmp_path / "plain.jsonl").read_text().splitlines()[1])["result"]
    ).results
    assert plain.descent.rule == DESCENT_RULE and plain.descent.into == d.into and plain.descent.copy_windows == []
    # the identity holds copy_sources only where they were measured: a log of the rule before them (and
    # any run that does not descend) keeps the identity it had, so --no-copy-sources resumes it
    assert header["identity"]["settings"]["copy_sources"] is True
    flat = tmp_path / "flat.jsonl"
    assert run("score", "--data", data, "--unit", "passage", "--out", flat).exit_code == 0
    for log in (tmp_path / "plain.jsonl", flat):
        assert "copy_sources" not in json.loads(log.read_text().splitlines()[0])["identity"]["settings"]
    assert {g.start for g in plain.ngrams} == set(range(0, first.token_end, 4)) < {g.start for g in lam.ngrams}
    assert {g.start: g.influence for g in plain.ngrams}.items() <= {g.start: g.influence for g in lam.ngrams}.items()


def test_a_hierarchical_runs_log_is_format_3_which_an_older_reader_refuses(tmp_path, monkeypatch):
    from ctxlite import logformat

    data = write(tmp_path / "r.jsonl", {"id": "r1", "passages": PASSAGES, "query": "What?", "response": PASSAGES[0]})
    out = tmp_path / "h.jsonl"
    assert run("score", "--data", data, "--unit", "passage", "--search", "adaptive", "--out", out).exit_code == 0
    assert json.loads(out.read_text().splitlines()[0])["schema_version"] == 3
    flat = run("score", "--data", data, "--unit", "passage", "--out", out)  # no descent: format 2, another run
    assert flat.exit_code != 0 and out.read_text().count('"type": "example"') == 1
    monkeypatch.setattr(logformat, "FORMATS", (1, 2))  # the previous ctxlite's reader
    refused = run("report", out)
    assert refused.exit_code == 4 and "log format 3" in refused.output and "newer ctxlite" in refused.output
