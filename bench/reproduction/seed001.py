"""Seed 001's claims (ContextLeak; Choi et al., 2025), measured with ``ctxlite.audit.run_audit`` on the
default model and the bundled private sets (``ctxlite/data/classify_sample.jsonl``, 128 reviews
labelled subjective/objective; ``dialogue_sample.jsonl`` for generation).

An audit's verdict is its certified ε: the Clopper–Pearson lower bound at 95 % confidence
(corner-grid threshold, the audit's default), which rejects "no leakage" exactly when it is above
0. The paper's own number, the point ε̂ at FPR 0.1, is reported beside it, as is the audited
pair's exact ε (or an upper bound for RNM) from the model's answer distributions: the most any
audit of that pair could certify.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from importlib import resources

import numpy as np

from .framework import (
    NOT_REPRODUCED,
    REPRODUCED,
    Figure,
    RunContext,
    TestResult,
    Verdict,
    claim,
    decide,
    rank_trend,
)

PAPER = "001 ContextLeak (Choi et al., 2025)"
MODEL, JUDGE = "gemma-3-270m", "smollm2-135m-instruct"
DELTA, CONFIDENCE = 1e-5, 0.95
RNM_EPSILONS = (1.0, 2.0, 4.0, 8.0, math.inf)
JUDGE_SHOTS = 4


def _records(task: str) -> list[dict]:
    from ctxlite.audit import load_records

    name = "classify_sample.jsonl" if task == "classify" else "dialogue_sample.jsonl"
    return load_records(resources.files("ctxlite").joinpath("data", name), task)


def _audit(ctx: RunContext, **settings) -> dict:
    """The report (``AuditReport.to_dict()``) of one audit on the default model, memoised by its settings."""
    from ctxlite.audit import AuditSettings, EstimateSettings, run_audit

    s = AuditSettings(seed=ctx.seed, delta=DELTA, estimates=EstimateSettings(confidence=CONFIDENCE), **settings)

    def compute():
        judge = ctx.engine(s.judge_model) if s.judge_model else None
        embedder = ctx.engine(MODEL, embeddings=True) if s.task.value == "generate" else None
        rep = run_audit(ctx.engine(MODEL), _records(s.task.value), s, embedder=embedder, judge=judge)
        return rep.to_dict()

    return ctx.memo(("audit", json.dumps(s.params(), sort_keys=True)), compute)


def _bound_test(row: dict, name: str = "") -> TestResult:
    """The audit's certified ε as a bound test: rejects "no leakage" when the lower bound is above 0."""
    lb, counts = _num(row["epsilon_lower_bound"]), row["lower_bound_counts"]
    return TestResult(
        name or f"Clopper–Pearson ε lower bound ({row['lower_bound_method']})",
        lb,
        None,
        lb,
        counts["n_in"] + counts["n_out"],
        (lb, _num(row.get("epsilon_upper_bound"), math.inf)),
        row["confidence"],
    )


def _num(v, default: float = 0.0) -> float:
    if v is None:
        return default
    return math.inf if v == "inf" else float(v)


def _row_numbers(row: dict) -> dict:
    keys = ("audit_accuracy", "epsilon_lower_bound", "epsilon_point", "epsilon_upper_bound", "epsilon_exact", "auroc",
            "tpr", "fpr", "n_in", "n_out", "utility", "withheld_rate")  # fmt: skip
    return {k: row.get(k) for k in keys if row.get(k) is not None}


def _settings(rep: dict) -> dict:
    return {
        "model": MODEL,
        **{k: v for k, v in rep["settings"].items() if v is not None},
        "canary": rep["canary"]["kind"],
    }


NEAR_FULL = 0.9
PLAIN = {"mechanism": "none", "canary": "hex", "query": "input-output", "utility_queries": 0}
"""The no-defence audit of claim 001.1 (and the others' baseline); utility costs most of an audit's
time (20 prompts of 20 shots), so only the utility claim measures it."""
UTILITY_QUERIES = 20


@claim("001.1", PAPER, "With no defence, audits reach near-full leakage (accuracy, certified ε) with hex canaries and "
       "input-output queries.", robust=True)  # fmt: skip
def no_defence(ctx: RunContext) -> Verdict:
    rep = _audit(ctx, **PLAIN, trials=ctx.size(200, 400))
    row = rep["rows"][0]
    test = _bound_test(row)
    outcome, reason = decide(test, ctx.alpha, "the audit certifies leakage")
    acc = row["audit_accuracy"]
    if outcome == REPRODUCED and acc < NEAR_FULL:
        outcome, reason = (
            NOT_REPRODUCED,
            f"leakage is certified but accuracy {acc:.2f} is short of near-full ({NEAR_FULL})",
        )
    elif outcome == REPRODUCED:
        reason += f"; audit accuracy {acc:.2f} (optimistic: threshold chosen on the same trials)"
    return Verdict(outcome, reason, numbers=_row_numbers(row), test=test, settings=_settings(rep))


