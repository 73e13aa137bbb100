"""Benchmark units on retrieved passages (issue 27's RAG benchmark; a first, partial version, not a test).

Data: bench/data/rag_units.jsonl, written by this script (``--write-data``, deterministic) and
shipped: per k in {3, 5, 10}, examples of k retrieved passages where exactly one carries the answer
(``answer_passage``, 1-based) and the distractors share its entities (the patient's name, the
drug, the clinic: a visit, a home, a relative's allergy to the same drug, another patient on
another drug, the clinic's opening hours). The response repeats the answer fact; ctxlite ignores
the extra field, so the file also runs as ``ctxlite score --data``.

Per example, on the default model (λ = 1, no noise-floor probes: this measures ranking and cost),
the hierarchical search (``--unit passage --search adaptive``) is run for real, and reported:

* top-1 passage accuracy: the passage of largest τ_u is the answer passage (goal >= 0.95);
* decoded tokens of the ablations (prefix reuse; the base and empty-context passes, common to all
  three, left out): the hierarchical run (passages, the sentences of the top passage, the n-grams
  of its top sentence and those holding copy sources of the response, unless ``--no-copy-sources``)
  against leave-one-passage-out alone and exhaustive n-gram search (8-grams),
  both counted by running them on the engine in dry-run mode (nothing decoded, exact counts);
* the wall time of the hierarchical run.

``--long`` runs the same on bench/data/rag_units_long.jsonl instead: the same kind of examples with
every passage padded by clinic boilerplate (``FILLER``) to contexts of about 570 (k = 3) and 2,000
(k = 10) tokens, and adds per example:

* the overlap O = |top-3 ∩ top-3| / 3 of the hierarchy's three n-grams of largest τ_i with those of
  exhaustive search over the same 8-gram grid (run for real, on contexts up to --overlap-max-tokens);
* the wall time of the from-scratch reference of bench_score.py (one forward pass per response
  token per ablation), MEASURED on one ablation (the answer passage removed) and EXTRAPOLATED to
  (a) the ablations whose exact τ the hierarchy reports (passages, sentences, n-grams, plus the
  two base passes) and (b) the reference's own exhaustive 8-gram search, and its ratio to the
  hierarchy's measured wall time.

    python bench/bench_units.py [--per-k 2] [--ks 3,5,10] [--write-data] [--long] [--no-copy-sources] [--flash-attn]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
from ctxlite.influence.dataset import load_examples  # noqa: E402
from ctxlite.influence.scorer import InfluenceScorer, InfluenceSettings, ngram_starts  # noqa: E402
from ctxlite.influence.units import join_passages  # noqa: E402
from ctxlite.runtime.engine import Engine, EngineConfig  # noqa: E402
from ctxlite.runtime.planning import dry_count  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "rag_units.jsonl"
LONG = DATA.with_name("rag_units_long.jsonl")
LONG_FILLER = {3: 10, 10: 11}
"""Boilerplate sentences per passage in the long data, by k: about 570 and 2,000 context tokens."""

FIRST = ["Marta", "Tomas", "Leena", "Dana", "Oskar", "Priya", "Ines", "Kofi", "Yusuf", "Hana", "Rafael", "Signe"]
LAST = ["Oyelaran", "Brandt", "Varga", "Whitcombe", "Lindqvist", "Raman", "Castel", "Mensah", "Demir", "Novak"]
DRUGS = [("losartan", "50 mg"), ("metformin", "500 mg"), ("atorvastatin", "20 mg"), ("lisinopril", "10 mg")]
DRUGS += [("levothyroxine", "75 mcg"), ("amlodipine", "5 mg"), ("sertraline", "50 mg"), ("warfarin", "3 mg")]
CONDITIONS = ["blood pressure", "diabetes", "cholesterol", "thyroid", "heart rhythm", "mood"]
CLINICS = ["Riverside", "Northfield", "Westgate", "Harbor", "Elm Park", "Kingsway"]
CITIES = ["Tamsworth", "Ravenholm", "Brightwater", "Millbrook", "Ashford", "Caldera Bay"]
JOBS = ["ferry engineer", "school librarian", "night nurse", "carpenter", "bus driver", "translator"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]


FILLER = [
    "The waiting room of the {clinic} clinic has {n} chairs and a water dispenser.",
    "Parking next to the {clinic} clinic is free for patients after {h} o'clock.",
    "Nurses at the {clinic} clinic change shifts every {day} afternoon.",
    "The {clinic} clinic sends appointment reminders by text message two days ahead.",
    "A bus from the centre of {city} stops outside the {clinic} clinic every {n} minutes.",
    "The reception desk in {city} keeps printed leaflets on healthy eating and sleep.",
    "Visitors are asked to wash their hands at the entrance of the {clinic} clinic.",
    "The {clinic} clinic was repainted in {year} and has a small garden behind it.",
    "On {day}s the pharmacy counter in {city} closes at {h} in the evening.",
    "Children under twelve wait with a parent in the play corner of the {clinic} clinic.",
    "The lift of the {clinic} clinic is serviced once a month, usually on a {day}.",
    "Records at the {clinic} clinic are kept for {n} years after the last visit.",
]
"""Clinic boilerplate that pads the long data's passages: no drug, condition or patient in it."""


