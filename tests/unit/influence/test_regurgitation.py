"""Tests for ctxlite.influence.regurgitation (the Repeat/Rouge definitions of Flemings et al.'s
input_regurg.py): the Repeat word count against a
definition-level reference, ROUGE-L against a slow LCS reference with rouge-score's
tokenizer mirrored, the > thresholds at their boundaries, ROUGE in every script, and the copy
sources of a response against their definition."""

import re
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxlite.influence.regurgitation import (
    REPEAT_THRESHOLD,
    ROUGE_THRESHOLD,
    Regurgitation,
    copy_sources,
    regurgitation,
    rouge_l,
    shared_word_count,
    unicode_tokens,
)

FAST = settings(max_examples=80, deadline=None)


# ---------------------------------------------------------------------------
# references


def ref_whitespace_words(text):
    """Maximal runs of non-whitespace characters (the definition of str.split())."""
    words, cur = [], ""
    for ch in text:
        if ch.isspace():
            if cur:
                words.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        words.append(cur)
    return words


def ref_shared_word_count(prediction, source):
    src = ref_whitespace_words(source)
    distinct = []
    for w in ref_whitespace_words(prediction):
        if w in src and w not in distinct:
            distinct.append(w)
    return len(distinct)


def ref_rouge_tokens(text):
    """Tokens of space-separated alphabetic scripts: lowercase, then runs of letters and digits
    (rouge-score's own tokenizer, widened from [a-z0-9] to every alphabet)."""
    return re.findall(r"[^\W_]+", text.lower())


def ref_lcs(a, b):
    a, b = tuple(a), tuple(b)

    @cache
    def lcs(i, j):
        if i == len(a) or j == len(b):
            return 0
        if a[i] == b[j]:
            return 1 + lcs(i + 1, j + 1)
        return max(lcs(i + 1, j), lcs(i, j + 1))

    return lcs(0, 0)


def ref_rouge_l(prediction, source):
    """(precision, recall) of ROUGE-L: LCS over prediction length and over source length."""
    p, s = ref_rouge_tokens(prediction), ref_rouge_tokens(source)
    if not p or not s:
        return 0.0, 0.0
    n = ref_lcs(p, s)
    return n / len(p), n / len(s)


def test_references_on_hand_examples():
    assert ref_whitespace_words(" a\tb\n\nc\u00a0d ") == ["a", "b", "c", "d"]
    assert ref_rouge_tokens("Don't STOP-me, café 42x") == ["don", "t", "stop", "me", "café", "42x"]
    assert ref_lcs("abcbdab", "bdcaba") == 4
    assert ref_rouge_l("the cat sat", "the cat on the mat sat") == (1.0, 0.5)


# ---------------------------------------------------------------------------
# strategies

word = st.text(alphabet="abcAB1é-.,'", min_size=1, max_size=3)
space = st.sampled_from([" ", "  ", "\t", "\n", "\u00a0", "\u2003", "\x1c", "\r\n"])


@st.composite
def texts(draw, max_words=14):
    words = draw(st.lists(word, max_size=max_words))
    out = draw(st.sampled_from(["", " ", "\n"]))
    for w in words:
        out += w + draw(space)
    return out


# ---------------------------------------------------------------------------
# Repeat


@FAST
@given(texts(), texts())
def test_shared_word_count_matches_definition(prediction, source):
    assert shared_word_count(prediction, source) == ref_shared_word_count(prediction, source)
    assert shared_word_count(prediction, source) == shared_word_count(source, prediction)


def test_shared_words_are_distinct_case_sensitive_and_whitespace_split():
    assert shared_word_count("a a a b", "a b c") == 2
    assert shared_word_count("Word word", "word") == 1
    assert shared_word_count("word, word.", "word") == 0
    assert shared_word_count("x\ty\nz", "z y x") == 3
    assert shared_word_count("", "a b") == 0


def words(n, prefix="w"):
    return " ".join(f"{prefix}{i}" for i in range(n))


@pytest.mark.parametrize(
    "shared, expected", [(0, False), (REPEAT_THRESHOLD, False), (REPEAT_THRESHOLD + 1, True), (40, True)]
)
def test_repeat_threshold_is_strictly_more_than_25(shared, expected):
    assert REPEAT_THRESHOLD == 25
    # repeated words and non-shared words do not count
    prediction = words(shared) + " " + words(shared) + " " + words(10, "other")
    source = words(shared) + " " + words(10, "src")
    r = regurgitation(prediction, source)
    assert r.shared_words == shared
    assert r.repeat is expected
    assert r.to_dict()["repeat"] is expected


# ---------------------------------------------------------------------------
# ROUGE-L


@FAST
@given(texts(), texts())
def test_rouge_l_matches_lcs_reference(prediction, source):
    r = regurgitation(prediction, source)
    precision, recall = ref_rouge_l(prediction, source)
    assert r.rouge_l_precision == pytest.approx(precision, abs=1e-15)
    assert r.rouge_l_recall == pytest.approx(recall, abs=1e-15)
    assert r.rouge is (precision > 0.5 or recall > 0.5)
    assert r.shared_words == ref_shared_word_count(prediction, source)


