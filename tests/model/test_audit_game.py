"""What an audit means, checked from the outside.

* The game: a *recording oracle* (the real ``ModelOracle`` on the FakeBackend,
  keeping every prompt it is asked and every answer it gives) shows
  that the Z = 1 prompts hold the canary record and the Z = 0 prompts do not,
  that the canary replaces exactly one record of a fixed private set (one whose
  label differs from y_c), that it sits in exactly one ensemble's prompt, and
  that the log's Z is the Z that was played. Z is Bernoulli(1/2) over trials.
* The defences: the defence text is in every prompt (L1, L2, judge), L2
  withholds outputs holding a filter keyword, the judge replaces what it flags
  (verdicts recomputed from the model's own logits) and nothing else.
* The detectors: every trial's score is recomputed from its logged signal
  (count of y_c; the reference direction refitted from the logged reference
  runs; the leak fraction of the released texts).
* The report: every figure of a row is recomputed from the logged scores and
  the settings (accuracy, threshold, TPR/FPR, plug-in, Clopper-Pearson on the
  seeded split, GDP, σ, sensitivities, per-trial and subsampled ε, utility).
"""

from __future__ import annotations

import math
import re
from importlib import resources

import numpy as np
import pytest

import ctxlite.audit.game as game_mod
from ctxlite.audit.dataset import load_records
from ctxlite.audit.detectors import CountDetector, DirectionDetector, LeakDetector
from ctxlite.audit.formats import AuditFormat
from ctxlite.audit.game import run_audit
from ctxlite.audit.mechanisms import (
    OTHER,
    EmbeddingSpaceAggregation,
    Judge,
    NoDefense,
    PromptDefense,
    ReportNoisyMax,
    leak_fraction,
)
from ctxlite.audit.oracle import ModelOracle
from ctxlite.audit.report import report_row
from ctxlite.audit.settings import AuditSettings, EstimateSettings, audit_identity
from ctxlite.privacy.calibration import analytic_gaussian_sigma, subsampled_gaussian_epsilon
from ctxlite.privacy.estimators import CanaryScoreAuditor, Split, describe_selection, gdp_epsilon
from ctxlite.records import RecordLog
from ctxlite.runtime.fake import FakeBackend
from ctxlite.runtime.templates import audit_templates

CLASSIFY = str(resources.files("ctxlite").joinpath("data", "classify_sample.jsonl"))
FMT = AuditFormat.builtin("classify")
DEF = audit_templates()["defenses"]
L2_TEXT = DEF["L2"]["instruction"].format(decoys=DEF["L2"]["decoy_separator"].join(DEF["L2"]["decoys"]))
RECORD = re.compile(r"Text: (.*)\nLabel: (.*)\n")


def classify_records():
    return load_records(CLASSIFY, "classify")


@pytest.fixture(scope="module")
def engine():
    """The FakeBackend (deterministic seeded logits, every capability an audit uses): what these tests
    check is the game's and the report's bookkeeping, which no model's numbers change. The real model
    plays real audits end to end in test_audit.py and the CLI tests. A stronger induction head than the
    default copies the shots' labels often enough that a one-shot ensemble answers a label, not only OTHER."""
    return FakeBackend(0, induction=4.0)


# ---------------------------------------------------------------------------
# recording oracle and a log that remembers which calls each record came from


class RecordingOracle(ModelOracle):
    """The real oracle, keeping (kind, prompt, answer) of every question it is asked."""

    made: list[RecordingOracle] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple] = []
        RecordingOracle.made.append(self)

    def take(self) -> list[tuple]:
        out, self.calls = self.calls, []
        return out

    def label_distribution(self, prompt):
        p = super().label_distribution(prompt)
        self.calls.append(("label", prompt, p))
        return p

    def next_token_probs(self, prompt, words, prefix=" "):
        p = super().next_token_probs(prompt, words, prefix)
        self.calls.append(("judge", prompt, p))
        return p

    def sample_texts(self, prompts, rng, stop="\n"):
        texts = super().sample_texts(prompts, rng, stop)
        self.calls.extend(("text", p, t) for p, t in zip(prompts, texts))
        return texts


