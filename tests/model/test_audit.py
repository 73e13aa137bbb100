"""Tests for ContextLeak audits: canaries, queries, mechanisms, the game, resumability, the CLI.

Model tests run the real default model (Gemma-3-270M) on the bundled sample
sets with small settings; they pin one llama.cpp thread so that they behave on a
shared 2-core machine. Nothing here asserts on wall-clock time.
"""

import json
import math
import re
from dataclasses import replace
from importlib import resources

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats

from ctxlite.audit.canaries import CanaryKind, canary_label, make_canary, semantic_canaries
from ctxlite.audit.dataset import check_records, load_records
from ctxlite.audit.formats import AuditFormat
from ctxlite.audit.game import run_audit
from ctxlite.audit.mechanisms import (
    EmbeddingSpaceAggregation,
    ReportNoisyMax,
    leak_fraction,
    partition,
)
from ctxlite.audit.queries import QueryKind, build_query, candidate_templates
from ctxlite.audit.settings import AuditSettings, EstimateSettings, audit_identity
from ctxlite.audit.template_search import search_template
from ctxlite.errors import DataError, InvalidParameter
from ctxlite.privacy.calibration import (
    analytic_gaussian_sigma,
    subsampled_gaussian_epsilon,
)
from ctxlite.records import RecordLog

SQRT2 = math.sqrt(2)
DATA = resources.files("ctxlite").joinpath("data")
CLASSIFY = str(DATA / "classify_sample.jsonl")
DIALOGUE = str(DATA / "dialogue_sample.jsonl")


CLS, GEN = AuditFormat.builtin("classify"), AuditFormat.builtin("generate")


def abc(*labels):
    """A classify format with these labels (the label rule reads nothing else)."""
    return AuditFormat("classify", "", "{text} {label}", "text", "label", labels)


def classify_records():
    return load_records(CLASSIFY, "classify")


# ---------------------------------------------------------------------------
# canaries and queries (no model)


def test_hex_canary_is_64_hex_chars_and_seeded():
    recs = classify_records()
    a = make_canary("hex", CLS, recs, seed=3)
    b = make_canary("hex", CLS, recs, seed=3)
    c = make_canary("hex", CLS, recs, seed=4)
    assert re.fullmatch(r"[0-9a-f]{64}", a.text)
    assert a == b and a.text != c.text
    assert a.id.startswith("hex-") and a.kind is CanaryKind.HEX


def test_semantic_canary_comes_from_the_curated_list():
    c = make_canary("semantic", GEN, [{"dialogue": "A: hi", "summary": "hi"}], seed=1)
    assert c.text in semantic_canaries()
    assert c.label == c.text  # generation: y_c = x_c


def test_label_rule_rarest_class_and_seeded_ties():
    rng = np.random.default_rng(0)
    assert canary_label(abc("a", "b", "c"), "x", ["a", "a", "b", "c", "c"], rng) == "b"
    assert canary_label(abc("a", "b"), "x", ["a", "a"], rng) == "b"  # absent class is rarest
    ties = {canary_label(abc("a", "b"), "x", ["a", "b"], np.random.default_rng(s)) for s in range(20)}
    assert ties == {"a", "b"}
    same = [canary_label(abc("a", "b"), "x", ["a", "b"], np.random.default_rng(5)) for _ in range(3)]
    assert len(set(same)) == 1
    assert canary_label(GEN, "the canary", [], rng) == "the canary"


def test_queries_fill_every_slot():
    recs = classify_records()
    c = make_canary("hex", CLS, recs, seed=0)
    for fmt in (CLS, GEN):
        for kind in QueryKind:
            for i in range(len(candidate_templates(fmt, kind))):
                q = build_query(fmt, kind, c, i)
                assert "{" not in q.text
                if kind is QueryKind.IF_THEN_BLIND:
                    assert c.text not in q.text
                else:
                    assert c.text in q.text
    with pytest.raises(InvalidParameter):
        build_query(CLS, "input-output", c, 99)


def test_leak_fraction():
    assert leak_fraction("xx abcdef yy", "abcdef") == 1.0
    assert leak_fraction("", "abc") == 0.0
    assert leak_fraction("abc", "abcdef") == 0.5


# ---------------------------------------------------------------------------
# mechanisms (no model)


