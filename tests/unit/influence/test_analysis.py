"""Tests for ctxlite.influence.analysis: position_means and bootstrap_ci against slow
references, bootstrap coverage, and summarize() on hand-made result records."""

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ctxlite.errors import InvalidParameter
from ctxlite.influence import analysis
from ctxlite.influence.analysis import bootstrap_ci, position_means
from ctxlite.influence.noise import NoiseFloor
from ctxlite.influence.regurgitation import Regurgitation
from ctxlite.influence.results import ExampleResult, Generation, LambdaResult, NgramInfluence, Utility
from ctxlite.reporting.terminal import score_table

FAST = settings(max_examples=60, deadline=None)

finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_infinity=False)


# ---------------------------------------------------------------------------
# slow references


def ref_position_means(rows):
    rows = [list(r) for r in rows]
    width = max((len(r) for r in rows), default=0)
    out = []
    for i in range(width):
        vals = [r[i] for r in rows if len(r) > i]
        out.append(sum(vals) / len(vals))
    return out


def exact_bootstrap_cdf(values):
    """Exact distribution of the bootstrap mean: every one of the n^n equally likely resamples."""
    n = len(values)
    means = sorted(sum(values[i] for i in idx) / n for idx in itertools.product(range(n), repeat=n))
    return np.asarray(means)


# ---------------------------------------------------------------------------
# position_means


@FAST
@given(st.lists(st.lists(finite, max_size=8), max_size=8))
def test_position_means_matches_reference_on_ragged_rows(rows):
    got = position_means(rows)
    want = ref_position_means(rows)
    assert len(got) == len(want)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_position_means_hand_example():
    assert position_means([[1.0, 2.0, 3.0], [3.0], [], [5.0, 4.0]]) == [3.0, 3.0, 3.0]
    assert position_means([]) == []
    assert position_means(iter([[2.0]])) == [2.0]  # any iterable, e.g. a generator


# ---------------------------------------------------------------------------
# bootstrap_ci


def test_bootstrap_degenerate_cases():
    lo, hi = bootstrap_ci([])
    assert math.isnan(lo) and math.isnan(hi)
    assert bootstrap_ci([3.5]) == (3.5, 3.5)
    lo, hi = bootstrap_ci([2.0] * 7)
    assert lo == pytest.approx(2.0) and hi == pytest.approx(2.0)


@pytest.mark.parametrize("confidence", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_bootstrap_rejects_bad_confidence(confidence):
    with pytest.raises(InvalidParameter):
        bootstrap_ci([1.0, 2.0, 3.0], confidence=confidence)


def test_bootstrap_rejects_bad_confidence_even_for_degenerate_input():
    with pytest.raises(InvalidParameter):
        bootstrap_ci([], confidence=2.0)


def test_bootstrap_is_deterministic_given_the_seed():
    x = np.random.default_rng(1).normal(size=30)
    assert bootstrap_ci(x, seed=7) == bootstrap_ci(list(x), seed=7)
    assert bootstrap_ci(x, seed=7) != bootstrap_ci(x, seed=8)


@FAST
@given(st.lists(finite, min_size=2, max_size=40), st.integers(0, 2**32 - 1))
def test_bootstrap_interval_contains_the_sample_mean_and_is_ordered(values, seed):
    lo, hi = bootstrap_ci(values, seed=seed, n_boot=500)
    m = float(np.mean(values))
    tol = 1e-9 * (1 + max(abs(v) for v in values))
    assert lo <= hi
    assert lo - tol <= m <= hi + tol
    assert min(values) - tol <= lo and hi <= max(values) + tol


@FAST
@given(st.lists(finite, min_size=2, max_size=20), st.integers(0, 2**32 - 1))
def test_bootstrap_interval_is_nested_in_confidence(values, seed):
    lo90, hi90 = bootstrap_ci(values, confidence=0.9, seed=seed, n_boot=400)
    lo99, hi99 = bootstrap_ci(values, confidence=0.99, seed=seed, n_boot=400)
    assert lo99 <= lo90 and hi90 <= hi99


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(-20, 20), min_size=2, max_size=5).map(lambda v: [x / 4 for x in v]),
    st.sampled_from([0.8, 0.9, 0.95]),
    st.integers(0, 2**32 - 1),
)
def test_bootstrap_endpoints_are_quantiles_of_the_exact_bootstrap_distribution(values, confidence, seed):
    """Against the exact bootstrap distribution (all n^n resamples): the exact CDF at the
    endpoints must be within a DKW band (failure prob. 1e-6) of the nominal tail levels."""
    n_boot = 20000
    means = exact_bootstrap_cdf(values)
    assume(means[0] < means[-1])
    lo, hi = bootstrap_ci(values, confidence=confidence, n_boot=n_boot, seed=seed)
    a = (1 - confidence) / 2
    delta = math.sqrt(math.log(2 / 1e-6) / (2 * n_boot)) + 1 / n_boot
    tol = 1e-12

    def cdf_le(x):
        return np.searchsorted(means, x + tol, side="right") / len(means)

    def cdf_lt(x):
        return np.searchsorted(means, x - tol, side="left") / len(means)

    assert cdf_le(lo) >= a - delta and cdf_lt(lo) <= a + delta
    assert cdf_le(hi) >= 1 - a - delta and cdf_lt(hi) <= 1 - a + delta


