"""How often the L3 judge blocks the prompt-injection baseline against canary-query answers.

ContextLeak's judge defence should withhold outputs that print the private examples far more
often than ordinary answers to the audit's canary query. This measures it on one private set
(the bundled dialogues, the canary inserted, the L2 defence text in the prompt, as the judge
mechanism builds it): the audited model samples N answers to the injection query and N to the
canary query, and each judge decides every answer. Printed side by side per judge: the blocked
fraction of each set, and how much of the private examples each set actually reveals (mean
longest common substring with the examples, as a fraction of the output), so a judge that blocks
everything or nothing is visible as such. A measurement, not a test.

    python bench/bench_judge.py [--outputs 24] [--shots 8] [--judges smollm2-135m-instruct,audited]
"""

from __future__ import annotations

import argparse
from importlib import resources

import numpy as np

from ctxlite.audit.canaries import make_canary
from ctxlite.audit.dataset import load_records
from ctxlite.audit.formats import AuditFormat
from ctxlite.audit.game import judge_from_engine
from ctxlite.audit.mechanisms import Judge, JudgeModel, leak_fraction
from ctxlite.audit.oracle import ModelOracle
from ctxlite.audit.queries import build_query, injection_query
from ctxlite.runtime.engine import Engine


def revealed(output: str, records) -> float:
    """Largest fraction of ``output`` that is a verbatim piece of one private example's input."""
    return max((leak_fraction(r["dialogue"], output) for r in records), default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--outputs", type=int, default=24, help="sampled answers per query")
    ap.add_argument("--shots", type=int, default=8, help="private records in the prompt")
    ap.add_argument("--judges", default="smollm2-135m-instruct,audited")
    args = ap.parse_args()

    fmt = AuditFormat.builtin("generate")
    data = resources.files("ctxlite").joinpath("data", "dialogue_sample.jsonl")
    private = load_records(data, fmt)[: args.shots]
    canary = make_canary("hex", fmt, private, seed=0)
    private[0] = canary.record(fmt, private[0])
    defence = Judge().defense_text
    audited = Engine()
    oracle = ModelOracle(audited, (), temperature=1.0, max_new_tokens=24)
    rng = np.random.default_rng(0)
    answers = {}
    for name, query in (("injection", injection_query(fmt)), ("canary", build_query(fmt, "input-output", canary))):
        answers[name] = oracle.sample_texts([fmt.prompt(private, query.text, defence)] * args.outputs, rng)
    gist = fmt.gist(private)
    print(
        f"{'judge':<24} {'blocked_injection':>17} {'blocked_canary':>14} {'reveal_injection':>16} {'reveal_canary':>13}"
    )
    reveal = {k: float(np.mean([revealed(o, private) for o in v])) for k, v in answers.items()}
    for spec in args.judges.split(","):
        judge = JudgeModel(oracle) if spec == "audited" else judge_from_engine(Engine(spec))
        blocked = {k: float(np.mean([judge.leaks(gist, o) for o in v])) for k, v in answers.items()}
        print(
            f"{spec:<24} {blocked['injection']:>17.3f} {blocked['canary']:>14.3f} "
            f"{reveal['injection']:>16.3f} {reveal['canary']:>13.3f}"
        )


if __name__ == "__main__":
    main()