def test_partition_is_disjoint_and_changing_one_record_changes_one_ensemble():
    fmt = CLS
    recs = classify_records()[:20]
    for seed in range(10):
        groups = partition(len(recs), 10, 2, np.random.default_rng(seed))
        assert sorted(groups.ravel().tolist()) == list(range(20))
        for pos in (0, 7, 19):
            changed = list(recs)
            changed[pos] = {"text": "a canary", "label": "objective"}
            before = [fmt.prompt([recs[i] for i in g], "Q") for g in groups]
            after = [fmt.prompt([changed[i] for i in g], "Q") for g in groups]
            assert sum(a != b for a, b in zip(before, after)) == 1


def test_partition_rejects_too_few_records():
    with pytest.raises(InvalidParameter):
        partition(5, 3, 2, np.random.default_rng(0))


def test_sigma_calibration_uses_analytic_gaussian_and_replacement_sensitivity():
    rnm = ReportNoisyMax(10, 2, 1.0, 1e-5)
    assert rnm.sensitivity == pytest.approx(math.sqrt(2))
    assert rnm.sigma == pytest.approx(analytic_gaussian_sigma(1.0, 1e-5, math.sqrt(2)))
    assert rnm.sigma == pytest.approx(
        3.7306 * math.sqrt(2), rel=1e-4
    )  # analytic σ(ε=1, δ=1e-5) for Δ = 1, times √2; docs/design.md#reference-values-in-the-tests
    assert ReportNoisyMax(10, 2, math.inf, 1e-5).sigma == 0.0
    esa = EmbeddingSpaceAggregation(10, 2, 8.0, 1e-5, clip_norm=0.5)
    assert esa.sensitivity == pytest.approx(1.0)  # 2C
    assert esa.sigma == pytest.approx(analytic_gaussian_sigma(8.0, 1e-5, 1.0))


def test_settings_validate():
    with pytest.raises(InvalidParameter):
        AuditSettings(mechanism="none", epsilons=(1.0,))
    with pytest.raises(InvalidParameter):
        AuditSettings(task="generate", mechanism="rnm", epsilons=(1.0,))
    with pytest.raises(InvalidParameter):
        AuditSettings(mechanism="rnm", epsilons=(0.0,))
    with pytest.raises(InvalidParameter):
        AuditSettings(trials=3)
    with pytest.raises(InvalidParameter):
        AuditSettings(mechanism="bogus")
    with pytest.raises(InvalidParameter):
        AuditSettings(mechanism="none", ensembles=3)
    with pytest.raises(InvalidParameter, match="DP mechanism"):
        AuditSettings(mechanism="none", estimates=EstimateSettings(accounting_queries=10))
    with pytest.raises(InvalidParameter, match="sampling_rate"):
        EstimateSettings(sampling_rate=1.5, accounting_queries=10)
    with pytest.raises(InvalidParameter, match="accounting_queries too"):
        EstimateSettings(sampling_rate=0.5)
    s = AuditSettings(mechanism="rnm", epsilons=(8, 1, math.inf), ensembles=10, shots=2)
    assert s.epsilons == (1.0, 8.0, math.inf) and s.queries_per_trial == 1 and s.private_size == 20
    assert AuditSettings().queries_per_trial == 64


def test_check_records_errors():
    with pytest.raises(DataError, match="empty"):
        check_records([], "classify")
    with pytest.raises(DataError, match="unknown label"):
        check_records([{"text": "x", "label": "neutral"}], "classify")
    with pytest.raises(DataError, match="summary"):
        check_records([{"dialogue": "x"}], "generate")


# ---------------------------------------------------------------------------
# CLI: bad data and bad parameters (exit codes)


def _cli(args):
    from ctxlite.cli import main

    return CliRunner().invoke(main, ["audit", *args])


