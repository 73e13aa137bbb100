"""``ctxlite audit``: ContextLeak canary audits of private in-context learning."""
from __future__ import annotations

import math

import click

from ctxlite.cli.options import NumberList, build_engine, emit_json, engine_kwargs, engine_options, progress


def _jsonable(obj):
    """inf -> "inf" so stdout stays strict JSON."""
    if isinstance(obj, float) and math.isinf(obj):
        return "inf" if obj > 0 else "-inf"
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


@click.command()
@click.option("--data", "data_path", required=True, type=click.Path(dir_okay=False),
              help="Private set (JSONL): text/label for classify, dialogue/summary for generate.")
@click.option("--task", type=click.Choice(["classify", "generate"]), default="classify", show_default=True)
@click.option("--mechanism", type=click.Choice(["none", "prompt-l1", "prompt-l2", "judge", "rnm", "esa"]),
              default="none", show_default=True, help="Private ICL method under audit.")
@click.option("--epsilon", "epsilons", type=NumberList(minimum=0, strict=True, allow_inf=True), default=None,
              help="Theoretical per-query epsilons for rnm/esa, e.g. 1,2,4,8,inf [default: 1,2,4,8,inf].")
@click.option("--delta", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=1e-5, show_default=True)
@click.option("--canary", type=click.Choice(["hex", "unigram", "semantic"]), default="hex", show_default=True)
@click.option("--query", type=click.Choice(["input-output", "if-then", "if-then-blind"]), default="input-output",
              show_default=True)
@click.option("--template-index", type=click.IntRange(0), default=0, show_default=True,
              help="Which candidate query template of that kind to use.")
@click.option("--search-template", is_flag=True, help="Pick the query template by held-out audit accuracy first.")
@click.option("--attack", type=click.Choice(["canary", "injection"]), default="canary", show_default=True,
              help="injection = the prompt-injection baseline (asks the model to print the examples).")
@click.option("--detector", type=click.Choice(["direction", "count"]), default="direction", show_default=True)
@click.option("--trials", type=click.IntRange(4), default=200, show_default=True)
@click.option("--queries-per-trial", type=click.IntRange(1), default=None,
              help="Queries per trial [default: 1 for rnm/esa, 64 classify, 4 generate].")
@click.option("--shots", type=click.IntRange(1), default=None,
              help="Records per prompt (per ensemble for rnm/esa) [default: 20, or 2 for rnm/esa].")
@click.option("--ensembles", type=click.IntRange(1), default=None, help="Ensembles m for rnm/esa [default: 10].")
@click.option("--reference-runs", type=click.IntRange(1), default=16, show_default=True,
              help="Paired reference runs per epsilon for the direction detector.")
@click.option("--temperature", type=click.FloatRange(0), default=1.0, show_default=True,
              help="Sampling temperature of the audited model (0 = greedy).")
@click.option("--max-new-tokens", type=click.IntRange(1), default=24, show_default=True)
@click.option("--clip-norm", type=click.FloatRange(0, min_open=True), default=1.0, show_default=True,
              help="ESA clip norm C of the unit-normalised embeddings.")
@click.option("--utility-queries", type=click.IntRange(0), default=20, show_default=True)
@click.option("--confidence", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.95,
              show_default=True)
@click.option("--accounting-queries", type=click.IntRange(1), default=None, metavar="T",
              help="Also report each sigma's epsilon subsampled over T queries (rnm/esa; PLD accountant).")
@click.option("--sampling-rate", type=click.FloatRange(0, 1, min_open=True), default=1.0, show_default=True,
              help="Poisson rate q at which each of those T queries samples a record.")
@click.option("--resample-data", is_flag=True, help="Re-draw the private set every trial (average-case audit).")
@click.option("--embed-model", default=None, metavar="PATH", help="GGUF for embeddings [default: the audited model].")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True)
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Append every trial to this JSONL log (resumable).")
@click.option("--resume", is_flag=True, help="Continue the run in --out (same parameters).")
@engine_options
def audit(data_path, task, mechanism, epsilons, delta, canary, query, template_index, search_template, attack,
          detector, trials, queries_per_trial, shots, ensembles, reference_runs, temperature, max_new_tokens,
          clip_norm, utility_queries, confidence, accounting_queries, sampling_rate, resample_data, embed_model, seed, out_path, resume, **kwargs):
    """Audit private in-context learning with canaries (ContextLeak).

    Each trial swaps a canary record into the private set with probability
    1/2, asks the fixed audit query and scores what the mechanism releases;
    the scores give audit accuracy, TPR/FPR and empirical epsilon (point,
    Clopper-Pearson lower bound, GDP) per theoretical epsilon. JSON report on
    stdout, a table and progress on stderr.

    \b
    Examples:
      ctxlite audit --data private.jsonl --mechanism none --trials 200 --out none.jsonl
      ctxlite audit --data private.jsonl --mechanism rnm --epsilon 1,8,inf --temperature 0
      ctxlite audit --data dialogues.jsonl --task generate --mechanism esa --epsilon 1,inf --trials 40
      ctxlite audit --data private.jsonl --mechanism judge --attack injection --task generate
    """
    from ctxlite.audit import AuditSettings, load_records, run_audit
    from ctxlite.queries import search_template as search
    from ctxlite.records import RecordLog

    dp = mechanism in ("rnm", "esa")
    if epsilons is not None and not dp:
        raise click.BadParameter(f"--mechanism {mechanism} has no privacy parameter", param_hint="--epsilon")
    if ensembles is not None and not dp:
        raise click.BadParameter("only rnm/esa use ensembles", param_hint="--ensembles")
    if resume and not out_path:
        raise click.BadParameter("--resume needs --out", param_hint="--resume")
    settings = AuditSettings(
        task=task, mechanism=mechanism, epsilons=epsilons or ((1.0, 2.0, 4.0, 8.0, math.inf) if dp else (math.inf,)),
        delta=delta, canary=canary, query=query, template_index=template_index, attack=attack, detector=detector,
        trials=trials, queries_per_trial=queries_per_trial, shots=shots or (2 if dp else 20),
        ensembles=ensembles or (10 if dp else 1), reference_runs=reference_runs, temperature=temperature,
        max_new_tokens=max_new_tokens, clip_norm=clip_norm, utility_queries=utility_queries,
        confidence=confidence, resample_data=resample_data, accounting_queries=accounting_queries,
        sampling_rate=sampling_rate, seed=seed,
    )
    records = load_records(data_path, task)
    ekw = engine_kwargs(kwargs)
    engine = build_engine(**ekw, kv_slots=4)
    embedder = None
    if task == "generate" and attack == "canary":
        embedder = build_engine(**{**ekw, "model": embed_model or ekw["model"]}, embeddings=True)
    if search_template:
        found = search(engine, records, settings, embedder=embedder)
        progress(f"template search ({found.kind}): accuracies {[round(a, 3) for a in found.accuracies]} "
                 f"-> template {found.best_index}")
        from dataclasses import replace

        settings = replace(settings, template_index=found.best_index)
    if out_path and not resume:
        from pathlib import Path

        if Path(out_path).exists() and Path(out_path).stat().st_size > 0:
            raise click.BadParameter(f"{out_path} exists: pass --resume to continue it or choose another file",
                                     param_hint="--out")
    log = RecordLog(out_path, settings.log_params(), kind="audit") if out_path else None
    try:
        report = run_audit(engine, records, settings, log, embedder=embedder, progress=progress)
    finally:
        if log is not None:
            log.close()
    click.echo(report.table(), err=True)
    emit_json(_jsonable(report.to_dict()))