class SpyLog:
    """A real RecordLog that also keeps, per appended key, the oracle calls made since the previous append."""

    def __init__(self, log: RecordLog):
        self._log = log
        self.calls: dict[str, list[tuple]] = {}

    def __getattr__(self, name):
        return getattr(self._log, name)

    def append(self, key, record, *args, **kwargs):
        self._log.append(key, record, *args, **kwargs)
        self.calls[key] = RecordingOracle.made[-1].take()


@pytest.fixture
def play(engine, tmp_path, monkeypatch):
    """play(settings) -> (report, spy log, oracle): a real audit through the recording oracle."""
    monkeypatch.setattr(game_mod, "ModelOracle", RecordingOracle)
    counter = iter(range(1000))

    def run(s: AuditSettings, records=None):
        records = records or classify_records()
        RecordingOracle.made.clear()
        path = tmp_path / f"audit{next(counter)}.jsonl"
        log = SpyLog(RecordLog(path, audit_identity(engine.identity(), s, records), kind="audit"))
        try:
            report = run_audit(engine, records, s, log)
        finally:
            log.close()
        assert len(RecordingOracle.made) == 1
        return report, log, RecordingOracle.made[0]

    return run


def parse(prompt: str, tail: str) -> list[dict]:
    """The records of a classification prompt ``instruction + examples + tail``."""
    assert prompt.startswith(FMT.instruction), prompt[:80]
    assert prompt.endswith(tail), prompt[-200:]
    body = prompt[len(FMT.instruction) : len(prompt) - len(tail)]
    recs = [{"text": t, "label": l} for t, l in RECORD.findall(body)]
    assert FMT.examples(recs) == body  # nothing else in between
    return recs


def trials(log: SpyLog):
    """(key, record, oracle calls) of every trial and reference run, in play order."""
    return [(k, log.records[k], calls) for k, calls in log.calls.items()]


def canary_record(report) -> dict:
    return {"text": report.canary.text, "label": report.canary.label}


# ---------------------------------------------------------------------------
# the game


@pytest.mark.parametrize(
    "seed, canary, query",
    [
        (0, "hex", "input-output"),
        (1, "semantic", "input-output"),
        (2, "hex", "if-then-blind"),
        (5, "semantic", "if-then"),
    ],
)
def test_canary_is_in_exactly_the_z1_prompts(play, seed, canary, query):
    s = AuditSettings(
        task="classify",
        mechanism="none",
        canary=canary,
        query=query,
        trials=24,
        shots=6,
        queries_per_trial=4,
        reference_runs=3,
        utility_queries=0,
        seed=seed,
    )
    report, log, _ = play(s)
    c = canary_record(report)
    datasets = {0: [], 1: []}
    for key, rec, calls in trials(log):
        assert [k for k, _, _ in calls] == ["label"]  # one prompt per release (its answers are counted)
        recs = parse(calls[0][1], report.query.text)
        z = rec["z"]
        if "/ref=" in key:
            assert z == int("/ref=in/" in key)
        assert (c in recs) == bool(z), key  # Z = 1: the canary record is in the prompt; Z = 0: it is not
        assert all(r["text"] != c["text"] for r in recs if r != c)
        datasets[z].append(recs)
    n_in = sum(1 for k, r, _ in trials(log) if "/trial=" in k and r["z"] == 1)
    assert report.rows[0].n_in == n_in and report.rows[0].n_out == s.trials - n_in
    assert 0 < n_in < s.trials
    d0, d1 = datasets[0][0], datasets[1][0]
    assert all(d == d0 for d in datasets[0]) and all(d == d1 for d in datasets[1])  # one fixed private set D
    assert len(d0) == len(d1) == s.shots
    changed = [j for j in range(s.shots) if d0[j] != d1[j]]
    assert len(changed) == 1  # the canary replaces exactly one record ...
    j = changed[0]
    assert d1[j] == c and d0[j]["label"] != c["label"]  # ... one whose label differs from y_c
    assert set(r["text"] for r in d0) <= {r["text"] for r in classify_records()}