def test_bootstrap_coverage_on_normal_data():
    """300 simulated data sets (n = 40, known mean): the 95% interval must cover the
    true mean in 95% ± 3.5 binomial sd of them (percentile bootstrap runs slightly low)."""
    reps, n, mu = 300, 40, 2.0
    data = np.random.default_rng(12345).normal(mu, 3.0, size=(reps, n))
    covered = 0
    for i, row in enumerate(data):
        lo, hi = bootstrap_ci(row, 0.95, n_boot=1000, seed=i)
        covered += lo <= mu <= hi
    sd = math.sqrt(0.95 * 0.05 / reps)
    assert abs(covered / reps - 0.95) <= 3.5 * sd, covered


def test_bootstrap_interval_shrinks_with_more_data():
    rng = np.random.default_rng(3)
    small = bootstrap_ci(rng.normal(size=20))
    large = bootstrap_ci(rng.normal(size=2000))
    assert (large[1] - large[0]) < 0.5 * (small[1] - small[0])


# ---------------------------------------------------------------------------
# summarize on hand-made ExampleResult records


def summarize(records, confidence=0.95):
    """The summary in its log form (what a result log's end line holds)."""
    return analysis.summarize(records, confidence).to_dict()


def lam_result(lam, token_infl, grams=(), floor=None, repeat=False, rouge=False):
    """grams: (start, influence, above_noise) triples; floor: null-ablation sums or None."""
    ngrams = [NgramInfluence(s, 4, 0, 1, "x", infl, [infl], above) for s, infl, above in grams]
    return LambdaResult(
        lam=lam,
        response="r",
        response_ids=[1] * len(token_infl),
        generated=False,
        token_logprob=[-1.0] * len(token_infl),
        token_logprob_without=[-1.0] * len(token_infl),
        token_pmi=[0.0] * len(token_infl),
        token_influence=list(token_infl),
        response_token_chars=[(0, 1)] * len(token_infl),
        document_influence=float(sum(token_infl)),
        ngrams=ngrams,
        noise_floor=None if floor is None else NoiseFloor(list(range(len(floor))), list(floor)),
        regurgitation=Regurgitation(30 if repeat else 0, 0.9 if rouge else 0.0, 0.0),
    )


def roundtrip(example_results):
    """What a resumed result log holds: to_dict() through JSON, read back."""
    return [ExampleResult.from_dict(json.loads(json.dumps(r.to_dict()))) for r in example_results]


