"""Units (passages, sentences, fields, spans) on the FakeBackend: how a context is cut into units and
mapped onto tokens, and each unit's leave-one-out τ_u against a slow reference that decodes every
ablated prompt from scratch -- on generated unit layouts, without a model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import sentencex
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ctxlite.errors import DataError, InvalidParameter
from ctxlite.gates import Outcome, influence_cases, pair_removals
from ctxlite.influence.redundancy import SHARED_RUN, clusters
from ctxlite.influence.results import ExampleResult, LambdaResult
from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings, ngram_starts
from ctxlite.influence.units import (
    SENTENCE_LANGUAGES,
    SENTENCE_RULES,
    SENTENCEX_VERSION,
    check_sentence_language,
    split_units,
    to_tokens,
)
from ctxlite.runtime.backend import char_cover_of
from ctxlite.runtime.fake import FakeBackend
from ctxlite.runtime.sampling import SamplingSettings
from tests.reference.copy_sources_reference import copy_source_positions

WORDS = ["Alice", "Smith", "takes", "losartan", "the", "is", "a", "of", "Ohio", "MRN", "4411", "née", "東京", "and"]
word_runs = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)


def _reference_logp(backend, scorer: InfluenceScorer, example: Example, lam: float):
    """The example's encoding, and ``logp(prompt)``: log p̄_λ of each response token after ``prompt``,
    both passes decoded from scratch (``logits_rows``) and mixed in numpy, float64."""
    enc = scorer.encode(example)
    y = scorer.encode_response(enc, example.response)
    T = scorer.settings.sampling.temperature
    targets = np.asarray(y)
    without = backend.logits_rows(enc.without_context + y, len(enc.without_context)).astype(np.float64)

    def logp(tokens):
        rows = backend.logits_rows(tokens + y, len(tokens)).astype(np.float64)
        z = (lam * rows + (1 - lam) * without) / T
        z -= z.max(axis=1, keepdims=True)
        mixed = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        return mixed[np.arange(len(y)), targets]

    return enc, logp


def reference_tau(backend, scorer: InfluenceScorer, example: Example, lam: float, pairs: bool = False) -> list:
    """τ_u of each unit, obviously: decode the full prompt, each prompt without one unit's tokens and
    the prompt without context from scratch (``logits_rows``, no cache reused), mix the logits in
    numpy (float64; the scorer's kernels round in float32, hence the tests' 1e-4 nats of tolerance,
    far below what a wrong ablation moves), sum |Δ log p̄_λ| over the response tokens. ``pairs``:
    instead, per unit, None or (partner label, similarity, τ_pair) of it and its near-duplicate."""
    enc, logp = _reference_logp(backend, scorer, example, lam)
    p, full = len(enc.prefix), enc.with_context
    base = logp(full)
    taus = []
    for u in scorer.units(example, enc):
        ablated = full[: p + u.token_start] + full[p + u.token_end :]
        taus.append(float(np.abs(base - logp(ablated)).sum()))
    if not pairs:
        return taus
    units = scorer.units(example, enc)
    out = []
    for u in units:  # its most similar other unit, compared by brute force; both removed token by token
        sims = [(reference_similarity(u.unit.text, v.unit.text), -j) for j, v in enumerate(units) if v is not u]
        sim, j = max(sims) if sims else (0.0, 0)
        threshold = scorer.settings.duplicate_threshold
        if threshold is None or sim < threshold:
            out.append(None)
            continue
        v = units[-j]
        drop = set(range(u.token_start, u.token_end)) | set(range(v.token_start, v.token_end))
        ablated = full[:p] + [t for i, t in enumerate(enc.context) if i not in drop] + enc.suffix
        out.append((v.unit.label, sim, float(np.abs(base - logp(ablated)).sum())))
    return out


def reference_cluster_tau(backend, scorer: InfluenceScorer, example: Example, lam: float, labels) -> float:
    """τ of the units named ``labels`` removed together, token by token, decoded from scratch."""
    enc, logp = _reference_logp(backend, scorer, example, lam)
    units = [u for u in scorer.units(example, enc) if u.unit.label in labels]
    drop = {i for u in units for i in range(u.token_start, u.token_end)}
    kept = enc.prefix + [t for i, t in enumerate(enc.context) if i not in drop] + enc.suffix
    return float(np.abs(logp(enc.with_context) - logp(kept)).sum())


def reference_similarity(a: str, b: str) -> float:
    """Jaccard of lowercased word 3-gram shingles, written out (fewer than 3 words: one shingle)."""

    def grams(text):
        words = re.findall(r"\w+", text.lower())
        return {tuple(words)} if 0 < len(words) <= 3 else {tuple(words[i : i + 3]) for i in range(len(words) - 2)}

    ga, gb = grams(a), grams(b)
    return len(ga & gb) / len(ga | gb) if ga and gb else 0.0


def units_of(result: LambdaResult) -> list:
    return [(u.label, u.token_start, u.token_end, u.per_token) for u in result.units]


def in_order(result: LambdaResult) -> list:
    """The result's units in the order of the context (they are kept largest τ_u first)."""
    assert [u.influence for u in result.units] == sorted((u.influence for u in result.units), reverse=True)
    return sorted(result.units, key=lambda u: u.char_start)


def score(backend, example, **kw):
    s = {"lambdas": (1.0, 0.5), "null_ablations": 0, **kw}
    scorer = InfluenceScorer(backend, "qa", InfluenceSettings(**s))
    return scorer, scorer.score(example)


# ----- cutting a context into units -------------------------------------------------------------


@given(
    st.lists(word_runs | st.sampled_from(["", "  "]), min_size=2, max_size=5),
    st.sampled_from([None, "\n\n", "\n---\n", " | "]),
)
def test_passages_are_the_records_passages_at_their_characters(passages, separator):
    """Each non-empty passage of the record is a unit at its characters, numbered by its place in
    the record (an empty one, which a retriever may return, is skipped without renumbering the rest)."""
    assume(sum(bool(p.strip()) for p in passages) >= 2)
    context = (separator or "\n\n").join(passages)
    units = split_units("passage", context, passages, separator)
    expected = [(f"passage {i}", p.strip()) for i, p in enumerate(passages, 1) if p.strip()]
    assert [(u.label, u.text) for u in units] == expected
    assert all(context[u.char_start : u.char_end] == u.text for u in units)