@pytest.mark.parametrize(
    "content, needle",
    [
        ("", "no records"),
        ('{"text": "fine", "label": "objective"}\n{"text": "broken"\n', ":2: malformed JSON"),
        ('{"text": "fine", "label": "neutral"}\n', "unknown label"),
        ('{"text": "fine"}\n', "'label' is missing"),
    ],
)
def test_cli_bad_data_exits_4(tmp_path, content, needle):
    path = tmp_path / "private.jsonl"
    path.write_text(content, encoding="utf-8")
    res = _cli(["--data", str(path)])
    assert res.exit_code == 4, res.output
    assert needle in res.output


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--mechanism", "rnm", "--epsilon", "0,1"], ["--epsilon", "> 0", "0"]),
        (["--mechanism", "rnm", "--epsilon", "nan"], ["--epsilon", "nan"]),
        (["--mechanism", "none", "--epsilon", "1"], ["--epsilon", "none", "no privacy parameter"]),
        (["--trials", "2"], ["--trials", "2", ">=4"]),
        (["--mechanism", "none", "--ensembles", "3"], ["--ensembles", "rnm/esa"]),
        (["--resume"], ["--resume", "--out"]),
        (["--mechanism", "none", "--accounting-queries", "10"], ["accounting", "rnm or esa"]),
        (["--mechanism", "rnm", "--sampling-rate", "0.5"], ["sampling", "accounting"]),
        (["--mechanism", "rnm", "--accounting-queries", "0"], ["--accounting-queries", "0", ">=1"]),
    ],
)
def test_cli_bad_parameters_exit_2(args, needles):
    """Exit 2 with a message that names the offending option and says what is wrong (no traceback)."""
    res = _cli(["--data", CLASSIFY, *args])
    assert res.exit_code == 2, res.output
    message = res.output.strip().splitlines()[-1].lower()
    for needle in needles:
        assert needle.lower() in message, (needle, res.output)
    assert "Traceback" not in res.output


@pytest.mark.model
def test_cli_too_few_records_exits_4(tmp_path):
    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in classify_records()[:5]), encoding="utf-8")
    res = _cli(["--data", str(path), "--shots", "6", "-t", "1"])
    assert res.exit_code == 4
    assert "need 6" in res.output


# ---------------------------------------------------------------------------
# model tests


@pytest.fixture(scope="module")
def engine():
    from ctxlite.runtime.engine import Engine, EngineConfig

    eng = Engine(None, EngineConfig(n_threads=1))
    yield eng
    eng.close()


@pytest.mark.model
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_exact_label_distribution_matches_real_sampling(engine, temperature):
    """The fast path's distribution vs real first-token sampling: chi-square, seeded."""
    from ctxlite.audit.oracle import ModelOracle
    from ctxlite.runtime.sampling import SamplingSettings, sample_continuations

    fmt = CLS
    oracle = ModelOracle(engine, [" " + l for l in fmt.labels], temperature)
    prompt = fmt.prompt(classify_records()[:3], "Text: 5e2f81c0aa9d7b3e\nLabel:")
    p = oracle.label_distribution(prompt)
    assert p.shape == (3,) and p.sum() == pytest.approx(1.0)
    toks = engine.tokenize(prompt, add_bos=True)
    counts = np.zeros(3)
    for seed in range(25):
        settings = SamplingSettings(temperature=temperature, min_new_tokens=0, max_new_tokens=1, seed=seed)
        for out in sample_continuations(engine, toks, 7, settings):
            tok = out[0] if out else -1  # an EOG stop counts as "other"
            firsts = [t[0] for t in oracle.label_tokens]
            j = firsts.index(tok) if tok in firsts else 2
            counts[j] += 1
    expected = p * counts.sum()
    keep = expected >= 5  # pool tiny cells into the test only when they are large enough
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    obs, exp = obs[exp > 0], exp[exp > 0]
    assert stats.chisquare(obs, exp).pvalue > 1e-3


@pytest.mark.model
def test_rnm_histogram_sums_to_m_before_noise(engine):
    from ctxlite.audit.oracle import ModelOracle

    fmt = CLS
    oracle = ModelOracle(engine, [" " + l for l in fmt.labels], 1.0)
    mech = ReportNoisyMax(3, 2, math.inf, 1e-5)
    recs = classify_records()[:6]
    for seed in range(4):
        rel = mech.release(oracle, fmt, recs, "Text: a plain sentence.\nLabel:", 1, np.random.default_rng(seed))
        assert rel.signal.sum() == 3.0  # sigma = 0: the raw vote histogram over labels + "other"
        assert np.all(rel.signal == np.round(rel.signal))
        assert len(rel.outputs) == 1 and set(rel.outputs) <= {"subjective", "objective", "other"}
    noisy = ReportNoisyMax(3, 2, 1.0, 1e-5).release(
        oracle, fmt, recs, "Text: a plain sentence.\nLabel:", 1, np.random.default_rng(0)
    )
    assert noisy.signal.sum() != 3.0