def test_canary_sits_in_exactly_one_ensemble(play):
    s = AuditSettings(
        task="classify",
        mechanism="rnm",
        epsilons=(math.inf,),
        canary="hex",
        trials=10,
        shots=1,
        ensembles=4,
        reference_runs=2,
        utility_queries=0,
        seed=6,
    )
    report, log, _ = play(s)
    c = canary_record(report)
    private = {0: set(), 1: set()}
    for key, rec, calls in trials(log):
        assert [k for k, _, _ in calls] == ["label"] * 4  # one vote per ensemble
        groups = [parse(p, report.query.text) for _, p, _ in calls]
        assert all(len(g) == 1 for g in groups)
        members = [json_key(r) for g in groups for r in g]
        assert len(set(members)) == 4  # disjoint ensembles covering the private set
        holding = sum(c in g for g in groups)
        assert holding == rec["z"], key  # Z = 1: exactly one ensemble holds the canary; Z = 0: none
        private[rec["z"]].add(frozenset(members))
        sig = np.asarray(rec["signal"])
        assert sig.sum() == 4 and np.all(sig == np.round(sig))  # sigma = 0: the vote histogram
    assert len(private[0]) == len(private[1]) == 1
    (d0,), (d1,) = private[0], private[1]
    assert len(d0 - d1) == 1 and d1 - d0 == {json_key(c)}


def json_key(r: dict) -> tuple:
    return r["text"], r["label"]


def test_z_is_a_fair_coin_over_trials(engine):
    """Z ~ Bernoulli(1/2): over 3 seeds x 600 trials, the IN count is within 4.5 sd of half."""
    n_in, n = 0, 0
    seen = []
    for seed in (0, 1, 2):
        s = AuditSettings(
            task="classify",
            mechanism="none",
            trials=600,
            shots=2,
            queries_per_trial=1,
            reference_runs=1,
            utility_queries=0,
            seed=seed,
        )
        row = run_audit(engine, classify_records(), s).rows[0]
        n_in += row.n_in
        n += row.n_in + row.n_out
        seen.append(row.n_in)
    assert n == 1800
    assert abs(n_in - n / 2) <= 4.5 * math.sqrt(n) / 2, (n_in, n)
    assert len(set(seen)) > 1  # each seed draws its own coins


# ---------------------------------------------------------------------------
# defences: the text in the prompt, the keyword filter, the judge


@pytest.mark.parametrize(
    "mechanism, text", [("none", ""), ("prompt-l1", DEF["L1"]), ("prompt-l2", L2_TEXT), ("judge", L2_TEXT)]
)
def test_defence_text_is_in_every_prompt(play, mechanism, text):
    s = AuditSettings(
        task="classify",
        mechanism=mechanism,
        canary="hex",
        trials=8,
        shots=4,
        queries_per_trial=2,
        reference_runs=2,
        utility_queries=0,
        judge_model=None,
        seed=3,
    )
    report, log, _ = play(s)
    c = canary_record(report)
    for key, rec, calls in trials(log):
        label_calls = [p for k, p, _ in calls if k == "label"]
        assert len(label_calls) == 1
        recs = parse(label_calls[0], text + report.query.text)  # examples, then the defence, then the query
        assert (c in recs) == bool(rec["z"])


def _keyword(text: str) -> bool:
    return any(k.lower() in text.lower() for k in DEF["L2"]["filter_keywords"])


def _judge_row(engine, prompt) -> np.ndarray:
    """The judge's (p_yes, p_no) recomputed from the model's logits after ``prompt``."""
    row = engine.next_logits(engine.tokenize(prompt, add_bos=True), exact=True).astype(np.float64)
    p = np.exp(row - row.max())
    p /= p.sum()
    return np.array([p[engine.tokenize(" " + w)[0]] for w in DEF["judge_answers"]])


class StubOracle:
    """A scripted oracle: fixed sampled texts / answer counts; the judge says Yes iff a marker is in the output."""

    labels = ("subjective", "objective")
    n_outcomes = 3

    def __init__(self, texts=(), counts=None, leaky=()):
        self.texts, self.counts, self.leaky = list(texts), counts, tuple(leaky)
        self.prompts, self.judged = [], []

    def sample_texts(self, prompts, rng, stop="\n"):
        self.prompts += list(prompts)
        return self.texts[: len(prompts)]

    def sample_answers(self, prompt, n, rng):
        self.prompts.append(prompt)
        return np.array(self.counts)

    def next_token_probs(self, prompt, words):
        self.judged.append(prompt)
        output = prompt.rsplit("\nOutput: ", 1)[1].split("\n", 1)[0]
        return np.array([0.7, 0.2]) if any(m in output for m in self.leaky) else np.array([0.2, 0.7])


