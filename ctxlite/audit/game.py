"""ContextLeak: canary membership-inference audits of private in-context learning (Choi et al. 2025).

The game (ContextLeak §3; design notes: docs/design.md#the-game). A private set D is drawn from the data (``ensembles ×
shots`` records; the rest is held out for utility). Each trial draws
Z ~ Bernoulli(1/2); if Z = 1 one record of D (the *slot*, fixed per audit and
chosen among records whose label differs from y_c) is replaced by the canary.
The mechanism answers the fixed audit query ``queries_per_trial`` times; its
randomness -- the ensemble partition, the model's sampled answers and the
Gaussian noise -- is re-drawn every trial. ``resample_data=True`` also re-draws
D (and the slot) every trial; that is closer to an average-case audit and,
on a 270M base model, buries the canary's effect under the variation between
private sets.

The auditor sees the mechanism's signal (answer frequencies, the noisy
histogram, or the (noisy mean) embedding), turns it into a score with a
detector fitted on reference runs disjoint from the trials, and the scores of
the Z = 1 and Z = 0 trials go to :class:`ctxlite.privacy.estimators.CanaryScoreAuditor`.

Theoretical ε: for RNM / ESA the reported ``epsilon`` is **per query with the
canary always present** (the analytic Gaussian σ for the mechanism's
replacement sensitivity); ``epsilon_per_trial`` composes the
``queries_per_trial`` releases of one trial (Gaussian composition, exact:
μ_trial = √n · Δ/σ), which is what the per-trial score is bounded by. With
``accounting_queries`` T (and ``sampling_rate`` q) each row also gives
``epsilon_subsampled``, the ε *subsampled over T queries* of a deployment
that runs this σ (PLD accountant). Plain ICL (``none``, no defense) and the
heuristic defenses have no theoretical ε (``null``).

Randomness: every trial has its own seed (``seed``, trial index), independent
of ε, so the same trial at different ε sees the same Z, partitions and votes
and only the noise scale differs (common random numbers). Every trial and
reference run is appended to the :class:`ctxlite.records.RecordLog` as it
finishes under a key like ``eps=8/trial=17``; a re-run with the same
parameters skips finished keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from ctxlite.audit.canaries import Canary, make_canary
from ctxlite.audit.dataset import check_records, resolve_format
from ctxlite.audit.detectors import CountDetector, Detector, DirectionDetector, LeakDetector
from ctxlite.audit.formats import AuditFormat, Task
from ctxlite.audit.mechanisms import (
    EmbeddingSpaceAggregation,
    Judge,
    JudgeModel,
    Mechanism,
    NoDefense,
    PromptDefense,
    ReportNoisyMax,
    leak_fraction,
)
from ctxlite.audit.oracle import ModelOracle, served_texts
from ctxlite.audit.queries import build_query, injection_query
from ctxlite.audit.report import (
    AuditReport,
    AuditRow,
    PairReference,
    bound_choice,
    ceiling_kind,
    contradictions,
    first_bound_choice,
    report_row,
    rereport_warning,
    tightness_fields,
)
from ctxlite.audit.settings import Attack, AuditSettings, DetectorKind, MechanismKind, audit_identity
from ctxlite.errors import DataError, InvalidParameter
from ctxlite.identity import differences
from ctxlite.privacy.privacy_profile import VotePair, pair_profile
from ctxlite.records import RecordLog, logged
from ctxlite.runtime.backend import Backend, Embeddings, LogitRows, Streams, require
from ctxlite.runtime.chat import chat_template, render_chat


def seeded_rng(*words: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(w) for w in words]))


def _eps_key(eps: float) -> str:
    return "inf" if math.isinf(eps) else f"{eps:g}"


def make_mechanism(settings: AuditSettings, epsilon: float, judge: JudgeModel | None = None) -> Mechanism:
    """The mechanism ``settings.mechanism`` names, at theoretical ``epsilon`` (used by rnm/esa only).

    ``judge`` is the judge model of ``MechanismKind.JUDGE``.
    """
    kind = settings.mechanism
    if kind is MechanismKind.NONE:
        return NoDefense()
    if kind is MechanismKind.PROMPT_L1:
        return PromptDefense(1)
    if kind is MechanismKind.PROMPT_L2:
        return PromptDefense(2)
    if kind is MechanismKind.JUDGE:
        return Judge(judge)
    if kind is MechanismKind.RNM:
        return ReportNoisyMax(settings.ensembles, settings.shots, epsilon, settings.delta)
    return EmbeddingSpaceAggregation(
        settings.ensembles, settings.shots, epsilon, settings.delta, settings.clip_norm, settings.zero_shot_candidates
    )


def _draw_private(pool_size: int, settings: AuditSettings, rng: np.random.Generator) -> np.ndarray:
    return rng.permutation(pool_size)


def _slot(records: Sequence[dict], canary: Canary, fmt: AuditFormat, rng: np.random.Generator) -> int:
    """Which record the canary replaces: one whose output differs from y_c."""
    cands = [i for i, r in enumerate(records) if r[fmt.output] != canary.label] or list(range(len(records)))
    return int(cands[int(rng.integers(len(cands)))])


class AuditGame:
    """The trials of one audit: the private set, the canary's slot in it, the query, and the log."""

    def __init__(self, oracle: ModelOracle, records, settings: AuditSettings, canary: Canary, fmt: AuditFormat):
        self.oracle, self.pool, self.s, self.canary, self.fmt = oracle, records, settings, canary, fmt
        order = _draw_private(len(records), settings, seeded_rng(settings.seed, 1))
        n = settings.private_size
        self.private = [records[i] for i in order[:n]]
        self.held_out = [records[i] for i in order[n:]]
        self.slot = _slot(self.private, canary, fmt, seeded_rng(settings.seed, 1, 1))
        self.text_outputs = settings.attack is Attack.INJECTION
        extras = self.private[self.slot]  # the query's fields other than the input: the replaced record's
        self.query = (
            injection_query(fmt, extras)
            if self.text_outputs
            else build_query(fmt, settings.query, canary, settings.template_index, extras)
        )

    def dataset(self, z: bool, data_rng: np.random.Generator | None) -> list[dict]:
        private, slot = self.private, self.slot
        if data_rng is not None:  # resample_data: a fresh D and slot for this trial
            idx = data_rng.choice(len(self.pool), self.s.private_size, replace=False)
            private = [self.pool[i] for i in idx]
            slot = _slot(private, self.canary, self.fmt, data_rng)
        recs = list(private)
        if z:
            recs[slot] = self.canary.record(self.fmt, recs[slot])
        return recs

    def example_prompt(self, mech: Mechanism) -> str:
        """A Z = 1 prompt as the model reads it, the canary's input between ``[[CANARY]]`` marks (for the
        report): every private record for the heuristic defences, the canary's ensemble for rnm/esa."""
        recs = self.dataset(True, None)
        recs[self.slot] = {**recs[self.slot], self.fmt.input: f"[[CANARY]]{self.canary.text}[[/CANARY]]"}
        if self.s.mechanism.is_dp:  # one ensemble: the canary and shots - 1 other records, in order
            others = [i for i in range(len(recs)) if i != self.slot][: self.s.shots - 1]
            recs = [recs[i] for i in sorted([self.slot, *others])]
        return self.fmt.prompt(recs, self.query.text, mech.defense_text)

    def run(self, mech: Mechanism, z: bool, rng: np.random.Generator, data_rng) -> tuple[np.ndarray, int]:
        """The auditor's signal of one run and how many outputs the defence withheld."""
        recs = self.dataset(z, data_rng)
        rel = mech.release(
            self.oracle, self.fmt, recs, self.query.text, self.s.queries_per_trial, rng, text_outputs=self.text_outputs
        )
        if self.text_outputs:
            return np.array([float(np.mean([leak_fraction(o, self.canary.text) for o in rel.outputs]))]), rel.withheld
        return np.asarray(rel.signal, dtype=np.float64), rel.withheld

    def _reference_draw(self, j: int, z: bool) -> tuple[bool, np.random.Generator, np.random.Generator | None]:
        """Reference run ``j``'s (z, generator, data generator): the same at every ε."""
        s = self.s
        return z, seeded_rng(s.seed, 3, j), seeded_rng(s.seed, 5, j) if s.resample_data else None

    def _trial_draw(self, i: int) -> tuple[bool, np.random.Generator, np.random.Generator | None]:
        """Trial ``i``'s Z ~ Bernoulli(1/2) from its own seed, and its generators after drawing it."""
        s = self.s
        rng = seeded_rng(s.seed, 2, i)
        z = bool(rng.random() < 0.5)
        return z, rng, seeded_rng(s.seed, 6, i) if s.resample_data else None

    def _answer_prompts(self, mech: Mechanism, draw) -> list[str]:
        """The prompts the run of ``draw`` (its z and fresh generators) will read, found without a model."""
        z, rng, data_rng = draw
        recs = self.dataset(z, data_rng)
        q, n = self.query.text, self.s.queries_per_trial
        return mech.answer_prompts(self.fmt, recs, q, n, rng, text_outputs=self.text_outputs)

    def play(
        self,
        mech: Mechanism,
        eps: float,
        detector: Detector,
        log: RecordLog | None,
        tick: Callable[[str, int, int], None],
    ) -> tuple[list[float], list[float], dict[str, list[int]]]:
        """The IN and OUT trial scores at ``eps`` (the detector fitted on reference runs first) and the
        outputs the defence withheld per IN / OUT trial; every run is read from ``log`` when it holds
        it, else played and appended. ``tick(label, done, total)`` after each reference run and trial.
        The scores are those :func:`trial_scores` reads from the records (what ``ctxlite report``
        recomputes them with). On a server the label distributions of the runs not logged yet are
        read ahead, several runs' in one batch (:class:`_ReadAhead`); the runs are played in order."""
        s, ek = self.s, _eps_key(eps)
        runs: dict[str, dict] = {}
        if detector.needs_reference:
            refs = [(j, z) for j in range(s.reference_runs) for z in (True, False)]
            keys = [reference_key(ek, z, j) for j, z in refs]
            ahead = _ReadAhead(self, mech, log, keys, [lambda j=j, z=z: self._reference_draw(j, z) for j, z in refs])
            for j in range(s.reference_runs):
                tick(f"eps={ek} reference runs", j, s.reference_runs)
                for z in (True, False):
                    key = reference_key(ek, z, j)
                    ahead.before(key)
                    runs[key] = logged(
                        log,
                        key,
                        lambda: {
                            "type": "reference",
                            "epsilon": ek,
                            "z": int(z),
                            "signal": self.run(mech, *self._reference_draw(j, z))[0].tolist(),
                        },
                    )
            tick(f"eps={ek} reference runs", s.reference_runs, s.reference_runs)
            fit_detector(detector, runs, s, ek)
        where = log.path if log is not None else None
        keys = [trial_key(ek, i) for i in range(s.trials)]
        ahead = _ReadAhead(self, mech, log, keys, [lambda i=i: self._trial_draw(i) for i in range(s.trials)])
        for i in range(s.trials):
            key = trial_key(ek, i)
            ahead.before(key)
            runs[key] = logged(log, key, lambda: self._trial(mech, ek, i, detector))
            _check_canary(runs[key], i, self.canary.id, where)  # before playing on into another audit's log
            tick(f"eps={ek} trials", i + 1, s.trials)
        return trial_scores(detector, runs, s, ek, self.canary.id, where)

    def _trial(self, mech: Mechanism, ek: str, i: int, detector: Detector) -> dict:
        """Play trial ``i``: Z ~ Bernoulli(1/2) from the trial's own seed, then the mechanism's release."""
        s = self.s
        z, rng, data_rng = self._trial_draw(i)
        sig, withheld = self.run(mech, z, rng, data_rng)
        return {
            "type": "trial",
            "epsilon": ek,
            "trial": i,
            "z": int(z),
            "canary": self.canary.id,
            "mechanism": mech.name,
            "seed": s.seed,
            "sigma": mech.sigma,
            "signal": sig.tolist(),
            "score": detector.score(sig),
            "withheld": withheld,
        }

    def known_profile(self, mech: Mechanism) -> PairReference:
        """The privacy profile of one trial's release on the audited pair -- the private set with and
        without the canary -- computed from the pair's known output distributions, whether it is the
        release's exact profile or an upper bound on it, and how it was computed; or None and why it
        cannot be.

        Classification only, where the model's answer distribution is exact. The heuristic
        defences release answers drawn i.i.d. from a known distribution per neighbour (the
        auditor's answer frequencies are their sufficient statistic): exact. rnm releases to the
        auditor the noisy histogram, not only its argmax: the profile of the canary's ensemble's
        noisy one-hot vote, its partner group public (:meth:`ReportNoisyMax.vote_pairs`), is an
        upper bound on the histogram's (post-processing), and exact only when the group and the
        other votes are fixed (:meth:`ReportNoisyMax.vote_pairs_are_the_release`). The noisy
        argmax alone would have a *smaller* ε than the histogram the auditor sees, so it could not
        cap the audit's lower bound. Composed over the trial's ``queries_per_trial`` releases."""
        s = self.s
        if s.task is not Task.CLASSIFY or self.text_outputs:
            return PairReference(None, "the distribution of generated texts is not known exactly: no privacy profile")
        if s.resample_data:
            return PairReference(
                None, "resample_data draws a new private set every trial: there is no fixed pair to profile"
            )
        recs_in, recs_out = self.dataset(True, None), self.dataset(False, None)
        try:
            if isinstance(mech, ReportNoisyMax):
                pairs = mech.vote_pairs(self.oracle, self.fmt, recs_in, recs_out, self.query.text)
                exact = mech.vote_pairs_are_the_release(self.oracle, self.fmt, recs_out, self.slot, self.query.text)
                how = (
                    f"the canary's ensemble's noisy one-hot vote, mixed over its {len(pairs)} partner groups (public); "
                    + (
                        "exact: the group and the other ensembles' votes are fixed, so the noisy histogram "
                        "the auditor sees is that vote plus a constant"
                        if exact
                        else "an upper bound on the noisy histogram the auditor sees, which hides the group and "
                        "adds the other ensembles' random votes (post-processing can only lower epsilon)"
                    )
                )
                return PairReference(pair_profile(pairs, mech.sigma, s.queries_per_trial), how, exact)
            p, q = (mech.released_distribution(self.oracle, self.fmt, r, self.query.text) for r in (recs_in, recs_out))
        except InvalidParameter as e:
            return PairReference(None, str(e))
        how = "exact: the released answer's distribution under each neighbour, composed over the trial's queries"
        return PairReference(pair_profile([VotePair(1.0, p, q)], 0.0, s.queries_per_trial), how, True)

    def utility_chance(self) -> tuple[float, int] | None:
        """(accuracy of a uniform guess over the labels, queries utility is measured on) for
        classification; None for generation (ROUGE has no chance level) or when nothing is measured."""
        n = min(self.s.utility_queries, len(self.held_out))
        if self.s.task is not Task.CLASSIFY or n == 0:
            return None
        return 1.0 / len(self.fmt.labels), n

    def utility(self, mech: Mechanism) -> float | None:
        """Accuracy (classification) or ROUGE-1 F1 (generation) of the released outputs on held-out records."""
        if self.s.utility_queries == 0 or not self.held_out:
            return None
        items = self.held_out[: self.s.utility_queries]
        scores = []
        scorer = None
        if self.s.task is Task.GENERATE:
            from rouge_score import rouge_scorer

            scorer = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)
        if self.oracle.reads_ahead:  # every held-out query's prompts in one batch
            prompts = [
                p
                for q, item in enumerate(items)
                for p in mech.answer_prompts(
                    self.fmt, self.private, self.fmt.query_for(item), 1, seeded_rng(self.s.seed, 4, q)
                )
            ]
            self.oracle.read_ahead(prompts)
        for q, item in enumerate(items):
            rng = seeded_rng(self.s.seed, 4, q)
            rel = mech.release(self.oracle, self.fmt, self.private, self.fmt.query_for(item), 1, rng)
            out = rel.outputs[0]
            if scorer is None:
                scores.append(float(out == item[self.fmt.output]))
            else:
                scores.append(scorer.score(item[self.fmt.output], out)["rouge1"].fmeasure)
        return float(np.mean(scores))


