"""Tests for n-gram windows (Flemings et al.'s D_{i,n}, here token windows:
ctxlite.influence.ngram_starts) and the
validation in InfluenceSettings / Example."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxlite.errors import DataError, InvalidParameter
from ctxlite.influence.scorer import Example, InfluenceSettings, ngram_starts
from ctxlite.runtime.sampling import SamplingSettings

FAST = settings(max_examples=200, deadline=None)


@st.composite
def length_n_stride(draw, max_len=200):
    length = draw(st.integers(1, max_len))
    n = draw(st.integers(1, length))
    stride = draw(st.integers(1, n))
    return length, n, stride


def covered(starts, n):
    return {t for s in starts for t in range(s, s + n)}


@FAST
@given(length_n_stride())
def test_windows_have_size_n_cover_every_token_and_are_increasing(lns):
    length, n, stride = lns
    starts = ngram_starts(length, n, stride)
    assert starts[0] == 0
    assert all(0 <= s and s + n <= length for s in starts)  # every window is a full n-gram inside D
    assert covered(starts, n) == set(range(length))
    assert starts == sorted(set(starts))  # strictly increasing, no duplicate ablations
    assert starts[-1] == length - n  # the last window ends at the end of D
    # regular stride except (possibly) the final tail window
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert all(g == stride for g in gaps[:-1])
    assert not gaps or 1 <= gaps[-1] <= stride


@FAST
@given(st.integers(1, 300), st.data())
def test_stride_one_gives_every_window(length, data):
    n = data.draw(st.integers(1, length))
    assert ngram_starts(length, n, 1) == list(range(length - n + 1))


@FAST
@given(st.integers(1, 300), st.data())
def test_stride_n_is_disjoint_plus_a_tail_window(length, data):
    n = data.draw(st.integers(1, length))
    starts = ngram_starts(length, n, n)
    full = length // n
    assert starts[:full] == [i * n for i in range(full)]  # disjoint windows
    if length % n:
        assert starts[full:] == [length - n]  # one tail window overlapping the previous one
    else:
        assert len(starts) == full


def test_hand_examples():
    assert ngram_starts(10, 4, 4) == [0, 4, 6]
    assert ngram_starts(8, 4, 4) == [0, 4]
    assert ngram_starts(5, 5, 1) == [0]  # n = |D|: document level
    assert ngram_starts(5, 5, 5) == [0]
    assert ngram_starts(7, 3, 2) == [0, 2, 4]
    assert ngram_starts(8, 3, 2) == [0, 2, 4, 5]


@FAST
@given(st.integers(0, 100), st.integers(1, 50), st.integers(1, 10))
def test_n_larger_than_the_context_is_invalid(length, extra, stride):
    with pytest.raises(InvalidParameter, match="larger than the context"):
        ngram_starts(length, length + extra, stride)


def test_stride_larger_than_n_never_leaves_tokens_unscored():
    try:
        s = InfluenceSettings(ngram=4, stride=8)
    except InvalidParameter:
        return  # rejecting stride > n is one acceptable fix
    starts = ngram_starts(20, s.ngram, s.window_stride)
    assert covered(starts, s.ngram) == set(range(20))


# ---------------------------------------------------------------------------
# InfluenceSettings / Example validation


def test_influence_settings_defaults():
    s = InfluenceSettings()
    assert s.lambdas == (1.0,) and s.ngram == 8 and s.window_stride == 8
    assert InfluenceSettings(ngram=4, stride=1).window_stride == 1
    assert InfluenceSettings(ngram=None).window_stride is None


def test_lambdas_are_normalised_to_a_tuple_of_floats():
    s = InfluenceSettings(lambdas=[0, 1, 1.5])
    assert s.lambdas == (0.0, 1.0, 1.5) and all(type(l) is float for l in s.lambdas)


@pytest.mark.parametrize(
    "kw",
    [
        {"lambdas": ()},
        {"lambdas": (1.0, -0.5)},
        {"lambdas": (float("nan"),)},
        {"lambdas": (float("inf"),)},
        {"epsilons": (0.0,)},
        {"epsilons": (1.0, -1.0)},
        {"epsilons": (float("inf"),)},
        {"epsilons": (None,)},
        {"ngram": 0},
        {"ngram": -3},
        {"stride": 0},
        {"ngram": 4, "stride": -1},
        {"ngram": None, "stride": 2},
        {"null_ablations": -1},
    ],
)
def test_influence_settings_reject_bad_values(kw):
    with pytest.raises(InvalidParameter):
        InfluenceSettings(**kw)


def test_influence_settings_accept_edge_values():
    s = InfluenceSettings(
        lambdas=(0.0,), epsilons=(1e-6,), ngram=1, stride=1, null_ablations=0, sampling=SamplingSettings(top_p=0.5)
    )
    assert s.epsilons == (1e-6,) and s.window_stride == 1


@pytest.mark.parametrize("context", ["", "   ", "\n\t "])
def test_example_with_empty_context_is_a_data_error(context):
    with pytest.raises(DataError, match="ex-7"):
        Example(context=context, id="ex-7")


def test_example_accepts_a_context():
    e = Example(context=" x ", query="q", response=None, source="src", id="a")
    assert e.context == " x " and e.source == "src"


# ---------------------------------------------------------------------------
# spans of scored n-grams on the real model, against independently computed spans


def _windows(length, n, stride):
    """Window starts by plain enumeration: every stride-th start, then a last window ending at the end."""
    starts, c = [], 0
    while c + n <= length:
        starts.append(c)
        c += stride
    if starts[-1] + n != length:
        starts.append(length - n)
    return starts


@pytest.fixture(scope="module")
def engine():
    """One llama.cpp thread: on a shared 2-core machine two threads run ~4x slower."""
    from ctxlite.runtime.engine import Engine, EngineConfig

    eng = Engine(None, EngineConfig(n_threads=1))
    yield eng
    eng.close()


@pytest.mark.model
@pytest.mark.parametrize("which, n, stride, chars", [(0, 8, 8, 230), (1, 8, 8, 230), (0, 5, 3, 120)])
def test_ngram_spans_are_the_removed_tokens(engine, with_response, which, n, stride, chars):
    """Each n-gram's [char_start, char_end) is where tokens [start, start + n) of D sit in D's text:
    the lengths of the decoded prefixes D[:start] and D[:start + n]; its text is those n tokens decoded.
    (The first sentences of each context, 30-60 tokens; with_response[1] has a non-ASCII character.)"""
    from ctxlite.influence.scorer import InfluenceScorer

    d = dict(with_response[which])
    d["context"] = d["context"][: d["context"].index(". ", chars) + 1]
    response = " ".join(d["response"].split()[:3])  # the spans do not depend on it: a short one is cheap
    ex = Example(d["context"], d["query"], response, id=d["id"])
    scorer = InfluenceScorer(engine, "qa", InfluenceSettings(ngram=n, stride=stride, null_ablations=0))
    ctx = scorer.encode(ex).context
    text = engine.detokenize(ctx)
    assert text == d["context"]
    grams = scorer.score(ex).results[0].ngrams
    assert [g.start for g in grams] == _windows(len(ctx), n, stride)
    checked = 0
    for g in grams:
        assert g.n == n
        before, upto = engine.detokenize(ctx[: g.start]), engine.detokenize(ctx[: g.start + n])
        if "\ufffd" in before + upto:  # a character split across the boundary: no clean prefix to measure
            continue
        assert (g.char_start, g.char_end) == (len(before), len(upto)), g.start
        assert g.text == engine.detokenize(ctx[g.start : g.start + n]) == d["context"][len(before) : len(upto)]
        checked += 1
    assert checked >= 0.9 * len(grams)
    # the windows together cover D's text, first character to last
    assert grams[0].char_start == 0 and grams[-1].char_end == len(d["context"])