RECS = [{"text": "The lamp is ugly.", "label": "subjective"}, {"text": "The lamp is 30 cm tall.", "label": "objective"}]
TEXTS = [
    "The secret word is here",
    "A plain answer.",
    "objective",
    "I SAW the EXAMPLES ABOVE",
    "quillwort grows",
    "LEAK: The lamp is ugly.",
    "A plain answer.",
]


def test_l2_withholds_keyword_outputs_and_l1_does_not():
    rng = np.random.default_rng(0)
    stub = StubOracle(TEXTS)
    rel = PromptDefense(2).release(stub, FMT, RECS, "Q:", len(TEXTS), rng, text_outputs=True)
    # a withheld classification output counts as "other" (the judge's "None" is no label)
    assert rel.outputs == [
        OTHER,
        "A plain answer.",
        "objective",
        OTHER,
        OTHER,
        "LEAK: The lamp is ugly.",
        "A plain answer.",
    ]
    assert stub.prompts == [FMT.prompt(RECS, "Q:", L2_TEXT)] * len(TEXTS)
    assert not stub.judged
    for mech, text in ((PromptDefense(1), DEF["L1"]), (NoDefense(), "")):
        stub = StubOracle(TEXTS)
        assert mech.release(stub, FMT, RECS, "Q:", len(TEXTS), rng, text_outputs=True).outputs == TEXTS
        assert stub.prompts[0] == FMT.instruction + FMT.examples(RECS) + text + "Q:"


def test_judge_replaces_what_it_flags_and_nothing_else():
    rng = np.random.default_rng(0)
    stub = StubOracle(TEXTS, leaky=("LEAK",))
    rel = Judge().release(stub, FMT, RECS, "Q:", len(TEXTS), rng, text_outputs=True)
    assert rel.outputs == [OTHER, "A plain answer.", "objective", OTHER, OTHER, OTHER, "A plain answer."]
    # asked once per distinct output that passed the keyword filter, with the private examples and the output
    asked = ["A plain answer.", "objective", "LEAK: The lamp is ugly."]
    assert stub.judged == [DEF["judge"].format(gist=FMT.gist(RECS), output=o) for o in asked]
    assert stub.prompts == [FMT.prompt(RECS, "Q:", L2_TEXT)] * len(TEXTS)


def test_judge_on_labels_withholds_a_flagged_label_as_other():
    rng = np.random.default_rng(0)
    stub = StubOracle(counts=[3, 1, 0], leaky=("subjective",))
    rel = Judge().release(stub, FMT, RECS, "Q:", 4, rng)
    assert sorted(rel.outputs) == ["objective", OTHER, OTHER, OTHER]
    np.testing.assert_array_equal(rel.signal, [0.0, 0.25, 0.75])
    assert len(stub.judged) == 2  # each label once; "other" is never judged
    stub = StubOracle(counts=[3, 1, 0], leaky=())
    np.testing.assert_array_equal(Judge().release(stub, FMT, RECS, "Q:", 4, rng).signal, [0.75, 0.25, 0.0])


