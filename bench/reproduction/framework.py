"""The claim registry behind ``bench/reproduce.py``: one small function per paper claim, each
returning a typed :class:`Verdict` (the outcome, its numbers, a test statistic or confidence
interval, and the reason), and the run loop that calls them.

A claim states a *direction* (influence grows with λ, known facts are less influenced than novel
ones, ...). Its verdict is decided by a one-sided test at level α on the data the claim measured:

* ``reproduced``: the effect is in the claimed direction and the test rejects "no effect" (p < α);
* ``not reproduced``: it does not (the reason says whether the direction was right and p ≥ α, or
  the data point the other way);
* ``not testable here``: what the claim is about cannot be measured with the models or data
  available here (the reason says what is missing; any numbers measured anyway are kept);
* ``error``: the claim's code failed (a bug or a missing model): never counted as a verdict.

Nothing is decided from wall-clock times. A claim marked ``robust`` is one whose direction a
correct implementation shows on any model with the quick mode's data: ``--quick`` exits 1 when one
of them is not reproduced (the CI check), the full run only reports.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_TESTABLE = "not testable here"
ERROR = "error"
OUTCOMES = (REPRODUCED, NOT_REPRODUCED, NOT_TESTABLE, ERROR)


@dataclass(frozen=True)
class TestResult:
    """A one-sided test of a claimed direction: ``effect`` > 0 is the claimed direction (a mean
    paired difference, a rank correlation, a certified ε, ...), ``p_value`` the test's one-sided
    p-value; ``ci`` an optional confidence interval of the effect. A test by a confidence bound
    instead (an audit's certified ε) has ``p_value`` None and rejects "no effect" exactly when its
    lower limit ``ci[0]`` is above 0 (at level 1 − ``confidence``)."""

    __test__ = False  # not a pytest class

    name: str
    statistic: float
    p_value: float | None
    effect: float
    n: int
    ci: tuple[float, float] | None = None
    confidence: float | None = None

    def __post_init__(self):
        if self.p_value is None and (self.ci is None or self.confidence is None):
            raise ValueError("a test by a confidence bound needs its interval and confidence")

    @property
    def rejects(self) -> bool | None:
        """Whether "no effect" is rejected at its own level (bound tests), None for a p-value test."""
        return None if self.p_value is not None else self.ci[0] > 0

    def describe(self) -> str:
        level = 100 * (self.confidence or 0.95)
        ci = "" if self.ci is None else f", {level:.0f}% CI [{self.ci[0]:.3g}, {self.ci[1]:.3g}]"
        p = f"p = {self.p_value:.2g}" if self.p_value is not None else f"lower {level:.0f}% bound {self.ci[0]:.3g}"
        return f"{self.name}: effect {self.effect:.3g}{ci}, statistic {self.statistic:.3g}, {p}, n = {self.n}"


@dataclass(frozen=True)
class Figure:
    """A line plot of the claim's data for the HTML report: ``series`` are (name, xs, ys)."""

    title: str
    series: list[tuple[str, list[float], list[float]]]
    x_label: str
    y_label: str


@dataclass
class Verdict:
    """What one claim's run found."""

    outcome: str
    reason: str
    numbers: dict = field(default_factory=dict)
    test: TestResult | None = None
    settings: dict = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    data: dict = field(default_factory=dict)  # per-example values behind the numbers (the JSON keeps them)

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}: one of {OUTCOMES}")
        if self.outcome in (REPRODUCED, NOT_REPRODUCED) and self.test is None:
            raise ValueError("a reproduced / not reproduced verdict needs the test that decided it")

    def to_dict(self) -> dict:
        return _json_ready(asdict(self))


@dataclass(frozen=True)
class Claim:
    """One claim of a paper: ``id`` like ``"000.6"`` (seed paper 000, claim 6), the statement, and
    the function that measures it. ``robust``: ``--quick`` asserts its direction."""

    id: str
    paper: str
    statement: str
    run: Callable[[RunContext], Verdict]
    robust: bool = False


REGISTRY: dict[str, Claim] = {}


def claim(id: str, paper: str, statement: str, *, robust: bool = False):
    """Register the decorated ``run(ctx) -> Verdict`` as claim ``id`` (ids are unique)."""

    def register(run: Callable[[RunContext], Verdict]) -> Callable[[RunContext], Verdict]:
        if id in REGISTRY:
            raise ValueError(f"claim {id} is registered twice")
        REGISTRY[id] = Claim(id, paper, statement, run, robust)
        return run

    return register


