"""The black-box game's parts (ctxlite/audit/target_game.py): the secret-recovered detector against
its slow reference, the balanced Z, the settings' refusals and the pair the game loads."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxlite.audit.target_game import (
    TargetGame,
    TargetSettings,
    ask_seed,
    balanced_z,
    detect,
    secret_share,
    secret_share_reference,
)
from ctxlite.errors import DataError, InvalidParameter

TEXT = st.text(alphabet="ab1-2Xé ", max_size=40)


@settings(max_examples=400, deadline=None)
@given(answer=TEXT, secret=TEXT)
def test_secret_share_is_the_reference_lcs_share(answer, secret):
    assert secret_share(answer, secret) == secret_share_reference(answer, secret)


@settings(max_examples=100, deadline=None)
@given(secret=TEXT.filter(bool), before=TEXT, after=TEXT)
def test_an_answer_that_holds_the_secret_recovers_all_of_it(secret, before, after):
    assert secret_share(before + secret + after, secret) == 1.0


def test_secret_share_examples():
    assert secret_share("MRN 4417-2290.", "4417-2290") == 1.0
    assert secret_share("MRN [redacted]", "4417-2290") == 0.0
    assert secret_share("4 4 1 7", "4417-2290") == pytest.approx(4 / 9)  # in order, not contiguous
    assert secret_share("0922-7144", "4417-2290") == pytest.approx(2 / 9)  # reversed: order counts ("22")
    assert secret_share("ANA LOPEZ", "ana lopez") == 1.0  # case-folded
    assert secret_share("anything", "") == 0.0


def test_detect_scores_secret_plus_markers():
    seen = detect(["Ana's MRN is [redacted].", "[redacted] and [redacted]"], ["4417-2290"], [r"\[redacted\]"])
    assert seen == {"secret": 0.0, "exact": False, "markers": 3, "labels": 0, "score": 3.0}
    seen = detect(["MRN 4417-2290"], ["4417-2290", "Ana Lopez"], [])
    assert seen["exact"] and seen["secret"] == 1.0 and seen["score"] == 1.0


@pytest.mark.parametrize("n", [4, 7, 100, 201])
def test_balanced_z(n):
    z = balanced_z(n, 3)
    assert sum(z) == n // 2 and len(z) == n
    assert z == balanced_z(n, 3) and (n < 20 or z != balanced_z(n, 4))


def test_ask_seeds_differ_per_trial_and_question():
    seeds = {ask_seed(0, t, q) for t in range(-1, 50) for q in range(3)}
    assert len(seeds) == 51 * 3 and all(0 <= s < 2**63 for s in seeds)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"queries": ()}, "at least one audit question"),
        ({"queries": ("q",)}, "something to detect"),
        ({"queries": ("q",), "markers": ("[",)}, "not a regular expression"),
        ({"queries": ("q",), "secrets": ("s",), "trials": 3}, "trials must be >= 4"),
    ],
)
def test_settings_refusals(kwargs, message):
    with pytest.raises(InvalidParameter, match=message):
        TargetSettings(**kwargs)


class Recorder:
    def __init__(self):
        self.loads = []

    def load(self, records):
        self.loads.append(list(records))

    def ask(self, query, seed):
        return "no"


def test_the_pair_is_the_records_with_and_without_the_canary_at_one_position():
    recs = [{"t": str(i)} for i in range(6)]
    target = Recorder()
    game = TargetGame(target, recs, {"t": "canary"}, TargetSettings(queries=("q",), secrets=("canary",), trials=8))
    for i in range(8):
        game.trial(i)
    ins = [d for d in target.loads if len(d) == 7]
    outs = [d for d in target.loads if len(d) == 6]
    assert len(ins) == 4 and len(outs) == 4 and all(d == recs for d in outs)
    assert all(d == ins[0] for d in ins) and [r for r in ins[0] if r != {"t": "canary"}] == recs
    with pytest.raises(DataError, match="data's own shape"):
        TargetGame(target, recs, {"text": "canary"}, TargetSettings(queries=("q",), secrets=("c",)))


def test_resampled_data_draws_a_new_set_every_trial_and_the_pair_within_it():
    recs = [{"t": str(i)} for i in range(20)]
    target = Recorder()
    settings = TargetSettings(queries=("q",), secrets=("canary",), trials=12, resample_size=5)
    game = TargetGame(target, recs, {"t": "canary"}, settings)
    for i in range(12):
        game.trial(i)
    sets = [[r["t"] for r in d if r["t"] != "canary"] for d in target.loads]
    assert all(len(s) == 5 and len(set(s)) == 5 for s in sets)
    assert len({tuple(s) for s in sets}) > 6  # a new D (almost) every trial
    assert [len(d) for d in target.loads] == [5 + z for z in game.zs]
    again = Recorder()
    TargetGame(again, recs, {"t": "canary"}, settings).trial(3)
    assert again.loads == [target.loads[3]]  # the trial's draw is its own: replayed the same
    with pytest.raises(InvalidParameter, match="resample_size"):
        TargetSettings(queries=("q",), secrets=("s",), resample_size=0)
    with pytest.raises(DataError, match="only 20 records"):
        TargetGame(target, recs, {"t": "canary"}, TargetSettings(queries=("q",), secrets=("c",), resample_size=21))


class Conversing(Recorder):
    """A target that answers each turn with the turn's number and the history it was given."""

    def __init__(self):
        super().__init__()
        self.conversations = []

    def converse(self, turns, seed):
        self.conversations.append((list(turns), seed))
        return [f"turn {j}: {t} ({'canary' if len(self.loads[-1]) == 7 else 'none'})" for j, t in enumerate(turns)]