class _ReadAhead:
    """The label distributions of an audit's runs read ahead on a server, in input order: before the
    first run of a batch is played, the prompts of the runs from it on that the log does not hold
    (``Mechanism.answer_prompts``, found without a model) are gathered until their unread label
    requests fill ``ModelOracle.ahead_requests``, and sent in one ``ModelOracle.read_ahead``. The
    runs are then played one by one as ever, reading from what was read: the log is the one
    played one prompt at a time. A no-op on a backend that does not read ahead (the local engine)."""

    def __init__(self, game: AuditGame, mech: Mechanism, log: RecordLog | None, keys: list[str], draws: list):
        self.game, self.mech = game, mech
        pending = [(k, d) for k, d in zip(keys, draws) if log is None or k not in log.records]
        self.keys, self.draws = [k for k, _ in pending], [d for _, d in pending]
        self.at = {k: n for n, k in enumerate(self.keys)}
        self.next = 0  # the first pending run not read ahead yet

    def before(self, key: str) -> None:
        """Called before run ``key`` is played (or read from the log)."""
        oracle = self.game.oracle
        n = self.at.get(key)
        if n is None or n < self.next or not oracle.reads_ahead:
            return
        prompts, unread, end = {}, 0, n
        while end < len(self.keys) and unread * len(oracle.labels) < oracle.ahead_requests:
            for prompt in self.game._answer_prompts(self.mech, self.draws[end]()):
                if prompt not in prompts:
                    prompts[prompt] = None
                    unread += len(oracle.unread([prompt]))
            end += 1
        self.next = end
        oracle.read_ahead(list(prompts))