def make_records():
    ex1 = ExampleResult(
        "a",
        12,
        "q",
        [
            lam_result(
                1.0,
                [3.0, 1.0, 2.0],
                [(0, 1.0, True), (1, 5.0, True), (2, 2.0, False)],
                floor=[1.5, 0.5],
                repeat=True,
                rouge=True,
            ),
            lam_result(0.0, [0.0, 0.0], [(0, 0.0, False), (1, 0.0, False), (2, 0.0, False)], floor=[0.1]),
        ],
    )
    ex2 = ExampleResult(
        "b",
        6,
        "q",
        [
            lam_result(1.0, [4.0], [(0, 3.0, True), (1, 1.0, False)], floor=[2.5], rouge=True),
            lam_result(0.0, [0.0, 0.0, 0.0], [(0, 0.0, False), (1, 0.0, False)], floor=[0.3]),
        ],
    )
    ex3 = ExampleResult(
        "c",
        20,
        "q",
        [
            lam_result(
                1.0,
                [1.0, 1.0, 1.0, 1.0],
                [(0, 2.0, False), (1, 3.0, True), (2, 8.0, True), (3, 0.5, False)],
                floor=[3.0, 1.0],
            ),
            lam_result(0.0, [0.0], [(0, 0.0, False)], floor=[0.2]),
        ],
    )
    return roundtrip([ex1, ex2, ex3])


def test_summarize_hand_made_records():
    out = summarize(make_records())
    assert list(out) == ["0.0", "1.0"]
    s = out["1.0"]
    assert s["lam"] == 1.0 and s["examples"] == 3

    doc = [6.0, 4.0, 4.0]
    d = s["document_influence"]
    assert d["mean"] == pytest.approx(14 / 3)
    assert d["std"] == pytest.approx(float(np.std(doc)))
    assert d["ci"] == list(bootstrap_ci(doc, 0.95)) and d["confidence"] == 0.95

    g = s["ngram_influence"]
    # all 9 grams: 1+5+2 + 3+1 + 2+3+8+0.5 = 25.5
    assert g["mean"] == pytest.approx(25.5 / 9)
    # per-position means over the examples that have the position: [2, 3, 5, 0.5]
    assert s["ngram_position_profile"]["starts"] == [0, 1, 2, 3]
    assert s["ngram_position_profile"]["means"] == pytest.approx([2.0, 3.0, 5.0, 0.5])
    assert g["max_of_mean"] == pytest.approx(5.0) and g["max_of_mean_position"] == 2
    # max-of-mean is not the mean of the per-example maxima (5, 3, 8 -> 16/3)
    assert g["max_of_mean"] != pytest.approx(16 / 3)
    assert g["fraction_above_noise"] == pytest.approx(5 / 9)

    assert s["noise_floor_max_mean"] == pytest.approx((1.5 + 2.5 + 3.0) / 3)
    assert s["response_position_profile"] == pytest.approx([8 / 3, 1.0, 1.5, 1.0])
    assert s["regurgitation"] == {
        "repeat": 1,
        "rouge": 2,
        "repeat_rate": pytest.approx(1 / 3),
        "rouge_rate": pytest.approx(2 / 3),
    }

    z = out["0.0"]
    assert z["examples"] == 3
    assert z["document_influence"]["mean"] == 0.0 and z["document_influence"]["ci"] == [0.0, 0.0]
    assert z["ngram_influence"]["max_of_mean"] == 0.0
    assert z["response_position_profile"] == [0.0, 0.0, 0.0]
    assert z["regurgitation"]["repeat"] == 0 and z["regurgitation"]["rouge_rate"] == 0.0
    assert z["noise_floor_max_mean"] == pytest.approx(0.2)

    # the summary is plain JSON
    assert json.loads(json.dumps(out)) == out


