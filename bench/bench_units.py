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
  of its top sentence) against leave-one-passage-out alone and exhaustive n-gram search (8-grams),
  both counted by running them on the engine in dry-run mode (nothing decoded, exact counts);
* the wall time of the hierarchical run.

Not yet measured (issue 27 asks for them): contexts up to 2,048 tokens, the wall-time ratio against
the from-scratch reference of bench_score.py, and the overlap of the hierarchy's top-3 n-grams with
exhaustive search's at L >= 512.

    python bench/bench_units.py [--per-k 2] [--ks 3,5,10] [--write-data]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
from ctxlite.influence.dataset import load_examples  # noqa: E402
from ctxlite.influence.scorer import InfluenceScorer, InfluenceSettings  # noqa: E402
from ctxlite.runtime.engine import Engine  # noqa: E402
from ctxlite.runtime.planning import dry_count  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "rag_units.jsonl"

FIRST = ["Marta", "Tomas", "Leena", "Dana", "Oskar", "Priya", "Ines", "Kofi", "Yusuf", "Hana", "Rafael", "Signe"]
LAST = ["Oyelaran", "Brandt", "Varga", "Whitcombe", "Lindqvist", "Raman", "Castel", "Mensah", "Demir", "Novak"]
DRUGS = [("losartan", "50 mg"), ("metformin", "500 mg"), ("atorvastatin", "20 mg"), ("lisinopril", "10 mg")]
DRUGS += [("levothyroxine", "75 mcg"), ("amlodipine", "5 mg"), ("sertraline", "50 mg"), ("warfarin", "3 mg")]
CONDITIONS = ["blood pressure", "diabetes", "cholesterol", "thyroid", "heart rhythm", "mood"]
CLINICS = ["Riverside", "Northfield", "Westgate", "Harbor", "Elm Park", "Kingsway"]
CITIES = ["Tamsworth", "Ravenholm", "Brightwater", "Millbrook", "Ashford", "Caldera Bay"]
JOBS = ["ferry engineer", "school librarian", "night nurse", "carpenter", "bus driver", "translator"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]


def make_example(rng: random.Random, k: int, index: int) -> dict:
    """One example of ``k`` passages: the answer passage and k − 1 distractors sharing its entities."""
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
    passages = [f"Passage {i}: {p}" for i, p in enumerate(passages, 1)]
    return {
        "id": f"k{k}-{index}",
        "query": f"Which medication does {name} take for {condition}?",
        "passages": passages,
        "response": f"{name} takes {drug} {dose} every morning.",
        "answer_passage": at + 1,
    }


def write_data(path: Path, ks, per_k: int, seed: int = 27) -> None:
    rng = random.Random(seed)
    lines = [make_example(rng, k, i) for k in ks for i in range(1, per_k + 1)]
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ks", default="3,5,10", help="numbers of passages per example")
    ap.add_argument("--per-k", type=int, default=2, help="examples per k")
    ap.add_argument("--write-data", action="store_true", help="(re)write bench/data/rag_units.jsonl first")
    args = ap.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    if args.write_data:
        write_data(DATA, (3, 5, 10), 4)
    answers = {json.loads(x)["id"]: json.loads(x)["answer_passage"] for x in DATA.read_text().splitlines()}
    examples = [ex for ex in load_examples(DATA) if int(ex.id.split("-")[0][1:]) in ks]
    examples = [ex for ex in examples if int(ex.id.split("-")[1]) <= args.per_k]
    engine = Engine()
    hier = InfluenceSettings(unit="passage", search="adaptive", null_ablations=0, duplicate_threshold=None)
    flat = InfluenceSettings(unit="passage", null_ablations=0, duplicate_threshold=None)
    print(f"# {len(examples)} examples on the default model, load average {os.getloadavg()[0]:.2f}")
    print("id       k  tokens  top-1    τ_u top  τ_u 2nd  hier tokens  LOPO tokens  n-gram tokens  wall s")
    rows = []
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
            f"{second.influence:8.2f} {r.search.tokens_decoded:12} {lopo:12} {exhaustive:14} {wall:7.1f}"
        )
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


if __name__ == "__main__":
    main()
