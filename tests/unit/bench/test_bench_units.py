"""bench/bench_units.py's data without a model: the shipped RAG examples are what the script writes,
and each is well formed (k passages, exactly one stating the answer fact, distractors sharing its
entities), so the benchmark's top-1 accuracy is measured against a true label."""

from __future__ import annotations

import json
import sys
from collections import Counter

import pytest

from ctxlite.influence.dataset import load_examples
from tests.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

import bench_units  # noqa: E402


def test_the_shipped_data_is_what_the_script_writes(tmp_path):
    path = tmp_path / "rag_units.jsonl"
    bench_units.write_data(path, (3, 5, 10), 4)
    assert path.read_bytes() == bench_units.DATA.read_bytes()
    bench_units.write_data(path, tuple(bench_units.LONG_FILLER), 2, filler=bench_units.LONG_FILLER)
    assert path.read_bytes() == bench_units.LONG.read_bytes()


@pytest.mark.parametrize("data, sizes", [("DATA", {3: 4, 5: 4, 10: 4}), ("LONG", {3: 2, 10: 2})])
def test_each_example_has_one_answer_passage_and_distractors_on_its_entities(data, sizes):
    lines = [json.loads(x) for x in getattr(bench_units, data).read_text(encoding="utf-8").splitlines()]
    assert Counter(len(d["passages"]) for d in lines) == sizes
    for d in lines:
        name = d["query"].removeprefix("Which medication does ").split(" take for ")[0]
        fact = d["response"].removeprefix(f"{name} takes ").removesuffix(" every morning.")
        holding = [i for i, p in enumerate(d["passages"], 1) if f"{name} takes {fact}" in p]
        assert holding == [d["answer_passage"]], d["id"]
        first = name.split()[0]
        sharing = [p for p in d["passages"] if first in p or fact.split()[0] in p.lower()]
        assert len(sharing) >= min(3, len(d["passages"])), d["id"]  # distractors on the same entities
    assert [ex.passages is not None for ex in load_examples(getattr(bench_units, data))] == [True] * len(lines)


def test_the_long_datas_boilerplate_names_no_drug_condition_or_patient():
    names = [drug for drug, _ in bench_units.DRUGS] + bench_units.CONDITIONS + bench_units.FIRST + bench_units.LAST
    words = {w.lower() for w in names}
    for sentence in bench_units.FILLER:
        assert not any(w in sentence.lower() for w in words), sentence