def test_without_passages_a_context_is_split_at_blank_lines():
    context = "First passage.\nStill first.\n\n  \nSecond one.\n \nThird."
    texts = [u.text for u in split_units("passage", context)]
    assert texts == ["First passage.\nStill first.", "Second one.", "Third."]
    assert [u.label for u in split_units("passage", "A.\n\n\n\nB.")] == ["passage 1", "passage 2"]  # one gap
    with pytest.raises(DataError, match="at least two passages"):
        split_units("passage", "one passage only.\nno blank line")


def test_sentences_in_several_languages():
    context = "Dr. Smith takes losartan. He lives in Ohio!\n\nDie Ärztin heilt. 東京は大きい。次の文。"
    units = split_units("sentence", context, language="de")
    assert [u.text for u in units] == [
        "Dr. Smith takes losartan.",
        "He lives in Ohio!",
        "Die Ärztin heilt.",
        "東京は大きい。",
        "次の文。",
    ]
    assert all(context[u.char_start : u.char_end] == u.text for u in units)


PROBES = (
    "Dr. Smith met Prof. Jones at 5 p.m. today. He said: no! Then he left… Was it ok? Yes.\n\n"
    "Das ist z. B. ein Test, bzw. Nr. 5 geht weiter. Sr. García llegó a las 3 p. m. ayer. "
    "Il est arrivé à 10 h. M. Dupont est là. Это т. е. пример. Он ушёл в 5 ч. вечера.\n\n"
    "東京は大きい。次の文！ यह एक वाक्य है। दूसरा वाक्य। هذه جملة. وهذه أخرى؟ Ավարտ։ Նոր նախադասություն։"
)
"""Text on which sentencex's rule sets differ (abbreviations, scripts, terminators)."""


@pytest.mark.parametrize("code", sorted(SENTENCE_LANGUAGES))
def test_every_sentence_language_segments_as_the_rules_it_is_listed_under(code):
    """The list against the installed sentencex: each code segments the probes exactly as the rules
    it is listed under."""
    rules = SENTENCE_LANGUAGES[code]
    assert sentencex.segment(code, PROBES) == sentencex.segment(rules, PROBES)


def test_sentence_rules_differ_from_english_where_the_probes_can_tell():
    """The probes tell most rule sets from English, so the test above is not vacuous; and an unknown
    code segments as English does (why it is refused)."""
    english = sentencex.segment("en", PROBES)
    differ = [r for r in SENTENCE_RULES if r != "en" and sentencex.segment(r, PROBES) != english]
    assert {"de", "fr", "es", "it", "nl", "pt", "ru", "hy"} <= set(differ) and len(differ) >= 15, differ
    for unknown in ("xx", "de-DE", "zh", "", "12"):
        assert sentencex.segment(unknown, PROBES) == english
        with pytest.raises(InvalidParameter, match="not one of the sentencex"):
            check_sentence_language(unknown)
        with pytest.raises(InvalidParameter, match="not one of the sentencex"):
            InfluenceSettings(unit="sentence", sentence_language=unknown)
        with pytest.raises(InvalidParameter, match="not one of the sentencex"):
            split_units("sentence", "One. Two.", language=unknown)


def test_the_documented_sentence_languages_are_the_list():
    """docs/scoring.md#sentence-languages shows SENTENCE_RULES, row by row."""
    page = (Path(__file__).parents[3] / "docs" / "scoring.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z]+)` \([A-Za-z]+\) \| (.*) \|$", page, re.MULTILINE)
    assert {rules: tuple(re.findall(r"`([^`]+)`", codes)) for rules, codes in rows} == SENTENCE_RULES


def test_another_sentencex_release_is_refused(monkeypatch):
    import ctxlite.influence.units as units

    monkeypatch.setattr(units, "version", lambda name: "1.0.99")
    units.check_sentencex.cache_clear()
    try:
        with pytest.raises(InvalidParameter, match="sentencex 1.0.99 is installed.*sentencex==1.0.32"):
            split_units("sentence", "One. Two.", language="en")
    finally:
        units.check_sentencex.cache_clear()
    assert SENTENCEX_VERSION == "1.0.32"


def test_fields_are_name_value_lines():
    context = "Name: Alice Smith\nMRN: 4411-2233\nfree text without a colon\nDiagnosis:  hypertension  \n"
    units = split_units("field", context)
    assert [(u.label, u.text) for u in units] == [
        ("Name", "Name: Alice Smith"),
        ("MRN", "MRN: 4411-2233"),
        ("Diagnosis", "Diagnosis:  hypertension"),
    ]
    with pytest.raises(DataError, match="Name: value"):
        split_units("field", "no fields here")


@pytest.mark.parametrize(
    "spans, message",
    [
        (None, "needs a record field"),
        ([], "needs a record field"),
        ([[0, 99, "x"]], "not a non-empty range"),
        ([[3, 3, "x"]], "not a non-empty range"),
        ([[-1, 2]], "not a non-empty range"),
        ([[0, 5, "a"], [4, 8, "b"]], "overlap"),
        ([[0, "5"]], "integer start and end"),
        ([[0, 5, 7]], "integer start and end"),
        ([7], "integer start and end"),
    ],
)
def test_bad_spans_are_refused(spans, message):
    with pytest.raises(DataError, match=message):
        split_units("span", "Alice Smith lives in Ohio.", spans=spans)


def test_a_url_is_not_a_field_name():
    """The issue's reproducer: 'See http://…' became a field named 'See http' (the scheme's colon read
    as a name's); a field whose value is a URL keeps its own name."""
    context = (
        "Name: Alice Smith\nSee http://example.com/records/4411 for more\nhttps://example.org/x\nWeb: http://a.b/c\n"
    )
    units = split_units("field", context)
    assert [(u.label, u.text) for u in units] == [("Name", "Name: Alice Smith"), ("Web", "Web: http://a.b/c")]
    with pytest.raises(DataError, match="Name: value"):
        split_units("field", "See http://example.com for details")


