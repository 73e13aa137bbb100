"""``ctxlite serve``: answer over a private context within an ε budget (OpenAI-compatible HTTP)."""

from __future__ import annotations

import signal

import click

from ctxlite.cli.options import engine_options, local_model
from ctxlite.cli.progress import say
from ctxlite.errors import EXIT_INTERRUPTED
from ctxlite.serve.deployment import (
    KEYS_VARIABLE,
    Deployment,
    read_api_keys,
    read_context,
    read_replay_secret,
    run_deployment,
)
from ctxlite.serve.ledger import Budgets


@click.command()
@engine_options
@click.option(
    "--context",
    "context_file",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="The private context: a text file.",
)
@click.option(
    "--data",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="RECORDS.jsonl",
    help="The private context: records, one JSON object with a 'text' a line, joined by blank lines.",
)
@click.option(
    "--epsilon",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="The per-token bound against the empty context (2x against a neighbouring context); "
    "omit it only to serve unbounded CID (no guarantee, no budgets).",
)
@click.option(
    "--lam",
    "lam",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="CID's mixing weight lambda; each token uses the largest lambda' <= lambda whose distribution "
    "is within epsilon of the empty context's.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (not loopback: needs API keys).")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="Port to listen on.")
@click.option(
    "--api-keys",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help=f"API keys, one a line (else env {KEYS_VARIABLE}, comma-separated; none: no key asked).",
)
@click.option("--budget-total", type=float, default=None, metavar="EPS", help="Epsilon budget of all keys together.")
@click.option("--budget-per-key", type=float, default=None, metavar="EPS", help="Epsilon budget of each key.")
@click.option(
    "--budget-delta",
    type=float,
    default=None,
    metavar="DELTA",
    help="Keep the budgets as (epsilon, DELTA) ones by the optimal composition theorem, which allows more "
    "tokens than basic composition once there are many (default: pure epsilon, basic composition).",
)
@click.option(
    "--max-tokens-cap",
    type=click.IntRange(1),
    default=256,
    show_default=True,
    help="The largest max_tokens a request may ask.",
)
@click.option(
    "--max-request-bytes",
    type=click.IntRange(256),
    default=65536,
    show_default=True,
    help="Larger request bodies are refused (HTTP 413).",
)
@click.option("--model-name", default=None, metavar="NAME", help="The served model's id [default: its registry name].")
@click.option(
    "--release-realised",
    is_flag=True,
    help="Also answer each token's realised bound and lambda (usage.ctxlite), and a completion with echo "
    "and logprobs by teacher forcing (the mixed distribution's log-probabilities of the prompt's tokens, "
    "charged nothing: what ctxlite score --backend openai needs): functions of the private context that "
    "the epsilon bound does not cover; for testing the server on loopback, not for deployment (another "
    "--host is refused).",
)
@click.option(
    "--replay-secret-file",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="Replay seeded requests: a request with a seed is sampled from HMAC(the secret in FILE, the request), "
    "so the same request gets the same answer (default: a client's seed is ignored and every answer is sampled "
    "from the system's entropy; a seed alone would make an answer a deterministic function of the context).",
)
@click.option(
    "--public-context-tokens",
    type=click.IntRange(1),
    default=None,
    metavar="N",
    help="The private context's length in tokens as declared public: whether a request fits the window is "
    "decided from it and the request alone [default: the context's own, rounded up to a multiple of 64].",
)
@click.option(
    "--log",
    "log_path",
    required=True,
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="The append-only, hash-chained budget log: read back at start, so a restart keeps the budget.",
)
@click.pass_context
def serve(ctx, context_file, data, epsilon, lam, host, port, api_keys, budget_total, budget_per_key, budget_delta,
          max_tokens_cap, max_request_bytes, model_name, release_realised, replay_secret_file, public_context_tokens,
          log_path, **engine):  # fmt: skip
    """Serve a model over a private context, each token epsilon-bounded (OpenAI-compatible HTTP).

    Every token is sampled from the whole epsilon-bounded CID distribution: its log-probability
    is within epsilon of the same request without the context, within 2 epsilon of a context that
    differs in one record; a response of n tokens costs n epsilon, and requests add up (basic
    composition) against --budget-total and --budget-per-key, kept in --log across restarts;
    with --budget-delta the budgets are (epsilon, delta) ones, composed optimally.
    Ctrl-C or SIGTERM finish the requests in flight and close the log (Ctrl-C exits 130).

    \b
    Examples:
      ctxlite serve --context note.txt --epsilon 1 --budget-total 500 --log runs/serve.jsonl
    """
    deployment = Deployment(
        read_context(context_file, data), epsilon, lam, Budgets(budget_total, budget_per_key, budget_delta),
        read_api_keys(api_keys), host, port, max_tokens_cap, max_request_bytes, model_name, release_realised,
        read_replay_secret(replay_secret_file), public_context_tokens,
    )  # fmt: skip
    if run_deployment(local_model(engine), deployment, log_path, say) == signal.SIGINT:
        ctx.exit(EXIT_INTERRUPTED)