def _open_log(path, engine, s, records):
    """The trial log of audit ``s`` (its identity: model runtime, settings, data, bundled templates)."""
    return RecordLog(path, audit_identity(engine.identity(), s, records), kind="audit")


@pytest.mark.model
@pytest.mark.parametrize("seed", [1])
def test_no_defense_reaches_high_audit_accuracy(engine, seed):
    """(a) L0, input-output query with the canary label: audit accuracy >= 0.8 (seed 1: its own canary and
    private set; seed 0's, with a certified lower bound, is claim 001.1 of ``make reproduce-quick``, which CI
    runs)."""
    s = AuditSettings(
        task="classify",
        mechanism="none",
        canary="hex",
        query="input-output",
        trials=100,
        shots=20,
        queries_per_trial=256,
        reference_runs=8,
        utility_queries=2,
        seed=seed,
    )
    report = run_audit(engine, classify_records(), s)
    row = report.rows[0]
    assert row.audit_accuracy >= 0.8
    assert row.n_in + row.n_out == 100
    assert row.epsilon is None and report.epsilon_kind.startswith("none")
    assert row.utility in (0.0, 0.5, 1.0)  # two held-out queries
    assert report.forward_passes <= 8  # two distinct audit prompts + utility prompts, all cached


RNM_SEEDS = (0, 1, 2, 3, 4)
RNM_TRIALS = 300


@pytest.fixture(scope="module")
def rnm_runs(engine, tmp_path_factory):
    """RNM audits at theoretical ε ∈ {1, 8, inf} for five seeds: {seed: (report, logged records)}.

    Three 1-shot ensembles, greedy votes: without noise the canary's ensemble always votes
    differently, so at ε = inf the audit separates IN from OUT perfectly and *could* certify ε > 1;
    the noise at ε = 1 must stop it.
    """
    runs = {}
    for seed in RNM_SEEDS:
        s = AuditSettings(
            task="classify",
            mechanism="rnm",
            epsilons=(1.0, 8.0, math.inf),
            canary="semantic",
            trials=RNM_TRIALS,
            shots=1,
            ensembles=3,
            temperature=0.0,
            reference_runs=32,
            utility_queries=0,
            seed=seed,
        )
        path = tmp_path_factory.mktemp("rnm") / f"seed{seed}.jsonl"
        with _open_log(path, engine, s, classify_records()) as log:
            report = run_audit(engine, classify_records(), s, log)
            runs[seed] = (report, dict(log.records))
    return runs


@pytest.mark.model
def test_rnm_noise_is_the_calibrated_gaussian(rnm_runs):
    """Common random numbers: a trial's noisy histogram at ε minus its noiseless one at ε = inf is the
    noise; divided by σ(ε, δ, Δ = √2) it must be N(0, 1) over 5 seeds x 300 trials x 3 classes (KS test)."""
    for eps in (1.0, 8.0):
        sigma = analytic_gaussian_sigma(eps, 1e-5, math.sqrt(2))
        z = []
        for seed, (report, recs) in rnm_runs.items():
            assert report.rows[[1.0, 8.0, math.inf].index(eps)].sigma == pytest.approx(sigma)
            for i in range(RNM_TRIALS):
                noisy = np.asarray(recs[f"eps={eps:g}/trial={i}"]["signal"])
                clean = np.asarray(recs[f"eps=inf/trial={i}"]["signal"])
                assert clean.sum() == 3 and np.all(clean == np.round(clean))  # the vote histogram
                z.extend((noisy - clean) / sigma)
        z = np.asarray(z)
        assert len(z) == len(RNM_SEEDS) * RNM_TRIALS * 3
        assert stats.kstest(z, "norm").pvalue > 1e-4, (eps, z.mean(), z.std())