def reference_key(ek: str, z: bool, j: int) -> str:
    """The log key of reference run ``j`` (with the canary if ``z``) at ε key ``ek``."""
    return f"eps={ek}/ref={'in' if z else 'out'}/{j}"


def trial_key(ek: str, i: int) -> str:
    """The log key of trial ``i`` at ε key ``ek``."""
    return f"eps={ek}/trial={i}"


def run_keys(epsilons, trials: int, reference_runs: int) -> dict[str, str]:
    """The log key of every record an audit at ``epsilons`` writes, with its type: a ``trial`` per
    trial ``i < trials`` and a ``reference`` per reference run ``j < reference_runs`` (with and
    without the canary) of each ε; the reference runs only where the detector needs them."""
    keys: dict[str, str] = {}
    for eps in epsilons:
        ek = _eps_key(eps)
        keys.update({trial_key(ek, i): "trial" for i in range(trials)})
        keys.update({reference_key(ek, z, j): "reference" for j in range(reference_runs) for z in (True, False)})
    return keys


def _run_record(runs: Mapping[str, dict], key: str, where) -> dict:
    rec = runs.get(key)
    if not isinstance(rec, dict) or not isinstance(rec.get("signal"), list):
        raise DataError(f"{where or 'the trial log'}: no usable record {key!r} (the report needs it)")
    return rec


