"""Soundness of the split threshold selection, and the privacy accounting's sensitivities.

* The Split selection must choose the threshold from the selection half only:
  replacing every evaluation-half score must not move it.
* On a mechanism where *every* threshold is tight, the (1 - alpha) lower bound
  over-claims epsilon in at most alpha of the audits; a copy of the selection
  that peeks at the evaluation half (:class:`LeakySplitAuditor`, kept here as
  a fixture) fails that check.
* The declared L2 sensitivities of RNM and ESA are the true maxima, found by
  enumerating neighbouring record sets through the mechanisms' own pre-noise
  code, and the subsampled accounting uses them.
"""

from __future__ import annotations

import functools
import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats

from ctxlite.audit import mechanisms
from ctxlite.audit.formats import AuditFormat
from ctxlite.audit.mechanisms import EmbeddingSpaceAggregation, ReportNoisyMax
from ctxlite.privacy.calibration import (
    Neighbouring,
    analytic_gaussian_sigma,
    esa_l2_sensitivity,
    rnm_l2_sensitivity,
)
from ctxlite.privacy.estimators import CanaryScoreAuditor, ClopperPearsonBound, Split, clopper_pearson_epsilon_array

# ---------------------------------------------------------------------------
# the leaky selection (test fixture: what the checks below must catch)


class LeakySplitAuditor(CanaryScoreAuditor):
    """A broken copy of the Split selection: it picks the threshold on the *evaluation* half.

    Same halves, same candidates and the same Clopper--Pearson bound as
    :meth:`CanaryScoreAuditor._split_bound`, except that the threshold maximises
    the bound on the very trials the bound is then computed from.
    """

    def _split_bound(self, alpha, delta, selection):
        (_, in_e), (_, out_e) = selection.halves(self.n_in, self.n_out)
        in_eval, out_eval = np.sort(self.in_scores[in_e]), np.sort(self.out_scores[out_e])
        cands = np.append(np.unique(np.concatenate([in_eval, out_eval])), np.inf)
        tp_s = self._count_at_least(in_eval, cands)
        fp_s = self._count_at_least(out_eval, cands)
        eps_s = clopper_pearson_epsilon_array(tp_s, in_eval.size, fp_s, out_eval.size, alpha, delta)
        best = int(np.argmax(eps_s))
        return ClopperPearsonBound(
            float(eps_s[best]),
            float(cands[best]),
            int(tp_s[best]),
            int(in_eval.size),
            int(fp_s[best]),
            int(out_eval.size),
            1.0 - alpha,
            alpha,
            delta,
            selection,
        )


AUDITORS = [CanaryScoreAuditor, LeakySplitAuditor]


# ---------------------------------------------------------------------------
# (a) the threshold does not depend on the evaluation half


def _replacements(rng, n_in_eval, n_out_eval):
    """Evaluation-half scores unlike the originals: shifted, swapped, tied, reversed."""
    yield rng.normal(3.0, 1.0, n_in_eval), rng.normal(0.0, 1.0, n_out_eval)
    yield rng.normal(0.0, 1.0, n_in_eval), rng.normal(3.0, 1.0, n_out_eval)
    yield np.full(n_in_eval, 0.5), np.full(n_out_eval, 0.5)
    yield rng.integers(0, 3, n_in_eval).astype(float), rng.integers(0, 3, n_out_eval).astype(float)
    yield rng.uniform(-5, 5, n_in_eval), rng.uniform(-5, 5, n_out_eval)