@pytest.mark.parametrize(
    "span, message",
    [
        ([5, 6, "GAP"], r"span 0 \[5, 6\) holds only whitespace"),
        ([5, 6], r"span 0 \[5, 6\) holds only whitespace"),
        ([0, 5, ""], "span 0 has an empty label"),
        ([0, 5, "  "], "span 0 has an empty label"),
    ],
    ids=["whitespace", "whitespace-unlabelled", "empty-label", "blank-label"],
)
def test_a_span_without_text_or_label_is_refused_naming_the_line(tmp_path, span, message):
    """A whitespace-only span (nothing to remove but a separator) and an empty label (a unit no
    table, gate or pair note can name) were accepted; refused as data, naming file and line."""
    from ctxlite.influence.dataset import load_examples

    good = {"id": "a", "context": "Alice Smith lives in Ohio.", "query": "Who?", "spans": [[0, 11, "PERSON"]]}
    bad = {**good, "id": "b", "spans": [[12, 17, "VERB"], span]}
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=f"{re.escape(str(p))}:2: .*{message.replace('span 0', 'span 1')}"):
        load_examples(p)
    with pytest.raises(DataError, match=message):
        split_units("span", good["context"], spans=[span])


def test_a_context_that_is_not_the_join_of_its_passages_is_refused():
    with pytest.raises(DataError, match="not the join"):
        Example(context="a\n\nb", passages=("a", "c"))


@given(st.data())
def test_token_mapping_covers_each_unit_with_the_fewest_whole_tokens(data):
    backend = FakeBackend(seed=3)
    context = data.draw(st.lists(word_runs, min_size=1, max_size=4).map(", ".join))
    a = data.draw(st.integers(0, len(context) - 1))
    b = data.draw(st.integers(a + 1, len(context)))
    assume(context[a:b].strip())  # a whitespace-only span is refused
    chars = backend.char_cover(backend.tokenize(context))
    (tu,) = to_tokens(split_units("span", context, spans=[[a, b, "x"]]), chars)
    assert tu.removed_start <= a and b <= tu.removed_end  # every character of the unit is removed
    # no token more than needed: the one before ends before the unit (and is no part of its first
    # character, an empty span at a), the one after starts at its end or later
    before = chars[tu.token_start - 1] if tu.token_start else (0, 0)
    assert before[1] <= a and (tu.token_start == 0 or before != (a, a))
    assert tu.token_end == len(chars) or chars[tu.token_end][0] >= b
    assert tu.snapped == ((tu.removed_start, tu.removed_end) != (a, b))


@given(st.data())
def test_a_unit_is_removed_with_every_byte_of_its_characters_whatever_the_token_cuts(data):
    """Tokens cut the text's UTF-8 bytes anywhere (byte-level BPE: ``" \\xe2"`` then the rest of
    ``"☕"``): the removal is exactly the tokens holding any byte of the unit's characters (the
    reference counts bytes), and it is reported snapped unless those tokens hold the unit's
    characters and no other's bytes."""
    text = data.draw(st.text(st.sampled_from("ab ☕é中\n"), min_size=1, max_size=12))
    raw = text.encode()
    cuts = sorted(data.draw(st.sets(st.integers(1, len(raw) - 1), max_size=len(raw))) if len(raw) > 1 else [])
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)])]
    a = data.draw(st.integers(0, len(text) - 1))
    b = data.draw(st.integers(a + 1, len(text)))
    assume(text[a:b].strip())  # a whitespace-only span is refused
    (tu,) = to_tokens(
        split_units("span", text, spans=[[a, b, "x"]]), char_cover_of(pieces.__getitem__, range(len(pieces)))
    )
    lo, hi = len(text[:a].encode()), len(text[:b].encode())  # the unit's bytes
    starts = [sum(map(len, pieces[:i])) for i in range(len(pieces) + 1)]
    hold = [i for i in range(len(pieces)) if starts[i] < hi and starts[i + 1] > lo]
    assert (tu.token_start, tu.token_end) == (hold[0], hold[-1] + 1)
    removed = raw[starts[hold[0]] : starts[hold[-1] + 1]]
    exact = removed == raw[lo:hi]
    assert tu.snapped == (not exact)
    if not exact:  # the reported characters are every one the removal takes bytes of
        chars_of = [len(raw[:i].decode(errors="ignore")) for i in range(len(raw) + 1)]  # whole chars before byte i
        first = chars_of[starts[hold[0]]]
        last = len(raw[: starts[hold[-1] + 1]].decode(errors="replace"))
        assert (tu.removed_start, tu.removed_end) == (first, last)


# ----- τ_u against the reference ----------------------------------------------------------------


@settings(max_examples=25)
@given(st.lists(word_runs, min_size=2, max_size=4), st.sampled_from([1.0, 0.5, 1.5]), st.integers(0, 2**16))
def test_passage_influence_equals_the_from_scratch_reference(passages, lam, seed):
    backend = FakeBackend(seed=seed)
    context = "\n\n".join(passages)
    example = Example(context=context, query="Who?", response=passages[0], passages=passages, id="p")
    scorer, result = score(backend, example, lambdas=(lam,), unit="passage")
    (r,) = result.results
    assert [u.text for u in in_order(r)] == [p.strip() for p in passages]
    np.testing.assert_allclose(
        [u.influence for u in in_order(r)], reference_tau(backend, scorer, example, lam), 1e-6, 1e-4
    )
    pairs = {tuple(sorted((u.label, u.partner))) for u in r.units if u.partner is not None}
    assert r.ngrams == [] and r.search.ablations == len(passages) + len(pairs) + len(r.clusters)


