"""The score report's data-set profiles on hand-made summaries (no model): the mean τ_t per
response position and the mean τ_i per n-gram start, one line per λ with a table; a run whose
summary has no n-gram profile (document level, or a search that ablates only some windows)
gets a one-line note instead of a plot."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from ctxlite.reporting.score_page import score_html


def _entry(lam: float, response: list, ngram: dict | None, ngram_mean=None) -> dict:
    return {
        "lam": lam,
        "context_size": None,
        "examples": 2,
        "document_influence": {"mean": 1.0, "std": 0.0, "ci": [0.5, 1.5], "confidence": 0.95},
        "ngram_influence": {"mean": ngram_mean, "max_of_mean": None, "fraction_above_noise": None},
        "response_position_profile": response,
        "ngram_position_profile": ngram,
    }


def _page(summary: dict) -> str:
    run = SimpleNamespace(path=Path("run.jsonl"), complete=True, end={"summary": summary}, records={}, identity={})
    return score_html(run)


def _section(html: str, heading: str) -> str:
    return html.split(f"<h3>{heading}</h3>", 1)[1].split("<h", 1)[0]


def test_profiles_are_plotted_per_lambda_with_a_row_per_position():
    html = _page(
        {
            "0.5": _entry(0.5, [0.25, 0.125], {"starts": [0, 8], "means": [2.5, None]}, 1.0),
            "1.5": _entry(1.5, [0.75, 0.5, 0.375], {"starts": [0, 8, 16], "means": [3.5, 1.25, 0.5]}, 1.0),
        }
    )
    response = _section(html, "Response-position profile")
    assert "<title>Mean τ_t at each response position</title>" in response
    assert response.count("<path ") == 2  # a line per λ
    rows = re.findall(r"<tr>(.*?)</tr>", response.split("<tbody>")[1])
    assert [re.findall(r"<td>(.*?)</td>", r) for r in rows] == [
        ["0", "0.25", "0.75"],
        ["1", "0.125", "0.5"],
        ["2", "", "0.375"],  # the λ = 0.5 responses were shorter
    ]
    ngram = _section(html, "N-gram-position profile")
    assert "<title>Mean τ_i at each n-gram start</title>" in ngram
    assert "<th>λ = 0.5</th><th>λ = 1.5</th>" in ngram
    assert "<tr><td>8</td><td>n/a</td><td>1.25</td></tr>" in ngram  # a None mean is not a number


def test_empty_or_missing_ngram_profiles_give_a_note_not_a_plot():
    for profile in ({"starts": [], "means": []}, {}, None):
        html = _page({"1.0": _entry(1.0, [0.5, 0.25], profile)})
        ngram = _section(html, "N-gram-position profile")
        assert "<svg" not in ngram and 'data-role="no-profile"' in ngram
        assert "<svg" in _section(html, "Response-position profile")
    html = _page({"1.0": _entry(1.0, [], None)})
    assert html.count('data-role="no-profile"') == 2 and "no values logged" in html


def test_an_adaptive_search_summary_says_why_it_has_no_ngram_profile():
    """The summary of an adaptive search keeps no n-gram averages and says why: the note repeats it."""
    entry = _entry(1.0, [0.5], {"starts": [], "means": []})
    entry["ngram_influence"]["not_measured"] = "2 result(s) of adaptive search, <which> measures only some"
    ngram = _section(_page({"1.0": entry}), "N-gram-position profile")
    assert "Not measured in this run: 2 result(s) of adaptive search, &lt;which&gt; measures only some." in ngram