def _threshold_moves(auditor_cls, ins, outs, selection, rng) -> bool:
    """Replace the evaluation half's scores a few times; True if the chosen threshold ever changes.

    Also checks that the reported counts are those of the evaluation half given
    by :meth:`Split.halves` at the chosen threshold (so the halves are the ones
    the selection really used).
    """
    (_, in_e), (_, out_e) = selection.halves(len(ins), len(outs))
    base = auditor_cls(ins, outs).epsilon_clopper_pearson(alpha=0.05, selection=selection)
    moved = False
    for new_in, new_out in itertools.chain([(ins[in_e], outs[out_e])], _replacements(rng, in_e.size, out_e.size)):
        ins2, outs2 = ins.copy(), outs.copy()
        ins2[in_e], outs2[out_e] = new_in, new_out
        res = auditor_cls(ins2, outs2).epsilon_clopper_pearson(alpha=0.05, selection=selection)
        assert (res.n_in, res.n_out) == (in_e.size, out_e.size)
        assert res.true_positives == int(np.sum(ins2[in_e] >= res.threshold))
        assert res.false_positives == int(np.sum(outs2[out_e] >= res.threshold))
        moved |= res.threshold != base.threshold
    return moved


SPLIT_CASES = [  # (fraction, seed, n_in, n_out, discrete scores)
    (0.5, 0, 200, 200, False),
    (0.3, 7, 150, 400, False),
    (0.7, 3, 60, 50, True),
    (0.5, 11, 500, 100, True),
]


@pytest.mark.parametrize("fraction, seed, n_in, n_out, discrete", SPLIT_CASES)
def test_split_threshold_ignores_evaluation_half(fraction, seed, n_in, n_out, discrete):
    rng = np.random.default_rng(seed)
    ins, outs = rng.normal(1.0, 1.0, n_in), rng.normal(0.0, 1.0, n_out)
    if discrete:
        ins, outs = np.round(ins * 2) / 2, np.round(outs * 2) / 2
    assert not _threshold_moves(CanaryScoreAuditor, ins, outs, Split(fraction, seed), rng)


def test_evaluation_half_check_catches_the_leaky_selection():
    moved = []
    for fraction, seed, n_in, n_out, discrete in SPLIT_CASES:
        rng = np.random.default_rng(seed)
        ins, outs = rng.normal(1.0, 1.0, n_in), rng.normal(0.0, 1.0, n_out)
        moved.append(_threshold_moves(LeakySplitAuditor, ins, outs, Split(fraction, seed), rng))
    assert all(moved)


# ---------------------------------------------------------------------------
# (b) soundness where every threshold is tight: randomised response + uniform jitter
#
# Z = 1: bit b ~ Bernoulli(p), Z = 0: b ~ Bernoulli(1 - p), p = e^eps / (1 + e^eps)
# (exactly eps-DP); score = b + J / K with J uniform on {0, ..., K - 1}. For a
# threshold t = 1 + j/K, TPR / FPR = p (1 - j/K) / ((1 - p)(1 - j/K)) = e^eps; for
# t = j/K, TNR / FNR = p (j/K) / ((1 - p)(j/K)) = e^eps. Every threshold sits on the
# DP boundary, so any choice of threshold that looked at the bound's own trials
# turns noise into an over-claim. With many more OUT than IN trials the OUT rates
# are nearly exact and each bound errs at close to its nominal level, which gives
# the check power against a leaky selection.

EPSILONS = (0.5, 1.0, 2.0, 4.0)
ALPHA = 0.05
N_AUDITS = 2000
N_IN, N_OUT = 600, 4000  # trials per audit (each Split half gets 300 / 2000)
LEVELS = 50  # jitter levels K: 2K + 1 candidate thresholds
P_FALSE_ALARM = 1e-3  # one-sided binomial test: Bin(N_AUDITS, ALPHA) exceeds this with prob <= 1e-3
MAX_OVERCLAIMS = int(stats.binom.ppf(1.0 - P_FALSE_ALARM, N_AUDITS, ALPHA))
MAX_OVERCLAIMS_POOLED = int(stats.binom.ppf(1.0 - P_FALSE_ALARM, len(EPSILONS) * N_AUDITS, ALPHA))