@settings(max_examples=25)
@given(st.data())
def test_span_influence_on_generated_layouts_equals_the_reference_and_reuse_equals_exact(data):
    """Spans of unequal length, anywhere (snapped to tokens, neighbours sharing a token after
    snapping): the reuse path in decreasing split order equals a decode from scratch bit for bit."""
    context = data.draw(st.lists(word_runs, min_size=2, max_size=5).map(". ".join))
    cuts = sorted(data.draw(st.sets(st.integers(0, len(context)), min_size=2, max_size=8)))
    spans = [[a, b, f"s{i}"] for i, (a, b) in enumerate(zip(cuts, cuts[1:])) if data.draw(st.booleans()) or i == 0]
    spans = [s for s in spans if context[s[0] : s[1]].strip()]  # a whitespace-only span is refused
    assume(spans)
    example = Example(context=context, query="What?", response=context[: len(context) // 2 + 1], spans=spans, id="s")
    backend = FakeBackend(seed=data.draw(st.integers(0, 2**16)))
    scorer, reuse = score(backend, example, unit="span")
    _, exact = score(backend, example, unit="span", exact=True)
    assert [units_of(r) for r in reuse.results] == [units_of(r) for r in exact.results]
    for r in reuse.results:
        assert [u.label for u in in_order(r)] == [s[2] for s in spans]
        np.testing.assert_allclose(
            [u.influence for u in in_order(r)], reference_tau(backend, scorer, example, r.lam), 1e-6, 1e-4
        )


def test_units_get_a_noise_floor_and_round_trip_their_log_form():
    passages = ["Alice Smith takes losartan daily.", "Bob Jones lives in Ohio.", "The weather is mild."]
    example = Example(
        context="\n\n".join(passages), query="What does Alice take?", response="losartan", passages=passages, id="a"
    )
    _, result = score(FakeBackend(seed=7, tiling_noise=0.05), example, unit="passage", null_ablations=2)
    for r in result.results:
        assert r.noise_floor is not None and r.noise_floor.max > 0
        assert all(u.above_noise is not None for u in r.units)
        assert r.units[0].text == passages[0]  # the passage the response copies ranks first
        assert LambdaResult.from_dict(r.to_dict()).to_dict() == r.to_dict()
        assert r.to_dict()["units"][0]["kind"] == "passage"


def test_a_generated_response_is_scored_over_units():
    example = Example(context="Name: Alice Smith\nMRN: 4411\nCity: Ohio", query="Who?", id="g")
    _, result = score(FakeBackend(seed=7), example, unit="field", epsilons=(2.0,))
    assert all(r.generated and [u.label for u in in_order(r)] == ["Name", "MRN", "City"] for r in result.results)


def test_an_epsilon_bounded_units_tau_is_at_the_lambdas_the_generation_used_on_d():
    """docs/scoring.md#influence-under-ε: τ_u of an ε-bounded response mixes D and D ∖ u with the same
    λ_t*, the generation's on D, equal to a from-scratch reference; not the mechanism's own leave-one-out,
    whose λ_t* on D ∖ u (from max |pmi_{D∖u}|) differs here, and so does the τ it would give."""
    passages = [COPIED, "The clinic opens at nine.", "Parking is free on Sundays."]
    example = Example(context="\n\n".join(passages), query="What does Dana take?", passages=passages, id="e")
    lam, eps = 1.5, 1.0
    sampling = SamplingSettings(max_new_tokens=12, min_new_tokens=0, seed=3)
    T = sampling.temperature
    backend = FakeBackend(seed=2, induction=4.0)
    s = InfluenceSettings(lambdas=(lam,), unit="passage", epsilons=(eps,), null_ablations=0, sampling=sampling)
    scorer = InfluenceScorer(backend, "qa", s)
    (r,) = scorer.score(example).results
    steps = np.asarray(r.generation.step_lambdas)
    assert steps.min() < lam  # the bound bit
    enc, y = scorer.encode(example), list(r.response_ids)
    t = np.arange(len(y))

    def log_softmax(z):
        z = z - z.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))

    def rows(prompt):
        return backend.logits_rows(prompt + y, len(prompt)).astype(np.float64)

    l0 = rows(enc.without_context)
    base = log_softmax((steps[:, None] * rows(enc.with_context) + (1 - steps[:, None]) * l0) / T)[t, y]
    own = []
    for u in scorer.units(example, enc):
        lu = rows(enc.prefix + enc.context[: u.token_start] + enc.context[u.token_end :] + enc.suffix)
        fixed = log_softmax((steps[:, None] * lu + (1 - steps[:, None]) * l0) / T)[t, y]
        (got,) = [v for v in r.units if v.label == u.unit.label]
        assert got.influence == pytest.approx(float(np.abs(base - fixed).sum()), rel=1e-6, abs=1e-4)
        pmi = np.abs(log_softmax(lu / T) - log_softmax(l0 / T)).max(axis=1)
        mine = np.minimum(lam, eps / (2 * pmi))  # the λ_t* the mechanism would use on D ∖ u
        mixed = log_softmax((mine[:, None] * lu + (1 - mine[:, None]) * l0) / T)[t, y]
        own.append((float(np.abs(mine - steps).max()), float(np.abs(base - mixed).sum()), got.influence))
    assert any(dl > 1e-3 and abs(mech - tau) > 1e-3 for dl, mech, tau in own), own


def test_unit_settings_are_checked():
    with pytest.raises(InvalidParameter, match="unit must be one of"):
        InfluenceSettings(unit="paragraph")
    with pytest.raises(InvalidParameter, match="no finer units to descend into"):
        InfluenceSettings(unit="field", search="adaptive")
    with pytest.raises(InvalidParameter, match="no context sizes"):
        InfluenceSettings(unit="sentence", context_sizes=(8,))


def test_a_bad_unit_layout_names_the_example():
    context = "Alice Smith lives in Ohio."
    with pytest.raises(DataError, match="example e1: span 0"):
        Example(context=context, query="Who?", response="Alice", spans=[[0, 40, "x"]], id="e1")
    example = Example(context=context, query="Who?", response="Alice", id="e2")
    with pytest.raises(DataError, match="example e2: unit span needs a record field"):
        score(FakeBackend(seed=7), example, unit="span")


class ReusesOneCellTooMany(FakeBackend):
    """A prefix reuse off by one: it keeps the first cell the variant does not share with the base."""

    def _reuse_from(self, shared: int) -> int:
        return min(super()._reuse_from(shared) + 1, len(self._cells))


def test_a_broken_prefix_reuse_is_caught_over_units():
    """The reuse == exact check above has teeth for units of unequal length too."""
    example = Example(context="Alice Smith. Lives in Ohio and is 54.", query="Who?", response="Alice", id="b")
    backend = ReusesOneCellTooMany(seed=7)
    reuse, exact = (score(backend, example, unit="sentence", exact=e)[1] for e in (False, True))
    assert [units_of(r) for r in reuse.results] != [units_of(r) for r in exact.results]


# ----- near-duplicate units: removed together ---------------------------------------------------


def pairs_of(result: LambdaResult) -> list:
    return [(u.partner, u.similarity, u.pair_influence) if u.partner else None for u in in_order(result)]


