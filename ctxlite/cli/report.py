"""``ctxlite report``: a score or audit run re-rendered from its ``--out`` log alone (no model)."""

from __future__ import annotations

import json

import click

from ctxlite.cli.options import (
    conclude,
    emit_json,
    fail_above_epsilon_option,
    fail_above_influence_option,
    given_explicitly,
    junit_option,
    progress,
    verdict_json,
)
from ctxlite.errors import DataError
from ctxlite.outputs import refuse_same_files
from ctxlite.reporting.labels import epsilon_label, result_epsilon


@click.command()
@click.argument("log_path", metavar="RUN.jsonl", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout instead of a table.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="Also write a self-contained offline HTML report (heatmap, plots, tables) to FILE, mode 0600.",
)
@click.option(
    "--no-text",
    is_flag=True,
    help="In the HTML report, show private text only by position, length and hash (a shareable report).",
)
@fail_above_influence_option
@fail_above_epsilon_option
@junit_option
def report(log_path, as_json, html_path, no_text, fail_above_influence, fail_above_epsilon, epsilon_unit, junit):
    """Report a finished or partial run from its log: no model is loaded.

    A score log gives one row per example and λ (and ε; document influence, the
    largest n-gram influence τ_i with its position and text, the noise floor),
    then per example and λ its top 3 n-grams marked in an excerpt of the
    context; an audit log gives the audit's table of ε rows. A run that did not finish
    is reported as partial, and a gate on it fails only on what finished: it
    refuses (exit 4) rather than pass an unfinished run. With a gate, the verdict (fail, pass
    or inconclusive, exit 8 / 0 / 10) and its basis come first. Everything printed and
    gated is recomputed from the log's records; a log whose hash chain breaks,
    that holds a record twice, or whose end line disagrees with its records is
    refused (exit 4, naming the line). The log's chain head is printed on stderr
    and ends the verdict line (keep it for ctxlite verify --head).

    \b
    Examples:
      ctxlite report runs/scores.jsonl
      ctxlite report runs/scores.jsonl --fail-above-influence 5 --junit influence.xml
      ctxlite report runs/audit.jsonl --json
      ctxlite report runs/scores.jsonl --html runs/report.html
      ctxlite report runs/audit.jsonl --html runs/audit.html --no-text
    """
    from ctxlite.records import read_run_log

    refuse_same_files([("RUN.jsonl", log_path)], [("--html", html_path), ("--junit", junit)])
    if no_text and html_path is None:
        raise click.UsageError("--no-text shapes the HTML report: give --html FILE too")
    if given_explicitly("epsilon_unit") and fail_above_epsilon is None:
        raise click.UsageError("--epsilon-unit is the unit of the --fail-above-epsilon budget: give that too")
    run = read_run_log(log_path)  # the chain and the records' keys are checked as it is read
    _check_identity(run)
    _say_chain(run)
    if run.kind == "score-run":
        if fail_above_epsilon is not None:
            raise click.UsageError(f"--fail-above-epsilon gates audit logs; {log_path} is a score log")
        verdict, out, table = _score(run, fail_above_influence)
    elif run.kind == "audit":
        if fail_above_influence is not None:
            raise click.UsageError(f"--fail-above-influence gates score logs; {log_path} is an audit log")
        verdict, out, table = _audit(run, fail_above_epsilon, epsilon_unit, junit)
    else:
        raise DataError(f"{log_path} is a ctxlite {run.kind!r} log, not a score or audit log")
    out["chain"] = {"chained": run.chained, "head": run.head, "lines": run.lines}
    if verdict is not None and run.head is not None:
        verdict.properties["log.head"] = run.head
    if out.get("complete"):
        progress(_headline(out))
    if html_path is not None:
        _write_html(run, html_path, no_text, verdict)
    if as_json:
        emit_json({**(verdict_json(verdict) if verdict else {}), **out})  # the verdict first
    elif table:
        click.echo("\n".join([*(verdict.lines() if verdict else []), table]))  # the verdict and its basis first
    if verdict is None:  # a partial audit: no report formed yet
        return
    if not run.complete and verdict.gate is not None and not verdict.failures:
        raise DataError(
            f"{log_path} is a partial run: nothing finished so far trips the gate, but a gate needs a "
            "finished run (re-run the same command to finish it)"
        )
    conclude(verdict, junit)