def _tight_audits(eps: float, seed: int):
    """N_AUDITS (in_scores, out_scores) pairs of the jittered randomised response.

    The trials are i.i.d. over the 2K score values, so each audit's scores are
    drawn as multinomial counts (vectorised over audits) and listed in sorted
    order; the split draws a uniformly random subset, so the order is
    immaterial.
    """
    rng = np.random.default_rng([seed, int(round(eps * 1000))])
    p = 1.0 / (1.0 + math.exp(-eps))
    values = np.r_[np.arange(LEVELS), LEVELS + np.arange(LEVELS)] / LEVELS  # b + J/K, ascending
    probs_in = np.r_[np.full(LEVELS, (1 - p) / LEVELS), np.full(LEVELS, p / LEVELS)]
    counts_in = rng.multinomial(N_IN, probs_in, size=N_AUDITS)
    counts_out = rng.multinomial(N_OUT, probs_in[::-1], size=N_AUDITS)
    for ci, co in zip(counts_in, counts_out):
        yield np.repeat(values, ci), np.repeat(values, co)


@functools.cache
def _overclaims(auditor_cls, eps: float, seed: int = 0) -> int:
    """How many of N_AUDITS audits give a (1 - ALPHA) lower bound above the true eps."""
    count = 0
    for k, (ins, outs) in enumerate(_tight_audits(eps, seed)):
        res = auditor_cls(ins, outs).epsilon_clopper_pearson(alpha=ALPHA, delta=0.0, selection=Split(0.5, seed=k))
        count += res.epsilon > eps
    return count


@pytest.mark.parametrize("eps", EPSILONS)
def test_split_bound_sound_when_every_threshold_is_tight(eps):
    assert _overclaims(CanaryScoreAuditor, eps) <= MAX_OVERCLAIMS


def test_split_bound_sound_when_every_threshold_is_tight_pooled():
    assert sum(_overclaims(CanaryScoreAuditor, eps) for eps in EPSILONS) <= MAX_OVERCLAIMS_POOLED


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_tight_threshold_check_catches_the_leaky_selection(eps):
    """(c) the same per-epsilon check fails for the selection that peeks at the evaluation half."""
    assert _overclaims(LeakySplitAuditor, eps) > MAX_OVERCLAIMS


# ---------------------------------------------------------------------------
# sensitivities: brute force over neighbouring record sets, through the mechanisms' own code


class FakeOracle:
    """Deterministic per-ensemble answers: a function of how many A and B records the prompt holds.

    key = (#A - #B); RNM votes class key mod 3 (one-hot, so sampling is
    deterministic); ESA "generates" the prompt itself and embeds it as
    EMBEDDINGS[key mod 4], whose norms lie above and below the clip norm.
    """

    n_outcomes = 3  # two labels + "other"
    EMBEDDINGS = np.array([[3.0, 0.0, 0.0], [0.0, 0.2, 0.0], [-2.0, 0.0, 0.0], [0.5, 0.5, 0.5]])

    @staticmethod
    def _key(prompt: str) -> int:
        return prompt.count("<A>") - prompt.count("<B>")

    def label_distribution(self, prompt):
        p = np.zeros(self.n_outcomes)
        p[self._key(prompt) % self.n_outcomes] = 1.0
        return p

    def sample_texts(self, prompts, rng):
        return list(prompts)

    def embed(self, texts):
        return np.array([self.EMBEDDINGS[self._key(t) % 4] for t in texts])


UNIVERSE = ("<A>", "<B>", "<C>")
M, SHOTS, N_RECORDS = 2, 2, 4  # m ensembles of `shots` records; one position is unused
SEEDS = (0, 1)


def _records(task: str, marks) -> list[dict]:
    if task == "classify":
        return [{"text": t, "label": "objective"} for t in marks]
    return [{"dialogue": t, "summary": "s"} for t in marks]