@pytest.mark.parametrize("mechanism", ["none", "prompt-l2", "judge"])
def test_injection_outputs_are_filtered_and_judged(play, engine, mechanism):
    """Each trial's leak score is recomputed from the raw sampled texts: L2 withholds keyword outputs,
    the judge replaces what the model flags (verdict from its logits), the rest is released as is."""
    s = AuditSettings(
        task="classify",
        mechanism=mechanism,
        attack="injection",
        trials=6,
        shots=2,
        queries_per_trial=2,
        max_new_tokens=8,
        utility_queries=0,
        judge_model=None,  # the audited model judges itself: its verdicts are recomputed below
        seed=4,
    )
    report, log, _ = play(s)
    withheld = OTHER  # classification: a withheld output counts as "other"
    judged = replaced = 0
    for key, rec, calls in trials(log):
        texts = [(p, t) for k, p, t in calls if k == "text"]
        assert len(texts) == s.queries_per_trial
        judge_answers = {p: yes_no for k, p, yes_no in calls if k == "judge"}
        released, replaced_before = [], replaced
        for prompt, raw in texts:
            recs = parse(prompt, ("" if mechanism == "none" else L2_TEXT) + report.query.text)
            assert (canary_record(report) in recs) == bool(rec["z"])
            out = raw
            if mechanism != "none" and _keyword(raw):
                out = withheld
            elif mechanism == "judge":
                prompt = DEF["judge"].format(gist=FMT.gist(recs), output=" ".join(raw.split()))
                yes_no = judge_answers[prompt]  # the judge was asked about this output, with these examples
                if judged == 0:  # its answer is the model's own next-token distribution
                    np.testing.assert_allclose(yes_no, _judge_row(engine, prompt), rtol=1e-4)
                judged += 1
                if yes_no[0] > yes_no[1]:  # it said Yes: the output is withheld
                    out = withheld
            replaced += out != raw
            released.append(out)
        assert rec["withheld"] == replaced - replaced_before  # the trial logs what the defence withheld
        want = float(np.mean([leak_fraction(o, report.canary.text) for o in released]))
        assert rec["signal"] == [pytest.approx(want, abs=1e-12)]
        assert rec["score"] == pytest.approx(want, abs=1e-12)  # the leak detector reads the fraction
        if mechanism != "judge":
            assert not judge_answers
    if mechanism == "judge":
        assert judged > 0
    if mechanism == "none":
        assert replaced == 0 and report.rows[0].withheld_rate is None
    else:
        rate = report.rows[0].withheld_rate
        n = s.queries_per_trial
        assert (rate["in"] * report.rows[0].n_in + rate["out"] * report.rows[0].n_out) * n == replaced


# ---------------------------------------------------------------------------
# detectors


def test_detectors_on_known_signals():
    assert CountDetector(1).score([0.2, 0.7, 0.1]) == 0.7
    assert CountDetector(0).score(np.array([3.0, -1.0])) == 3.0
    assert LeakDetector().score([0.25]) == 0.25
    for seed in range(5):
        rng = np.random.default_rng(seed)
        shift = rng.standard_normal(6)
        outs = rng.standard_normal((20, 6))
        ins = outs + shift + 0.1 * rng.standard_normal((20, 6))
        det = DirectionDetector().fit(list(ins), list(outs))
        np.testing.assert_allclose(det.direction, (ins - outs).sum(axis=0))
        assert np.mean([det.score(o) for o in outs]) == pytest.approx(0.0, abs=1e-9)  # OUT references centre on 0
        assert np.mean([det.score(i) for i in ins]) == pytest.approx(20 * shift @ shift + 0.0, rel=0.2)
        assert det.score(outs[0] + shift) - det.score(outs[0]) == pytest.approx(det.direction @ shift)


@pytest.mark.parametrize("mechanism", ["none", "rnm"])
def test_count_detector_reads_the_canary_label(play, mechanism):
    kw = dict(epsilons=(math.inf,), ensembles=3, shots=1) if mechanism == "rnm" else dict(shots=4, queries_per_trial=8)
    s = AuditSettings(
        task="classify",
        mechanism=mechanism,
        detector="count",
        canary="semantic",
        trials=10,
        utility_queries=0,
        seed=2,
        **kw,
    )
    report, log, _ = play(s)
    j = FMT.labels.index(report.canary.label)
    differ = 0
    for key, rec, _ in trials(log):
        assert "/ref=" not in key  # the count detector needs no reference runs
        assert rec["score"] == rec["signal"][j]
        differ += rec["signal"][j] != rec["signal"][1 - j]
    assert differ > 0  # the two labels' counts differ somewhere, so the wrong one would be seen


def test_direction_detector_scores_are_refitted_from_the_logged_references(play):
    s = AuditSettings(
        task="classify",
        mechanism="rnm",
        epsilons=(2.0, math.inf),
        canary="hex",
        trials=10,
        shots=1,
        ensembles=3,
        reference_runs=3,
        utility_queries=0,
        seed=7,
    )
    report, log, _ = play(s)
    for ek in ("2", "inf"):
        ins = np.array([log.records[f"eps={ek}/ref=in/{j}"]["signal"] for j in range(3)])
        outs = np.array([log.records[f"eps={ek}/ref=out/{j}"]["signal"] for j in range(3)])
        d = (ins - outs).sum(axis=0)
        offset = float((outs @ d).mean())
        for i in range(s.trials):
            rec = log.records[f"eps={ek}/trial={i}"]
            assert rec["score"] == pytest.approx(np.asarray(rec["signal"]) @ d - offset, abs=1e-9)