def _check_canary(rec: dict, i: int, canary_id: str, where) -> None:
    if rec.get("canary") != canary_id:
        raise DataError(
            f"{where}: trial {i} was played with canary {rec.get('canary')!r}, this audit's "
            f"canary is {canary_id!r}: choose another --out"
        )


def fit_detector(detector: Detector, runs: Mapping[str, dict], s: AuditSettings, ek: str, where=None) -> None:
    """Fit ``detector`` on the reference runs at ε key ``ek`` held in ``runs`` (records by log key)."""
    if not detector.needs_reference:
        return
    refs = {
        z: [np.asarray(_run_record(runs, reference_key(ek, z, j), where)["signal"]) for j in range(s.reference_runs)]
        for z in (True, False)
    }
    detector.fit(refs[True], refs[False])


def trial_scores(
    detector: Detector, runs: Mapping[str, dict], s: AuditSettings, ek: str, canary_id: str, where=None
) -> tuple[list[float], list[float], dict[str, list[int]]]:
    """The IN and OUT scores of the trials at ε key ``ek`` in ``runs`` (by ``detector``, fitted) and
    the outputs withheld per IN / OUT trial; a trial of another canary is refused (``where``: the log)."""
    in_scores, out_scores, withheld = [], [], {"in": [], "out": []}
    for i in range(s.trials):
        rec = _run_record(runs, trial_key(ek, i), where)
        _check_canary(rec, i, canary_id, where)
        (in_scores if rec["z"] else out_scores).append(detector.score(np.asarray(rec["signal"])))
        withheld["in" if rec["z"] else "out"].append(rec.get("withheld", 0))
    return in_scores, out_scores, withheld


