"""Hand-made typed results for the tests that need no model: every field has a plain default, and a
test sets the few it is about (``gram(0, 9.0, True)``, ``row(epsilon_lower_bound=1.2)``)."""

from __future__ import annotations

from ctxlite.audit.canaries import Canary, CanaryKind
from ctxlite.audit.queries import AuditQuery
from ctxlite.audit.report import AuditReport, AuditRow, BoundCounts
from ctxlite.audit.settings import AuditSettings
from ctxlite.influence.noise import NoiseFloor
from ctxlite.influence.regurgitation import Regurgitation
from ctxlite.influence.results import ExampleResult, LambdaResult, NgramInfluence, SearchRecord


def gram(start: int, influence: float, above: bool | None = None, n: int = 4, **fields) -> NgramInfluence:
    """An n-gram at token ``start`` (characters 3·start on) of τ_i ``influence``."""
    values = dict(
        char_start=3 * start, char_end=3 * start + 10, text="private words", per_token=[influence], above_noise=above
    )
    return NgramInfluence(start, n, **{**values, **fields}, influence=influence)


def floor(most: float, pairs: int = 1) -> NoiseFloor:
    """A floor measured as the scorer logs it: ``pairs`` probe pairs re-decoded in other batch
    tilings, each of Σ_t |δ_t| = most / 2.5, whose floor 2 Σ_t r_t is ``most`` (one response token)."""
    return NoiseFloor([8] * (2 * pairs), [most / 2.5] * (2 * pairs), [most / 2], ["ablation", "null"] * pairs)


def result(lam: float = 1.0, ngrams=(), noise: NoiseFloor | None = None, token_influence=(1.0,), **fields):
    """One λ result; its ``top`` spans are its n-grams of largest τ_i (five)."""
    tau = list(token_influence)
    values = dict(
        response="r",
        response_ids=[1] * len(tau),
        generated=False,
        token_logprob=[-1.0] * len(tau),
        token_logprob_without=[-1.0] * len(tau),
        token_pmi=[0.0] * len(tau),
        token_influence=tau,
        response_token_chars=[(0, 1)] * len(tau),
        document_influence=float(sum(tau)),
        ngrams=list(ngrams),
        noise_floor=noise,
        regurgitation=Regurgitation(0, 0.0, 0.0),
        context_tokens=20,
    )
    r = LambdaResult(lam=lam, **{**values, **fields})
    if "top" not in fields:
        r.top = r.top_spans(5)
    return r


def example(*results: LambdaResult, id: str = "e", context_tokens: int = 20, query: str = "q") -> ExampleResult:
    return ExampleResult(id, context_tokens, query, list(results))


def adaptive(windows: int, measured_every_window: bool = False) -> SearchRecord:
    """An adaptive search's record over ``windows`` windows."""
    return SearchRecord("adaptive", windows, 0, None, 0, None, 5, 1.0, 4, 16, 1, True, measured_every_window, None, [])


def row(**fields) -> AuditRow:
    """An audit row; ``fields`` override the defaults (no DP mechanism, no profile, 20 IN / 20 OUT)."""
    values = dict(
        epsilon=None,
        epsilon_per_trial=None,
        sigma=None,
        sensitivity=None,
        n_in=20,
        n_out=20,
        audit_accuracy=0.85,
        threshold=0.5,
        tpr=0.9,
        fpr=0.2,
        epsilon_point=1.2,
        epsilon_lower_bound=0.7,
        lower_bound_method="corner grid",
        lower_bound_counts=BoundCounts(18, 20, 4, 20, 0.5),
        confidence=0.95,
        mu_lower_bound=0.5,
        epsilon_gdp_bound=None,
        epsilon_from_mu_lb=None,
        epsilon_from_mu_lb_kind="estimate, not a bound",
        gaussian_mu=None,
        auroc=0.9,
        tpr_interpolated=0.9,
        accuracy_upper_bound=0.95,
        epsilon_gdp=None,
        epsilon_gdp_kind="model-based estimate, not a bound",
        epsilon_upper_bound=None,
        epsilon_exact=None,
        privacy_profile_kind=None,
        privacy_profile_method=None,
        privacy_profile=None,
        audit_tightness=None,
        audit_tightness_at_least=None,
        reasons={"epsilon_upper_bound": "the distribution of generated texts is not known exactly"},
        epsilon_subsampled=None,
        accounting=None,
        utility=None,
        withheld_rate=None,
        utility_chance=None,
        contradictions=[],
    )
    return AuditRow(**{**values, **fields})


def report(rows, settings: AuditSettings | None = None, **fields) -> AuditReport:
    """An audit report of ``rows`` (default settings: the classification game, 64 queries per trial)."""
    values = dict(
        settings=settings or AuditSettings(),
        canary=Canary(CanaryKind.HEX, "c0ffee", "objective", "hex-0"),
        query=AuditQuery("input-output", 0, "Text: {canary}", "Text: c0ffee"),
        rows=list(rows),
        epsilon_kind="none (no defense: plain in-context learning)",
        utility_metric="accuracy",
        private_size=20,
    )
    return AuditReport(**{**values, **fields})