def select(ids: Sequence[str] | None) -> list[Claim]:
    """The registered claims in id order, or those named (a prefix such as ``000`` names a paper's)."""
    claims = [REGISTRY[k] for k in sorted(REGISTRY, key=_id_key)]
    if not ids:
        return claims
    chosen = [c for c in claims if any(_names(i, c.id) for i in ids)]
    unknown = [i for i in ids if not any(_names(i, c.id) for c in claims)]
    if unknown:
        raise KeyError(f"unknown claim(s) {', '.join(unknown)}: known {', '.join(c.id for c in claims)}")
    return chosen


def _names(name: str, claim_id: str) -> bool:
    """``name`` is the claim's id, its paper (``000``) or its number without a letter (``000.1``)."""
    return claim_id == name or claim_id.startswith(name + ".") or claim_id.rstrip("abcdefgh") == name


def _id_key(claim_id: str) -> tuple:
    paper, number = claim_id.split(".")
    digits = number.rstrip("abcdefgh")
    return int(paper), int(digits), number[len(digits) :]


# ----- deciding a direction ---------------------------------------------------------------


def decide(test: TestResult, alpha: float, what: str) -> tuple[str, str]:
    """(outcome, reason) of a one-sided test of ``what`` (the claimed direction, in words); a bound
    test decides at its own confidence, not at ``alpha``."""
    if test.p_value is None:
        low, level = test.ci[0], 1 - test.confidence
        if low > 0:
            return REPRODUCED, f"{what} (lower bound {low:.3g} > 0 at confidence {test.confidence:g})"
        return NOT_REPRODUCED, f"the lower bound {low:.3g} does not exclude 0 (level {level:g})"
    if not math.isfinite(test.p_value):
        return NOT_REPRODUCED, f"{what}: the test could not be formed ({test.describe()})"
    if test.effect > 0 and test.p_value < alpha:
        return REPRODUCED, f"{what} (p = {test.p_value:.2g} < α = {alpha:g})"
    if test.effect > 0:
        return NOT_REPRODUCED, f"the direction holds but is not significant: p = {test.p_value:.2g} ≥ α = {alpha:g}"
    return NOT_REPRODUCED, f"the data point the other way (effect {test.effect:.3g}, p = {test.p_value:.2g})"


def paired_greater(a: Sequence[float], b: Sequence[float], name: str = "", confidence: float = 0.95) -> TestResult:
    """Wilcoxon signed-rank test of "a > b" on paired values (exact for small n, zero differences
    dropped, as Wilcoxon's original), with the mean difference a − b and its percentile-bootstrap
    interval. All-zero differences give p = 1."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError("paired values must be two equal-length sequences")
    d = a - b
    ci = _bootstrap(d, confidence)
    if not np.any(d != 0):
        return TestResult(name or "Wilcoxon signed-rank", 0.0, 1.0, 0.0, len(d), ci, confidence)
    res = stats.wilcoxon(d, alternative="greater", zero_method="wilcox")
    return TestResult(
        name or "Wilcoxon signed-rank (one-sided)",
        float(res.statistic),
        float(res.pvalue),
        float(d.mean()),
        len(d),
        ci,
        confidence,
    )


def trend_greater(xs: Sequence[float], rows: Sequence[Sequence[float]], confidence: float = 0.95) -> TestResult:
    """Page's test of an increasing trend of each row (a subject: one example's values at the
    ordered conditions ``xs``), one-sided; effect = mean over rows of Spearman's ρ between x and
    the row's values (with its bootstrap interval)."""
    y = np.asarray(rows, dtype=float)
    if y.ndim != 2 or y.shape[1] != len(xs) or y.shape[1] < 3:
        raise ValueError("Page's test needs one row per subject and at least 3 ordered conditions")
    order = np.argsort(np.asarray(xs, dtype=float), kind="stable")
    y = y[:, order]
    rho = np.array([_spearman(np.arange(y.shape[1]), row) for row in y])
    res = stats.page_trend_test(y, predicted_ranks=list(range(1, y.shape[1] + 1)))
    return TestResult(
        "Page's trend test (one-sided)",
        float(res.statistic),
        float(res.pvalue),
        float(np.nanmean(rho)),
        len(y),
        _bootstrap(rho[np.isfinite(rho)], confidence),
        confidence,
    )


