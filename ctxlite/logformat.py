"""The result log's format: its version, its JSON Schema, and the one policy for logs of older formats.

A log's header names its format, ``{"type": ..., "schema_version": SCHEMA_VERSION, "identity": ...}``,
and ``ctxlite/data/log.schema.json`` (:func:`schema`) describes every line of that format: the
header, each kind of record, the end line. The typed results read a log of this format
(``from_dict``) and write it (``to_dict``); the test suite validates every log it writes against
the schema.

The policy for a log of another format (docs/log-schema.md says the same for users):

* a log of **this** format (:data:`FORMATS`: 1, 2 or 3) is read, resumed and reported; a run resumes
  only a log of the format it writes (:func:`format_of_run`);
* a log written **before** formats were versioned (no ``schema_version``: ctxlite before the run
  layer) is read for ``ctxlite report`` and ``ctxlite verify`` but never resumed or appended to
  (:data:`NOT_RESUMABLE`; one older still, without a hash chain, is reported, never verified nor
  resumed, :data:`UNCHAINED`): its results are upgraded to this format as they are read
  (:func:`upgrade_example`, :func:`upgrade_report`), filling only what the older format did not
  write, by the rule the older readers applied, and its end line is compared with what is
  recomputed on the fields it holds;
* a log of a **newer** format, or of a version this ctxlite does not know, is refused (exit 4).

Every compatibility rule lives here: no reader elsewhere guesses at a missing field.
"""

from __future__ import annotations

import json
import math
from importlib import resources

from ctxlite.errors import DataError

SCHEMA_VERSION = 3
"""The newest format this ctxlite reads and writes (the header's ``schema_version``)."""

FORMATS = (1, 2, 3)
"""The formats this ctxlite reads, resumes and writes. Format 2 adds a score result's ``units`` (and
a unit run's ``unit``/``sentence_language`` settings); format 3 a hierarchical search's ``descent``
(the sentences it measured inside a passage, each with its ``parent``). A run writes the oldest
format that holds its records (:func:`format_of_run`), so an n-gram run's log stays a format-1
log, byte for byte what the previous version wrote and readable by it, a unit run without a
descent stays format 2, while a ctxlite that knows an older format only refuses a newer log
instead of reporting it without what it cannot read."""


SERVE_FORMATS = (2, 3)
"""The formats of a ``ctxlite serve`` ledger, whose records (reservations, responses) are the same in
each: it began in format 2, and format 3 changed score results only. A new ledger is written in the
first; a ledger of any of them is continued in its own (:class:`ctxlite.records.RecordLog`'s
``continues``), so a restart after an upgrade keeps the budget spent instead of refusing the
ledger, which would leave the operator a new, empty one."""


def format_of_run(unit: str | None, descends: bool = False) -> int:
    """The format a score run writes: 3 where it descends the unit hierarchy (``--search adaptive``
    with ``--unit passage`` or ``sentence``), 2 where it scores units (``--unit`` other than
    ``ngram``), else 1."""
    if unit in (None, "ngram"):
        return 1
    return 3 if descends else 2


SCHEMA_FILE = "log.schema.json"
"""The JSON Schema of this format, shipped in ``ctxlite/data/``."""

NOT_RESUMABLE = (
    "was written by an older ctxlite, before result logs had a versioned format: it can be reported "
    "(ctxlite report) and verified, never resumed"
)
"""Why a log of an older format is refused for writing."""

UNCHAINED = (
    "was written before ctxlite chained its logs (it has no hash chain): it can be reported "
    "(ctxlite report), never resumed into a chained log"
)
"""Why a log without a hash chain (older still) is refused for writing."""