def test_summarize_document_level_only_records():
    recs = roundtrip(
        [ExampleResult("a", 5, "", [lam_result(0.5, [1.0, 2.0])]), ExampleResult("b", 5, "", [lam_result(0.5, [5.0])])]
    )
    s = summarize(recs, confidence=0.9)["0.5"]
    assert s["document_influence"]["mean"] == pytest.approx(4.0)
    assert s["document_influence"]["confidence"] == 0.9
    assert s["ngram_influence"] == {
        "mean": None,
        "max_of_mean": None,
        "max_of_mean_position": None,
        "fraction_above_noise": None,
    }
    assert s["ngram_position_profile"] == {"starts": [], "means": []}
    assert s["noise_floor_max_mean"] is None
    assert s["response_position_profile"] == pytest.approx([3.0, 2.0])


def test_summarize_exact_mode_records_have_no_noise_flags():
    recs = roundtrip([ExampleResult("a", 8, "", [lam_result(1.0, [1.0], [(0, 2.0, None), (4, 4.0, None)])])])
    s = summarize(recs)["1.0"]
    assert s["ngram_influence"]["fraction_above_noise"] is None
    assert s["ngram_influence"]["mean"] == pytest.approx(3.0)


def test_summarize_nothing():
    assert summarize([]) == {}


def ref_max_of_mean(records, lam):
    """Per start position (token offset in D): mean τ_i over the examples that have an
    n-gram starting there; then the max and where it is."""
    by_start = {}
    for rec in records:
        for res in rec.results:
            if res.lam == lam:
                for g in res.ngrams:
                    by_start.setdefault(g.start, []).append(g.influence)
    means = {s: sum(v) / len(v) for s, v in by_start.items()}
    best = max(means, key=means.get)
    return means[best], best


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=6), min_size=1, max_size=5))
def test_summarize_max_of_mean_matches_reference_for_stride_one(rows):
    """Stride 1: the i-th window starts at token i, so index and start agree."""
    recs = roundtrip(
        [
            ExampleResult(str(j), len(r) + 3, "", [lam_result(1.0, [1.0], [(i, v, None) for i, v in enumerate(r)])])
            for j, r in enumerate(rows)
        ]
    )
    g = summarize(recs)["1.0"]["ngram_influence"]
    want, pos = ref_max_of_mean(recs, 1.0)
    assert g["max_of_mean"] == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert g["max_of_mean"] == pytest.approx(max(ref_position_means(rows)))


def test_summarize_max_of_mean_groups_by_start_position_with_tail_windows():
    # n = 4, stride 4: L = 10 -> starts [0, 4, 6] (tail window); L = 16 -> starts [0, 4, 8, 12]
    recs = roundtrip(
        [
            ExampleResult("a", 10, "", [lam_result(1.0, [1.0], [(0, 1.0, None), (4, 1.0, None), (6, 9.0, None)])]),
            ExampleResult(
                "b", 16, "", [lam_result(1.0, [1.0], [(0, 1.0, None), (4, 1.0, None), (8, 1.0, None), (12, 1.0, None)])]
            ),
        ]
    )
    g = summarize(recs)["1.0"]["ngram_influence"]
    want, pos = ref_max_of_mean(recs, 1.0)
    assert (g["max_of_mean"], g["max_of_mean_position"]) == (want, pos) == (9.0, 6)


def test_summarize_gives_utility_with_its_bootstrap_ci_only_where_answers_exist():
    recs = []
    for i, f1 in enumerate([0.2, 0.4, 0.9]):
        r = lam_result(1.0, [0.1, 0.2])
        r.utility = Utility(f1, f1, f1)
        recs.append(ExampleResult(f"e{i}", 10, "q", [r, lam_result(0.5, [0.1])]))
    out = summarize(recs)
    u = out["1.0"]["utility"]
    assert u["metric"] == "rouge_l_f" and u["examples"] == 3 and u["mean"] == pytest.approx(0.5)
    assert (u["ci"][0], u["ci"][1]) == bootstrap_ci([0.2, 0.4, 0.9], 0.95)
    assert out["0.5"]["utility"] is None  # no answers at this lambda's results