RECORDED_FIELDS = (
    "utility",
    "epsilon_upper_bound",
    "epsilon_exact",
    "epsilon_pair_at_least",
    "privacy_profile_kind",
    "privacy_profile_method",
    "privacy_profile",
    "gaussian_mu",
    "utility_chance",
)
"""Row fields measured with the model beyond the trials (held-out utility, the pair's exact answer
distributions): a report without the model takes them from the end line, which the chain protects."""


def recompute_rows(report: AuditReport, runs: Mapping[str, dict], where=None) -> list[AuditRow]:
    """The rows of a finished audit's report recomputed from its logged trial and reference records
    (``runs``, by log key) by the code that formed them: the detector is refitted on the reference
    runs, the trials re-scored and :func:`report_row` re-run. The :data:`RECORDED_FIELDS` come from
    ``report``'s rows (the audit tightness is re-derived from them). ``InvalidParameter`` or
    ``DataError`` if the report's settings or canary cannot be read."""
    s = report.settings
    labels, canary = (report.format or {}).get("labels") or [], report.canary
    if len(report.rows) != len(s.epsilons):
        raise DataError(f"{where}: the report has {len(report.rows)} rows for {len(s.epsilons)} epsilon(s)")
    rows = []
    for eps, stored in zip(s.epsilons, report.rows):
        mech, ek = make_mechanism(s, eps), _eps_key(eps)
        detector = _detector(s, labels, canary.label)
        fit_detector(detector, runs, s, ek, where)
        ins, outs, withheld = trial_scores(detector, runs, s, ek, canary.id, where)
        row = report_row(s, mech, eps, ins, outs, stored.utility, withheld, gaussian_mu=stored.gaussian_mu)
        recorded = {k: getattr(stored, k) for k in RECORDED_FIELDS}
        reasons = {k: v for k, v in stored.reasons.items() if k not in row.reasons}
        row = replace(row, **recorded, **tightness_fields(row.epsilon_lower_bound, recorded, reasons))
        row.reasons = {**row.reasons, **reasons}
        row.contradictions = contradictions(row, recorded["utility_chance"])  # against the recorded pair
        rows.append(row)
    return rows