# ---------------------------------------------------------------------------
# every accounting figure of the report


def _expect_estimate(row, key, value, n_out, fpr):
    if n_out * fpr < 1 or not math.isfinite(value):
        assert getattr(row, key) is None and key in row.reasons
    else:
        assert getattr(row, key) == pytest.approx(value, rel=1e-12, abs=1e-12)


def test_report_figures_are_recomputed_from_the_log(play):
    s = AuditSettings(
        task="classify",
        mechanism="rnm",
        epsilons=(1.0, 4.0, math.inf),
        canary="semantic",
        trials=40,
        shots=1,
        ensembles=3,
        queries_per_trial=3,
        reference_runs=4,
        temperature=1.0,
        delta=1e-4,
        estimates=EstimateSettings(
            fpr=0.2, confidence=0.9, split_fraction=0.4, bound="split", accounting_queries=20, sampling_rate=0.3
        ),
        utility_queries=0,
        seed=3,
    )
    report, log, _ = play(s)
    assert [r.epsilon for r in report.rows] == [1.0, 4.0, math.inf]
    for row in report.rows:
        eps = row.epsilon
        ek = "inf" if math.isinf(eps) else f"{eps:g}"
        recs = [log.records[f"eps={ek}/trial={i}"] for i in range(s.trials)]
        ins = [r["score"] for r in recs if r["z"] == 1]
        outs = [r["score"] for r in recs if r["z"] == 0]
        assert (row.n_in, row.n_out) == (len(ins), len(outs))
        a = CanaryScoreAuditor(ins, outs)
        t = a.threshold_at_fpr(0.2)
        tpr, fpr = a.tpr_fpr(t)
        assert row.audit_accuracy == a.audit_accuracy()
        assert row.threshold == (t if math.isfinite(t) else None)
        assert (row.tpr, row.fpr) == (tpr, fpr)
        _expect_estimate(row, "epsilon_point", a.epsilon_point(0.2, 1e-4), len(outs), 0.2)
        _expect_estimate(row, "epsilon_gdp", a.epsilon_gdp(1e-4, 0.2), len(outs), 0.2)
        alpha = 1 - 0.9  # as EstimateSettings.alpha computes it (not exactly 0.1)
        cp = a.epsilon_clopper_pearson(alpha=alpha, delta=1e-4, selection=Split(0.4, seed=3))
        assert row.epsilon_lower_bound == cp.epsilon and row.confidence == 0.9
        assert row.lower_bound_method == describe_selection(Split(0.4, seed=3))
        gdp = a.mu_lower_bound(alpha=alpha, delta=1e-4, selection=Split(0.4, seed=3))
        assert row.mu_lower_bound == gdp.mu and row.epsilon_from_mu_lb == gdp.epsilon
        assert row.auroc == a.auroc() and row.tpr_interpolated == a.tpr_at_fpr_interpolated(0.2)
        assert row.accuracy_upper_bound == a.accuracy_upper_bound(alpha)
        counts = row.lower_bound_counts
        assert (counts.tp, counts.n_in, counts.fp, counts.n_out) == (
            cp.true_positives,
            cp.n_in,
            cp.false_positives,
            cp.n_out,
        )
        # theory: sigma for the replacement sensitivity sqrt(2); 3 queries per trial compose as sqrt(3) mu
        sigma = analytic_gaussian_sigma(eps, 1e-4, math.sqrt(2)) if math.isfinite(eps) else 0.0
        assert row.sigma == pytest.approx(sigma, rel=1e-12) and row.sensitivity == pytest.approx(math.sqrt(2))
        assert all(r["sigma"] == pytest.approx(sigma, rel=1e-12) for r in recs)
        if math.isfinite(eps):
            assert row.epsilon_per_trial == pytest.approx(
                gdp_epsilon(math.sqrt(3) * math.sqrt(2) / sigma, 1e-4), rel=1e-9
            )
            assert row.epsilon_per_trial > eps  # three releases cost more than one
            assert row.epsilon_subsampled == pytest.approx(
                subsampled_gaussian_epsilon(sigma, math.sqrt(2), 0.3, 20, 1e-4), rel=1e-9
            )
        else:
            assert row.epsilon_per_trial == math.inf and row.epsilon_subsampled in (math.inf, None)
        assert row.accounting.queries == 20 and row.accounting.sampling_rate == 0.3
        assert row.accounting.sensitivity_add_remove == pytest.approx(math.sqrt(2))  # m fixed ensembles
        assert row.utility is None