def _check_identity(run) -> None:
    """Refuse (exit 4) a header whose identity holds a part the report reads in another shape."""
    for name in ("model", "software", "settings"):
        value = run.identity.get(name)
        if value is not None and not isinstance(value, dict):
            raise DataError(
                f"{run.path}:1: corrupt log, its header's identity.{name} is a {type(value).__name__}, not an object"
            )


def _say_chain(run) -> None:
    """One line on stderr: the log's chain head (what ``ctxlite verify --head`` checks), or that it has none."""
    if run.chained:
        progress(f"{run.path}: hash chain intact over {run.lines} line(s), head {run.head}")
    else:
        progress(
            f"ctxlite: note: {run.path} has no hash chain (written before ctxlite chained its logs): an edit "
            "to it cannot be detected; reported from its records, read-only (it cannot be resumed)"
        )


def _disagrees(run, what: str, stored, recomputed) -> None:
    """Refuse (exit 4) an end line whose ``what`` is not what the records give."""
    from ctxlite.identity import mismatch

    found = mismatch(stored, recomputed, newer_keys=not run.chained)  # an older, unchained log lacks newer fields
    if found is not None:
        path, a, b = found
        raise DataError(
            f"{run.where()}: the end line disagrees with the records: {what}{'' if path.startswith('[') else '.'}"
            f"{path} is {a!r} there, "
            f"{b!r} recomputed from the records (the log was edited)"
        )


def _headline(out: dict) -> str:
    """One line a person reads first: the largest n-gram influence (score) or the strongest
    certified ε (audit), with what qualifies it."""
    if out["kind"] == "score":
        best = None
        for rec in out["examples"]:
            for r in rec["results"]:
                if r.get("top_spans") and (best is None or r["max_ngram_influence"] > best[1]["max_ngram_influence"]):
                    best = (rec["id"], r)
        if best is None:
            return "score: document level only (no n-grams scored)"
        key, r = best
        span = r["top_spans"][0]
        text = " ".join(span["text"].split())
        floor = {True: "above", False: "within", None: "no"}[span.get("above_noise")]
        eps = epsilon_label(r)
        at = f"λ = {r['lam']:g}" + (f", ε = {eps}" if eps else "")
        return (
            f"score: largest n-gram influence {r['max_ngram_influence']:.2f} nats in {key} at {at}, "
            f'"{text[:40]}{"…" if len(text) > 40 else ""}" ({floor} noise floor)'
        )
    rows = out["rows"]
    top = max(rows, key=lambda r: r["epsilon_lower_bound"])
    at = "" if top["epsilon"] is None else f" at theoretical ε = {top['epsilon']}"
    ceiling = top.get("epsilon_upper_bound", top.get("epsilon_exact"))  # logs before the field have only the latter
    kind = top.get("privacy_profile_kind", "exact")
    exact_text = (
        ""
        if ceiling is None
        else f"; the audited pair's {'exact ε' if kind == 'exact' else 'ε is at most'}: "
        f"{ceiling if isinstance(ceiling, str) else f'{ceiling:.3g}'}"
    )
    return (
        f"audit ({out['settings']['mechanism']}): certified ε ≥ {top['epsilon_lower_bound']:.3f}{at} "
        f"at {out['settings']['confidence']:.0%} confidence{exact_text}"
    )


def _write_html(run, path: str, no_text: bool, verdict=None) -> None:
    """The run's HTML report at ``path`` (owner-readable only: it holds the private text), the gate's
    verdict on top."""
    from ctxlite.reporting.audit_page import audit_html
    from ctxlite.reporting.page import write_private
    from ctxlite.reporting.score_page import score_html

    write_private(path, (score_html if run.kind == "score-run" else audit_html)(run, no_text, verdict))
    progress(f"HTML report: {path}")


def _partial(run, what: str) -> None:
    progress(f"{run.path}: partial run ({what}; it did not finish): re-run the same command to finish it")


