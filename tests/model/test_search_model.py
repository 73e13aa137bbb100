"""Adaptive ablation search on the real default model: what it reports is exhaustive search's
own numbers, bit for bit, and on a context with one planted span it finds that span."""

from __future__ import annotations

import fcntl
import json
import os
import pickle

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.influence.analysis import summarize
from ctxlite.influence.scorer import Example, ExampleResult, InfluenceScorer, InfluenceSettings
from ctxlite.runtime.sampling import SamplingSettings

pytestmark = pytest.mark.model

FILLER = [
    "The committee met on Tuesday to review the quarterly schedule.",
    "Several members asked for the minutes to be circulated earlier.",
    "The budget for the spring term was approved without changes.",
    "A short break followed, and coffee was served in the hall.",
    "The next meeting will take place in the usual room.",
]
FACT = "The vault code is 7351-QX-8842."
QUERY = "What is the vault code?"
RESPONSE = "The vault code is 7351-QX-8842."
# a small tree (2 top blocks of 4 windows, branching 2), so that every level of the search runs
TREE = dict(top_blocks=2, branching=2, top_spans=1, ngram=4)


def planted(copies: int = 1) -> str:
    """Filler sentences with the fact once (in the middle) or twice (in both halves)."""
    if copies == 1:
        return " ".join(FILLER[:3] + [FACT] + FILLER[3:])
    return " ".join(FILLER[:1] + [FACT] + FILLER[1:4] + [FACT] + FILLER[4:])


def both(engine, example, **settings):
    ex = InfluenceScorer(engine, "qa", InfluenceSettings(search="exhaustive", **settings)).score(example)
    ad = InfluenceScorer(engine, "qa", InfluenceSettings(search="adaptive", **settings)).score(example)
    return ex.results, ad.results


def assert_exact(ex_result, ad_result):
    """Every n-gram adaptive search reports is exhaustive search's, bit for bit."""
    by_start = {g.start: g for g in ex_result.ngrams}
    assert ad_result.ngrams, "adaptive search reported no n-gram"
    for g in ad_result.ngrams:
        assert (g.influence, g.per_token, g.text) == (
            by_start[g.start].influence,
            by_start[g.start].per_token,
            by_start[g.start].text,
        )


