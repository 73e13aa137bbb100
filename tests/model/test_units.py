"""Units on the real default model: ``ctxlite score --unit passage`` on each of the three
retrieved-passage examples of ctxlite/data/examples/rag_passages.jsonl (issue 27's case), where the
passage that carries the answer ranks first, above the noise floor; and one short example per other
kind (sentence, field, span), where the unit the response copies ranks first."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.influence.dataset import load_examples
from ctxlite.influence.results import ExampleResult
from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings, ngram_starts
from tests.docs_pages import REPO
from tests.reference.copy_sources_reference import copy_source_positions

pytestmark = pytest.mark.model

DATA = REPO / "ctxlite" / "data" / "examples" / "rag_passages.jsonl"
ANSWER = {"rag-1": "passage 2", "rag-2": "passage 1", "rag-3": "passage 3"}


def test_the_answer_passage_ranks_first(tmp_path):
    out = tmp_path / "rag.jsonl"
    r = CliRunner().invoke(main, ["score", "--data", str(DATA), "--unit", "passage", "--out", str(out)])
    assert r.exit_code == 0, r.output
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()[1:]]
    results = {d["key"]: ExampleResult.from_dict(d["result"]) for d in records if d.get("type") == "example"}
    assert set(results) == set(ANSWER)
    for key, rec in results.items():
        (lam,) = rec.results
        first, *rest = lam.units
        assert first.label == ANSWER[key] and first.above_noise, (key, [(u.label, u.influence) for u in lam.units])
        assert len(rest) == 2 and all(u.kind == "passage" for u in lam.units)


# ----- sentences, fields and spans: one short example each, on the session's model ---------------


def _ranked(engine, unit: str, example: Example) -> list:
    """The example's units on the default model, largest τ_u first (λ = 1; no noise-floor probes, which
    would cost more than the units: the passage test above checks the floor, these the ranking, by a
    margin of 2x, where the floors measured on these examples were under 0.4 nats)."""
    scorer = InfluenceScorer(engine, "qa", InfluenceSettings(unit=unit, null_ablations=0))
    (lam,) = scorer.score(example).results
    return lam.units


def _shows(units) -> list:
    return [(u.label, round(u.influence, 2), u.above_noise) for u in units]


def test_the_sentence_the_answer_copies_ranks_first(engine):
    context = "Marta lives on Harbor Street. Her cat is grey. Marta takes losartan daily. The clinic opens Saturdays."
    example = Example(context=context, query="What does Marta take?", response="Losartan.", id="sentences")
    units = _ranked(engine, "sentence", example)
    assert [u.kind for u in units] == ["sentence"] * 4
    first, second, *_ = units
    assert first.text == "Marta takes losartan daily.", _shows(units)
    assert first.influence > 2 * second.influence, _shows(units)


def test_the_field_the_answer_copies_ranks_first(engine):
    record = "Name: Marta Oyelaran\nBorn: 1966\nMedication: losartan"
    example = Example(context=record, query="Which medication does the patient take?", response="Losartan.")
    units = _ranked(engine, "field", example)
    assert sorted(u.label for u in units) == ["Born", "Medication", "Name"]
    first, second, *_ = units
    assert first.label == "Medication", _shows(units)
    assert first.influence > 2 * second.influence, _shows(units)


def test_the_name_span_the_answer_copies_ranks_first(engine):
    """Spans a PII detector would give (a person, a date, a doctor): the name the response repeats
    moves it most."""
    context = "Patient Marta Oyelaran, seen Tuesday by Dr. Brandt."
    spans = [
        [context.index(text), context.index(text) + len(text), label]
        for text, label in [("Marta Oyelaran", "PERSON"), ("Tuesday", "DATE"), ("Dr. Brandt", "DOCTOR")]
    ]
    example = Example(context=context, query="What is the patient's name?", response="Marta Oyelaran.", spans=spans)
    units = _ranked(engine, "span", example)
    first, second, *_ = units
    assert (first.label, first.text) == ("PERSON", "Marta Oyelaran"), _shows(units)
    assert first.influence > 2 * second.influence, _shows(units)


def test_the_hierarchical_search_descends_into_the_answer_passage(tmp_path, engine):
    """--search adaptive on the first bundled example (no noise floor: the docs example runs all three
    with it): it descends into the answer passage, and the n-grams it measured are the grid's windows
    that share a token with that passage's sentence it chose or hold a copy source of the response
    (here the patient's name in passage 1, outside the sentence chosen)."""
    out = tmp_path / "h.jsonl"
    args = ["score", "--data", str(DATA), "--unit", "passage", "--search", "adaptive", "--out", str(out)]
    args += ["--limit", "1", "--null-ablations", "0"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()[1:]]
    results = {d["key"]: ExampleResult.from_dict(d["result"]) for d in records if d.get("type") == "example"}
    for key, rec in results.items():
        (lam,) = rec.results
        d = lam.descent
        assert d.into[0] == ANSWER[key] and d.into[1].startswith(ANSWER[key] + " › "), (key, d.into)
        chosen = next(u for u in d.sentences if u.label == d.into[1])
        example = next(e for e in load_examples(DATA) if e.id == key)
        scorer = InfluenceScorer(engine, "qa", InfluenceSettings(unit="passage"))
        enc = scorer.encode(example)
        copies, n = copy_source_positions(enc, scorer.encode_response(enc, example.response)), 8
        grid = ngram_starts(len(enc.context), n, n)
        inside = {c for c in grid if c < chosen.token_end and chosen.token_start < c + n}
        holding = {c for c in grid if any(c <= i < c + n for i in copies)}
        assert {g.start for g in lam.ngrams} == inside | holding, (key, sorted(inside), sorted(holding))
        assert holding - inside, "no copy source outside the chosen sentence: the case this test is for"
        assert d.copy_windows == sorted(holding - inside)
        assert len(lam.ngrams) < d.windows


def test_a_span_whose_character_a_token_splits_is_removed_whole_on_a_byte_level_bpe(instruct):
    """SmolLM2's byte-level BPE spells " ☕" as the tokens " \\xe2" and "\\x98" and "\\x95": a span on the
    ☕ alone must remove the token that holds the space and its first byte too (else the ablated
    context keeps a byte of the unit), and say the removal was snapped to the space."""
    context = "I like ☕ a lot"
    scorer = InfluenceScorer(instruct, "qa", InfluenceSettings(unit="span", null_ablations=0))
    example = Example(context=context, query="What?", response="Coffee.", spans=((7, 8, "cup"),))
    (tu,) = scorer.units(example, scorer.encode(example))
    removed = b"".join(instruct.token_bytes(t) for t in scorer.encode(example).context[tu.token_start : tu.token_end])
    assert removed == " ☕".encode() and tu.snapped and (tu.removed_start, tu.removed_end) == (6, 8)