def run_audit(
    engine: Backend,
    records: Sequence[dict],
    settings: AuditSettings,
    log: RecordLog | None = None,
    embedder: Backend | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    fmt: AuditFormat | str | None = None,
    judge: Backend | None = None,
    tell: Callable[[str], None] | None = None,
) -> AuditReport:
    """Run the ContextLeak game for every ε in ``settings`` and estimate the leakage.

    ``records``: the private pool (validated here against ``fmt``, the deployment's prompt
    format: an :class:`AuditFormat`, a built-in name or a file; default the built-in of
    ``settings.task``); ``log``: an open :class:`RecordLog` whose finished keys are reused
    (resume); ``embedder``: an ``Engine(..., embeddings=True)`` for generation audits; ``judge``:
    the engine of ``settings.judge_model`` for the judge defence; ``progress(label, done, total)``
    is called after each reference run and trial; ``tell(note)`` is handed each note a person must
    read with the numbers (how the backend sampled what the audit scored: the table shows no notes).
    (:func:`ctxlite.runs.run_audit` runs this with a log, a verdict and an end line.)
    """
    s = settings
    game = audit_game(engine, records, s, log=log, embedder=embedder, fmt=fmt, judge=judge)
    canary, fmt = game.canary, game.fmt
    rows = []
    for eps in s.epsilons:
        mech = make_mechanism(s, eps, judge_from_engine(judge))
        detector = _detector(s, fmt.labels, canary.label)
        ins, outs, withheld = game.play(mech, eps, detector, log, progress or (lambda *_: None))
        rows.append(
            report_row(
                s, mech, eps, ins, outs, game.utility(mech), withheld, game.known_profile(mech), game.utility_chance()
            )
        )
    choice, first = bound_choice(s), first_bound_choice(log.first_end if log is not None else None)
    warning = rereport_warning(first, choice)
    transport = (_served_note(s) if served_texts(engine) and _texts_out(s) else []) + (
        _sampled_answers_note(s) if game.oracle.sampled_answers and not _texts_out(s) else []
    )
    for note in transport:
        (tell or (lambda _: None))(note)
    return AuditReport(
        settings=s,
        canary=canary,
        query=game.query,
        rows=rows,
        epsilon_kind=_epsilon_kind(s),
        utility_metric="accuracy" if s.task is Task.CLASSIFY else "rouge1_f",
        private_size=s.private_size,
        forward_passes=game.oracle.forward_passes,
        notes=_notes(s, len(game.pool), bool(game.held_out))
        + transport
        + _above_exact(rows, s.estimates.alpha)
        + [c for r in rows for c in r.contradictions]
        + ([warning] if warning else []),
        format=fmt.identity(),
        example_prompt=game.example_prompt(mech),
        first_reported_with=first or choice,
        rereport_warning=warning,
    )