@claim("001.2a", PAPER, "Prompt defences L1/L2 do not stop canary audits.", robust=True)
def prompt_defences(ctx: RunContext) -> Verdict:
    numbers, lows, reps = {}, {}, {}
    for level in ("prompt-l1", "prompt-l2"):
        reps[level] = _audit(ctx, **{**PLAIN, "mechanism": level}, trials=ctx.size(200, 400))
        row = reps[level]["rows"][0]
        lows[level] = _bound_test(row)
        numbers |= {f"{level} {k}": v for k, v in _row_numbers(row).items()}
    weakest = min(lows, key=lambda k: lows[k].effect)
    outcome, reason = decide(lows[weakest], ctx.alpha, "both prompt defences leave leakage the audit certifies")
    return Verdict(
        outcome,
        reason + f" (the weaker, {weakest}, decides)",
        numbers=numbers,
        test=lows[weakest],
        settings=_settings(reps["prompt-l2"]),
    )


@claim("001.2b", PAPER, "The LLM judge (L3) blocks prompt injection more often than canary queries.")
def judge_blocks(ctx: RunContext) -> Verdict:
    from scipy.stats import fisher_exact

    # what is counted is the trials' own outputs the judge withholds: the detector's reference runs
    # (16 by default, each generating as much as a trial) and the utility queries change no count.
    # The judge reads every output against every private record: 4 shots, not the default 20 (at 20,
    # 40 trials ran over 34 minutes on a core without finishing); the canary is one of the 4.
    trials = ctx.size(16, 40)
    common = dict(mechanism="judge", task="generate", canary="hex", trials=trials, judge_model=JUDGE, shots=JUDGE_SHOTS,
                  reference_runs=1, utility_queries=0)  # fmt: skip
    reps = {attack: _audit(ctx, attack=attack, **common) for attack in ("injection", "canary")}
    blocked = {}
    for attack, rep in reps.items():
        rate = rep["rows"][0]["withheld_rate"]
        n = rep["rows"][0]["n_in"] + rep["rows"][0]["n_out"]
        overall = (rate["in"] * rep["rows"][0]["n_in"] + rate["out"] * rep["rows"][0]["n_out"]) / n
        blocked[attack] = (
            int(round(overall * n * rep["settings"]["queries_per_trial"])),
            n * rep["settings"]["queries_per_trial"],
        )
    (bi, ni), (bc, nc) = blocked["injection"], blocked["canary"]
    res = fisher_exact([[bi, ni - bi], [bc, nc - bc]], alternative="greater")
    test = TestResult("Fisher's exact test (one-sided), outputs withheld: injection vs canary",
                      float(res.statistic), float(res.pvalue), bi / ni - bc / nc, ni + nc)  # fmt: skip
    outcome, reason = decide(test, ctx.alpha, "the judge withholds injection answers more often than canary answers")
    return Verdict(
        outcome,
        reason + f"; the 135M judge ({JUDGE}) withholds {bi}/{ni} injection and {bc}/{nc} canary answers",
        numbers={"withheld injection": bi / ni, "withheld canary": bc / nc, "outputs": [ni, nc]},
        test=test,
        settings=_settings(reps["canary"]) | {"judge": JUDGE},
    )


def _rnm(ctx: RunContext) -> dict:
    """The RNM sweep over ``RNM_EPSILONS``: hex canary, greedy votes (so a trial's randomness is the
    mechanism's noise alone and the release is the Gaussian mechanism on the vote histogram), scored
    on the noisy count of the canary's label."""
    return _audit(ctx, mechanism="rnm", temperature=0, canary="hex", query="input-output", detector="count",
                  epsilons=RNM_EPSILONS, trials=ctx.size(200, 400), utility_queries=UTILITY_QUERIES)  # fmt: skip