@pytest.mark.model
def test_rnm_at_epsilon_1_lower_bound_is_at_most_1(rnm_runs):
    """(b) Soundness with power: for every seed the same audit certifies ε > 1 when there is no noise
    (ε = inf), and at theoretical ε = 1 its Clopper-Pearson lower bound does not exceed 1."""
    for seed, (report, _) in rnm_runs.items():
        r1, _, rinf = report.rows
        assert r1.epsilon == 1.0
        assert r1.sigma == pytest.approx(analytic_gaussian_sigma(1.0, 1e-5, math.sqrt(2)))
        assert rinf.audit_accuracy == 1.0 and rinf.epsilon_lower_bound > 2.0, seed  # the audit has power
        assert r1.epsilon_lower_bound <= 1.0, seed  # ... and the noise at ε = 1 stops it


@pytest.mark.model
def test_rnm_exact_profile_is_the_gaussian_mechanism(rnm_runs):
    """One-shot ensembles with greedy votes: the canary's ensemble votes one label with the canary and
    another without, so the noisy histogram's pair is the Gaussian mechanism with sensitivity √2 and
    its exact ε at δ is the theoretical ε (pessimistic grid: up to 3e-3 above); without noise the
    pair is told apart with certainty (ε = inf). No lower bound may exceed it."""
    for seed, (report, _) in rnm_runs.items():
        r1, r8, rinf = report.rows
        for row in (r1, r8):
            assert row.epsilon - 1e-6 <= row.epsilon_exact <= row.epsilon + 3e-3, (seed, row.epsilon)
            assert row.audit_tightness == pytest.approx(row.epsilon_lower_bound / row.epsilon_exact)
            assert "partner groups" in row.privacy_profile_method and row.privacy_profile_kind == "exact"
            assert row.epsilon_upper_bound == row.epsilon_exact
        assert rinf.epsilon_exact == math.inf and rinf.audit_tightness is None
        assert "audit_tightness" in rinf.reasons
        for row in report.rows:
            assert row.epsilon_lower_bound <= row.epsilon_exact, seed
            curve = row.privacy_profile
            assert [d for d, _ in curve] == sorted(d for d, _ in curve)
            assert all(a >= b for (_, a), (_, b) in zip(curve, curve[1:]))  # ε(δ) falls as δ grows


@pytest.mark.model
@pytest.mark.parametrize(
    "mechanism, extra",
    [
        ("none", {}),
        ("prompt-l1", {}),
        ("prompt-l2", {}),
        ("judge", {"judge_model": None}),
        ("rnm", {"epsilons": (8.0, math.inf), "shots": 2, "ensembles": 2, "temperature": 0.0}),
    ],
)
def test_lower_bound_never_exceeds_the_audited_pairs_exact_epsilon(engine, mechanism, extra):
    """Every classification mechanism: the report gives the audited pair's ε (the model's answer
    distributions with and without the canary, through the defence, composed over the trial's
    queries: exact for the heuristic defences; for rnm with two 2-shot ensembles an upper bound,
    the partner group and the other ensemble's vote being hidden), and the certified lower bound
    stays under it; the audit certifies something, so a pair ε that is too small (or a bound that
    is too large) fails here."""
    s = AuditSettings(task="classify", mechanism=mechanism, canary="semantic", trials=200, utility_queries=0, **extra)
    report = run_audit(engine, classify_records(), s)
    assert min(r.epsilon_lower_bound for r in report.rows) > 0.3, "the audit must certify something"
    exact = mechanism != "rnm"
    for row in report.rows:
        ceiling = row.epsilon_upper_bound
        assert ceiling is not None, row.reasons
        assert row.privacy_profile_kind == ("exact" if exact else "upper bound")
        assert row.epsilon_exact == (ceiling if exact else None)
        assert row.epsilon_lower_bound <= ceiling, (mechanism, row.epsilon)
        tightness = getattr(row, "audit_tightness" if exact else "audit_tightness_at_least")
        assert getattr(row, "audit_tightness_at_least" if exact else "audit_tightness") is None
        if math.isfinite(ceiling):
            assert 0 <= tightness <= 1
    assert not any("exceeds the pair's" in n for n in report.notes)