def audit_game(
    engine: Backend,
    records: Sequence[dict],
    settings: AuditSettings,
    *,
    log: RecordLog | None = None,
    embedder: Backend | None = None,
    fmt: AuditFormat | str | None = None,
    judge: Backend | None = None,
) -> AuditGame:
    """The game :func:`run_audit` plays (its arguments validated the same way): the model behind
    its caches, the canary, the private set and the query, for playing trials one by one."""
    s = settings
    records, fmt = _check_inputs(engine, records, s, log, embedder, fmt, judge)
    labels = [fmt.answer_prefix + label for label in fmt.labels]
    oracle = ModelOracle(engine, labels, s.temperature, embedder, s.max_new_tokens, special=fmt.chat)
    canary = make_canary(s.canary, fmt, records, s.seed, engine=engine)
    return AuditGame(oracle, records, s, canary, fmt)


def audit_format(engine, fmt, settings: AuditSettings, records: Sequence[dict]) -> AuditFormat:
    """The format an audit runs: ``fmt`` (default the task's built-in) with its labels resolved against
    ``records`` and, for a chat format, the model's chat template bound (refused when it has none)."""
    fmt = resolve_format(fmt if fmt is not None else settings.task, records)
    if fmt.task is not settings.task:
        raise InvalidParameter(
            f"format {fmt.name} is a {fmt.task.value} format but the audit's task is {settings.task.value}"
        )
    if not fmt.chat:
        return fmt
    render_chat(engine, [{"role": "user", "content": "x"}])  # refuses a model without a chat template, now
    return fmt.with_chat(True, lambda messages: render_chat(engine, messages))


def judge_from_engine(judge) -> JudgeModel | None:
    """The judge engine as a :class:`JudgeModel`: asked through its chat template when it has one."""
    if judge is None:
        return None
    chat = chat_template(judge) is not None
    oracle = ModelOracle(judge, special=chat)
    return JudgeModel(oracle, (lambda messages: render_chat(judge, messages)) if chat else None)


def _check_inputs(
    engine, records, s: AuditSettings, log: RecordLog | None, embedder, fmt, judge=None
) -> tuple[list, AuditFormat]:
    """The validated records and the format; refuses a pool too small, a missing capability or another audit's log."""
    records = check_records(records, fmt if fmt is not None else s.task)
    fmt = audit_format(engine, fmt, s, records)
    if len(records) < s.private_size:
        raise DataError(
            f"the private set has {len(records)} records but {s.ensembles} ensemble(s) x {s.shots} "
            f"shot(s) need {s.private_size}"
        )
    text_out = _texts_out(s)
    # a classification's label distribution is exact by teacher forcing too: only texts need rows and
    # streams, or a backend that samples them itself (a server)
    if text_out and not served_texts(engine):
        require(engine, [LogitRows, Streams], f"a {s.task.value} audit")
    if s.mechanism is MechanismKind.JUDGE and judge is None:
        require(engine, [LogitRows], "the judge mechanism (the audited model judging its own outputs)")
    if s.task is Task.GENERATE and s.attack is Attack.CANARY:
        if embedder is None:
            raise InvalidParameter("generation audits need an embedding engine (embedder=Engine(..., embeddings=True))")
        require(embedder, [Embeddings], "the generation audit's embedding model")
    if (s.judge_model is None) != (judge is None):
        raise InvalidParameter(
            f"settings.judge_model is {s.judge_model!r} but run_audit got judge={'an engine' if judge else None}: "
            "pass judge=Engine(settings.judge_model), or judge_model=None to let the audited model judge itself"
            if s.judge_model is not None
            else "a judge engine needs the judge mechanism and settings.judge_model naming it"
        )
    if judge is not None:
        require(judge, [LogitRows], "the judge model")
    if log is not None:
        embed_id = embedder.identity()["model"] if embedder else None
        judge_id = judge.identity()["model"] if judge else None
        expected = audit_identity(engine.identity(), s, records, embed_id, fmt, judge_id)
        diff = differences(log.identity, expected)
        if diff:
            raise DataError(
                f"{log.path} is the log of another audit ({', '.join(diff[:6])} differ): open it with "
                "this audit's identity (audit_identity) or choose another log"
            )
    return records, fmt