def gaussian_trials(pair_epsilon: float) -> int | None:
    """The fewest trials with which the corner-grid bound certifies ε > 0 (at the expected counts, so
    about half the time) against a Gaussian pair whose ε at ``DELTA`` is ``pair_epsilon``: μ solves
    ε_μ(δ) = ``pair_epsilon``, and the test at each FPR of a grid has TPR = Φ(μ − Φ⁻¹(1 − FPR));
    the best FPR counts. RNM with certain votes is exactly such a pair."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    from ctxlite.privacy.estimators import gdp_epsilon
    from ctxlite.privacy.power import trials_to_certify

    mu = brentq(lambda m: gdp_epsilon(m, DELTA) - pair_epsilon, 1e-3, 50.0)
    best = None
    for fpr in np.geomspace(1e-3, 0.5, 60):
        tpr = float(norm.sf(norm.isf(fpr) - mu))
        n = trials_to_certify(0.0, tpr, float(fpr), alpha=1 - CONFIDENCE, delta=DELTA)
        if n is not None and (best is None or n < best):
            best = n
    return best


def _power(rows: list[dict]) -> dict:
    """Per finite ε, for the audited pair (its ε: the report's upper bound, at most the theoretical
    ε): the fewest trials with which the corner-grid bound could certify ε > 0, at the (ε, δ) corner
    (the most distinguishable rates any pair allows: a lower estimate) and for a Gaussian pair of
    that ε (RNM's own shape: the estimate to plan by)."""
    from ctxlite.privacy.power import dp_corner, trials_to_certify

    out = {}
    for row in rows:
        eps = _num(row["epsilon"], math.inf)
        pair = min(_num(row.get("epsilon_upper_bound"), math.inf), eps)
        if math.isfinite(pair):
            corner = trials_to_certify(0.0, *dp_corner(pair, DELTA), alpha=1 - CONFIDENCE, delta=DELTA)
            out[f"{eps:g}"] = {"pair_epsilon": pair, "corner": corner, "gaussian": gaussian_trials(pair)}
    return out


def _sweep_verdict(ctx: RunContext, rep: dict, name: str, weak: str) -> Verdict:
    """A DP mechanism's ε sweep as a verdict: Spearman's trend of the certified ε over the theoretical
    ε (∞ last), and an unsound bound (above the pair's own ε) overrides it; ``weak`` says why nothing
    may be certified."""
    rows = rep["rows"]
    eps = [_num(r["epsilon"], math.inf) for r in rows]
    low = [_num(r["epsilon_lower_bound"]) for r in rows]
    test = rank_trend(list(range(len(eps))), low)  # ε = inf ranks last
    outcome, reason = decide(test, ctx.alpha, "the certified ε rises with the theoretical ε")
    over = [f"{e:g}" for e, lb, r in zip(eps, low, rows) if lb > min(e, _num(r.get("epsilon_upper_bound"), math.inf))]
    if over:
        outcome, reason = (
            NOT_REPRODUCED,
            f"the certified ε exceeds the pair's ε at ε = {', '.join(over)}: an unsound bound",
        )
    else:
        reason += "; below the theoretical ε and the pair's own ε everywhere"
    if outcome != REPRODUCED and max(low) == 0:
        acc = rows[-1]["audit_accuracy"]
        reason += (
            f". Nothing is certified at any ε, not even without noise (ε = ∞: audit accuracy {acc:.2f}): in "
            f"{rows[-1]['n_in'] + rows[-1]['n_out']} trials {weak}"
        )
    finite = [(e, lb) for e, lb in zip(eps, low) if math.isfinite(e)]
    return Verdict(
        outcome,
        reason,
        numbers={
            "theoretical ε": [f"{e:g}" for e in eps],
            "certified ε (lower bound)": low,
            "point ε̂ at FPR 0.1": [r["epsilon_point"] for r in rows],
            "audit accuracy (optimistic)": [r["audit_accuracy"] for r in rows],
            "pair ε (upper bound)": [r.get("epsilon_upper_bound") for r in rows],
            "trials per ε": rep["settings"]["trials"],
            "fewest trials to certify > 0, per ε (corner: lower estimate; gaussian: RNM's shape)": _power(rows),
        },
        test=test,
        settings=_settings(rep),
        figures=[
            Figure(
                f"{name}: certified ε against theoretical ε",
                [
                    ("certified ε", [e for e, _ in finite], [lb for _, lb in finite]),
                    ("theoretical ε", [e for e, _ in finite], [e for e, _ in finite]),
                ],
                "theoretical ε",
                "ε",
            )
        ],  # fmt: skip
    )


@claim("001.3a", PAPER, "RNM: the certified ε increases with the theoretical ε and never exceeds it.")
def rnm_trend(ctx: RunContext) -> Verdict:
    weak = (
        "the canary barely moves its ensemble's greedy vote against the spread the re-drawn partition gives "
        "the other ensembles' votes, so this model's RNM pair is too weak to show the trend"
    )
    return _sweep_verdict(ctx, _rnm(ctx), "RNM", weak)


ESA_EPSILONS = (1.0, 8.0, math.inf)
ESA_SIZE = {"ensembles": 4, "shots": 2, "max_new_tokens": 8, "reference_runs": 1, "queries_per_trial": 1}
"""ESA (generation) at a size a 60-minute run affords: every ensemble generates its text token by token,
so the default (10 ensembles, 16 reference runs) plans 52,798 decodes for 40 trials at three ε (~2 h
on this machine, ``ctxlite audit --plan``); 4 ensembles of 2 shots, 8 new tokens, 1 reference run
and 1 query a trial plan ~3,000 decodes for 40 trials at two ε."""


@claim("001.3b", PAPER, "ESA: the certified ε increases with the theoretical ε and never exceeds it.")
def esa_trend(ctx: RunContext) -> Verdict:
    rep = _audit(ctx, mechanism="esa", task="generate", canary="hex", epsilons=ESA_EPSILONS,
                 trials=ctx.size(16, 60), utility_queries=0, **ESA_SIZE)  # fmt: skip
    weak = (
        "the canary's presence is not told apart from the texts of re-drawn partitions even without noise "
        "(the canary is in one of 4 ensembles), so this model's ESA pair at this size is too weak to show the trend"
    )
    return _sweep_verdict(ctx, rep, "ESA", weak)


@claim("001.4", PAPER, "RNM utility rises with ε and stays below non-private ICL.")
def rnm_utility(ctx: RunContext) -> Verdict:
    rows = _rnm(ctx)["rows"]
    plain = _audit(ctx, **{**PLAIN, "utility_queries": UTILITY_QUERIES}, trials=ctx.size(200, 400))["rows"][0]
    eps = [_num(r["epsilon"], math.inf) for r in rows]
    util = [float(r["utility"]) for r in rows]
    test = rank_trend(list(range(len(eps))), util)
    outcome, reason = decide(test, ctx.alpha, "utility rises with ε")
    above = [f"{e:g}" for e, u in zip(eps, util) if math.isfinite(e) and u > plain["utility"]]
    if outcome == REPRODUCED and above:
        outcome, reason = (
            NOT_REPRODUCED,
            f"utility at ε = {', '.join(above)} is above non-private ICL's {plain['utility']:.2f}",
        )
    return Verdict(
        outcome,
        reason + f"; non-private ICL (no mechanism, 20 shots) {plain['utility']:.2f}",
        numbers={
            "theoretical ε": [f"{e:g}" for e in eps],
            "utility (accuracy on held-out queries)": util,
            "non-private ICL utility": plain["utility"],
        },  # fmt: skip
        test=test,
        settings=_settings(_rnm(ctx)),
    )


@claim("001.5", PAPER, "More trials narrow the audit's spread (50 / 100 / 400 trials).")
def spread(ctx: RunContext) -> Verdict:
    from scipy.stats import f as f_dist

    seeds, counts = ctx.size(4, 8), (50, 100, 400)
    acc = {n: [] for n in counts}
    for n in counts:
        for seed in range(seeds):
            sub = replace(ctx, seed=ctx.seed + seed, _memo=ctx._memo, _engines=ctx._engines)
            rep = _audit(sub, **PLAIN, trials=n)
            acc[n].append(rep["rows"][0]["audit_accuracy"])
    v_small, v_large = np.var(acc[50], ddof=1), np.var(acc[400], ddof=1)
    if v_large > 0:
        ratio = v_small / v_large
        p = float(f_dist.sf(ratio, seeds - 1, seeds - 1))
    else:  # no spread at 400 trials: narrower than at 50 only if there is some at 50 (then no F is needed)
        ratio, p = (math.inf, 0.0) if v_small > 0 else (1.0, 1.0)
    test = TestResult("F test of variances (one-sided), audit accuracy at 50 vs 400 trials", ratio, p,
                      float(np.sqrt(v_small) - np.sqrt(v_large)), seeds)  # fmt: skip
    outcome, reason = decide(test, ctx.alpha, "the audit accuracy spreads less over seeds with 400 trials than with 50")
    reason += (
        "; a seed draws the canary and the private set too, so this spread mixes the audited pairs' own "
        "differences with the trials' (a fixed pair with re-seeded trials would isolate the latter)"
    )
    return Verdict(
        outcome,
        reason,
        numbers={f"audit accuracy sd over {seeds} seeds, {n} trials": float(np.std(acc[n], ddof=1)) for n in counts}
        | {f"audit accuracy mean, {n} trials": float(np.mean(acc[n])) for n in counts},
        test=test,
        settings={
            "model": MODEL,
            "mechanism": "none",
            "canary": "hex",
            "seeds": list(range(ctx.seed, ctx.seed + seeds)),
            "trials": list(counts),
        },  # fmt: skip
        figures=[
            Figure(
                "Audit accuracy spread against trials",
                [("sd over seeds", list(counts), [float(np.std(acc[n], ddof=1)) for n in counts])],
                "trials",
                "sd of audit accuracy",
            )
        ],  # fmt: skip
        data={str(n): acc[n] for n in counts},
    )