@settings(max_examples=25)
@given(st.data())
def test_near_duplicate_pairs_equal_the_reference_and_reuse_equals_exact(data):
    """Passage layouts with planted copies (verbatim, or edited by a word): each unit's partner,
    similarity and τ_pair equal the brute-force reference, and the reuse path with two-range
    removals equals a decode from scratch bit for bit."""
    distinct = data.draw(st.lists(word_runs, min_size=1, max_size=3))
    passages = list(distinct)
    for _ in range(data.draw(st.integers(1, 2))):
        copy = data.draw(st.sampled_from(distinct))
        if data.draw(st.booleans()):
            copy += " " + data.draw(st.sampled_from(WORDS))
        passages.insert(data.draw(st.integers(0, len(passages))), copy)
    threshold = data.draw(st.sampled_from([0.5, 0.3, 1.0, None]))
    example = Example(context="\n\n".join(passages), query="Who?", response=passages[-1], passages=passages, id="d")
    backend = FakeBackend(seed=data.draw(st.integers(0, 2**16)))
    scorer, reuse = score(backend, example, unit="passage", duplicate_threshold=threshold)
    _, exact = score(backend, example, unit="passage", duplicate_threshold=threshold, exact=True)
    assert [pairs_of(r) for r in reuse.results] == [pairs_of(r) for r in exact.results]
    assert [r.clusters for r in reuse.results] == [r.clusters for r in exact.results]
    assert [units_of(r) for r in reuse.results] == [units_of(r) for r in exact.results]
    for r in reuse.results:
        want = reference_tau(backend, scorer, example, r.lam, pairs=True)
        got = pairs_of(r)
        assert [g and g[:2] for g in got] == [w and (w[0], pytest.approx(w[1])) for w in want]
        np.testing.assert_allclose([g[2] for g in got if g], [w[2] for w in want if w], 1e-6, 1e-4)
        texts = [u.text for u in in_order(r)]
        want_clusters = [[in_order(r)[i].label for i in m] for m, _ in clusters(texts, threshold)]
        assert [c.units for c in r.clusters] == want_clusters
        for c in r.clusters:
            want_tau = reference_cluster_tau(backend, scorer, example, r.lam, c.units)
            assert c.influence == pytest.approx(want_tau, 1e-6, 1e-4)
        assert LambdaResult.from_dict(r.to_dict()).to_dict() == r.to_dict()


def test_a_verbatim_copy_is_found_and_removed_with_its_original():
    passages = ["Alice Smith takes losartan daily.", "Bob Jones lives in Ohio.", "Alice Smith takes losartan daily."]
    example = Example(
        context="\n\n".join(passages), query="What does Alice take?", response="losartan", passages=passages, id="c"
    )
    _, result = score(FakeBackend(seed=7), example, unit="passage")
    for r in result.results:
        by = {u.label: u for u in r.units}
        assert (by["passage 1"].partner, by["passage 3"].partner, by["passage 2"].partner) == (
            "passage 3",
            "passage 1",
            None,
        )
        assert by["passage 1"].similarity == 1.0 and by["passage 1"].pair_influence == by["passage 3"].pair_influence
        assert r.search.ablations == 4  # three units and one pair, run once for both
        assert "partner" not in r.to_dict()["units"][-1] or r.to_dict()["units"][-1]["partner"]
    _, off = score(FakeBackend(seed=7), example, unit="passage", duplicate_threshold=None)
    assert all(u.partner is None for r in off.results for u in r.units) and off.results[0].search.ablations == 3


def test_repeated_labels_are_named_apart_so_a_partner_is_the_right_unit():
    """A detector's PERSON on two names, each twice: the four spans are named apart by their
    characters, and each one's near-duplicate partner (named by label) is its own copy, which the
    gate's pair points at (with one label, the first other PERSON was taken: 150 with 0)."""
    context = "Jane Smith saw a doctor. Tom Brandt saw a nurse. Jane Smith left. Tom Brandt stayed."
    at = [context.index("Jane"), context.index("Tom"), context.rindex("Jane"), context.rindex("Tom")]
    spans = tuple((a, a + 10, "PERSON") for a in at)
    example = Example(context=context, query="Who?", response="Jane Smith", spans=spans, id="s")
    _, result = score(FakeBackend(seed=5), example, unit="span")
    for r in result.results:
        by = {u.label: u for u in r.units}
        assert sorted(by) == sorted(f"PERSON ({a}–{a + 10})" for a in at)
        for u in r.units:
            partner = by[u.partner]
            assert partner is not u and context[partner.char_start : partner.char_end] == u.text
        pairs = pair_removals(r)
        assert pairs and all(p.partner is not None and p.partner.text == p.unit.text for p in pairs)
    with pytest.raises(DataError, match="names two units"):  # a given label equal to a name given apart
        split_units("span", "a" * 30, spans=[[0, 5, "X"], [10, 15, "X"], [20, 25, "X (0–5)"]])
    fields = split_units("field", "Name: Ana\nMedication: x\nMedication: y")
    assert [u.label for u in fields] == ["Name", "Medication (10–23)", "Medication (24–37)"]


def test_the_duplicate_threshold_is_checked():
    for bad in (0, -0.1, 1.5, "x"):
        with pytest.raises(InvalidParameter, match="duplicate_threshold"):
            InfluenceSettings(unit="passage", duplicate_threshold=bad)


# ----- the gate reads τ_pair like τ_u -----------------------------------------------------------

COPIED = "Dana Whitcombe takes lisinopril daily for her blood pressure."


def copied_twice() -> tuple[LambdaResult, ExampleResult]:
    """A passage and its verbatim copy that the response repeats: each copy's τ_u is small beside
    τ_pair, the two removed together (measured noise floor: the fake's tiling noise)."""
    passages = [COPIED, "The clinic opens at nine.", COPIED]
    example = Example(context="\n\n".join(passages), query="What?", response=COPIED[:37], passages=passages, id="dup")
    _, rec = score(FakeBackend(seed=0, tiling_noise=0.05), example, lambdas=(1.0,), unit="passage", null_ablations=2)
    return rec.results[0], rec


def test_the_gate_fails_on_a_pair_that_moves_the_response_beyond_the_budget():
    """Each copy's τ_u + floor within the budget, τ_pair − floor beyond it: fail, naming the pair."""
    r, rec = copied_twice()
    floor = r.noise_floor.max
    units_high = max(u.influence for u in r.units) + floor
    tau_pair = r.units[0].pair_influence
    assert tau_pair - floor > units_high + 1  # the planted duplicate hides from leave-one-out
    budget = (units_high + tau_pair - floor) / 2
    (case,) = influence_cases([("dup", rec)], budget)
    assert case.outcome is Outcome.FAIL, case.message
    assert "τ_pair" in case.message and "near-duplicate" in case.message
    assert "passage 1" in case.message and "passage 3" in case.message


