"""``ctxlite serve``: answer over a private context within an ε budget (OpenAI-compatible HTTP)."""

from __future__ import annotations

import ipaddress
import os
import signal

import click

from ctxlite.cli.options import engine_options, local_model
from ctxlite.cli.progress import say
from ctxlite.errors import EXIT_INTERRUPTED, DataError, InvalidParameter, LogInUse
from ctxlite.identity import content_hash
from ctxlite.records import read_jsonl, read_text
from ctxlite.runtime.models import verified_entry
from ctxlite.serve.ledger import Budgets, Ledger
from ctxlite.serve.service import ServeSettings, Service

KEYS_VARIABLE = "CTXLITE_API_KEYS"


def _absorb(signum, frame):
    """The signal uvicorn raises again after draining: already acted on."""


def _context(context_file: str | None, data: str | None) -> str:
    if (context_file is None) == (data is None):
        raise click.UsageError("give the private context as exactly one of --context FILE or --data RECORDS.jsonl")
    if context_file is not None:
        text = read_text(context_file, "context file")
    else:
        text = "\n\n".join(line.data["text"] for line in read_jsonl(data, required=["text"], strings=["text"]))
    if not text.strip():
        raise InvalidParameter("the private context is empty: there is nothing to serve over")
    return text


def _keys(path: str | None) -> frozenset:
    """API keys: one per line of ``path``, else comma-separated in $CTXLITE_API_KEYS (none: no auth)."""
    if path is not None:
        raw = read_text(path, "API key file").splitlines()
    else:
        raw = os.environ.get(KEYS_VARIABLE, "").split(",")
    keys = frozenset(k.strip() for k in raw if k.strip() and not k.strip().startswith("#"))
    if path is not None and not keys:
        raise InvalidParameter(f"{path} holds no API key (one per line)")
    return keys


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


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
    help="CID's mixing weight lambda; each token uses min(lambda, epsilon / (2 max|pmi|)).",
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
    help="Also answer each token's realised bound and lambda (usage.ctxlite): functions of the private "
    "context that the epsilon bound does not cover; for testing the server, not for deployment.",
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
def serve(ctx, context_file, data, epsilon, lam, host, port, api_keys, budget_total, budget_per_key,
          max_tokens_cap, max_request_bytes, model_name, release_realised, log_path, **engine):  # fmt: skip
    """Serve a model over a private context, each token epsilon-bounded (OpenAI-compatible HTTP).

    Every token is sampled from the whole epsilon-bounded CID distribution: its log-probability
    is within epsilon of the same request without the context, within 2 epsilon of a context that
    differs in one record; a response of n tokens costs n epsilon, and requests add up (basic
    composition) against --budget-total and --budget-per-key, kept in --log across restarts.
    Ctrl-C or SIGTERM finish the requests in flight and close the log (Ctrl-C exits 130).

    \b
    Examples:
      ctxlite serve --context note.txt --epsilon 1 --budget-total 500 --log runs/serve.jsonl
    """
    from ctxlite.serve.app import server  # the ASGI stack (~0.3 s) loads for this command only

    context = _context(context_file, data)
    keys = _keys(api_keys)
    if not keys and not _loopback(host):
        raise InvalidParameter(f"--host {host} is reachable from other machines: give --api-keys (or {KEYS_VARIABLE})")
    budgets = Budgets(budget_total, budget_per_key)
    model = local_model(engine)
    identity = {
        **model.identity(),
        "settings": {"epsilon": epsilon, "lambda": lam, "context": content_hash(context)},
    }
    try:  # refuses another server's log (or one in use) before the model loads
        ledger = Ledger(log_path, identity, budgets, epsilon)
    except (DataError, LogInUse) as exc:  # RecordLog's advice names a run's --out: here it is --log
        raise type(exc)(str(exc).replace("--out", "--log").replace("ctxlite run", "ctxlite process")) from None
    try:
        eng = model.open()
        try:
            entry = verified_entry(eng.model_path)
            name = model_name or (entry.name if entry else eng.model_path.stem)
            settings = ServeSettings(name, epsilon, lam, max_tokens_cap, max_request_bytes, keys, release_realised)
            service = Service(eng, context, settings, ledger)
            http = server(service, host, port)
            bound = "no bound (unbounded CID)" if epsilon is None else f"epsilon {epsilon:g} per token"
            spent = f"{ledger.responses} response(s) logged, {ledger.spent_total:g} spent"
            say(f"ctxlite serve: {name} on http://{host}:{port}/v1, {bound}; {log_path}: {spent}")
            # uvicorn sends the signal that stopped it again once it has drained: absorbed here
            previous = {sig: signal.signal(sig, _absorb) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                http.run()
            except SystemExit:  # uvicorn exits when it cannot bind
                if http.started:
                    raise
                raise InvalidParameter(
                    f"cannot listen on {host}:{port}: the port is in use or the address is not this machine's"
                ) from None
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
            if http.stopped_by is not None:
                how = "Ctrl-C" if http.stopped_by == signal.SIGINT else "SIGTERM"
                say(f"ctxlite serve: stopped ({how}); requests in flight answered, {ledger.responses} response(s) "
                    f"in {log_path}, {ledger.spent_total:g} spent")  # fmt: skip
                if http.stopped_by == signal.SIGINT:
                    ctx.exit(EXIT_INTERRUPTED)
        finally:
            eng.close()
    finally:
        ledger.close_log()