def _filler(rng: random.Random, n: int, clinic: str, city: str) -> str:
    picks = rng.sample(FILLER, n)
    return " ".join(
        s.format(clinic=clinic, city=city, n=rng.randint(5, 30), h=rng.randint(5, 9), day=rng.choice(DAYS),
                 year=rng.randint(1995, 2020))
        for s in picks
    )  # fmt: skip


def make_example(rng: random.Random, k: int, index: int, filler: int = 0) -> dict:
    """One example of ``k`` passages: the answer passage and k − 1 distractors sharing its entities;
    each passage followed by ``filler`` boilerplate sentences (the long data)."""
    name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    first = name.split()[0]
    (drug, dose), condition = rng.choice(DRUGS), rng.choice(CONDITIONS)
    clinic, city = rng.choice(CLINICS), rng.choice(CITIES)
    answer = f"For her {condition}, {name} takes {drug} {dose} every morning."
    others = [d for d in DRUGS if d[0] != drug]
    pool = [
        f"{name} visited the {clinic} clinic on {rng.choice(DAYS)} for a routine eye examination.",
        f"{name} lives in {city} and works as a {rng.choice(JOBS)}.",
        f"{first}'s brother is allergic to {drug} and carries an allergy card.",
        f"The {clinic} clinic in {city} opens at {rng.randint(7, 10)} on weekdays and on Saturdays.",
        f"{rng.choice(FIRST)} {rng.choice(LAST)} takes {' '.join(rng.choice(others))} for {rng.choice(CONDITIONS)}.",
        f"{name} cancelled an appointment at the {clinic} clinic in {rng.choice(['May', 'June', 'July'])}.",
        f"{drug.capitalize()} is usually taken once a day and may cause dizziness.",
        f"{name} walks to the {clinic} clinic with a neighbour every {rng.choice(DAYS)}.",
        f"The pharmacy next to the {clinic} clinic stocks {' '.join(rng.choice(others))} and {drug}.",
        f"{first} {rng.choice([x for x in LAST if x != name.split()[1]])}, no relation, is a {rng.choice(JOBS)} in {city}.",
        f"{name} was born in {rng.randint(1940, 1990)} and moved to {city} later.",
    ]
    distractors = rng.sample(pool, k - 1)
    at = rng.randrange(k)
    passages = distractors[:at] + [answer] + distractors[at:]
    if filler:
        passages = [f"{p} {_filler(rng, filler, clinic, city)}" for p in passages]
    passages = [f"Passage {i}: {p}" for i, p in enumerate(passages, 1)]
    return {
        "id": f"k{k}-{index}",
        "query": f"Which medication does {name} take for {condition}?",
        "passages": passages,
        "response": f"{name} takes {drug} {dose} every morning.",
        "answer_passage": at + 1,
    }


def write_data(path: Path, ks, per_k: int, seed: int = 27, filler: dict | None = None) -> None:
    rng = random.Random(seed)
    lines = [make_example(rng, k, i, (filler or {}).get(k, 0)) for k in ks for i in range(1, per_k + 1)]
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")