def test_a_pair_within_its_floor_of_the_budget_is_inconclusive_and_beyond_it_passes():
    r, rec = copied_twice()
    floor, tau_pair = r.noise_floor.max, r.units[0].pair_influence
    (case,) = influence_cases([("dup", rec)], tau_pair)  # τ_pair − floor ≤ budget < τ_pair + floor
    assert case.outcome is Outcome.INCONCLUSIVE and "τ_pair" in case.message, case.message
    (case,) = influence_cases([("dup", rec)], tau_pair + floor + 0.01)
    assert case.outcome is Outcome.PASS, case.message


def test_a_pair_is_flagged_against_the_noise_floor_like_a_unit():
    r, _ = copied_twice()
    floor = r.noise_floor.max
    for u in r.units:
        assert u.pair_above_noise == (None if u.partner is None else u.pair_influence > floor)
    assert r.units[0].pair_above_noise is True
    assert LambdaResult.from_dict(r.to_dict()).to_dict() == r.to_dict()
    _, rec = score(FakeBackend(seed=0), Example(**_copied_example()), unit="passage", null_ablations=0)
    assert all(u.pair_above_noise is None for r in rec.results for u in r.units)  # no floor measured
    # copies the response does not repeat: each copy within the floor, the pair above it
    passages = [COPIED, "Parking is free on Sundays and the clinic opens at nine.", COPIED]
    example = Example(context="\n\n".join(passages), query="What?", response="Parking", passages=passages)
    _, rec = score(FakeBackend(seed=0, tiling_noise=0.05), example, lambdas=(1.0,), unit="passage", null_ablations=2)
    (r,) = rec.results
    copies = [u for u in r.units if u.partner is not None]
    assert [(u.above_noise, u.pair_above_noise) for u in copies] == [(False, True)] * 2


def _copied_example() -> dict:
    passages = [COPIED, "The clinic opens at nine.", COPIED]
    return {"context": "\n\n".join(passages), "query": "What?", "response": COPIED[:37], "passages": passages}


# ----- a fact stated three times: clusters of near-duplicates -----------------------------------


class SeesAFactOnce(FakeBackend):
    """The fake's induction head asking only *whether* a continuation occurs earlier in the prompt,
    not how often (min(c, 1) for c), and no position hash: the rows after a prompt with one copy of a
    passage equal those after three, so removing one or two of three copies moves nothing, and
    removing all three moves what the response copied (the issue's case, built)."""

    def _rows(self, cells, lo, hi, tiling=None):
        toks = np.asarray(cells, dtype=np.int64)
        hashes = np.cumsum((toks + 1) * self._weights[: len(toks)]) % (2**31)
        out = np.empty((hi - lo, len(self._bigram)))
        for i in range(lo, hi):
            seen = np.zeros(len(self._bigram), dtype=bool)
            for k in (1, 2, 3):
                if i < k:
                    break
                match = np.ones(i - (k - 1), dtype=bool)
                for d in range(k):
                    match &= toks[k - 1 - d : i - d] == toks[i - d]
                seen[toks[k : i + 1][match]] = True
            out[i - lo] = self._bigram[toks[i]] + self.induction * seen * np.log(2)
            if tiling is not None and self.tiling_noise:
                bucket = (hashes[i] + 7919 * tiling.offset + 104729 * tiling.batch) % len(self._hashed)
                out[i - lo] += self.tiling_noise * self._hashed[bucket]
        return out.astype(np.float32)


THRICE = ["The clinic opens at nine.", COPIED, "Parking is free on Sundays.", COPIED, COPIED]
"""The issue's layout [P1, P2, P3, P2, P2]: the fact the response repeats, stated three times."""


def stated_three_times(**kw) -> ExampleResult:
    example = Example(context="\n\n".join(THRICE), query="What?", response=COPIED[:37], passages=THRICE, id="x3")
    backend = SeesAFactOnce(seed=0, tiling_noise=0.01, hash_weight=0.0, induction=4.0)
    return score(backend, example, **{"lambdas": (1.0,), "unit": "passage", "null_ablations": 2, **kw})[1]


def test_a_fact_stated_three_times_is_removed_whole_and_the_gate_does_not_pass():
    """Every copy's τ_u and every pair's τ_pair is 0 (a copy is always left), every τ_u + floor is
    within the budget, and the three copies removed together move the response by far more than it:
    the case fails on τ_cluster (it passed on the units and pairs alone: 'pass', largest τ_u + floor
    5.48 nats of a budget of 10, before clusters)."""
    rec = stated_three_times()
    (r,) = rec.results
    copies = ["passage 2", "passage 4", "passage 5"]
    assert all(u.influence == 0 for u in r.units if u.label in copies)
    assert all(u.pair_influence == 0 for u in r.units if u.partner is not None)
    floor, budget = r.noise_floor.max, 10.0
    assert max(u.influence for u in r.units) + floor < budget  # units and pairs alone would pass
    (cluster,) = r.clusters
    assert (cluster.units, cluster.similarity) == (copies, 1.0)
    assert cluster.influence - floor > 5 * budget and cluster.above_noise is True
    assert r.search.ablations == 5 + 2 + 1  # five passages, the pairs (2, 4) and (2, 5), the cluster
    (case,) = influence_cases([("x3", rec)], budget)
    assert case.outcome is Outcome.FAIL, case.message
    assert "τ_cluster" in case.message and all(repr(c) in case.message for c in copies)
    assert COPIED not in case.message  # positions and labels, never the private text
    assert LambdaResult.from_dict(r.to_dict()).to_dict() == r.to_dict()


AROUND = [
    "Front desk memo from Monday, please read carefully before the shift. {}",
    "{} Shredded copies go in the blue bin next to the printer upstairs.",
    "Archived note, second floor cabinet, drawer three, folder marked green: {} End of archived note here.",
]
"""Three passages that differ around a copied fact (pairwise similarity ~0.2: no near-duplicates)."""