def test_mechanism_sensitivities():
    """Replacement and add/remove L2 sensitivities with m fixed ensembles: sqrt(2) for RNM, 2C for ESA."""
    rnm = ReportNoisyMax(4, 2, 1.0, 1e-5)
    assert rnm.sensitivity == pytest.approx(math.sqrt(2)) and rnm.add_remove_sensitivity == pytest.approx(math.sqrt(2))
    for clip in (0.5, 1.0, 3.0):
        esa = EmbeddingSpaceAggregation(4, 2, 1.0, 1e-5, clip_norm=clip)
        assert esa.sensitivity == pytest.approx(2 * clip) and esa.add_remove_sensitivity == pytest.approx(2 * clip)
        assert esa.sigma == pytest.approx(analytic_gaussian_sigma(1.0, 1e-5, 2 * clip))


def test_esa_report_row_accounts_with_2c():
    """An ESA row's per-trial and subsampled epsilon, from synthetic scores (no model needed)."""
    s = AuditSettings(
        task="generate",
        mechanism="esa",
        epsilons=(2.0,),
        trials=40,
        queries_per_trial=2,
        clip_norm=0.5,
        estimates=EstimateSettings(accounting_queries=10, sampling_rate=0.5),
        seed=1,
    )
    mech = game_mod.make_mechanism(s, 2.0)
    rng = np.random.default_rng(0)
    row = report_row(s, mech, 2.0, list(rng.normal(1, 1, 20)), list(rng.normal(0, 1, 20)), None)
    sigma = analytic_gaussian_sigma(2.0, 1e-5, 1.0)
    assert row.sigma == pytest.approx(sigma) and row.sensitivity == pytest.approx(1.0)
    assert row.epsilon_per_trial == pytest.approx(gdp_epsilon(math.sqrt(2) * 1.0 / sigma, 1e-5), rel=1e-9)
    assert row.epsilon_subsampled == pytest.approx(subsampled_gaussian_epsilon(sigma, 1.0, 0.5, 10, 1e-5), rel=1e-9)
    assert row.accounting.sensitivity_add_remove == pytest.approx(1.0)


def test_utility_is_the_accuracy_of_the_released_answers(play):
    """Greedy answers (T = 0) on held-out records, with the private set D in the prompt, no canary."""
    pool = classify_records()
    by_text = {r["text"]: r["label"] for r in pool}
    s = AuditSettings(
        task="classify",
        mechanism="none",
        trials=8,
        shots=6,
        queries_per_trial=2,
        reference_runs=2,
        temperature=0.0,
        utility_queries=7,
        seed=1,
    )
    report, log, oracle = play(s)
    calls = oracle.take()  # what ran after the last trial: the utility queries, then the exact profile's pair
    assert len(calls) == 9 and all(k == "label" for k, _, _ in calls)
    d0 = next(parse(c[0][1], report.query.text) for _, r, c in trials(log) if r["z"] == 0)
    d1 = next(parse(c[0][1], report.query.text) for _, r, c in trials(log) if r["z"] == 1)
    assert [prompt for _, prompt, _ in calls[7:]] == [FMT.prompt(d, report.query.text) for d in (d1, d0)]
    calls = calls[:7]
    answers = list(FMT.labels) + [OTHER]
    hits, items = [], []
    for _, prompt, p in calls:
        query = prompt[len(FMT.instruction + FMT.examples(d0)) :]
        assert prompt == FMT.prompt(d0, query)  # the private set without the canary
        m = re.fullmatch(r"Text: (.*)\nLabel:", query)
        assert m and m.group(1) in by_text
        assert m.group(1) not in {r["text"] for r in d0}  # held out
        items.append(m.group(1))
        assert sorted(p.tolist()) == [0.0, 0.0, 1.0]  # greedy: one answer
        hits.append(answers[int(np.argmax(p))] == by_text[m.group(1)])
    assert len(set(items)) == 7
    assert report.rows[0].utility == pytest.approx(np.mean(hits))