def _pre_noise(mech, task, marks, seed, groups, monkeypatch) -> np.ndarray:
    """The mechanism's aggregate before noise (sigma = 0): RNM histogram, ESA sum of clipped embeddings."""
    if groups is not None:  # pin the ensemble partition (the coupling of an add/remove pair)
        monkeypatch.setattr(mechanisms, "partition", lambda *a, **k: groups)
    rel = mech.release(
        FakeOracle(), AuditFormat.builtin(task), _records(task, marks), "Query:", 1, np.random.default_rng(seed)
    )
    monkeypatch.undo()
    return rel.signal * (M if task == "generate" else 1)  # ESA releases the (noisy) sum / m


def _neighbour_changes(mech, task, monkeypatch) -> dict:
    """Max ||f(D) - f(D')||_2 over all neighbours, per relation.

    REPLACE: same positions, same partition seed, one record swapped.
    ADD_REMOVE: D' = D + [x]. The partition of D' is the real one; D's is the
    same with x's position (if used) given to an unused record of D, which
    maps uniform partitions of D' onto uniform partitions of D, so the
    mechanism's output distributions are compared under that coupling.
    """
    partition = mechanisms.partition
    worst = {Neighbouring.REPLACE: 0.0, Neighbouring.ADD_REMOVE: 0.0}
    for marks in itertools.product(UNIVERSE, repeat=N_RECORDS):
        for seed in SEEDS:
            base = _pre_noise(mech, task, marks, seed, None, monkeypatch)
            for i, other in itertools.product(range(N_RECORDS), UNIVERSE):
                if other != marks[i]:
                    swapped = marks[:i] + (other,) + marks[i + 1 :]
                    change = np.linalg.norm(_pre_noise(mech, task, swapped, seed, None, monkeypatch) - base)
                    worst[Neighbouring.REPLACE] = max(worst[Neighbouring.REPLACE], change)
            big_groups = partition(N_RECORDS + 1, M, SHOTS, np.random.default_rng(seed))
            unused = sorted(set(range(N_RECORDS)) - set(big_groups.ravel().tolist()))
            small = (
                [big_groups]
                if N_RECORDS not in big_groups
                else [np.sort(np.where(big_groups == N_RECORDS, y, big_groups), axis=1) for y in unused]
            )
            for x in UNIVERSE:
                bigger = _pre_noise(mech, task, marks + (x,), seed, big_groups, monkeypatch)
                for groups in small:
                    change = np.linalg.norm(bigger - _pre_noise(mech, task, marks, seed, groups, monkeypatch))
                    worst[Neighbouring.ADD_REMOVE] = max(worst[Neighbouring.ADD_REMOVE], change)
    return worst


def test_rnm_sensitivity_is_the_true_maximum(monkeypatch):
    mech = ReportNoisyMax(M, SHOTS, math.inf, 1e-5)
    worst = _neighbour_changes(mech, "classify", monkeypatch)
    for relation, change in worst.items():
        assert change == pytest.approx(rnm_l2_sensitivity(relation), rel=1e-12), relation
    assert mech.sensitivity == pytest.approx(worst[Neighbouring.REPLACE], rel=1e-12)
    assert mech.add_remove_sensitivity == pytest.approx(worst[Neighbouring.ADD_REMOVE], rel=1e-12)


@pytest.mark.parametrize("clip_norm", [0.5, 1.0])
def test_esa_sensitivity_is_the_true_maximum(clip_norm, monkeypatch):
    mech = EmbeddingSpaceAggregation(M, SHOTS, math.inf, 1e-5, clip_norm=clip_norm, candidates=2)
    worst = _neighbour_changes(mech, "generate", monkeypatch)
    for relation, change in worst.items():
        assert change == pytest.approx(esa_l2_sensitivity(clip_norm, relation), rel=1e-9), relation
    assert mech.sensitivity == pytest.approx(worst[Neighbouring.REPLACE], rel=1e-9)
    assert mech.add_remove_sensitivity == pytest.approx(worst[Neighbouring.ADD_REMOVE], rel=1e-9)


# ---------------------------------------------------------------------------
# report rows: the accounting uses these sensitivities; estimates that cannot be formed are null