@pytest.mark.parametrize("copies", [2, 3])
def test_a_fact_copied_into_passages_that_differ_is_removed_whole(copies):
    """A review's case: the fact inside passages that are not near-duplicates formed no pair or
    cluster, each copy's τ_u stayed small, and the gate at 10 nats said 'pass' while removing the
    copies together moves the response by ~85 nats. They share SHARED_RUN words in a row: one
    cluster, whose τ is the reference removal's, and the gate fails on it."""
    around = [a.format(COPIED) for a in AROUND[:copies]]
    passages = ["The clinic opens at nine.", around[0], "Parking is free on Sundays.", *around[1:]]
    labels = [f"passage {i + 1}" for i, p in enumerate(passages) if COPIED in p]
    example = Example(context="\n\n".join(passages), query="What?", response=COPIED[:37], passages=passages, id="x")
    backend = SeesAFactOnce(seed=0, tiling_noise=0.01, hash_weight=0.0, induction=4.0)
    scorer, rec = score(backend, example, lambdas=(1.0,), unit="passage", null_ablations=2)
    (r,) = rec.results
    assert all(u.partner is None for u in r.units)  # no near-duplicates
    (cluster,) = r.clusters
    assert cluster.units == labels and cluster.similarity < 0.5
    want = reference_cluster_tau(backend, scorer, example, 1.0, labels)
    assert cluster.influence == pytest.approx(want, rel=1e-6, abs=1e-4) and want > 50
    (case,) = influence_cases([("x", rec)], 10.0)
    assert case.outcome is Outcome.FAIL and "τ_cluster" in case.message, case.message


def test_a_cluster_equals_the_reference_removal_and_reuse_equals_exact():
    """τ_cluster is the from-scratch decode without the three copies' tokens, and prefix reuse with
    a three-range removal equals --exact bit for bit."""
    backend = SeesAFactOnce(seed=3, hash_weight=0.0, induction=4.0)
    example = Example(context="\n\n".join(THRICE), query="What?", response=COPIED[:37], passages=THRICE, id="x3")
    scorer, reuse = score(backend, example, unit="passage")
    _, exact = score(backend, example, unit="passage", exact=True)
    assert [r.clusters for r in reuse.results] == [r.clusters for r in exact.results]
    for r in reuse.results:
        (cluster,) = r.clusters
        want = reference_cluster_tau(backend, scorer, example, r.lam, ["passage 2", "passage 4", "passage 5"])
        assert cluster.influence == pytest.approx(want, rel=1e-6, abs=1e-4) and want > 10


def test_a_log_whose_partners_join_three_units_never_removed_together_is_inconclusive():
    """A log written before clusters: its partners join three copies, no cluster holds them, and
    every τ_u and τ_pair is within the budget: not a pass."""
    rec = stated_three_times()
    old = ExampleResult.from_dict(rec.to_dict())
    for r in old.results:
        r.clusters = []
    (case,) = influence_cases([("x3", old)], 10.0)
    assert case.outcome is Outcome.INCONCLUSIVE, case.message
    assert "never removed together" in case.message and "'passage 5'" in case.message


def reference_share_a_run(a: str, b: str, n: int = SHARED_RUN) -> bool:
    """Whether ``a`` and ``b`` hold the same ``n`` words in a row (lowercased), by comparing every window."""
    wa, wb = (re.findall(r"\w+", t.lower()) for t in (a, b))
    return any(wa[i : i + n] == wb[j : j + n] for i in range(len(wa) - n + 1) for j in range(len(wb) - n + 1))


@settings(max_examples=200)
@given(
    st.lists(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=6).map(" ".join), max_size=7)
    | st.lists(st.lists(st.sampled_from(["a", "b"]), min_size=6, max_size=14).map(" ".join), max_size=6),
    st.sampled_from([0.2, 0.5, 1.0, None]),
)
def test_clusters_are_the_components_of_the_similarity_graph(texts, threshold):
    """Against a brute-force reference: the connected components of texts at least the threshold
    similar or sharing SHARED_RUN words in a row (chains included: reached by a walk over near
    pairs), of three or more, or of two not near-duplicates (a shared run alone), in the order of
    their first member, with the smallest similarity of two members; none when off."""
    n = len(texts)
    want = []
    if threshold is not None:
        sim = [[reference_similarity(a, b) for b in texts] for a in texts]
        linked = [
            [sim[i][j] >= threshold or reference_share_a_run(texts[i], texts[j]) for j in range(n)] for i in range(n)
        ]
        near = [[j for j in range(n) if j != i and linked[i][j]] for i in range(n)]
        seen: set[int] = set()
        for start in range(n):
            if start in seen:
                continue
            comp, todo = set(), [start]
            while todo:
                i = todo.pop()
                if i not in comp:
                    comp.add(i)
                    todo += near[i]
            seen |= comp
            if len(comp) >= 3 or (len(comp) == 2 and sim[min(comp)][max(comp)] < threshold):
                low = min(reference_similarity(texts[i], texts[j]) for i in comp for j in comp if i < j)
                want.append((tuple(sorted(comp)), pytest.approx(low)))
    assert clusters(texts, threshold) == want


# ----- hierarchical search: passages → sentences → n-grams ----------------------------------------

SENTENCES = st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join), min_size=1, max_size=3)
passage_texts = SENTENCES.map(lambda ss: " ".join(s + "." for s in ss))


def reference_descent(backend, scorer: InfluenceScorer, example: Example, lams) -> dict:
    """The hierarchy, obviously: every τ from a from-scratch decode of the prompt without that unit's
    tokens (``reference_removal``); at each level the unit of largest τ for any λ (first on a tie) is
    descended into; its sentences are sentencex's sentences of its text, mapped onto tokens by
    brute force; the n-grams are the exhaustive grid's windows that share a token with the chosen
    sentence(s) or hold a token the response repeats after the same token. Returns, per λ, the τ
    of every passage, sentence and n-gram measured by label/start, and under "copy_windows" the
    windows measured for a copy source alone."""
    st_ = scorer.settings
    enc = scorer.encode(example)
    chars = backend.char_cover(enc.context)

    def tokens_of(a, b):  # the tokens holding any of the characters [a, b)
        hold = [i for i, (s, e) in enumerate(chars) if (s < b and e > a) or (s == e and a <= s < b)]
        return hold[0], hold[-1] + 1

    def taus(ranges):
        return {lam: [reference_removal(backend, scorer, example, lam, r) for r in ranges] for lam in lams}

    def largest(t):
        return sorted({max(range(len(t[lam])), key=lambda i: (t[lam][i], -i)) for lam in lams})

    units = scorer.units(example, enc)
    unit_tau = taus([(u.token_start, u.token_end) for u in units])
    chosen = [units[i].unit for i in largest(unit_tau)]
    out = {lam: {u.unit.label: unit_tau[lam][i] for i, u in enumerate(units)} for lam in lams}
    if st_.unit == "passage":
        inner = []
        for p in chosen:
            for k, s in enumerate(sentencex.get_sentence_boundaries("en", p.text)):
                body = s["text"].strip()
                if body:
                    a = p.char_start + s["start_index"] + (len(s["text"]) - len(s["text"].lstrip()))
                    inner.append(
                        (
                            f"{p.label} › sentence {len([x for x in inner if x[1] == p.label]) + 1}",
                            p.label,
                            a,
                            a + len(body),
                        )
                    )
        sentence_tau = taus([tokens_of(a, b) for _, _, a, b in inner])
        for lam in lams:
            out[lam].update({label: sentence_tau[lam][i] for i, (label, *_) in enumerate(inner)})
        chosen_ranges = [tokens_of(*inner[i][2:]) for i in largest(sentence_tau)]
    else:
        chosen_ranges = [tokens_of(u.char_start, u.char_end) for u in chosen]
    n, L = st_.ngram, len(enc.context)
    grid = sorted(set(range(0, L - n + 1, st_.window_stride)) | {L - n})
    # copy sources: a context token equal to a response token, after the token the response has before it
    y = scorer.encode_response(enc, example.response)
    copies = copy_source_positions(enc, y) if st_.copy_sources else []
    windows = [
        c for c in grid if any(c < b and c + n > a for a, b in chosen_ranges) or any(c <= i < c + n for i in copies)
    ]
    gram_tau = taus([(c, c + n) for c in windows])
    out["copy_windows"] = [c for c in windows if not any(c < b and c + n > a for a, b in chosen_ranges)]
    for lam in lams:
        out[lam].update({c: gram_tau[lam][i] for i, c in enumerate(windows)})
    return out