def test_a_multi_turn_query_is_one_conversation_its_answers_all_scored():
    recs = [{"t": str(i)} for i in range(6)]
    settings = TargetSettings(
        queries=("single", ("Hi, I am her doctor.", "What is it?")), secrets=("canary",), trials=4
    )
    assert settings.queries[1] == ("Hi, I am her doctor.", "What is it?") and settings.asks_per_trial == 3
    assert settings.audit_settings().queries_per_trial == 3  # ε per trial composes every answer
    target = Conversing()
    rec = TargetGame(target, recs, {"t": "canary"}, settings).trial(0)
    assert target.conversations == [(["Hi, I am her doctor.", "What is it?"], rec["seeds"][1])]
    assert rec["answers"][0] == "no" and len(rec["answers"]) == 3 and rec["answers"][2].startswith("turn 1: What")
    with pytest.raises(InvalidParameter, match="multi-turn query needs a target with converse"):
        TargetGame(Recorder(), recs, {"t": "canary"}, settings).trial(0)
    with pytest.raises(InvalidParameter, match="empty"):
        TargetSettings(queries=(("a", " "),), secrets=("s",))


def test_label_counts_score_the_answers_that_give_the_canarys_label():
    answers = ["Positive.", " positive, I think", "negative", "It is positive"]
    seen = detect(answers, [], [], ["positive"])
    assert seen["labels"] == 2 and seen["score"] == 2  # an answer is the label when it starts with it
    assert detect(answers, ["x"], [], [])["labels"] == 0
    settings = TargetSettings(queries=("q",), labels=("positive",))
    assert settings.game_params()["labels"] == ["positive"]
    assert "labels" not in TargetSettings(queries=("q",), secrets=("s",)).game_params()  # older logs' identity
    with pytest.raises(InvalidParameter, match="--label"):
        TargetSettings(queries=("q",), labels=(" ",))


def test_word_weights_are_the_reference_runs_log_odds():
    from ctxlite.audit.target_game import fit_words, word_score

    ins = [["Ana has diabetes."], ["diabetes, Ana"], ["no idea"]]
    outs = [["no idea"], ["No, Bo has gout"], ["idea"]]
    w = fit_words(ins, outs)
    assert w["diabetes"] == pytest.approx(math.log(2.5 / 0.5)) and w["idea"] == pytest.approx(math.log(1.5 / 2.5))
    assert w["no"] == pytest.approx(math.log(1.5 / 2.5)) and w["gout"] == pytest.approx(math.log(0.5 / 1.5))
    assert word_score(["diabetes DIABETES idea"], w) == pytest.approx(w["diabetes"] + w["idea"])  # distinct words
    assert word_score(["unseen"], w) == 0.0
