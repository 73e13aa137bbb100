"""The known-versus-novel facts data set (``bench/data/known_novel_facts.jsonl``) of claim 000.6.

Each line is one *pair*: a context, query and fixed response written once as templates with two
slots, ``{a}`` (the answer, always the response's last words) and ``{b}`` (what is asked about),
and two fillings: ``known``, a fact a small base model has seen in training ("Paris" / "France"),
and ``novel``, an invented counterpart ("Zorblat" / "Quenvia"). Both members of a pair are
therefore the same text up to the two names: a copying metric (ROUGE, Repeat) sees the same
overlap with the context in both, while context influence sees whether the model needed the
context to say it (Flemings et al., ACL 2025, §5: influence separates parametric knowledge from
what was read in the context).

Whether the model "knows" a fact is measured, not assumed (:func:`answer_rank`): the rank of the
answer's first token among the model's next-token logits with the context slot left empty,
after the response's own prefix ("The capital of France is"). Rank 0 = its top choice.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent.parent / "data" / "known_novel_facts.jsonl"
SLOTS = {"a", "b"}
FIELDS = ("context", "query", "response")


@dataclass(frozen=True)
class FactPair:
    """One line of the data set: the three templates and the two fillings."""

    id: str
    context: str
    query: str
    response: str
    known: dict
    novel: dict

    def filled(self, kind: str) -> dict:
        """The ``known`` or ``novel`` member as an example: context, query, response and answer."""
        slots = {"known": self.known, "novel": self.novel}[kind]
        return {
            "id": f"{self.id}/{kind}",
            **{f: getattr(self, f).format(**slots) for f in FIELDS},
            "answer": slots["a"],
        }


def problems(rec: dict) -> list[str]:
    """What is wrong with one line of the data set (empty when it is well-formed)."""
    out = []
    if set(rec) != {"id", *FIELDS, "known", "novel"}:
        return [f"fields {sorted(rec)}: expected id, context, query, response, known, novel"]
    for f in FIELDS:
        names = {n for _, n, _, _ in string.Formatter().parse(rec[f]) if n is not None}
        if not names <= SLOTS:
            out.append(f"{f} uses slots {sorted(names)} beyond {{a}}, {{b}}")
    if "{a}" not in rec["context"] or "{b}" not in rec["context"]:
        out.append("the context must state the fact: both {a} and {b}")
    if "{a}" in rec["query"] or "{b}" not in rec["query"]:
        out.append("the query asks about {b} and must not contain the answer {a}")
    if not rec["response"].rstrip(".").endswith("{a}"):
        out.append("the response must end with the answer {a} (its rank is read there)")
    for kind in ("known", "novel"):
        if set(rec[kind]) != SLOTS or not all(isinstance(v, str) and v.strip() for v in rec[kind].values()):
            out.append(f"{kind} must fill a and b with non-empty text")
    if not out and any(rec["known"][s].lower() == rec["novel"][s].lower() for s in SLOTS):
        out.append("the novel member must replace both names of the known one")
    return out


def load(path: Path = DATA) -> list[FactPair]:
    """Every pair of the data set, validated (a ``ValueError`` names the first bad line)."""
    pairs = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        bad = problems(rec)
        if bad:
            raise ValueError(f"{path.name} line {i}: {'; '.join(bad)}")
        pairs.append(FactPair(**rec))
    return pairs


def answer_rank(scorer, example: dict) -> int:
    """Rank of the answer's first token among the next-token logits *without* the context (the
    template's empty slot) after the response's prefix: 0 when the model's top choice is the
    answer, i.e. it knows the fact. ``scorer`` is an ``InfluenceScorer`` (its template and engine)."""
    from ctxlite import Example

    eng = scorer.engine
    enc = scorer.encode(Example(context=example["context"], query=example["query"]))
    y = scorer.encode_response(enc, example["response"])
    at = eng.detokenize(y).rstrip(".").rindex(example["answer"])
    first = next(i for i, (_, end) in enumerate(eng.char_spans(y)) if end > at)
    rows = eng.logits_rows(enc.without_context + y, len(enc.without_context))
    row = rows[first]
    return int(np.sum(row > row[y[first]]))
