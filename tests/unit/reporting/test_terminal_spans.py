"""The top spans in context under the score table (``ctxlite.reporting.terminal``), on hand-made
records: the context read back from the n-gram windows, the marks, the gaps, the control characters."""

from __future__ import annotations

import re
from dataclasses import replace

from ctxlite.influence.results import Block, NgramInfluence
from ctxlite.reporting.terminal import BOLD_REVERSE, RESET, REVERSE, printable, score_table, spans_in_context
from tests.results import adaptive, example, result

CONTEXT = "Patient Dana Whitcombe takes lisinopril 10 mg daily; phone 555-0187 at home."


def _gram(a: int, b: int, influence: float, start: int = 0) -> NgramInfluence:
    return NgramInfluence(start, 2, a, b, CONTEXT[a:b], influence, [influence])


def _result(grams: list[NgramInfluence], **extra):
    return result(extra.pop("lam", 1.0), grams, **extra)


CUTS = [0, 8, 22, 29, 40, 46, 53, 59, 68, len(CONTEXT)]
TILED = [_gram(a, b, 0.1 * i, start=i) for i, (a, b) in enumerate(zip(CUTS, CUTS[1:]))]


def test_top_spans_are_bracketed_in_their_context_with_the_largest_bold_on_a_terminal():
    grams = [replace(g) for g in TILED]
    grams[1].influence, grams[3].influence, grams[7].influence = 9.0, 5.0, 7.0
    line = spans_in_context(_result(grams), spans=3, margin=4)
    # 4 characters either side, excerpts merged where they meet, "…" where the context goes on
    assert line == "…ent [Dana Whitcombe] takes [lisinopril ]10 m… …one [555-0187 ]at h…", line
    ansi = spans_in_context(_result(grams), spans=3, margin=4, ansi=True)
    assert f"{BOLD_REVERSE}Dana Whitcombe{RESET}" in ansi and f"{REVERSE}555-0187 {RESET}" in ansi
    assert re.sub(r"\x1b\[[0-9;]*m", "", ansi) == line.replace("[", "").replace("]", "")


def test_uncovered_context_is_a_gap_and_an_overlap_belongs_to_the_larger_span():
    sparse = [_gram(8, 22, 3.0), _gram(29, 46, 1.0), _gram(40, 53, 2.0)]  # nothing covers 22–29 or 0–8
    line = spans_in_context(_result(sparse), spans=3, margin=40)
    assert line == "[Dana Whitcombe]…[lisinopril ][10 mg daily; ]"
    search = replace(adaptive(9), blocks=[Block(0, 9, 0, 29, CONTEXT[:29], 4.0)])
    searched = _result(sparse, search=search)  # its blocks fill the gaps
    assert (
        spans_in_context(searched, spans=3, margin=40) == "Patient [Dana Whitcombe] takes [lisinopril ][10 mg daily; ]"
    )


def test_long_spans_are_cut_in_the_middle_and_control_characters_are_pictures():
    text = "A\x1b[2Jcleared\tand\nrung\x07" + "x" * 60
    g = NgramInfluence(0, 9, 0, len(text), text, 1.0, [1.0])
    line = spans_in_context(_result([g]), spans=1, width=20)
    assert "\x1b" not in line and "\x07" not in line and "\n" not in line
    assert line == "[" + printable(text)[:10] + "…" + "x" * 9 + "]"
    assert printable("a\x1bb\x7fc\x85d\ne") == "a␛b␡c⟨U+0085⟩d⏎e"


def test_the_table_ends_with_one_line_per_example_and_lambda_and_none_without_ngrams():
    rec = example(_result(TILED, lam=0.5), _result(TILED, lam=1.5, context_size=16))
    lines = score_table(["ex<1>"], [rec], ansi=False).splitlines()
    assert lines[0].startswith("example") and len(lines) == 7 and lines[3] == ""
    assert lines[4].startswith("top 3 n-grams by τ_i in their context (each [in brackets]")
    assert lines[5] == "ex<1> λ=0.5: …0 mg daily; [phone ][555-0187 ][at home.]"
    assert lines[6].startswith("ex<1> λ=1.5@16: …")
    doc = example(_result([]))
    assert len(score_table(["e"], [doc], ansi=True).splitlines()) == 2
    assert "\x1b" not in score_table(["e"], [example(_result([replace(TILED[0], text="\x1b[2J")]))], ansi=False)