def _score(run, threshold):
    from ctxlite.gates import score_verdict
    from ctxlite.influence.analysis import score_table, summarize

    examples = {k: r for k, r in run.records.items() if r.get("type") == "example"}
    if run.complete:
        keys = _end(run, "examples")
        missing = [k for k in keys if k not in examples]
        if missing:
            raise DataError(f"{run.path}: corrupt log, its end line names example {missing[0]!r} it does not hold")
        unlisted = [k for k in examples if k not in keys]
        if unlisted:  # an earlier run of the same log scored inputs the last one did not have
            progress(
                f"ctxlite: note: {run.path} also holds {len(unlisted)} example(s) its last run did not list "
                f"({', '.join(map(repr, unlisted[:3]))}{', …' if len(unlisted) > 3 else ''}): not reported"
            )
    else:
        keys = list(examples)
        _partial(run, f"{len(keys)} example(s) finished")
    records = [examples[k]["result"] for k in keys]
    if run.complete:  # recomputed from the records, never read from the end line
        stored = run.end.get("summary")
        summary = None if stored is None else json.loads(json.dumps(summarize(records), allow_nan=False))
        _disagrees(run, "summary", stored, summary)
    else:
        summary = summarize(records) if len(records) > 1 else None
    verdict = score_verdict(keys, records, threshold, run.identity, complete=run.complete)
    out = {
        "log": str(run.path),
        "kind": "score",
        "complete": run.complete,
        "identity": run.identity,
        "summary": summary,
        "examples": [{"id": k, **_compact(r)} for k, r in zip(keys, records)],
    }
    return verdict, out, score_table(keys, records)


def _compact(record: dict) -> dict:
    """One example's result without the per-token arrays: what a report shows."""
    keep = ("lam", "context_size", "context_tokens", "document_influence", "max_ngram_influence", "noise_floor")
    return {
        "context_tokens": record.get("context_tokens"),
        "results": [
            {
                **{k: r.get(k) for k in keep},
                "epsilon": result_epsilon(r),
                "top_spans": [_span(g) for g in r.get("top_spans", [])],
            }
            for r in record["results"]
        ],
    }


def _span(g: dict) -> dict:
    return {k: g[k] for k in ("start", "n", "char_start", "char_end", "text", "influence", "above_noise")}


def _end(run, key: str):
    """What the log's end line holds under ``key``; a hand-edited end line without it is refused."""
    if not isinstance(run.end.get(key), (dict, list)):
        raise DataError(f"{run.path}: corrupt log, its end line has no {key!r}")
    return run.end[key]


def _audit(run, threshold, unit, junit):
    from ctxlite.audit.report import AuditReport
    from ctxlite.gates import audit_verdict

    if not run.complete:
        trials = sum("/trial=" in k for k in run.records)
        _partial(run, f"{trials} trial(s) logged, no report formed yet")
        if threshold is not None or junit:
            raise DataError(
                f"{run.path} is a partial audit: its report is formed when the run finishes, so there is "
                "no ε to gate or write as JUnit yet (re-run the same command with --resume to finish it)"
            )
        return None, {"log": str(run.path), "kind": "audit", "complete": False, "trials": trials}, None
    result = _recomputed_report(run, _end(run, "report"))
    if result.get("rereport_warning"):  # the stored report was a re-report of the trials under another bound choice
        progress(f"ctxlite: warning: {result['rereport_warning']}")
    verdict = audit_verdict(result, threshold, run.identity, unit)
    out = {"log": str(run.path), "kind": "audit", "complete": True, "identity": run.identity, **result}
    return verdict, out, AuditReport.from_dict(result).table()


def _recomputed_report(run, stored: dict) -> dict:
    """The end line's audit report with every row recomputed from the logged trial and reference
    records (:func:`ctxlite.audit.game.recompute_rows`); refused if the end line disagrees with them."""
    from ctxlite.audit.game import recompute_rows
    from ctxlite.audit.report import AuditReport
    from ctxlite.audit.settings import AuditSettings
    from ctxlite.errors import InvalidParameter
    from ctxlite.identity import differences, normalise

    try:
        settings = AuditSettings(**stored["settings"])
        rows = recompute_rows(stored, run.records, run.path)
        fresh = AuditReport.from_dict(stored)
    except (InvalidParameter, KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(f"{run.where()}: corrupt log, its end line's report cannot be read ({exc})") from None
    diff = differences(normalise(run.identity.get("settings")), settings.log_params())
    if diff:
        raise DataError(
            f"{run.where()}: the end line disagrees with the header: its report's settings "
            f"({', '.join(diff[:6])}) are not those the trials were played with (the log was edited)"
        )
    fresh.rows = rows
    result = json.loads(json.dumps(fresh.to_dict(), allow_nan=False))
    _disagrees(run, "report.rows", stored["rows"], result["rows"])
    return result