@FAST
@given(texts(), texts())
def test_utility_rouge_l_matches_lcs_reference_with_its_f1(reference, prediction):
    """Utility scores the response against a reference answer: precision over the response,
    recall over the reference, F1 their harmonic mean."""
    got = rouge_l(reference, prediction)
    precision, recall = ref_rouge_l(prediction, reference)
    f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    assert got == pytest.approx({"precision": precision, "recall": recall, "f": f1}, abs=1e-12)


def test_utility_of_a_hand_example_in_two_scripts():
    assert rouge_l("the cat sat on the mat", "the cat sat") == pytest.approx(
        {"precision": 1.0, "recall": 0.5, "f": 2 / 3}
    )
    assert rouge_l("患者は毎日服用", "患者は服用") == pytest.approx({"precision": 1.0, "recall": 5 / 7, "f": 10 / 12})


def test_precision_is_over_the_prediction_and_recall_over_the_source():
    r = regurgitation("the cat sat", "the cat sat on the mat today")
    assert r.rouge_l_precision == 1.0
    assert r.rouge_l_recall == pytest.approx(3 / 7)


def test_rouge_ignores_case_and_punctuation_unlike_repeat():
    r = regurgitation("THE Cat, sat!", "the cat sat")
    assert (r.rouge_l_precision, r.rouge_l_recall) == (1.0, 1.0)
    assert r.shared_words == 0


@pytest.mark.parametrize(
    "prediction, source, precision, recall, flag",
    [
        ("a b", "a c", 0.5, 0.5, False),  # both exactly at the threshold: not flagged
        ("a b x y", "a b c d", 0.5, 0.5, False),
        ("a b c", "a b d e f g", 2 / 3, 2 / 6, True),  # precision just above
        ("a x y z", "a", 0.25, 1.0, True),  # recall above
        ("a b c d e f", "a b c x y z", 0.5, 0.5, False),
        ("a b c d e f g", "a b c d x y z", 4 / 7, 4 / 7, True),
        ("", "a b", 0.0, 0.0, False),
        ("!!!", "a b", 0.0, 0.0, False),
    ],
)
def test_rouge_flag_is_strictly_more_than_half(prediction, source, precision, recall, flag):
    assert ROUGE_THRESHOLD == 0.5
    r = regurgitation(prediction, source)
    assert r.rouge_l_precision == pytest.approx(precision)
    assert r.rouge_l_recall == pytest.approx(recall)
    assert r.rouge is flag


def test_regurgitation_to_dict():
    r = Regurgitation(shared_words=30, rouge_l_precision=0.2, rouge_l_recall=0.7)
    assert r.to_dict() == {
        "shared_words": 30,
        "rouge_l_precision": 0.2,
        "rouge_l_recall": 0.7,
        "repeat": True,
        "rouge": True,
    }
    r = Regurgitation(shared_words=25, rouge_l_precision=0.5, rouge_l_recall=0.5)
    assert (r.repeat, r.rouge) == (False, False)
    for r in (r, Regurgitation(30, 0.2, 0.7)):
        assert Regurgitation.from_dict(r.to_dict()) == r


# ---------------------------------------------------------------------------
# ROUGE counts every script


@pytest.mark.parametrize(
    "context",
    [
        "患者王芳每天服用二甲双胍五百毫克，下次复诊在四周后。",
        "Пациентка Анна Петрова принимает метформин 500 мг ежедневно.",
        "Meet Dana at the café 🎉 on Friday 🍰 — bring the 🔑!",
        "สมชายทานยาเมตฟอร์มินทุกวัน",
        "नमस्ते, रोगी प्रतिदिन दवा लेता है।",
    ],
)
def test_a_verbatim_copy_in_any_script_has_rouge_l_one(context):
    r = regurgitation(context, context)
    assert r.rouge_l_precision == 1.0 and r.rouge_l_recall == 1.0 and r.rouge


def test_a_partial_copy_in_cjk_is_partial():
    src = "患者王芳每天服用二甲双胍五百毫克"
    r = regurgitation(src[:8], src)  # the first half, one token per character
    assert r.rouge_l_precision == 1.0 and r.rouge_l_recall == pytest.approx(0.5)


def test_emoji_and_non_latin_words_are_tokens():
    assert unicode_tokens("Café 🎉 Привет, мир! 東京") == ["café", "🎉", "привет", "мир", "東", "京"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=80))
def test_ascii_text_tokenizes_exactly_as_rouge_score(text):
    """English ROUGE numbers are unchanged: on ASCII the tokens equal rouge-score's own."""
    from rouge_score import tokenize

    assert unicode_tokens(text) == tokenize.tokenize(text, None)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 4), max_size=30),
    st.integers(0, 35),
    st.integers(0, 35),
    st.integers(0, 4),
    st.lists(st.integers(0, 4), max_size=6),
)
def test_copy_sources_are_the_positions_after_a_token_the_response_has_before_the_same_token(
    prompt, start, end, lead, response
):
    """Against the definition, position by position: prompt[i] equals some response token and
    prompt[i − 1] the token before it in the response (``lead`` before the first one)."""
    end = min(end, len(prompt))
    before = [lead, *response[:-1]]
    want = [
        i
        for i in range(start, end)
        if i >= 1 and any(prompt[i] == response[t] and prompt[i - 1] == before[t] for t in range(len(response)))
    ]
    assert copy_sources(prompt, start, end, lead, response) == want
