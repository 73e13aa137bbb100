"""``ctxlite report``: a score or audit run re-rendered from its ``--out`` log alone (no model), or
what a ``ctxlite serve`` budget log says was served."""

from __future__ import annotations

import sys

import click

from ctxlite.cli.options import (
    conclude,
    emit_json,
    fail_above_epsilon_option,
    fail_above_influence_option,
    given_explicitly,
    junit_option,
)
from ctxlite.cli.progress import progress_line, say
from ctxlite.errors import InvalidParameter
from ctxlite.gates import EpsilonGate, InfluenceGate
from ctxlite.outputs import refuse_same_files
from ctxlite.reporting.html import write_html
from ctxlite.reporting.json_output import report_json
from ctxlite.reporting.page import write_private
from ctxlite.reporting.target_page import target_html, target_json, target_table
from ctxlite.reporting.terminal import audit_headline, audit_table, score_headline, score_table
from ctxlite.runs import ScoreRun, report_log
from ctxlite.runs.target_audit import TargetAuditRun
from ctxlite.serve.report import ServeLogReport, serve_report


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
    context; an audit log the audit's table of ε rows; a ctxlite serve budget log
    what was served per API key and in all (tokens, ε spent and left; no gate or
    HTML). A run that did not finish is reported as partial, and a gate on it
    fails only on what finished: it refuses (exit 4) rather than pass an unfinished
    run. With a gate, the verdict (fail, pass or inconclusive, exit 8 / 0 / 10)
    and its basis come first. Everything printed and gated is recomputed from the
    log's records; a log whose hash chain breaks, that holds a record twice, or
    whose end line disagrees with its records is refused (exit 4, naming the
    line). The log's chain head is printed on stderr and ends the verdict line
    (keep it for ctxlite verify --head).

    \b
    Examples:
      ctxlite report runs/scores.jsonl
      ctxlite report runs/scores.jsonl --fail-above-influence 5 --junit influence.xml
      ctxlite report runs/audit.jsonl --json
      ctxlite report runs/scores.jsonl --html runs/report.html
      ctxlite report runs/audit.jsonl --html runs/audit.html --no-text
      ctxlite report runs/serve.jsonl --json
    """
    refuse_same_files([("RUN.jsonl", log_path)], [("--html", html_path), ("--junit", junit)])
    if no_text and html_path is None:
        raise click.UsageError("--no-text shapes the HTML report: give --html FILE too")
    if given_explicitly("epsilon_unit") and fail_above_epsilon is None:
        raise click.UsageError("--epsilon-unit is the unit of the --fail-above-epsilon budget: give that too")
    gate = _gate(fail_above_influence, fail_above_epsilon, epsilon_unit)
    run = report_log(log_path, gate=gate, progress=progress_line(), others={"serve": serve_report})  # all checked
    if isinstance(run, ServeLogReport):
        return _serve(run, as_json, html_path, junit)
    _show(run, as_json, html_path, no_text, junit)
    if run.verdict is None:  # a partial audit: no report formed yet
        return
    run.check_gate_finished()  # a gate on a partial run refuses rather than passes
    conclude(run.verdict, junit)


def _serve(run: ServeLogReport, as_json: bool, html_path: str | None, junit: str | None) -> None:
    """A serve log: what was served (recomputed from its records), as a table or JSON."""
    for option, given in (("--html", html_path), ("--junit", junit)):
        if given is not None:
            raise InvalidParameter(f"{option} reports score and audit runs; {run.path} is a ctxlite serve log")
    say(run.headline())
    if as_json:
        emit_json(run.to_dict())
    else:
        click.echo(run.table())


def _target(run: TargetAuditRun, as_json: bool, html_path: str | None, no_text: bool, junit: str | None) -> None:
    """A target audit log (``ctxlite audit --target``): the HTML page, then the JSON or the verdict and table."""
    if junit:
        run.require_report()  # a partial audit has no verdict to write yet
    if html_path is not None:
        write_private(html_path, target_html(run, no_text))
        say(f"HTML report: {html_path}")
    if as_json:
        emit_json(target_json(run))
    elif run.verdict is not None:
        click.echo("\n".join([*run.verdict.lines(), target_table(run)]))


def _gate(influence: float | None, epsilon: float | None, unit: str) -> InfluenceGate | EpsilonGate | None:
    if influence is not None and epsilon is not None:
        raise click.UsageError(
            "give one gate: --fail-above-influence (score logs) or --fail-above-epsilon (audit logs)"
        )
    if influence is not None:
        return InfluenceGate(influence)
    return None if epsilon is None else EpsilonGate(epsilon, unit)


def _show(run, as_json: bool, html_path: str | None, no_text: bool, junit: str | None) -> None:
    """The headline (stderr); the HTML report (its path on stderr); the JSON, or the verdict and its
    basis then the table, on stdout. A JUnit file needs an audit's report: refused before any of it."""
    if isinstance(run, TargetAuditRun):
        return _target(run, as_json, html_path, no_text, junit)
    if junit and not isinstance(run, ScoreRun):
        run.require_report()  # a partial audit has no verdict to write yet
    if run.complete:
        say(score_headline(run) if isinstance(run, ScoreRun) else audit_headline(run))
    if html_path is not None:
        write_html(html_path, run, no_text)
        say(f"HTML report: {html_path}")
    if as_json:
        emit_json(report_json(run))  # the verdict first
    elif run.verdict is not None:
        click.echo("\n".join([*run.verdict.lines(), _table(run)]))


def _table(run) -> str:
    if isinstance(run, ScoreRun):
        return score_table(run.keys, run.results, ansi=sys.stdout.isatty())
    return audit_table(run.report)
