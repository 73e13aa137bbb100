#!/usr/bin/env python3
"""Mutation check of the test suite: does each curated bug make the tests that should see it fail?

Every mutant is one exact text substitution in the core (Python or C). The
script copies the working tree (``git ls-files`` plus untracked, non-ignored
files, plus the built ``ctxlite/runtime/_kernels*.so``) into a temporary directory and
never touches the shared tree. For each mutant it applies the substitution in
the copy, rebuilds the C extension there when a C file changed, runs the
mutant's test selection with ``pytest -x -q`` under a timeout, and restores
the file (and the original extension). It prints one line per mutant and a
final ``killed=K survived=S not_applicable=N``:

* KILLED   the selection failed (or timed out) with the mutant in place;
* SURVIVED the selection passed: the tests cannot see this bug;
* N/A      the mutant's target snippet is not in the file (the code moved on:
           update the mutant), or its selection did not pass before mutation.

Before the mutants it checks that the copy is what gets imported (a probe
mutation must break a test) and that every selection passes unmutated.

    python tools/mutants.py               # all mutants (make mutants)
    python tools/mutants.py --list        # what would run
    python tools/mutants.py --only A1,K2  # some of them
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = "ctxlite/runtime"  # where ``setup.py build_ext --inplace`` puts the cffi extension


@dataclass(frozen=True)
class Mutant:
    id: str
    path: str  # file inside the repository
    old: str  # exact snippet (must occur exactly once)
    new: str
    tests: tuple[str, ...]
    k: str | None  # pytest -k expression, None for whole files
    what: str

    @property
    def is_c(self) -> bool:
        return self.path.endswith((".c", ".h"))

    @property
    def selection(self) -> tuple:
        return self.tests, self.k


GAME = "tests/model/test_audit_game.py"
AUDIT = "tests/model/test_audit.py"
KERN = "tests/unit/runtime/test_kernels.py"
INFL = "tests/model/test_influence.py"
NGRAM = "tests/model/test_ngrams.py"
EST = "tests/unit/privacy/test_estimators.py"
SOUND = "tests/unit/privacy/test_soundness.py"
CAL = "tests/unit/privacy/test_calibration.py"
ENG = "tests/model/test_engine.py"
REC = "tests/unit/core/test_records.py"
IDENT = "tests/model/test_identity.py"
BAD = "tests/model/test_bad_inputs.py"
REG = "tests/unit/influence/test_regurgitation.py"
NOISE = "tests/model/test_noise.py"
GATES = "tests/unit/core/test_gates.py"
VERDICTS = "tests/model/test_influence_verdicts.py"
FLOOR_GATE = "measured_floor or estimate_from_probes or stored_log or server_backend"
MULTI = "across_blocks or rescales or walks_past"

MUTANTS: list[Mutant] = [
    # ---- the seven the review found the suite missed ---------------------------------------------
    Mutant(
        "A1",
        "ctxlite/audit/game.py",
        "        if z:\n            recs[slot] = self.canary.record(",
        "        if not z:\n            recs[slot] = self.canary.record(",
        (GAME,),
        "z1_prompts",
        "the canary is inserted into the Z = 0 trials",
    ),
    Mutant(
        "M1",
        "ctxlite/audit/mechanisms.py",
        "return bool(p_yes > p_no)",
        "return bool(p_yes < p_no)",
        (GAME,),
        "judge and not defence",
        "the judge's verdict is inverted",
    ),
    Mutant(
        "M2",
        "ctxlite/audit/mechanisms.py",
        'self.keywords = tuple(l2["filter_keywords"])',
        "self.keywords = ()",
        (GAME,),
        "withholds_keyword or injection",
        "the L2 keyword filter is disabled",
    ),
    Mutant(
        "A2",
        "ctxlite/audit/game.py",
        "return CountDetector(list(labels).index(canary_label))",
        "return CountDetector(1 - list(labels).index(canary_label))",
        (GAME,),
        "count_detector",
        "the count detector reads the other label",
    ),
    Mutant(
        "A3",
        "ctxlite/audit/report.py",
        "gdp_epsilon(math.sqrt(s.queries_per_trial) * mech.sensitivity / mech.sigma",
        "gdp_epsilon(math.sqrt(s.queries_per_trial) / mech.sigma",
        (GAME,),
        "report_figures or esa_report",
        "epsilon_per_trial ignores the sensitivity",
    ),
    Mutant(
        "C1",
        "ctxlite/privacy/calibration.py",
        "    _check_relation(relation)\n    return 2.0 * clip_norm\n",
        "    relation = _check_relation(relation)\n"
        "    return 2.0 * clip_norm if relation is Neighbouring.REPLACE else clip_norm\n",
        (GAME, CAL),
        "sensitivit or esa_report",
        "ESA's add/remove sensitivity is C instead of 2C",
    ),
    Mutant(
        "I1",
        "ctxlite/influence/scorer.py",
        "spans[c + st.ngram - 1][1]",
        "spans[c + st.ngram - 2][1]",
        (NGRAM,),
        "spans",
        "every n-gram's span is one token short",
    ),
    # ---- audit game and report -----------------------------------------------------------------
    Mutant(
        "A4",
        "ctxlite/audit/report.py",
        "gdp_epsilon(math.sqrt(s.queries_per_trial) * mech.sensitivity",
        "gdp_epsilon(s.queries_per_trial * mech.sensitivity",
        (GAME,),
        "report_figures",
        "a trial's queries compose linearly in mu instead of as sqrt(n)",
    ),
    Mutant(
        "A5",
        "ctxlite/audit/game.py",
        "if r[fmt.output] != canary.label]",
        "if r[fmt.output] == canary.label]",
        (GAME,),
        "z1_prompts",
        "the canary replaces a record with its own label",
    ),
    Mutant(
        "A6",
        "ctxlite/audit/game.py",
        "return z, seeded_rng(s.seed, 3, j)",
        "return True, seeded_rng(s.seed, 3, j)",
        (GAME,),
        "z1_prompts",
        "the OUT reference runs also hold the canary",
    ),
    Mutant(
        "A7",
        "ctxlite/audit/report.py",
        "BoundKind.SPLIT: Split(e.split_fraction, s.seed)",
        "BoundKind.SPLIT: Split(e.split_fraction, 0)",
        (GAME,),
        "report_figures",
        "the Clopper-Pearson split ignores the audit seed",
    ),
    Mutant(
        "A8",
        "ctxlite/audit/report.py",
        '"epsilon_gdp": auditor.epsilon_gdp(s.delta, e.fpr)',
        '"epsilon_gdp": auditor.epsilon_gdp(s.delta)',
        (GAME,),
        "report_figures",
        "the GDP estimate ignores the FPR target",
    ),
    Mutant(
        "A9",
        "ctxlite/audit/game.py",
        "scores.append(float(out == item[self.fmt.output]))",
        "scores.append(float(out != item[self.fmt.output]))",
        (GAME,),
        "utility",
        "utility counts the misses",
    ),
    Mutant(
        "A10",
        "ctxlite/audit/game.py",
        "z = bool(rng.random() < 0.5)",
        "z = bool(rng.random() < 0.6)",
        (GAME,),
        "fair_coin",
        "Z is a biased coin (P(Z = 1) = 0.6)",
    ),
    Mutant(
        "A11",
        "ctxlite/audit/game.py",
        '(in_scores if rec["z"] else out_scores)',
        '(out_scores if rec["z"] else in_scores)',
        (GAME,),
        "report_figures",
        "IN and OUT scores are swapped in the estimates",
    ),
    # ---- mechanisms ----------------------------------------------------------------------------
    Mutant(
        "M3",
        "ctxlite/audit/mechanisms.py",
        "prompt = fmt.prompt(records, query, self.defense_text)",
        "prompt = fmt.prompt(records, query)",
        (GAME,),
        "defence_text",
        "the defence text is left out of the prompt",
    ),
    Mutant(
        "M4",
        "ctxlite/audit/mechanisms.py",
        "fmt.prompt([records[i] for i in group], query)",
        "fmt.prompt([records[i] for i in groups[0]], query)",
        (GAME,),
        "one_ensemble",
        "every RNM ensemble votes on the first ensemble's records",
    ),
    Mutant(
        "M5",
        "ctxlite/audit/mechanisms.py",
        "out = [OTHER if (o == replacement and o not in fmt.labels) else o for o in out]",
        "out = list(out)",
        (GAME,),
        "judge_on_labels",
        "a withheld label is not counted as 'other'",
    ),
    Mutant(
        "M6",
        "ctxlite/audit/mechanisms.py",
        "noise = rng.standard_normal(k) * self.sigma",
        "noise = rng.standard_normal(k) * self.sigma * 0.25",
        (AUDIT,),
        "calibrated_gaussian",
        "RNM adds a quarter of the calibrated noise",
    ),
    Mutant(
        "M7",
        "ctxlite/audit/mechanisms.py",
        "noise = rng.standard_normal(k) * self.sigma",
        "noise = rng.standard_normal(k) * self.sigma * 0.1",
        (AUDIT,),
        "epsilon_1",
        "RNM adds a tenth of the calibrated noise (the epsilon = 1 audit must see it)",
    ),
    # ---- detectors -----------------------------------------------------------------------------
    Mutant(
        "D1",
        "ctxlite/audit/detectors.py",
        "self.direction = (w - wo).sum(axis=0)",
        "self.direction = (wo - w).sum(axis=0)",
        (GAME,),
        "detectors_on_known or refitted",
        "the reference direction points away from the canary",
    ),
    Mutant(
        "D2",
        "ctxlite/audit/detectors.py",
        "self.offset = float((wo @ self.direction).mean())",
        "self.offset = float((w @ self.direction).mean())",
        (GAME,),
        "detectors_on_known or refitted",
        "the direction score is centred on the IN references",
    ),
    # ---- calibration -----------------------------------------------------------------------------
    Mutant(
        "C2",
        "ctxlite/privacy/calibration.py",
        "    _check_relation(relation)\n    return math.sqrt(2.0)\n",
        "    _check_relation(relation)\n    return 1.0\n",
        (CAL, GAME),
        "sensitivit or report_figures",
        "RNM's sensitivity is 1 instead of sqrt(2)",
    ),
    Mutant(
        "C3",
        "ctxlite/privacy/calibration.py",
        "    return ratio * sensitivity\n",
        "    return ratio\n",
        (CAL,),
        None,
        "the analytic sigma ignores the sensitivity",
    ),
    # ---- estimators ------------------------------------------------------------------------------
    Mutant(
        "E1",
        "ctxlite/privacy/estimators.py",
        "    half = alpha / 2.0\n    tpr_lo = _cp_lower(tp, n_in, half)",
        "    half = alpha\n    tpr_lo = _cp_lower(tp, n_in, half)",
        (EST,),
        None,
        "Clopper-Pearson spends alpha on each of the two rates",
    ),
    Mutant(
        "E2",
        "ctxlite/privacy/estimators.py",
        "        tp = self._count_at_least(in_eval, t)",
        "        tp = self._count_at_least(in_sel, t)",
        (EST,),
        None,
        "the split bound counts true positives on the selection half",
    ),
    Mutant(
        "E3",
        "ctxlite/privacy/estimators.py",
        "ok = fp / self.n_out <= fpr + 1e-12",
        "ok = fp / self.n_out < fpr",
        (EST,),
        None,
        "the FPR target is treated as strict",
    ),
    Mutant(
        "E4",
        "ctxlite/privacy/estimators.py",
        "return float(special.ndtri(tpr) - special.ndtri(fpr))",
        "return float(special.ndtri(fpr) - special.ndtri(tpr))",
        (EST,),
        None,
        "GDP mu has the wrong sign",
    ),
    # ---- C kernels -------------------------------------------------------------------------------
    Mutant(
        "K1",
        "csrc/logits.c",
        "s->sum += block_sumexp_f32(x, n, (float)s->max, (float)(1.0 / t));",
        "s->sum += block_sumexp_f32(x, n, bm, (float)(1.0 / t));",
        (KERN,),
        MULTI,
        "log-sum-exp sums a later piece against its own max",
    ),
    Mutant(
        "K2",
        "csrc/logits.c",
        "s->sum *= exp((s->max - new_max) / t);",
        "s->sum *= 1.0;",
        (KERN,),
        MULTI,
        "log-sum-exp does not rescale when a later piece is larger",
    ),
    Mutant(
        "K3",
        "csrc/logits.c",
        "sz.sum += block_sumexp_f64(z, n, sz.max, 1.0 / t);",
        "sz.sum += block_sumexp_f64(z, n, zm, 1.0 / t);",
        (KERN,),
        MULTI,
        "mixed log-sum-exp sums a later piece against its own max",
    ),
    Mutant(
        "K4",
        "csrc/logits.c",
        "            acc += block;\n            continue;",
        "            continue;",
        (KERN,),
        MULTI,
        "the sampler forgets the mass of the pieces it skips",
    ),
    Mutant(
        "K5",
        "csrc/mechanisms.c",
        "if (out_noisy[j] > out_noisy[best])",
        "if (out_noisy[j] >= out_noisy[best])",
        (KERN,),
        "noisy_histogram",
        "report-noisy-max breaks ties towards the highest class",
    ),
    Mutant(
        "K6",
        "csrc/mechanisms.c",
        "? clip_norm / (s * u) : 1.0;",
        "? clip_norm / s : 1.0;",
        (KERN,),
        "embed_aggregate",
        "ESA clips by the largest entry instead of the L2 norm",
    ),
    Mutant(
        "K7",
        "ctxlite/runtime/kernels.py",
        "rows = np.ascontiguousarray(flags != 0, dtype=np.uint8)",
        "rows = np.ascontiguousarray(flags == 0, dtype=np.uint8)",
        (KERN,),
        "logprob_gather",
        "per-row bans apply to the unflagged rows",
    ),
    # ---- engine ----------------------------------------------------------------------------------
    Mutant(
        "G1",
        "ctxlite/runtime/engine.py",
        "        self.clear()\n"
        "        self.decode_sequence(tokens, BASE_SEQ, 0, targets_from - 1, on_rows, len(tokens) - 1)\n"
        "\n    def logprobs(",
        "        self.clear()\n        self.decode_sequence(tokens, BASE_SEQ, 0, targets_from, on_rows, len(tokens))\n"
        "\n    def logprobs(",
        (ENG,),
        "teacher_forcing",
        "teacher forcing hands over the rows one token late",
    ),
    Mutant(
        "G2",
        "ctxlite/runtime/backend.py",
        "n_chars += len(decoder.decode(token_bytes(t)))",
        "n_chars += len(token_bytes(t))",
        (ENG, NGRAM),
        "spans",
        "character spans count bytes",
    ),
    Mutant(
        "G3",
        "ctxlite/runtime/engine.py",
        "reusable = min(shared, self.kv.valid)",
        "reusable = min(shared, self.kv.valid) + 1",
        (ENG,),
        "out_of_order",
        "a variant keeps one stale base token in the cache",
    ),
    # ---- influence -------------------------------------------------------------------------------
    Mutant(
        "N1",
        "ctxlite/runtime/kv.py",
        "            self.valid = min(self.valid, canonical_upto)\n",
        "            pass\n",
        (NOISE,),
        "leave_the_reuse_path_canonical or never_reused_as_canonical",
        "a probe's cells, decoded in another tiling, are reused as canonical base cells",
    ),
    Mutant(
        "N2",
        "ctxlite/influence/noise.py",
        "return 2.0 * float(sum(self.per_token))",
        "return 0.0 * float(sum(self.per_token))",
        (NOISE,),
        "covers_the_rounding",
        "the noise floor reads 0 whatever the probes measured (issue 24)",
    ),
    Mutant(
        "V1",
        "ctxlite/gates.py",
        "    if floor_measured(result) is not None:\n        return None\n",
        "    if floor_measured(result) is not None:\n        return 0.0\n",
        (GATES, VERDICTS),
        FLOOR_GATE,
        "an unmeasured floor reads as an uncertainty of 0, so a pass ignores rounding between builds (issue 24)",
    ),
    Mutant(
        "V2",
        "ctxlite/gates.py",
        "    if floor.method != RETILED or not floor.per_token:\n",
        "    if not floor.per_token:\n        return None  # an older floor: its max\n    if False:\n",
        (GATES, VERDICTS),
        FLOOR_GATE,
        "an older null-ablation floor (0 by construction) counts as a measured one",
    ),
    Mutant(
        "V3",
        "ctxlite/gates.py",
        "    if not any(floor.per_token):\n",
        "    if False:\n",
        (GATES,),
        FLOOR_GATE,
        "probes that reproduced the canonical decode bit for bit count as a measured floor of 0",
    ),
    Mutant(
        "V4",
        "ctxlite/gates.py",
        '"re-decoded in other batch tilings, an estimate of the rounding between builds, not a bound on "\n'
        '        "another build\'s rounding",',
        '"re-decoded in other batch tilings",',
        (GATES, VERDICTS),
        FLOOR_GATE,
        "a pass no longer says its floor is an estimate, not a bound",
    ),
    Mutant(
        "I2",
        "ctxlite/influence/scorer.py",
        "    ranges = [tuple(span)] if isinstance(span[0], int) else sorted(tuple(r) for r in span)\n",
        "    ranges = [(span[0], span[1] - 1)] if isinstance(span[0], int) else sorted(tuple(r) for r in span)\n",
        (INFL,),
        "scorer_matches",
        "an ablation removes n - 1 tokens",
    ),
    Mutant(
        "I3",
        "ctxlite/influence/scorer.py",
        'for key, lam in (("steps", self.step_lambdas[t]), (1.0, 1.0)):',
        'for key, lam in (("steps", self.step_lambdas[0]), (1.0, 1.0)):',
        (INFL,),
        "generated_response",
        "epsilon-bounded CID scores every token (and every ablation) with the first step's lambda",
    ),
    Mutant(
        "I4",
        "ctxlite/influence/scorer.py",
        "doc_tau = np.abs(lp - passes.logp_without)",
        "doc_tau = np.abs(lp - base[1.0])",
        (INFL,),
        "lambda_one or generated_response",
        "document influence is measured against lambda = 1",
    ),
    Mutant(
        "I5",
        "ctxlite/influence/scorer.py",
        "ban_rows=ban, generation=gen, step_lambdas=lams",
        "ban_rows=None, generation=gen, step_lambdas=lams",
        (INFL,),
        "generated_response or banned_eos",
        "a generated response is scored without the EOS ban",
    ),
    Mutant(
        "I6",
        "ctxlite/influence/scorer.py",
        "if starts[-1] + n < n_tokens:",
        "if starts[-1] + n < n_tokens - 1:",
        (NGRAM,),
        "not spans",
        "the tail window is dropped when one token is left over",
    ),
    # ---- run identity and clean failures -----------------------------------------------------------
    Mutant(
        "R1",
        "ctxlite/records.py",
        'if rec is None or (input_hash is not None and rec.get("input") != input_hash):',
        "if rec is None:",
        (REC, IDENT),
        "reused_only or one_character",
        "a logged result is reused for another input",
    ),
    Mutant(
        "R2",
        "ctxlite/runs/score.py",
        "        if len(log) and not self.reused:",
        "        if False:",
        (IDENT,),
        "another_data_file or single_example",
        "a log of another input is not refused",
    ),
    Mutant(
        "R3",
        "ctxlite/audit/settings.py",
        '"data": content_hash(list(records)),',
        '"data": None,',
        (IDENT,),
        "audit_resume",
        "the audit identity leaves out the record set",
    ),
    Mutant(
        "R4",
        "ctxlite/records.py",
        '        return raw.decode("utf-8").removeprefix("\\ufeff")',
        '        return raw.decode("utf-8")',
        (REC,),
        "byte_order_mark",
        "a UTF-8 BOM is read as content",
    ),
    Mutant(
        "R5",
        "ctxlite/runtime/engine.py",
        "    return not _InterruptDuringLoad.pending",
        "    return True",
        (BAD,),
        "during_model_load",
        "Ctrl-C during the model load does not abort it",
    ),
    Mutant(
        "R6",
        "ctxlite/runtime/engine.py",
        "        if self.config.n_ctx > self.n_ctx_train:",
        "        if False:",
        (BAD,),
        "trained",
        "a context window beyond the trained one is accepted",
    ),
    Mutant(
        "R7",
        "ctxlite/influence/regurgitation.py",
        '            if category[0] == "S" and not ch.isascii():',
        "            if False:",
        (REG,),
        "any_script or emoji",
        "emoji are dropped from ROUGE tokens",
    ),
    Mutant(
        "E20",
        "ctxlite/privacy/estimators.py",
        "        return alpha / k\n",
        "        return alpha\n",
        (SOUND,),
        "loose_level",
        "Bonferroni, the corner grid and the multi-split drop their alpha correction",
    ),
    Mutant(
        "E21",
        "ctxlite/privacy/estimators.py",
        "        tp_used = np.r_[tp[lowest], self.n_in - c_in]",
        "        tp_used = np.r_[tp[lowest], tp[lowest]]",
        (EST,),
        "corner_grid or randomises",
        "the corner grid's B corners are bounded with the A corners' counts",
    ),
    Mutant(
        "E22",
        "ctxlite/privacy/estimators.py",
        "            order = np.lexsort((tie_break, scores))",
        "            order = np.lexsort((np.arange(scores.size), scores))",
        (EST,),
        "corner_grid or randomises",
        "the corner grid's ties are broken in input order, not at random",
    ),
    Mutant(
        "E23",
        "ctxlite/privacy/one_run.py",
        "    return alpha / k\n",
        "    return alpha\n",
        (SOUND,),
        "one_run_bounds_sound",
        "one-run auditing tries every guess count at the full alpha",
    ),
    Mutant(
        "E24",
        "ctxlite/privacy/one_run.py",
        "    if check_inclusion and p_incl < INCLUSION_LEVEL:",
        "    if False:",
        (SOUND,),
        "unfair_inclusion",
        "one-run auditing accepts canaries that were not included by fair coins",
    ),
    Mutant(
        "E25",
        "ctxlite/audit/game.py",
        "for r in (recs_in, recs_out))",
        "for r in (recs_out, recs_out))",
        (AUDIT,),
        "exact",
        "the exact privacy profile compares the private set without the canary with itself",
    ),
    Mutant(
        "E26",
        "ctxlite/audit/mechanisms.py",
        "for recs in (records_in, records_out)",
        "for recs in (records_out, records_out)",
        (AUDIT,),
        "exact",
        "rnm's exact profile reads the canary ensemble's votes without the canary on both sides",
    ),
    Mutant(
        "E27",
        "ctxlite/privacy/estimators.py",
        "np.lexsort((-plug_in, -median))",
        "np.lexsort((-median, -plug_in))",
        (EST,),
        "median_limit",
        "the split breaks tied selection bounds by the plug-in estimate first (an extreme threshold)",
    ),
    Mutant(
        "E28",
        "ctxlite/privacy/estimators.py",
        "        tnr_hi = _cp_upper(self.n_out - fp, self.n_out, alpha / 2.0)",
        "        tnr_hi = (self.n_out - fp) / self.n_out",
        (SOUND,),
        "accuracy_upper_bound_sound",
        "the accuracy upper limit ignores the TNR's sampling error",
    ),
    Mutant(
        "E29",
        "ctxlite/audit/mechanisms.py",
        "        if self.shots != 1:\n            return False",
        "        if self.shots != 1:\n            return True",
        (SOUND,),
        "nothing_is_hidden",
        "rnm's vote-pair profile is called exact although the partner group is hidden",
    ),
    Mutant(
        "E30",
        "ctxlite/audit/report.py",
        "    if not changed:\n        return None",
        "    if True:\n        return None",
        (SOUND,),
        "rereport",
        "a log re-reported under another bound method or confidence says nothing",
    ),
    Mutant(
        "R8",
        "ctxlite/cli/options.py",
        "        if unencodable(value):",
        "        if False:",
        (BAD,),
        "non_utf8",
        "non-UTF-8 arguments are accepted",
    ),
    # ---- adaptive search (issue 13) ----------------------------------------------------------------
    Mutant(
        "S1",
        "ctxlite/influence/search.py",
        "tau[node] >= rule.refine_ratio * kth",
        "tau[node] >= 2 * kth",
        ("tests/unit/influence/test_search.py",),
        "monotone",
        "blocks are refined only at twice the K-th n-gram's influence, not ρ times it",
    ),
    Mutant(
        "S2",
        "ctxlite/influence/search.py",
        "            if out.ablations + len(frontier) + len(kids) > budget:",
        "            if False:",
        ("tests/unit/influence/test_search.py",),
        "budget or monotone",
        "the ablation budget (exhaustive search's count) is ignored",
    ),
    Mutant(
        "S3",
        "ctxlite/influence/scorer.py",
        "                if j == i + 1:\n                    kept[windows[i]] = out",
        "                if j >= i + 1:\n                    kept[windows[i]] = out",
        ("tests/model/test_search_model.py",),
        "planted",
        "a block's log-probabilities are reported as its first n-gram's",
    ),
    Mutant(
        "L1",
        "ctxlite/records.py",
        "            if claimed is None or claimed != link(head, body):",
        "            if claimed is None:",
        (REC,),
        "broken_chain",
        "a log line's hash is read but never checked against the line before it",
    ),
    Mutant(
        "L2",
        "ctxlite/records.py",
        """        if held is not None and (held.get("input") is None or held.get("input") == body.get("input")):""",
        """        if held is not None and held.get("input") is not None and held.get("input") == body.get("input"):""",
        (REC,),
        "held_twice",
        "a second record of an audit key (no input hash) silently supersedes the first",
    ),
    Mutant(
        "L3",
        "ctxlite/lock.py",
        "                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)",
        "                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)",
        (REC,),
        "write_lock",
        "the write lock is shared: two writers hold it at once",
    ),
]

PROBE = Mutant(
    "P0",
    "ctxlite/influence/scorer.py",
    "    starts = list(range(0, n_tokens - n + 1, stride))\n",
    "    starts = list(range(0, n_tokens - n + 1, stride))[:1]\n",
    (NGRAM,),
    "hand_examples",
    "probe: the copy, not the shared tree, is what the tests import",
)


# --------------------------------------------------------------------------


def copy_tree(dest: Path) -> None:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for rel in filter(None, out.split("\0")):
        src = ROOT / rel
        if src.is_file():  # (a file deleted in the working tree is still in the index)
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    built = sorted((ROOT / KERNELS).glob("_kernels*.so"))
    if not built:
        sys.exit("ctxlite/runtime/_kernels*.so is not built: run `make install` first")
    for so in built:
        shutil.copy2(so, dest / KERNELS / so.name)


def env_for(copy: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(copy) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_selection(copy: Path, m: Mutant, timeout: float) -> tuple[str, float, str]:
    """('pass' | 'fail' | 'timeout' | 'error', seconds, last output lines)."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *m.tests]
    if m.k:
        cmd += ["-k", m.k]
    t0 = time.monotonic()
    try:
        res = subprocess.run(cmd, cwd=copy, env=env_for(copy), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - t0, ""
    dt = time.monotonic() - t0
    tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-3:])
    if res.returncode == 0:
        return "pass", dt, tail
    if res.returncode in (1, 2):  # 2: an import or collection error caused by the mutant
        return "fail", dt, tail
    return "error", dt, tail  # 3/4: pytest itself failed, 5: nothing selected