def test_pair_profile_is_refused_for_generation_and_resampled_data():
    """No exact answer without an exact output distribution or a fixed pair: null, with the reason."""
    from ctxlite.audit.game import AuditGame
    from ctxlite.audit.mechanisms import NoDefense

    game = AuditGame.__new__(AuditGame)
    game.text_outputs = False
    game.s = AuditSettings(task="generate", mechanism="none")
    assert game.known_profile(NoDefense()).profile is None
    assert "generated texts" in game.known_profile(NoDefense()).how
    game.s = AuditSettings(task="classify", mechanism="none", resample_data=True)
    profile, why, _ = game.known_profile(NoDefense())
    assert profile is None and "no fixed pair" in why


def _null_accuracy_quantile(ins, outs, q, n_perm=400, seed=0):
    """The q-quantile of the (optimistic) audit accuracy when IN/OUT labels carry no information."""
    from ctxlite.privacy.estimators import CanaryScoreAuditor

    rng = np.random.default_rng(seed)
    scores = np.concatenate([ins, outs])
    accs = []
    for _ in range(n_perm):
        perm = rng.permutation(scores)
        accs.append(CanaryScoreAuditor(perm[: len(ins)], perm[len(ins) :]).audit_accuracy())
    return float(np.quantile(accs, q))


@pytest.mark.model
def test_rnm_empirical_epsilon_rises_with_theoretical_epsilon(rnm_runs):
    """(c) Over ε ∈ {1, 8, inf}: accuracy and ε̂ rise with ε. Thresholds come from the data: ε = 8 must beat
    the 99.9 % quantile of a permutation null on every seed, and the per-seed accuracy gains ε = 1 -> 8 must
    be positive with a mean above four standard errors of their spread across seeds."""
    gains = []
    for seed, (report, recs) in rnm_runs.items():
        r1, r8, rinf = report.rows
        assert [r.epsilon for r in report.rows] == [1.0, 8.0, math.inf]
        assert r1.audit_accuracy < r8.audit_accuracy < rinf.audit_accuracy == 1.0, seed
        assert r1.epsilon_lower_bound <= r8.epsilon_lower_bound < rinf.epsilon_lower_bound, seed
        assert (r1.epsilon_point or 0.0) < r8.epsilon_point, seed
        ins = [recs[f"eps=8/trial={i}"]["score"] for i in range(RNM_TRIALS) if recs[f"eps=8/trial={i}"]["z"]]
        outs = [recs[f"eps=8/trial={i}"]["score"] for i in range(RNM_TRIALS) if not recs[f"eps=8/trial={i}"]["z"]]
        assert r8.audit_accuracy > _null_accuracy_quantile(ins, outs, 0.999, seed=seed), seed
        gains.append(r8.audit_accuracy - r1.audit_accuracy)
    gains = np.asarray(gains)
    assert np.all(gains > 0)
    assert gains.mean() > 4 * gains.std(ddof=1) / math.sqrt(len(gains)), gains


@pytest.mark.model
def test_judge_blocks_injection_baseline(engine, tmp_path, monkeypatch):
    """The injection baseline through the L3 judge: what the judge flags is withheld, and nothing else.

    On the same trials (same seeds, same sampled texts): with every verdict forced to "no leak" the judge is
    exactly the L2 defence it wraps; forced to "leaks", every output is withheld and each trial scores only the
    withheld placeholder. (tests/model/test_audit_game.py recomputes the judge's verdicts output by output.)
    """
    from ctxlite.audit.mechanisms import OTHER, Judge

    def play(mechanism, name):
        s = AuditSettings(
            task="classify",
            mechanism=mechanism,
            attack="injection",
            trials=8,
            shots=3,
            queries_per_trial=2,
            max_new_tokens=8,
            utility_queries=0,
            judge_model=None,
            seed=1,
        )
        engine.clear()  # the same decode history for every run: sampled texts are then identical
        with _open_log(tmp_path / f"{name}.jsonl", engine, s, classify_records()) as log:
            report = run_audit(engine, classify_records(), s, log)
            sig = [log.records[f"eps=inf/trial={i}"]["signal"][0] for i in range(8)]
            zs = [log.records[f"eps=inf/trial={i}"]["z"] for i in range(8)]
        assert report.query.kind == "injection" and report.rows[0].n_in + report.rows[0].n_out == 8
        return report, sig, zs

    l2, l2_sig, zs = play("prompt-l2", "l2")
    asked = []
    monkeypatch.setattr(Judge, "_judge_leaks", lambda self, oracle, fmt, records, output: asked.append(output) or False)
    clean, clean_sig, clean_z = play("judge", "clean")
    assert asked  # the judge was consulted ...
    assert clean_sig == l2_sig and clean_z == zs and clean.rows == l2.rows  # ... and withheld nothing
    monkeypatch.setattr(Judge, "_judge_leaks", lambda self, oracle, fmt, records, output: True)
    blocked, blocked_sig, _ = play("judge", "blocked")
    withheld = leak_fraction(OTHER, blocked.canary.text)
    assert blocked_sig == [pytest.approx(withheld, abs=1e-12)] * 8  # every output withheld
    assert blocked_sig != l2_sig  # which changes what the injection recovers