def _audit_row(eps: float, ins, outs, **settings):
    from ctxlite.audit.game import make_mechanism
    from ctxlite.audit.report import report_row
    from ctxlite.audit.settings import AuditSettings

    s = AuditSettings(task="classify", mechanism="rnm", epsilons=(eps,), ensembles=2, shots=2, trials=40, **settings)
    return s, report_row(s, make_mechanism(s, eps), eps, ins, outs, None)


def test_row_epsilon_subsampled_uses_add_remove_sensitivity():
    """Through the audit row: RNM at eps = 1 over one unsubsampled query reports 1.000 (0.684 before)."""
    rng = np.random.default_rng(0)
    _, row = _audit_row(1.0, rng.normal(1, 1, 20), rng.normal(0, 1, 20), accounting_queries=1)
    assert row["sigma"] == pytest.approx(analytic_gaussian_sigma(1.0, 1e-5, math.sqrt(2)))
    assert row["accounting"]["sensitivity_add_remove"] == pytest.approx(math.sqrt(2))
    assert row["epsilon_subsampled"] == pytest.approx(1.0, abs=5e-3)
    _, row = _audit_row(4.0, rng.normal(1, 1, 20), rng.normal(0, 1, 20), accounting_queries=100, sampling_rate=0.1)
    assert row["epsilon_subsampled"] == pytest.approx(6.10, abs=5e-3)


def test_row_with_fewer_out_trials_than_one_over_fpr_is_strict_json():
    from ctxlite.audit.report import AuditReport

    rng = np.random.default_rng(1)
    ins, outs = rng.normal(3, 1, 30), rng.normal(0, 1, 5)  # 5 OUT trials < 1/FPR = 10
    s, row = _audit_row(1.0, ins, outs)
    json.dumps(row, allow_nan=False)
    for key in ("epsilon_point", "epsilon_gdp"):
        assert row[key] is None
        assert "fewer than 1/FPR = 10 OUT trials (n_out = 5)" in row["reasons"][key]
    assert math.isfinite(row["epsilon_lower_bound"])  # the bound is always formed
    assert row["epsilon_gdp_kind"] == "model-based estimate, not a bound"
    # the non-private setting: only its theoretical epsilons are infinite, written as "inf"
    s_inf, row_inf = _audit_row(math.inf, ins, outs)
    assert row_inf["epsilon"] == row_inf["epsilon_per_trial"] == math.inf
    report = AuditReport(
        settings=s.params(),
        canary={},
        query={},
        rows=[row, row_inf],
        epsilon_kind="per-query",
        utility_metric="accuracy",
        private_size=4,
    )
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["rows"][0]["epsilon_point"] is None and data["rows"][1]["epsilon"] == "inf"
    table = report.table()
    assert "n/a" in table and "n/a: eps_pt at eps = 1: fewer than 1/FPR = 10 OUT trials" in table
    assert "gdp_est = GDP estimate (model-based, not a bound)" in table


def test_row_on_perfect_separation_is_null_with_reason():
    ins, outs = np.linspace(10, 11, 40), np.linspace(0, 1, 40)  # enough OUT trials, but TPR = 1 at FPR 0.1
    _, row = _audit_row(2.0, ins, outs)
    json.dumps(row, allow_nan=False)
    assert row["tpr"] == 1.0 and row["epsilon_point"] is None and row["epsilon_gdp"] is None
    assert "empirical TPR 1" in row["reasons"]["epsilon_point"]
    assert row["epsilon_lower_bound"] > 0


def test_row_estimates_are_kept_when_they_can_be_formed():
    rng = np.random.default_rng(2)
    _, row = _audit_row(2.0, rng.normal(1, 1, 200), rng.normal(0, 1, 200))
    assert row["reasons"] == {}
    assert math.isfinite(row["epsilon_point"]) and math.isfinite(row["epsilon_gdp"])
    assert row["threshold"] is not None and row["lower_bound_counts"]["threshold"] is not None
