"""bench/reproduce.py's logic without a model: the claim registry, the verdict rules, the tests that
decide a direction, the outputs, and the known-versus-novel facts data set's well-formedness."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from reproduction import claims, facts, report  # noqa: E402,F401
from reproduction.framework import (  # noqa: E402
    ERROR,
    NOT_REPRODUCED,
    NOT_TESTABLE,
    REGISTRY,
    REPRODUCED,
    Claim,
    ClaimRun,
    Figure,
    RunContext,
    TestResult,
    Verdict,
    decide,
    failed_assertions,
    paired_greater,
    rank_trend,
    run_claims,
    select,
    summary_line,
    trend_greater,
)


def _test(effect: float, p: float) -> TestResult:
    return TestResult("t", 1.0, p, effect, 10)


# ----- deciding a direction ----------------------------------------------------------------


@pytest.mark.parametrize(
    "effect, p, outcome, words",
    [
        (1.0, 0.01, REPRODUCED, "p = 0.01 < α"),
        (1.0, 0.2, NOT_REPRODUCED, "not significant"),
        (1.0, 0.05, NOT_REPRODUCED, "not significant"),  # p = α is not below α
        (-1.0, 0.001, NOT_REPRODUCED, "other way"),
        (0.0, 0.001, NOT_REPRODUCED, "other way"),
        (1.0, float("nan"), NOT_REPRODUCED, "could not be formed"),
    ],
)
def test_decide_needs_the_claimed_direction_and_significance(effect, p, outcome, words):
    got, reason = decide(_test(effect, p), 0.05, "it rises")
    assert got == outcome and words in reason


def test_paired_greater_sees_a_consistent_shift_and_not_noise():
    a = [5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]
    shifted = paired_greater([x + 1 for x in a], a)
    assert shifted.effect == pytest.approx(1.0) and shifted.p_value < 0.01 and shifted.n == 8
    assert shifted.ci[0] <= 1.0 <= shifted.ci[1]
    backwards = paired_greater(a, [x + 1 for x in a])
    assert backwards.effect < 0 and backwards.p_value > 0.9
    same = paired_greater(a, a)
    assert same.p_value == 1.0 and same.effect == 0.0
    with pytest.raises(ValueError):
        paired_greater([1.0, 2.0], [1.0])


def test_trend_greater_orders_the_conditions_by_x():
    rows = [
        [1.0, 2.0, 3.0, 4.0],
        [0.5, 1.5, 2.0, 4.5],
        [2.0, 2.5, 3.5, 5.0],
        [1.0, 3.0, 3.2, 3.3],
        [0.1, 0.2, 0.3, 0.4],
    ]
    up = trend_greater([1, 2, 3, 4], rows)
    assert up.p_value < 0.01 and up.effect == pytest.approx(1.0)
    # the same values listed against decreasing x are a falling trend
    down = trend_greater([4, 3, 2, 1], rows)
    assert down.p_value > 0.9 and down.effect == pytest.approx(-1.0)
    with pytest.raises(ValueError):
        trend_greater([1, 2], [[1.0, 2.0]])


def test_rank_trend_is_the_exact_permutation_test():
    assert rank_trend([1, 2, 4, 8, 16], [0.1, 0.2, 0.3, 0.4, 0.9]).p_value == pytest.approx(1 / 120)
    assert rank_trend([1, 2, 4, 8, 16], [0.9, 0.4, 0.3, 0.2, 0.1]).p_value == 1.0
    assert rank_trend([1, 2, 3, 4, 5], [0.0, 0.0, 0.0, 0.0, 0.0]).p_value == 1.0  # no trend in ties
    # two tied zeros below three rising values: the orderings as good are those that keep the three on top
    assert rank_trend([1, 2, 3, 4, 5], [0.0, 0.0, 0.2, 0.5, 2.0]).p_value == pytest.approx(2 / 120)
    with pytest.raises(ValueError):
        rank_trend([1, 2], [1, 2])


def test_a_bound_test_decides_by_its_lower_limit():
    certified = TestResult("cp", 0.4, None, 0.4, 200, (0.4, 25.0), 0.95)
    assert decide(certified, 0.05, "leaks")[0] == REPRODUCED and certified.rejects
    zero = TestResult("cp", 0.0, None, 0.0, 200, (0.0, 1.0), 0.95)
    assert decide(zero, 0.05, "leaks")[0] == NOT_REPRODUCED and not zero.rejects
    assert "lower 95% bound" in certified.describe()
    with pytest.raises(ValueError):
        TestResult("cp", 0.4, None, 0.4, 200)


def test_a_verdict_of_reproduced_or_not_carries_its_test():
    with pytest.raises(ValueError):
        Verdict(REPRODUCED, "because")
    with pytest.raises(ValueError):
        Verdict(NOT_REPRODUCED, "because")
    with pytest.raises(ValueError):
        Verdict("maybe", "because")
    assert Verdict(NOT_TESTABLE, "no model pair").test is None


# ----- the registry and the run loop ------------------------------------------------------


def test_the_registry_has_every_claim_once_in_order():
    ids = [c.id for c in select(None)]
    assert ids[0] == "000.1a" and len(ids) == len(set(ids)) == len(REGISTRY)
    for required in ("000.1a", "000.2", "000.3", "000.4", "000.5", "000.6", "000.7", "000.8a"):
        assert required in ids
    assert [c.id for c in select(["000.1"])] == ["000.1a", "000.1b"]
    assert [c.id for c in select(["000.6"])] == ["000.6"]
    assert all(c.id.startswith("000.") for c in select(["000"]))
    with pytest.raises(KeyError):
        select(["000.99"])


def _claim(id, run, robust=False):
    return Claim(id, "test", "a statement", run, robust)


def test_run_claims_records_an_error_and_goes_on():
    def boom(ctx):
        raise RuntimeError("no model")

    ok = lambda ctx: Verdict(REPRODUCED, "yes", test=_test(1.0, 0.01))  # noqa: E731
    runs = run_claims([_claim("9.1", boom), _claim("9.2", ok)], RunContext())
    assert [r.verdict.outcome for r in runs] == [ERROR, REPRODUCED]
    assert "RuntimeError: no model" in runs[0].verdict.reason


def test_quick_fails_on_a_robust_claim_not_reproduced_or_any_error_only():
    def run(outcome, robust):
        test = _test(1.0, 0.5) if outcome in (REPRODUCED, NOT_REPRODUCED) else None
        return ClaimRun(_claim("9.1", None, robust), Verdict(outcome, "r", test=test), 0.0)

    assert failed_assertions([run(NOT_REPRODUCED, True)])
    assert failed_assertions([run(NOT_TESTABLE, True)])
    assert failed_assertions([run(ERROR, False)])
    assert not failed_assertions([run(NOT_REPRODUCED, False), run(NOT_TESTABLE, False), run(REPRODUCED, True)])


def test_outputs_hold_every_claim_and_the_page_is_offline(tmp_path):
    v = Verdict(
        REPRODUCED,
        "it rises <b>",
        numbers={"mean": 1.5, "ci": [1.0, 2.0], "nan": float("nan")},
        test=TestResult("t", 3.0, 0.01, 1.5, 8, (1.0, 2.0), 0.95),
        settings={"model": "m"},
        figures=[Figure("rise", [("mean", [1, 2, 3], [1.0, 2.0, 3.5])], "x", "y")],
    )
    runs = [ClaimRun(_claim("9.1", None, True), v, 1.0), ClaimRun(_claim("9.2", None), Verdict(NOT_TESTABLE, "n/a"), 0)]
    result = report.summary(runs, RunContext(), {"python": "3"}, 2.0)
    js, page = report.write(tmp_path, result)
    back = json.loads(js.read_text())
    assert [c["id"] for c in back["claims"]] == ["9.1", "9.2"]
    assert back["claims"][0]["numbers"]["nan"] == "nan" and back["outcomes"] == {REPRODUCED: 1, NOT_TESTABLE: 1}
    html = page.read_text()
    assert "<script" not in html and "it rises &lt;b&gt;" in html and 'id="claim-9.2"' in html
    assert "9.1   " in summary_line(runs[0]) and "REPRODUCED" in summary_line(runs[0])


def test_the_script_lists_the_claims_and_refuses_unknown_ones():
    script = [sys.executable, str(REPO / "bench" / "reproduce.py")]
    listed = subprocess.run([*script, "--list"], capture_output=True, text=True, check=True).stdout
    assert "000.6   robust" in listed
    bad = subprocess.run([*script, "--claims", "7.7"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown claim" in bad.stderr


# ----- the known-versus-novel facts --------------------------------------------------------


def test_the_facts_data_set_is_well_formed():
    pairs = facts.load()
    assert len(pairs) >= 40
    assert len({p.id for p in pairs}) == len(pairs)
    for p in pairs:
        known, novel = p.filled("known"), p.filled("novel")
        for member, slots in ((known, p.known), (novel, p.novel)):  # one template, filled twice
            assert slots["a"] in member["context"] and slots["b"] in member["context"]
            assert slots["b"] in member["query"] and not re.search(rf"\b{re.escape(slots['a'])}\b", member["query"])
        assert known["response"].rstrip(".").endswith(known["answer"])
        assert p.known["a"] not in novel["context"] and p.novel["a"] not in known["context"]


@pytest.mark.parametrize(
    "change, words",
    [
        ({"response": "{a} is it, {b}"}, "must end with the answer"),
        ({"query": "Is {a} the capital of {b}?"}, "must not contain the answer"),
        ({"context": "A capital of {b}."}, "both {a} and {b}"),
        ({"novel": {"a": "Paris", "b": "Quenvia"}}, "replace both names"),
        ({"novel": {"a": "Zorblat"}}, "fill a and b"),
        ({"context": "{a} is the capital of {c}."}, "beyond"),
        ({"extra": 1}, "fields"),
    ],
)
def test_a_malformed_pair_is_refused(tmp_path, change, words):
    good = json.loads(facts.DATA.read_text(encoding="utf-8").splitlines()[0])
    assert facts.problems(good) == []
    bad = {**good, **change}
    assert any(words in p for p in facts.problems(bad))
    path = tmp_path / "facts.jsonl"
    path.write_text(json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1"):
        facts.load(path)