def reference_seconds(engine, scorer, ex, drop: int) -> float:
    """Wall time of the from-scratch reference (bench_score.py's ``ref_logprobs``: one forward pass
    per response token) on one ablation, passage ``drop`` (1-based) removed."""
    from bench_score import T, ref_logprobs

    kept = tuple(p for i, p in enumerate(ex.passages, 1) if i != drop)
    ablated = replace(ex, context=join_passages(kept, ex.separator), passages=kept)
    enc = scorer.encode(ablated)
    y = scorer.encode_response(enc, ex.response)
    t0 = time.perf_counter()
    ref_logprobs(engine, enc.with_context, y, T)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ks", default=None, help="numbers of passages per example (default 3,5,10; --long: 3,10)")
    ap.add_argument("--per-k", type=int, default=2, help="examples per k")
    ap.add_argument("--write-data", action="store_true", help="(re)write bench/data/rag_units*.jsonl first")
    ap.add_argument("--long", action="store_true", help="the long data: top-3 overlap and the reference's wall time")
    ap.add_argument("--overlap-max-tokens", type=int, default=1024,
                    help="--long: run exhaustive search (the top-3 overlap) on contexts up to this long (default 1024)")  # fmt: skip
    ap.add_argument("--no-copy-sources", action="store_true", help="the hierarchy without copy sources")
    ap.add_argument(
        "--flash-attn", action="store_true", help="llama.cpp flash attention (every run, the reference's too)"
    )
    args = ap.parse_args()
    ks = [int(k) for k in (args.ks or ("3,10" if args.long else "3,5,10")).split(",")]
    if args.write_data:
        write_data(DATA, (3, 5, 10), 4)
        write_data(LONG, tuple(LONG_FILLER), 2, filler=LONG_FILLER)
    data = LONG if args.long else DATA
    answers = {json.loads(x)["id"]: json.loads(x)["answer_passage"] for x in data.read_text().splitlines()}
    examples = [ex for ex in load_examples(data) if int(ex.id.split("-")[0][1:]) in ks]
    examples = [ex for ex in examples if int(ex.id.split("-")[1]) <= args.per_k]
    engine = Engine(None, EngineConfig(n_ctx=4096 if args.long else EngineConfig.n_ctx, flash_attn=args.flash_attn))
    hier = InfluenceSettings(
        unit="passage",
        search="adaptive",
        null_ablations=0,
        duplicate_threshold=None,
        copy_sources=not args.no_copy_sources,
    )
    flat = InfluenceSettings(unit="passage", null_ablations=0, duplicate_threshold=None)
    exhaustive_ngrams = InfluenceSettings(ngram=8, search="exhaustive", null_ablations=0, duplicate_threshold=None)
    # warm-up: the first decode pages the weights in (the 262k-row output matrix); no timed run pays it
    first = replace(examples[0], passages=None, context=examples[0].passages[0])
    InfluenceScorer(engine, "qa", exhaustive_ngrams).score(first)
    copies = "without" if args.no_copy_sources else "with"
    copies += " copy sources" + (", flash attention" if args.flash_attn else "")
    print(f"# {len(examples)} examples of {data.name} on the default model, hierarchy {copies}, "
          f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    print("id       k  tokens  top-1    τ_u top  τ_u 2nd  hier tokens  LOPO tokens  n-gram tokens  wall s")
    rows, long_rows = [], []
    for ex in examples:
        scorer = InfluenceScorer(engine, "qa", hier)
        t0 = time.perf_counter()
        (r,) = scorer.score(ex).results
        wall = time.perf_counter() - t0
        first, second = r.units[0], r.units[1]
        right = first.label == f"passage {answers[ex.id]}"

        def job():  # the ablations' decoded tokens, counted as the hierarchical run counts its own
            (dry,) = InfluenceScorer(engine, "qa", flat).score(ex).results
            return dry.search.tokens_decoded

        lopo, exhaustive = dry_count(engine, job), r.descent.exhaustive_tokens
        k = len(ex.passages)
        rows.append((k, right, r.search.tokens_decoded, lopo, exhaustive, wall))
        print(
            f"{ex.id:8} {k:2} {r.context_tokens:7} {'yes' if right else 'NO':>5} {first.influence:10.2f} "
            f"{second.influence:8.2f} {r.search.tokens_decoded:12} {lopo:12} {exhaustive:14} {wall:7.1f}",
            flush=True,
        )
        if args.long:
            overlap = wall_full = None
            if r.context_tokens <= args.overlap_max_tokens:  # exhaustive search, for real
                t0 = time.perf_counter()
                (full,) = InfluenceScorer(engine, "qa", exhaustive_ngrams).score(ex).results
                wall_full = time.perf_counter() - t0
                top = {g.start for g in r.top_spans(3)}
                overlap = len(top & {g.start for g in full.top_spans(3)}) / 3
            per_ablation = reference_seconds(engine, scorer, ex, answers[ex.id])
            reported = len(r.units) + len(r.descent.sentences) + len(r.ngrams) + 2  # + the two base passes
            windows = len(ngram_starts(r.context_tokens, 8, 8)) + 2
            long_rows.append((ex.id, r.context_tokens, overlap, wall, wall_full, per_ablation, reported, windows))
    print()
    print("k   examples  top-1 accuracy  hier/n-gram tokens  hier/LOPO tokens")
    for k in ks:
        mine = [row for row in rows if row[0] == k]
        if not mine:
            continue
        acc = sum(row[1] for row in mine) / len(mine)
        vs_ngram = sum(row[2] for row in mine) / sum(row[4] for row in mine)
        vs_lopo = sum(row[2] for row in mine) / sum(row[3] for row in mine)
        print(f"{k:<3} {len(mine):8}  {acc:14.2f}  {vs_ngram:18.3f}  {vs_lopo:16.3f}")
    if long_rows:
        print()
        print("reference: MEASURED on one ablation (answer passage removed), EXTRAPOLATED by ablation count")
        print("id       tokens  top-3 O  hier s  exhaustive s  ref s/ablation  reported  ref(reported) s  ratio  "
              "ref(exhaustive) s  ratio")  # fmt: skip
        for eid, tokens, overlap, wall, wall_full, per, reported, windows in long_rows:
            o = "-" if overlap is None else f"{overlap:.2f}"
            w = "-" if wall_full is None else f"{wall_full:.1f}"
            print(
                f"{eid:8} {tokens:6} {o:>8} {wall:7.1f} {w:>13} {per:15.1f} {reported:9} "
                f"{per * reported:16.0f} {per * reported / wall:6.0f} {per * windows:18.0f} {per * windows / wall:6.0f}"
            )


if __name__ == "__main__":
    main()