def build_kernels(copy: Path) -> tuple[bool, str]:
    for so in (copy / KERNELS).glob("_kernels*.so"):
        so.unlink()
    res = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=copy,
        env=env_for(copy),
        capture_output=True,
        text=True,
    )
    ok = res.returncode == 0 and any((copy / KERNELS).glob("_kernels*.so"))
    return ok, (res.stdout + res.stderr)[-2000:]


def check_import(copy: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-c", "import ctxlite, ctxlite.runtime.kernels; print(ctxlite.__file__)"],
        cwd=copy,
        env=env_for(copy),
        capture_output=True,
        text=True,
    )
    where = Path(res.stdout.strip()).resolve() if res.returncode == 0 else None
    if where is None or copy.resolve() not in where.parents:
        sys.exit(f"the copy's ctxlite is not the one imported ({res.stdout.strip() or res.stderr[-500:]})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated mutant ids")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per test selection (default 900)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy")
    ap.add_argument("--no-baseline", action="store_true", help="skip running each selection unmutated first")
    args = ap.parse_args(argv)
    mutants = MUTANTS
    if args.only:
        want = set(args.only.split(","))
        mutants = [m for m in MUTANTS if m.id in want]
        if want - {m.id for m in mutants}:
            sys.exit(f"unknown mutant ids: {sorted(want - {m.id for m in mutants})}")
    if args.list:
        for m in mutants:
            print(f"{m.id:4} {m.path:24} {m.what}  [{' '.join(m.tests)}{' -k ' + repr(m.k) if m.k else ''}]")
        return 0

    start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="ctxlite-mutants-"))
    copy = tmp / "repo"
    copy.mkdir()
    try:
        copy_tree(copy)
        check_import(copy)
        so_backup = tmp / "so"
        so_backup.mkdir()
        for so in (copy / KERNELS).glob("_kernels*.so"):
            shutil.copy2(so, so_backup / so.name)

        def restore_so():
            for so in (copy / KERNELS).glob("_kernels*.so"):
                so.unlink()
            for so in so_backup.iterdir():
                shutil.copy2(so, copy / KERNELS / so.name)

        def apply(m: Mutant) -> str | None:
            """Apply ``m`` in the copy; returns the original text, or None if the snippet is not there once."""
            path = copy / m.path
            text = path.read_text(encoding="utf-8")
            if text.count(m.old) != 1:
                return None
            path.write_text(text.replace(m.old, m.new), encoding="utf-8")
            return text

        # the probe: a mutation in the copy must break a test, or the shared tree is what runs
        original = apply(PROBE)
        if original is None:
            sys.exit("the probe's snippet is missing from ctxlite/influence/scorer.py: update PROBE")
        verdict, _, tail = run_selection(copy, PROBE, args.timeout)
        (copy / PROBE.path).write_text(original, encoding="utf-8")
        if verdict != "fail":
            sys.exit(f"the probe mutation was not seen ({verdict}): the tests do not import the copy\n{tail}")
        print(f"probe: the copy at {copy} is what the tests import", flush=True)

        baseline: dict[tuple, str] = {}
        if not args.no_baseline:
            for sel in dict.fromkeys(m.selection for m in mutants):
                probe = Mutant("-", "-", "", "", sel[0], sel[1], "")
                verdict, dt, tail = run_selection(copy, probe, args.timeout)
                baseline[sel] = verdict
                flag = "ok" if verdict == "pass" else f"BASELINE {verdict.upper()}"
                print(
                    f"baseline {flag:>16} {dt:7.1f}s  {' '.join(sel[0])}{' -k ' + repr(sel[1]) if sel[1] else ''}"
                    + ("" if verdict == "pass" else f"\n{tail}"),
                    flush=True,
                )

        counts = {"killed": 0, "survived": 0, "not_applicable": 0}
        for m in mutants:
            t0 = time.monotonic()
            if baseline.get(m.selection, "pass") != "pass":
                verdict, note = "N/A", "its tests fail unmutated"
            else:
                original = apply(m)
                if original is None:
                    verdict, note = "N/A", "snippet not found (the code changed: update this mutant)"
                else:
                    note = ""
                    try:
                        built = True
                        if m.is_c:
                            built, log = build_kernels(copy)
                            if not built:
                                verdict, note = "KILLED", "does not compile"
                        if built:
                            res, _, tail = run_selection(copy, m, args.timeout)
                            verdict = {"pass": "SURVIVED", "fail": "KILLED", "timeout": "KILLED"}.get(res, "ERROR")
                            note = {"timeout": "timed out", "error": f"pytest error: {tail}"}.get(res, "")
                    finally:
                        (copy / m.path).write_text(original, encoding="utf-8")
                        if m.is_c:
                            restore_so()
            key = {"KILLED": "killed", "SURVIVED": "survived"}.get(verdict, "not_applicable")
            counts[key] += 1
            sel = f"{' '.join(Path(t).name for t in m.tests)}{' -k ' + repr(m.k) if m.k else ''}"
            print(
                f"{verdict:8} {m.id:4} {m.path:24} {m.what} [{sel}] {time.monotonic() - t0:.0f}s"
                + (f"  ({note})" if note else ""),
                flush=True,
            )
        total = time.monotonic() - start
        print(f"killed={counts['killed']} survived={counts['survived']} not_applicable={counts['not_applicable']}")
        print(f"total time {total / 60:.1f} min")
        return 0 if counts["survived"] == 0 and counts["not_applicable"] == 0 else 1
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