@pytest.fixture(scope="session")
def single(engine, tmp_path_factory):
    """Both searches on the context with the fact once, at λ = 1: computed once per pytest run (under
    pytest-xdist by the first worker that needs it, under a lock, and read back by the others: three
    tests on two workers computed it twice)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    with open(shared / "search-single.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = shared / "search-single.pickle"
        if not done.is_file():
            (ex,), (ad,) = both(engine, Example(planted(), QUERY, RESPONSE), lambdas=(1.0,), **TREE)
            done.write_bytes(pickle.dumps((ex, ad)))
        return pickle.loads(done.read_bytes())


def test_adaptive_finds_the_planted_span_with_its_exact_influence(single):
    ex, ad = single
    assert_exact(ex, ad)
    top = ex.top_spans(1)[0]
    assert "7351" in top.text or "8842" in top.text or "QX" in top.text  # the planted span leaks most
    assert ad.top_spans(1)[0].start == top.start
    s = ad.search
    assert s.method == "adaptive" and s.converged and s.rounds >= 3
    assert s.ablations < s.windows == len(ex.ngrams) and len(ad.ngrams) < len(ex.ngrams)
    assert s.tokens_decoded < s.exhaustive_tokens
    # the dry-run count of what exhaustive search would decode is what it decoded
    # the dry run counts the ablations on a canonical cache; the real exhaustive run also re-decodes the
    # prefix cells its floor's probes decoded in another tiling, at most as many as the probes decoded
    extra = ex.search.tokens_decoded - s.exhaustive_tokens
    assert 0 <= extra <= ex.search.null_tokens, (extra, ex.search)
    assert [b.text for b in s.blocks] and all(b.end > b.start for b in s.blocks)
    # both searches measure a noise floor with their first pass: two probe pairs at the latest spans
    for r in (ex, ad):
        assert r.noise_floor is not None and r.search.null_ablations == 4 == len(r.noise_floor.sums)
        assert r.noise_floor.kinds == ["ablation", "null"] * 2


def test_a_lambda_sweep_is_searched_exactly_for_every_lambda(engine):
    ex, ad = both(engine, Example(planted(), QUERY, RESPONSE), lambdas=(0.5, 1.5), **TREE)
    for e, a in zip(ex, ad):
        assert e.lam == a.lam
        assert_exact(e, a)
        assert a.top_spans(1)[0].start == e.top_spans(1)[0].start


def test_epsilon_bounded_generation_searches_its_own_response(engine):
    sampling = SamplingSettings(max_new_tokens=6, min_new_tokens=2, seed=3)
    example = Example(planted(), QUERY)
    (ex,), (ad,) = both(engine, example, lambdas=(1.0,), epsilons=(2.0,), sampling=sampling, **TREE)
    assert ex.response_ids == ad.response_ids and ad.generation.step_lambdas
    assert_exact(ex, ad)


def test_a_duplicated_fact_is_small_in_both_searches(engine, single):
    """Removing one copy leaves the other: each copy's τ_i falls (exhaustive and adaptive alike).
    Documented in the README."""
    (ex,), (ad,) = both(engine, Example(planted(2), QUERY, RESPONSE), lambdas=(1.0,), **TREE)
    assert_exact(ex, ad)
    assert ex.max_ngram_influence < 0.5 * single[0].max_ngram_influence
    assert ad.top_spans(1)[0].start == ex.top_spans(1)[0].start


def test_summary_leaves_out_ngram_averages_of_adaptive_results(single):
    result = ExampleResult("x", single[1].context_tokens, QUERY, [single[1]])
    summary = summarize([result]).to_dict()["1.0"]
    assert summary["ngram_influence"]["max_of_mean"] is None and summary["ngram_position_profile"]["means"] == []
    assert "adaptive" in summary["ngram_influence"]["not_measured"]
    exhaustive = summarize([ExampleResult("x", 0, QUERY, [single[0]])]).to_dict()["1.0"]
    assert exhaustive["ngram_influence"]["max_of_mean"] == single[0].max_ngram_influence


def test_a_plan_of_adaptive_search_says_it_is_an_estimate(tmp_path):
    """The search refines where the logits say and a plan computes none: ``--plan`` says its
    counts are an estimate, while the same plan of exhaustive search stays exact."""
    note = tmp_path / "note.txt"
    note.write_text(planted(), encoding="utf-8")
    base = ["score", "--context", str(note), "-q", QUERY, "-r", RESPONSE, "--ngram", "4", "--plan", "--json"]
    plans = {}
    for search in ("adaptive", "exhaustive"):
        r = CliRunner().invoke(main, base + ["--search", search], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        plans[search] = json.loads(r.stdout)["plan"]
    assert not plans["adaptive"]["exact"] and "adaptive search" in plans["adaptive"]["estimate"]
    assert plans["exhaustive"]["exact"] and plans["exhaustive"]["estimate"] is None


def test_cli_adaptive_search_and_its_refusals(tmp_path):
    note = tmp_path / "note.txt"
    note.write_text(planted(), encoding="utf-8")
    base = ["score", "--context", str(note), "-q", QUERY, "-r", RESPONSE, "--ngram", "4"]
    pointless = CliRunner().invoke(main, base + ["--search", "exhaustive", "--refine-ratio", "0.3"])
    assert pointless.exit_code == 2 and "--refine-ratio" in pointless.output
    out = tmp_path / "run.jsonl"
    args = base + ["--search", "adaptive", "--top", "2", "--out", str(out), "--json"]
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)["result"]["results"][0]
    assert res["search"]["method"] == "adaptive" and len(res["top_spans"]) == 2
    every = res["search"]["measured_every_window"]
    assert every == (len(res["ngrams"]) == res["search"]["windows"])
    assert ("the search was exhaustive" in r.stderr) == every  # said, never silent
    # a gate on adaptive search is not refused: what it skipped makes a pass inconclusive
    regate = CliRunner().invoke(main, ["report", str(out), "--fail-above-influence", "1000", "--json"])
    [case] = json.loads(regate.stdout)["verdict"]["results"]
    assert (regate.exit_code, case["verdict"]) == ((0, "pass") if every else (10, "inconclusive")), regate.output
    if not every:
        assert f"of {res['search']['windows']} n-gram windows" in case["message"]


def test_adaptive_search_on_a_short_context_says_it_measured_every_window(tmp_path):
    """Issue 24 §6: fewer windows than the search's top-level blocks leave nothing to search, so
    adaptive search is exhaustive there; the record and a note on stderr say so."""
    note = tmp_path / "short.txt"
    note.write_text(FACT, encoding="utf-8")
    args = ["score", "--context", str(note), "-q", QUERY, "-r", RESPONSE, "--ngram", "4", "--search", "adaptive"]
    r = CliRunner().invoke(main, [*args, "--top", "1", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)["result"]["results"][0]
    assert res["search"]["method"] == "adaptive" and res["search"]["measured_every_window"] is True
    assert len(res["ngrams"]) == res["search"]["windows"]
    assert f"--search adaptive measured all {res['search']['windows']} n-gram windows" in r.stderr
    gated = CliRunner().invoke(main, [*args, "--fail-above-influence", "1000", "--json"])
    assert gated.exit_code == 0 and json.loads(gated.stdout)["verdict"]["verdict"] == "pass", gated.output


def test_the_html_heatmap_shows_the_whole_context_of_an_adaptive_run(tmp_path):
    """Measured n-grams are shaded; the rest of the context is there too, dotted, with its block's τ_B."""
    import html
    import re

    note = tmp_path / "note.txt"
    note.write_text(planted(), encoding="utf-8")
    out, page = tmp_path / "run.jsonl", tmp_path / "report.html"
    args = ["score", "--context", str(note), "-q", QUERY, "-r", RESPONSE, "--ngram", "4", "--search", "adaptive"]
    assert CliRunner().invoke(main, args + ["--top", "1", "--out", str(out), "--json"]).exit_code == 0
    r = CliRunner().invoke(main, ["report", str(out), "--html", str(page)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    heatmap = page.read_text(encoding="utf-8").split('data-role="heatmap">', 1)[1].split("</div>", 1)[0]
    spans = re.findall(r'<span class="tok ([^"]*)"[^>]*>(.*?)</span>', heatmap)
    assert any("unmeasured" in cls for cls, _ in spans) and any("unmeasured" not in cls for cls, _ in spans)
    assert "".join(html.unescape(text) for _, text in spans).strip() == planted()