@pytest.mark.model
def test_generation_esa_end_to_end(engine, tmp_path):
    from ctxlite.runtime.engine import Engine, EngineConfig

    s = AuditSettings(
        task="generate",
        mechanism="esa",
        epsilons=(1.0, math.inf),
        trials=4,
        shots=1,
        ensembles=2,
        reference_runs=1,
        max_new_tokens=6,
        zero_shot_candidates=2,
        utility_queries=1,
        seed=2,
    )
    records = load_records(DIALOGUE, "generate")
    with Engine(None, EngineConfig(n_threads=1), embeddings=True) as emb:
        engine.clear()  # the same start for both runs: generation rows depend on the decode history
        report = run_audit(engine, records, s, embedder=emb)
        engine.clear()
        one = run_audit(engine, records, replace(s, epsilons=(1.0,)), embedder=emb)
    assert [r.epsilon for r in report.rows] == [1.0, math.inf]
    assert report.utility_metric == "rouge1_f" and 0.0 <= report.rows[0].utility <= 1.0
    assert report.rows[0].sigma == pytest.approx(analytic_gaussian_sigma(1.0, 1e-5, 2.0))
    # common random numbers: epsilon = inf replays epsilon = 1's walks from memoised nodes, decoding nothing
    assert report.forward_passes == one.forward_passes > 0
    assert report.rows[0] == one.rows[0]


@pytest.mark.model
def test_template_search_picks_the_best_held_out_template(engine):
    s = AuditSettings(
        task="classify",
        mechanism="none",
        trials=40,
        shots=6,
        queries_per_trial=16,
        reference_runs=2,
        utility_queries=0,
        seed=3,
    )
    found = search_template(engine, classify_records(), s, trials=8)
    n = len(candidate_templates(CLS, QueryKind.INPUT_OUTPUT))
    assert found.kind == "input-output" and len(found.accuracies) == n and found.trials == 8
    assert found.seed == 3 + 7919  # held-out trials: not the seed of the audit that gets reported
    assert found.best_index == max(range(n), key=lambda i: (found.accuracies[i], -i))
    assert all(0.5 <= a <= 1.0 for a in found.accuracies)
    # each accuracy is a real small audit of that template under the search seed
    for i in range(n):
        small = replace(s, template_index=i, trials=8, seed=found.seed)
        assert run_audit(engine, classify_records(), small).rows[0].audit_accuracy == found.accuracies[i]
    with pytest.raises(InvalidParameter, match=">= 4 trials"):
        search_template(engine, classify_records(), s, trials=3)


@pytest.mark.model
def test_cli_search_template_audits_with_the_chosen_template():
    res = _cli(
        [
            "--data",
            CLASSIFY,
            "--search-template",
            "--trials",
            "8",
            "--shots",
            "4",
            "--queries-per-trial",
            "8",
            "--reference-runs",
            "2",
            "--utility-queries",
            "0",
            "-t",
            "1",
        ]
    )
    assert res.exit_code == 0, res.output
    m = re.search(r"template search \(input-output\): accuracies \[([^\]]*)\] -> template (\d+)", res.stderr)
    assert m, res.stderr
    report = json.loads(res.stdout[res.stdout.index("{") :])
    assert report["settings"]["template_index"] == int(m.group(2))
    assert report["query"]["index"] == int(m.group(2))


def _end_line(line: str) -> dict:
    """A log line without its chain hash."""
    from ctxlite.chain import unseal

    return unseal(json.loads(line))[0]