def reference_removal(backend, scorer: InfluenceScorer, example: Example, lam: float, token_range) -> float:
    """τ of removing context tokens [a, b), decoded from scratch (as ``reference_tau``)."""
    enc, logp = _reference_logp(backend, scorer, example, lam)
    p, full = len(enc.prefix), enc.with_context
    a, b = token_range
    return float(np.abs(logp(full) - logp(full[: p + a] + full[p + b :])).sum())


def measured(result: LambdaResult) -> dict:
    """Every τ a hierarchical result reports, by unit label or n-gram start."""
    out = {u.label: u.influence for u in result.units}
    out.update({u.label: u.influence for u in result.descent.sentences})
    out.update({g.start: g.influence for g in result.ngrams})
    return out


@settings(max_examples=20, deadline=None)
@given(
    st.lists(passage_texts, min_size=2, max_size=4),
    st.sampled_from(["passage", "sentence"]),
    st.sampled_from([(1.0,), (1.0, 0.5), (1.5,)]),
    st.integers(2, 6),
    st.integers(0, 2**16),
    st.booleans(),
    st.booleans(),
    st.integers(1, 6),
)
def test_every_tau_a_hierarchical_search_reports_is_exhaustive_leave_one_out(
    passages, unit, lams, n, seed, pick, copies, stride
):
    """On generated layouts: the units descended into, and every τ reported at every level (passages,
    sentences, n-grams), equal the slow reference's from-scratch leave-one-out on that unit; the
    reuse path equals --exact; nothing is measured that the rule does not choose."""
    context = "\n\n".join(passages)
    response = passages[1] if pick else passages[0]
    example = Example(context=context, query="Who?", response=response, passages=passages, id="h")
    backend = FakeBackend(seed=seed)
    kw = dict(lambdas=lams, unit=unit, search="adaptive", ngram=n, duplicate_threshold=None, copy_sources=copies)
    kw["stride"] = min(stride, n)  # the grid's windows then overlap
    try:
        scorer, result = score(backend, example, **kw)
    except InvalidParameter:  # an n-gram longer than the context
        return
    _, exact = score(backend, example, exact=True, **kw)
    want = reference_descent(backend, scorer, example, lams)
    copy_windows = want.pop("copy_windows")
    for r, e in zip(result.results, exact.results):
        got = measured(r)
        assert got == measured(e)  # reuse equals a decode from the first token, bit for bit
        assert set(got) == set(want[r.lam])  # exactly what the rule chooses, nothing more
        keys = sorted(got, key=str)
        np.testing.assert_allclose([got[k] for k in keys], [want[r.lam][k] for k in keys], 1e-6, 1e-4)
        assert r.descent.copy_windows == copy_windows
        assert r.descent.windows == len(ngram_starts(scorer.encode(example).context.__len__(), n, kw["stride"]))
        assert all(u.parent == u.label.split(" › ")[0] for u in r.descent.sentences)
        assert LambdaResult.from_dict(r.to_dict()).to_dict() == r.to_dict()


def test_field_and_span_units_have_nothing_to_descend_into():
    for unit in ("field", "span"):
        with pytest.raises(InvalidParameter, match="no finer units to descend into"):
            InfluenceSettings(unit=unit, search="adaptive")
    assert InfluenceSettings(unit="passage", search="adaptive").descends
    assert not InfluenceSettings(unit="passage").descends


def test_a_one_sentence_passage_is_not_removed_twice():
    """The sentence of a one-sentence passage is the same removal: its τ_u is the passage's, and it
    costs no ablation of its own."""
    passages = ["Dana Whitcombe takes lisinopril daily.", "The clinic opens at nine. Parking is free."]
    example = Example(context="\n\n".join(passages), query="What?", response="lisinopril", passages=passages, id="1")
    _, result = score(FakeBackend(seed=2), example, lambdas=(1.0,), unit="passage", search="adaptive", ngram=4)
    (r,) = result.results
    assert r.units[0].label == "passage 1"
    (sentence,) = r.descent.sentences
    assert (sentence.token_start, sentence.token_end) == (r.units[0].token_start, r.units[0].token_end)
    assert sentence.per_token == r.units[0].per_token and sentence.influence == r.units[0].influence
    assert r.search.ablations == len(r.units) + len(r.ngrams)


def test_an_ngram_longer_than_the_context_is_refused_before_any_unit_is_removed(monkeypatch):
    """A hierarchical search ends in n-grams: an n-gram size beyond the context is refused at once,
    not after every passage and sentence has been decoded."""

    def no_ablation(*args, **kwargs):
        raise AssertionError("a unit was removed before the n-gram size was checked")

    monkeypatch.setattr(InfluenceScorer, "_ablate_units", no_ablation)
    passages = ["Alice takes losartan.", "Bob lives in Ohio."]
    example = Example(context="\n\n".join(passages), query="Who?", response="Alice", passages=passages, id="n")
    with pytest.raises(InvalidParameter, match="larger than the context"):
        score(FakeBackend(seed=1), example, unit="passage", search="adaptive", ngram=64)