def eps_result(lam, eps, doc, f1, realised):
    """A generated response of ε-bounded CID (``eps`` None: unbounded) with its ROUGE-L F and per-step realised ε."""
    r = lam_result(lam, [doc])
    r.generated, r.epsilon = True, eps
    r.utility = Utility(f1, f1, f1)
    r.generation = Generation("eog", eps, [lam], list(realised), 0)
    return r


def test_summarize_keys_results_by_lambda_and_epsilon():
    """Two ε at one λ are two entries, never one: keyed ``"λ/eps=ε"`` (after the unbounded ``"λ"``), each with
    its own ``epsilon``, means, utility and realised per-step ε; README: output schema."""
    recs = roundtrip(
        [
            ExampleResult(
                f"e{i}",
                10,
                "q",
                [eps_result(1.5, None, 9.0 + i, 0.6, [5.0]), eps_result(1.5, 4.0, 3.0 + i, 0.5, [4.0, 2.0])]
                + [eps_result(1.5, 1.0, 1.0 + i, 0.3 + i / 10, [1.0, 0.5]), eps_result(0.5, 1.0, 0.5, 0.2, [0.25])],
            )
            for i in range(2)
        ]
    )
    out = summarize(recs)
    assert list(out) == ["0.5/eps=1.0", "1.5", "1.5/eps=1.0", "1.5/eps=4.0"]
    assert [(s["lam"], s["epsilon"], s["context_size"]) for s in out.values()] == [
        (0.5, 1.0, None),
        (1.5, None, None),
        (1.5, 1.0, None),
        (1.5, 4.0, None),
    ]
    one, four = out["1.5/eps=1.0"], out["1.5/eps=4.0"]
    assert one["examples"] == four["examples"] == 2
    assert one["document_influence"]["mean"] == pytest.approx(1.5) and four["document_influence"]["mean"] == 3.5
    assert one["utility"]["mean"] == pytest.approx(0.35) and four["utility"]["mean"] == pytest.approx(0.5)
    assert one["realised_epsilon"] == {"mean": pytest.approx(0.75), "max": 1.0, "steps": 4}
    assert four["realised_epsilon"]["max"] == 4.0 and out["1.5"]["realised_epsilon"]["max"] == 5.0
    assert json.loads(json.dumps(out)) == out


def test_summarize_keys_a_context_size_and_an_epsilon_together():
    sized = roundtrip([ExampleResult("e", 10, "q", [eps_result(1.0, 2.0, 1.0, 0.5, [2.0])])])
    sized[0].results[0].context_size = 8
    assert list(summarize(sized)) == ["1.0@8/eps=2.0"]


def test_the_typed_summary_round_trips_its_log_form():
    s = analysis.summarize(make_records())
    assert analysis.Summary.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    assert [e.key for e in s] == s.keys() == ["0.0", "1.0"] and s["1.0"].examples == 3


def test_score_table_gives_epsilon_a_column_only_when_a_result_has_one():
    plain = roundtrip([ExampleResult("e", 10, "q", [lam_result(1.0, [1.0])])])
    assert score_table(["e"], plain, ansi=False).splitlines()[0].split()[:3] == ["example", "λ", "tokens"]
    swept = roundtrip(
        [ExampleResult("e", 10, "q", [eps_result(1.0, 1.0, 1.0, 0.5, [1.0]), eps_result(1.0, 4.0, 2.0, 0.5, [3.0])])]
    )
    for r, infl in zip(swept[0].results, (2.0, 3.0)):  # an n-gram each, so each gets a top-span line
        r.ngrams = r.top = [NgramInfluence(0, 1, 0, 4, "Dana", infl, [infl], True)]
    lines = score_table(["e"], swept, ansi=False).splitlines()
    assert lines[0].split()[:4] == ["example", "λ", "ε", "tokens"]
    assert [line.split()[:3] for line in lines[1:3]] == [["e", "1", "1"], ["e", "1", "4"]]
    assert lines[-2:] == ["e λ=1 ε=1: [Dana]", "e λ=1 ε=4: [Dana]"]