def rank_trend(xs: Sequence[float], ys: Sequence[float]) -> TestResult:
    """Exact permutation test of an increasing trend of one series (one value per ordered condition,
    at most 8): effect = Spearman's ρ between x and y, p = the fraction of the n! orderings of y
    whose ρ is at least as large (ties in y kept as ties)."""
    import itertools

    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if len(x) != len(y) or not 3 <= len(x) <= 8:
        raise ValueError("a rank trend needs 3 to 8 paired values")
    rho = _spearman(x, y)
    perms = [_spearman(x, y[list(p)]) for p in itertools.permutations(range(len(y)))]
    p = float(np.mean(np.asarray(perms) >= rho - 1e-12))
    return TestResult("exact permutation test of Spearman's ρ (one-sided)", rho, p, rho, len(x))


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    if np.all(y == y[0]):
        return 0.0
    return float(stats.spearmanr(x, y).statistic)


def _bootstrap(values: np.ndarray, confidence: float) -> tuple[float, float] | None:
    from ctxlite.influence.analysis import bootstrap_ci

    if len(values) < 2:
        return None
    return bootstrap_ci(values, confidence)


# ----- running ----------------------------------------------------------------------------


@dataclass
class RunContext:
    """What every claim gets: the mode, seed, threads and α, the engines (opened once, on first
    use) and a memo for measurements several claims share."""

    quick: bool = True
    seed: int = 0
    threads: int = 1
    alpha: float = 0.05
    n_ctx: int = 2048
    _engines: dict = field(default_factory=dict)
    _memo: dict = field(default_factory=dict)

    def size(self, quick: int, full: int) -> int:
        return quick if self.quick else full

    def engine(self, model: str = "gemma-3-270m", **options):
        """An ``Engine`` for ``model``, opened on first use with ``threads`` threads."""
        key = (model, tuple(sorted(options.items())))
        if key not in self._engines:
            from ctxlite import Engine, EngineConfig

            self._engines[key] = Engine(model, EngineConfig(n_ctx=self.n_ctx, n_threads=self.threads), **options)
        return self._engines[key]

    def memo(self, key, compute: Callable[[], object]):
        """``compute()`` once per ``key`` for the whole run (claims sharing one measurement)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def close(self) -> None:
        for eng in self._engines.values():
            eng.close()
        self._engines.clear()

    def settings(self) -> dict:
        return {
            "mode": "quick" if self.quick else "full",
            "seed": self.seed,
            "threads": self.threads,
            "alpha": self.alpha,
            "n_ctx": self.n_ctx,
        }


@dataclass
class ClaimRun:
    """A claim with its verdict and the seconds it took (reported, never asserted)."""

    claim: Claim
    verdict: Verdict
    seconds: float
    cpu_seconds: float = 0.0  # this process's CPU time: the cost without other load on the machine

    def to_dict(self) -> dict:
        c = self.claim
        return {
            "id": c.id,
            "paper": c.paper,
            "statement": c.statement,
            "robust": c.robust,
            "seconds": round(self.seconds, 1),
            "cpu_seconds": round(self.cpu_seconds, 1),
            **self.verdict.to_dict(),
        }


def run_claims(claims: Sequence[Claim], ctx: RunContext, on_done: Callable[[ClaimRun], None] | None = None):
    """Each claim's verdict, in order; a claim that raises gets an ``error`` verdict with the
    exception (the others still run)."""
    done = []
    for c in claims:
        start, cpu = time.monotonic(), time.process_time()
        try:
            verdict = c.run(ctx)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - one claim's failure is reported, not fatal
            last = traceback.extract_tb(exc.__traceback__)[-1]
            where = f"{last.filename.rsplit('/', 1)[-1]}:{last.lineno}"
            verdict = Verdict(ERROR, f"{type(exc).__name__}: {exc} (at {where})")
        run = ClaimRun(c, verdict, time.monotonic() - start, time.process_time() - cpu)
        done.append(run)
        if on_done is not None:
            on_done(run)
    return done


def failed_assertions(runs: Sequence[ClaimRun]) -> list[ClaimRun]:
    """The runs ``--quick`` fails on: a robust claim not reproduced, or any error."""
    return [r for r in runs if r.verdict.outcome == ERROR or (r.claim.robust and r.verdict.outcome != REPRODUCED)]


def summary_line(run: ClaimRun) -> str:
    """The one printed line of a claim: id, outcome, the deciding statistic, the reason."""
    v = run.verdict
    stat = f" [{v.test.describe()}]" if v.test is not None else ""
    return f"{run.claim.id:<7} {v.outcome.upper():<18} {v.reason}{stat}"


def _json_ready(value):
    """Floats that JSON can hold (non-finite as strings), numpy scalars and tuples unwrapped."""
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value