def _notes(s: AuditSettings, n_records: int, has_held_out: bool) -> list[str]:
    """What a reader of the report must know to read its numbers."""
    notes = []
    if s.mechanism.is_dp:
        notes.append(
            "epsilon is per query with the canary always present (analytic Gaussian, replacement "
            "sensitivity); epsilon_per_trial composes the trial's queries exactly (Gaussian composition)"
        )
    if s.estimates.accounting_queries is not None:
        notes.append(
            f"epsilon_subsampled: the same sigma over T = {s.estimates.accounting_queries} queries, each "
            f"Poisson-subsampling records at q = {s.estimates.sampling_rate:g} (dp_accounting PLD, add/remove "
            "sensitivity sqrt(2) for rnm, 2C for esa: one record changes one ensemble's output); it is "
            "not what the audit measures, which is one release per query"
        )
    if s.utility_queries == 0:
        notes.append("utility: not measured (utility_queries = 0)")
    elif not has_held_out:
        notes.append(
            f"utility: not measured, no held-out records (the private set uses all {n_records} records "
            "of the data: add records to measure it)"
        )
    if s.detector is DetectorKind.DIRECTION and s.attack is Attack.CANARY:
        notes.append(
            f"detector direction fitted on {s.reference_runs} paired reference runs per epsilon, "
            "disjoint from the evaluated trials"
        )
    return notes


def _texts_out(s: AuditSettings) -> bool:
    return s.task is Task.GENERATE or s.attack is Attack.INJECTION or s.mechanism is MechanismKind.JUDGE


def _served_note(s: AuditSettings) -> list[str]:
    """What the reader must know when the server sampled the texts."""
    return [
        f"texts: sampled by the server, one completion per text at temperature {s.temperature:g} and at most "
        f"{s.max_new_tokens} tokens, each with its own seed (top-p 1, top-k, min-p and repetition penalty off): "
        "i.i.d. samples of the model as served, so the detector and the epsilon lower bound are those of the "
        "served model; not comparable text for text with a local run (the server may end a text at its first "
        "token, which the local sampler bans), and a trial replayed at another epsilon draws the same texts "
        "only where the server's seeded sampling is deterministic"
    ]


def _sampled_answers_note(s: AuditSettings) -> list[str]:
    """What the reader must know when the server sampled the answers (no log-probabilities)."""
    per = f"{s.queries_per_trial} per trial" + (f", each from {s.ensembles} ensembles" if s.mechanism.is_dp else "")
    return [
        f"answers: sampled by the server, which returns no log-probabilities: every answer is one completion at "
        f"temperature {s.temperature:g} ({per}), read as the label its tokens start with, or other. They are "
        "i.i.d. answers of the model as served, so a trial's answer frequencies, which the detector scores, "
        "have the law they have when the distribution is read exactly, and the epsilon lower bound stays "
        "valid; the distribution itself is not known, so the pair's exact epsilon is not computed, and every "
        "answer costs a request"
    ]


def _epsilon_kind(s: AuditSettings) -> str:
    """What the rows' theoretical ε is: per query for the DP mechanisms; none for plain ICL (no
    defense at all) and for the heuristic defenses (a defense, but no privacy parameter)."""
    if s.mechanism.is_dp:
        return "per-query, canary always present"
    if s.mechanism is MechanismKind.NONE:
        return "none (no defense: plain in-context learning)"
    return "none (heuristic defense)"


def _above_exact(rows: list[AuditRow], alpha: float) -> list[str]:
    """A warning for each row whose lower bound exceeds the pair's ε (exact, or an upper bound): a
    valid bound does so with probability at most alpha; more often than that is a bug."""
    return [
        f"eps_lb = {r.epsilon_lower_bound:.4g} exceeds the pair's {ceiling_kind(r)} eps = "
        f"{r.epsilon_upper_bound:.4g} at eps = {r.epsilon}: a valid bound does so with probability "
        f"<= {alpha:g}; if it recurs, report it"
        for r in rows
        if r.epsilon_upper_bound is not None and r.epsilon_lower_bound > r.epsilon_upper_bound + 1e-9
    ]


def _detector(s: AuditSettings, labels: Sequence[str], canary_label: str) -> Detector:
    if s.attack is Attack.INJECTION:
        return LeakDetector()
    if s.detector is DetectorKind.COUNT:
        if s.task is not Task.CLASSIFY:
            raise InvalidParameter("the count detector is for classification; generation uses the direction detector")
        if canary_label not in labels:
            raise DataError(f"the canary's label {canary_label!r} is not one of the format's labels {list(labels)}")
        return CountDetector(list(labels).index(canary_label))
    return DirectionDetector()