def _logged(printed: dict) -> dict:
    """The report as the end line holds it: what the audit printed, less the log's head."""
    return {k: v for k, v in printed.items() if k != "log_head"}


@pytest.mark.model
def test_cli_audit_json_and_table(tmp_path):
    out = tmp_path / "log.jsonl"
    args = [
        "--data",
        CLASSIFY,
        "--mechanism",
        "rnm",
        "--epsilon",
        "1,inf",
        "--trials",
        "8",
        "--shots",
        "1",
        "--ensembles",
        "4",
        "--reference-runs",
        "2",
        "--utility-queries",
        "1",
        "--out",
        str(out),
        "-t",
        "1",
    ]
    res = _cli(args)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout[res.stdout.index("{") :])
    assert [r["epsilon"] for r in report["rows"]] == [1.0, "inf"]
    assert "acc*" in res.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 1 + 2 * (8 + 2 * 2) + 1  # header, every reference run and trial of both ε, the end
    assert _end_line(lines[-1]) == {"end": {"report": _logged(report)}}
    res2 = _cli(args)
    assert res2.exit_code == 2  # exists without --resume
    assert "exists" in res2.output and "--resume" in res2.output
    assert out.read_text().splitlines() == lines  # and the log is left alone

    # an interrupted run: the header, the first 7 records and a torn line; --resume replays only what is missing
    out.write_text("\n".join(lines[:8]) + "\n" + lines[8][:25])
    res3 = _cli([*args, "--resume"])
    assert res3.exit_code == 0, res3.output
    assert out.read_text().splitlines() == lines  # the same records, in the same order, nothing duplicated
    resumed = json.loads(res3.stdout[res3.stdout.index("{") :])
    assert resumed["rows"] == report["rows"]

    # the finished log, re-reported with the subsampled-over-T accounting: no new trial, same estimates
    res4 = _cli([*args, "--resume", "--accounting-queries", "50", "--sampling-rate", "0.2"])
    assert res4.exit_code == 0, res4.output
    reported = json.loads(res4.stdout[res4.stdout.index("{") :])
    now = out.read_text().splitlines()  # the same records, a new end line
    assert now[:-1] == lines and _end_line(now[-1]) == {"end": {"report": _logged(reported)}}
    lines = now
    rows = reported["rows"]
    for new, old in zip(rows, report["rows"]):
        assert {k: v for k, v in new.items() if k not in ("epsilon_subsampled", "accounting")} == {
            k: v for k, v in old.items() if k not in ("epsilon_subsampled", "accounting")
        }
    assert (
        rows[0]["epsilon_subsampled"]
        == pytest.approx(subsampled_gaussian_epsilon(rows[0]["sigma"], SQRT2, 0.2, 50, 1e-5))
        and rows[1]["epsilon_subsampled"] == "inf"
    )
    assert "eps_T" in res4.stderr and "T = 50" in res4.stderr
    assert "warning" not in res4.stderr and reported["rereport_warning"] is None  # the same bound choice

    # re-reported under another bound method: one warning line on stderr and in the report, naming the
    # first choice (the best of several bounds of the same trials is not a valid bound)
    res6 = _cli([*args, "--resume", "--bound", "split"])
    assert res6.exit_code == 0, res6.output
    rereported = json.loads(res6.stdout[res6.stdout.index("{") :])
    warnings = [line for line in res6.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "first reported with another bound choice" in warnings[0], res6.stderr
    assert "'corner grid" in warnings[0] and "-> 'split" in warnings[0]
    assert (
        warnings[0].endswith(rereported["rereport_warning"]) and rereported["rereport_warning"] in rereported["notes"]
    )
    assert (
        rereported["first_reported_with"]
        == report["first_reported_with"]
        == {
            "lower_bound_method": report["rows"][0]["lower_bound_method"],
            "confidence": 0.95,
        }
    )
    now = out.read_text().splitlines()  # one more end line, the records untouched
    assert now[:-1] == lines and _end_line(now[-1]) == {"end": {"report": _logged(rereported)}}
    lines = now

    # a log of another audit is refused, naming what differs, and left alone
    res5 = _cli([*args[:-2], "--seed", "1", "-t", "1", "--resume"])
    assert res5.exit_code != 0 and "seed" in res5.output
    assert out.read_text().splitlines() == lines