def schema() -> dict:
    """The JSON Schema (draft 2020-12) of a log line of this format; ``$defs`` names each kind of line."""
    text = resources.files("ctxlite").joinpath("data", SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def version_of(path, header: dict) -> int | None:
    """The format of a log from its header: one of :data:`FORMATS`, or None for a log written before
    formats were versioned; another version is refused (``DataError``: a newer ctxlite wrote it)."""
    if "schema_version" not in header:
        return None
    version = header["schema_version"]
    if version not in FORMATS or isinstance(version, bool):
        raise DataError(
            f"{path}:1: log format {version!r}, but this ctxlite reads format {SCHEMA_VERSION} and older "
            "(a newer ctxlite wrote it: report it with that version)"
        )
    return version


# --------------------------------------------------------------------------
# score logs


def upgrade_example(result: dict) -> dict:
    """A score record's ``result`` (``ExampleResult``) of an unversioned log, in this format.

    What older logs lack, each by the rule their readers applied: a result's ``epsilon`` (ε-bounded
    CID) was only in ``generation``; ``top_spans`` was the 5 n-grams of largest τ_i; a result
    without token spans shows its response plain; an adaptive search without
    ``measured_every_window`` measured every window when it holds as many n-grams as windows; a
    noise floor of null ablations only has no per-token maxima (its floor is its largest sum)."""
    out = dict(result)
    out["results"] = [_upgrade_lambda(r, result.get("context_tokens", 0)) for r in result.get("results") or ()]
    return out


def _upgrade_lambda(r: dict, context_tokens: int) -> dict:
    r = dict(r)
    if "epsilon" not in r:
        r["epsilon"] = (r.get("generation") or {}).get("epsilon")
    ngrams = [{"above_noise": None, **g} for g in r.get("ngrams") or ()]
    r["ngrams"] = ngrams
    if "top_spans" not in r:
        r["top_spans"] = sorted(ngrams, key=lambda g: -g["influence"])[:5]
    else:
        r["top_spans"] = [{"above_noise": None, **g} for g in r["top_spans"]]
    r.setdefault("response_token_chars", [])
    r.setdefault("context_tokens", context_tokens)
    r.setdefault("context_size", None)
    r.setdefault("generation", None)
    r.setdefault("utility", None)
    r.setdefault("search", None)
    if not r.get("regurgitation"):
        r["regurgitation"] = None
    if r.get("noise_floor"):
        r["noise_floor"] = {"per_token": [], "kinds": [], "method": "null ablations", **r["noise_floor"]}
    else:
        r["noise_floor"] = None
    if r.get("generation") is not None:
        r["generation"] = {"step_lambdas": None, "realised_epsilon": None, "seed": None, **r["generation"]}
    search = r["search"]
    if search is not None:
        search = {"tokens_decoded": None, "null_ablations": 0, "null_tokens": None, **search}
        if search.get("method") == "adaptive":
            search = {key: None for key in ADAPTIVE_SEARCH_FIELDS} | {"blocks": []} | search
            if search.get("measured_every_window") is None:
                search["measured_every_window"] = len(ngrams) >= int(search.get("windows") or 0)
        r["search"] = search
    return r


ADAPTIVE_SEARCH_FIELDS = (
    "top",
    "refine_ratio",
    "branching",
    "top_blocks",
    "rounds",
    "converged",
    "measured_every_window",
    "exhaustive_tokens",
)
"""The fields an adaptive search's record holds beside an exhaustive one's (this format)."""


# --------------------------------------------------------------------------
# audit logs

REPORT_DEFAULTS = {
    "forward_passes": 0,
    "notes": [],
    "format": None,
    "example_prompt": None,
    "first_reported_with": None,
    "rereport_warning": None,
}
"""What an older audit report may lack, and its value."""

ROW_FIELDS = (
    "epsilon epsilon_per_trial sigma sensitivity n_in n_out audit_accuracy threshold tpr fpr epsilon_point "
    "epsilon_lower_bound lower_bound_method lower_bound_counts confidence mu_lower_bound epsilon_gdp_bound "
    "epsilon_from_mu_lb epsilon_from_mu_lb_kind gaussian_mu auroc tpr_interpolated accuracy_upper_bound "
    "epsilon_gdp epsilon_gdp_kind epsilon_upper_bound epsilon_exact privacy_profile_kind privacy_profile_method "
    "privacy_profile audit_tightness audit_tightness_at_least reasons epsilon_subsampled accounting utility "
    "withheld_rate utility_chance contradictions"
).split()
"""The fields of an audit report's row in this format."""

ROW_FIELDS_ADDED = ("epsilon_pair_at_least",)
"""Audit row fields added to format 1 after logs were written without them (not in
:data:`ROW_FIELDS`, which an older log's row is upgraded to): a row without one is read with it
null, not computed (such a row has the pair's grid value, rounded up, in ``epsilon_exact``)."""


def upgrade_report(report: dict) -> dict:
    """An audit log's end-line report of an unversioned log, in this format.

    What older reports lack, each by the rule their readers applied: a row without
    ``lower_bound_method`` was bounded by the split; without ``confidence``, at the report's; the
    pair's ε was only ``epsilon_exact`` (an exact profile) before ``epsilon_upper_bound`` and
    ``privacy_profile_kind``; a row without the lower bound's counts has no observed rates; any
    other field it lacks was not computed (null, no reasons, no contradictions)."""
    out = {**REPORT_DEFAULTS, **report}
    confidence = (report.get("settings") or {}).get("confidence", 0.95)
    out["rows"] = [_upgrade_row(r, confidence) for r in report.get("rows") or ()]
    return out


def _upgrade_row(row: dict, confidence: float) -> dict:
    row = dict(row)
    if "epsilon_upper_bound" not in row:
        row["epsilon_upper_bound"] = row.get("epsilon_exact")
    if "privacy_profile_kind" not in row:
        row["privacy_profile_kind"] = None if row["epsilon_upper_bound"] is None else "exact"
    row.setdefault("lower_bound_method", "split")
    row.setdefault("confidence", confidence)
    row.setdefault("lower_bound_counts", {"tp": 0, "n_in": 0, "fp": 0, "n_out": 0, "threshold": None})
    row.setdefault("reasons", {})
    row.setdefault("contradictions", [])
    return {key: row.get(key) for key in ROW_FIELDS} | {key: row[key] for key in ROW_FIELDS_ADDED if key in row}


def finite_or_inf(value):
    """A strict-JSON number of a log (``"inf"``/``"-inf"`` for the infinities) as a float; None stays None."""
    if value in ("inf", "-inf"):
        return float(value)
    return value


def strict(value):
    """``value`` as strict JSON writes it: ±inf as ``"inf"``/``"-inf"`` (NaN as null), recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value
