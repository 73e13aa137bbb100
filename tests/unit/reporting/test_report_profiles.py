"""The score report's data-set profiles on hand-made summaries (no model): the mean τ_t per
response position and the mean τ_i per n-gram start, one line per λ with a table; a run whose
summary has no n-gram profile (document level, or a search that ablates only some windows)
gets a one-line note instead of a plot."""

from __future__ import annotations

import re

from ctxlite.gates import Verdict
from ctxlite.influence.analysis import Summary
from ctxlite.reporting.score_page import score_html
from ctxlite.runs import LogState, ScoreRun


def _entry(lam: float, response: list, ngram: dict | None, ngram_mean=None) -> dict:
    """A summary entry in its log form (no n-gram profile: empty)."""
    return {
        "lam": lam,
        "context_size": None,
        "epsilon": None,
        "context_tokens_mean": 10.0,
        "examples": 2,
        "document_influence": {"mean": 1.0, "std": 0.0, "ci": [0.5, 1.5], "confidence": 0.95},
        "ngram_influence": {
            "mean": ngram_mean,
            "max_of_mean": None,
            "max_of_mean_position": None,
            "fraction_above_noise": None,
        },
        "noise_floor_max_mean": None,
        "response_position_profile": response,
        "ngram_position_profile": ngram or {"starts": [], "means": []},
        "utility": None,
        "realised_epsilon": None,
        "regurgitation": {"repeat": 0, "rouge": 0, "repeat_rate": 0.0, "rouge_rate": 0.0},
    }


def _page(summary: dict) -> str:
    run = ScoreRun(
        [], [], Summary.from_dict(summary), Verdict("ctxlite score", None, []), {}, log=LogState("run.jsonl", None)
    )
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


def _eps_entry(lam: float, eps: float | None, doc: float, f1: float, realised_max: float) -> dict:
    entry = _entry(lam, [doc], None)
    entry["epsilon"] = eps
    entry["document_influence"] = {"mean": doc, "std": 0.0, "ci": [doc - 0.5, doc + 0.5], "confidence": 0.95}
    entry["utility"] = {"metric": "rouge_l_f", "mean": f1, "ci": [f1 - 0.1, f1 + 0.1], "confidence": 0.95}
    entry["utility"]["examples"] = 2
    entry["realised_epsilon"] = {"mean": realised_max / 2, "max": realised_max, "steps": 6}
    return entry


def _rows(section: str, title: str) -> list[list[str]]:
    """The table right below the plot titled ``title``."""
    after = section.split(f"<title>{title}</title>", 1)[1].split("</figure>", 1)[1]
    body = after.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", body)]


def test_the_epsilon_sweep_is_plotted_per_lambda_with_its_numbers():
    """Privacy–utility across ε: influence and utility against ε, a curve per λ, each with its table;
    the unbounded entry is in the λ views, never a point on the ε axis."""
    html = _page(
        {
            "1.0/eps=1.0": _eps_entry(1.0, 1.0, 2.0, 0.25, 1.0),
            "1.0/eps=4.0": _eps_entry(1.0, 4.0, 3.0, 0.375, 3.5),
            "1.5": _eps_entry(1.5, None, 9.0, 0.625, 12.0),
            "1.5/eps=1.0": _eps_entry(1.5, 1.0, 2.5, 0.25, 1.0),
            "1.5/eps=4.0": _eps_entry(1.5, 4.0, 4.0, 0.5, 4.0),
        }
    )
    section = html.split("<h3>Privacy–utility across ε</h3>", 1)[1].split("<h3>", 1)[0]
    assert section.count("<svg") == 2 and section.count("<path ") == 4  # two plots, a curve per λ in each
    assert _rows(section, "Mean document influence against ε") == [
        ["1", "1", "2", "2", "1.5", "2.5", "0.5", "1"],
        ["1", "4", "2", "3", "2.5", "3.5", "1.75", "3.5"],
        ["1.5", "1", "2", "2.5", "2", "3", "0.5", "1"],
        ["1.5", "4", "2", "4", "3.5", "4.5", "2", "4"],
    ]
    assert _rows(section, "Mean utility against ε") == [
        ["1", "1", "0.25", "0.15", "0.35", "2"],
        ["1", "4", "0.375", "0.275", "0.475", "2"],
        ["1.5", "1", "0.25", "0.15", "0.35", "2"],
        ["1.5", "4", "0.5", "0.4", "0.6", "2"],
    ]
    assert "realised ε max" in section and ">9<" not in section  # the unbounded λ = 1.5 entry is no ε point
    tradeoff = html.split("<title>Utility against influence across λ</title>", 1)[1].split("</svg>", 1)[0]
    assert [t for t in re.findall(r">(λ sweep[^<]*)<", tradeoff)] == ["λ sweep", "λ sweep, ε = 1", "λ sweep, ε = 4"]
    across = html.split("<title>Mean document influence across λ</title>", 1)[1].split("</svg>", 1)[0]
    assert re.findall(r">(mean[^<]*)<", across) == ["mean", "mean, ε = 1", "mean, ε = 4"]  # a curve per ε
    assert "<th>λ = 1.5, ε = 4</th>" in _section(html, "Response-position profile")


def test_one_epsilon_gets_its_table_and_no_plot():
    html = _page({"1.0/eps=2.0": _eps_entry(1.0, 2.0, 2.0, 0.25, 2.0)})
    section = html.split("<h3>Privacy–utility across ε</h3>", 1)[1].split("<h3>", 1)[0]
    assert "<svg" not in section and "<td>2</td>" in section
    assert "Privacy–utility across ε" not in _page({"1.0": _entry(1.0, [0.5], None)})
