"""Near-duplicate passages on the real default model (issue 27, "redundancy made visible"): rag-1 with
its answer passage planted twice (ctxlite/data/examples/rag_duplicate.jsonl, passages 2 and 4). Each
copy alone barely moves the response, since the other still states the fact; removed together they
do. Measured at the time of writing: τ_u 0.25 and 1.41 nats, τ_pair 25.51 (docs/scoring.md)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.influence.results import ExampleResult
from tests.docs_pages import REPO

pytestmark = pytest.mark.model

DATA = REPO / "ctxlite" / "data" / "examples" / "rag_duplicate.jsonl"


def test_a_fact_stated_twice_shows_in_the_pair_not_in_either_copy(tmp_path):
    out = tmp_path / "dup.jsonl"
    r = CliRunner().invoke(main, ["score", "--data", str(DATA), "--unit", "passage", "--out", str(out)])
    assert r.exit_code == 0, r.output
    (line,) = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()[1:] if '"example"' in x]
    (lam,) = ExampleResult.from_dict(line["result"]).results
    by = {u.label: u for u in lam.units}
    copies = by["passage 2"], by["passage 4"]
    assert (copies[0].partner, copies[1].partner) == ("passage 4", "passage 2")
    assert by["passage 1"].partner is None and by["passage 3"].partner is None
    tau_pair = copies[0].pair_influence
    assert tau_pair == copies[1].pair_influence
    for u in copies:  # each copy's leave-one-out τ_u hides the fact; the pair shows it
        assert tau_pair > 5 * u.influence, [(v.label, v.influence, v.pair_influence) for v in lam.units]
    assert tau_pair > 0.5 * lam.document_influence  # the pair carries most of what the context does
    # the gate reads τ_pair like τ_u: each copy within a budget of 5 nats, the pair beyond it
    assert all(u.influence + lam.noise_floor.max < 5 for u in copies)
    gated = CliRunner().invoke(main, ["report", str(out), "--fail-above-influence", "5"])
    verdict = next(line for line in gated.output.splitlines() if line.startswith("verdict:"))
    assert gated.exit_code == 8 and "τ_pair" in verdict and "near-duplicate" in verdict, gated.output
    assert "'passage 2'" in verdict and "'passage 4'" in verdict
    assert copies[0].pair_above_noise is True


def test_a_fact_stated_three_times_shows_in_its_cluster_not_in_any_pair(tmp_path):
    """Issue 46: rag-1's passages as [P1, P2, P3, P2, P2], the answer passage verbatim three times.
    Removing one or two copies leaves a third; the cluster of all three, removed together, moves the
    response, and the gate at 5 nats fails on τ_cluster (it passed on the units and pairs alone)."""
    p1, p2, p3, _ = json.loads(DATA.read_text(encoding="utf-8").splitlines()[0])["passages"]
    line = {"id": "rag-1-x3", "query": "Which medication does Marta Oyelaran take for her blood pressure?"}
    line |= {"passages": [p1, p2, p3, p2, p2], "response": "Marta Oyelaran takes losartan 50 mg every morning."}
    data, out = tmp_path / "x3.jsonl", tmp_path / "x3.log.jsonl"
    data.write_text(json.dumps(line) + "\n", encoding="utf-8")
    r = CliRunner().invoke(main, ["score", "--data", str(data), "--unit", "passage", "--out", str(out)])
    assert r.exit_code == 0, r.output
    (rec,) = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()[1:] if '"example"' in x]
    (lam,) = ExampleResult.from_dict(rec["result"]).results
    (cluster,) = lam.clusters
    assert cluster.units == ["passage 2", "passage 4", "passage 5"] and cluster.similarity == 1.0
    copies = [u for u in lam.units if u.label in cluster.units]
    alone = max([u.influence for u in copies] + [u.pair_influence for u in copies])
    floor = lam.noise_floor.max
    shown = [(u.label, u.influence, u.pair_influence) for u in copies]
    assert cluster.influence > 3 * alone, (cluster.influence, shown)
    assert cluster.influence - floor > 5 and cluster.above_noise is True
    gated = CliRunner().invoke(main, ["report", str(out), "--fail-above-influence", "5"])
    verdict = next(line for line in gated.output.splitlines() if line.startswith("verdict:"))
    assert gated.exit_code == 8 and "τ_cluster" in verdict, gated.output
