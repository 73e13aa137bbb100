"""``ctxlite report --html``: self-contained offline reports, loaded in a real headless Chromium.

Runs the real CLI (on the FakeBackend, and on the default model for the plots and the colour
scale) on inputs laced with markup and script, renders the reports, and checks in the browser that
no script runs, nothing is requested but the file, nothing is logged as an error (a CSP violation
would be), the private text shows literally, and the heatmap's shading follows the log's n-gram
influences. ``--no-text`` reports must not contain the private text at all, and reports are written
owner-readable only.
"""

from __future__ import annotations

import html
import json
import os
import re
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from ctxlite.reporting.page import heat_class
from tests.browser import Browser, require_chromium
from tests.fake_models import use_fake_models
from tests.paths import REPO
from tests.results import result

pytestmark = pytest.mark.model
NOTHING_ACTIVE = "document.querySelectorAll('script, img, iframe, a:not([href^=\"#\"])').length"
"""Elements that could run or fetch anything: none (in-page anchor links are allowed)."""

PAYLOADS = [
    "<script>window.__pwned=1</script>",
    "</style><script>window.__pwned=2</script>",
    '"><img src=x onerror="window.__pwned=3">',
    "javascript:window.__pwned=4",
]
CONTEXT = (
    "Clinic note. Patient Dana Whitcombe " + PAYLOADS[0] + " was prescribed lisinopril 10 mg daily. "
    "Address " + PAYLOADS[1] + " Larkspur Lane. Phone " + PAYLOADS[2] + " 555-0187. Portal " + PAYLOADS[3] + "."
)
QUERY = "What was prescribed? " + PAYLOADS[2]
RESPONSE = "Lisinopril 10 mg daily " + PAYLOADS[0]
LABEL = '<b>"spam"</b>' + PAYLOADS[0]


def _run(args):
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture(scope="module")
def browser():
    b = Browser(require_chromium())
    yield b
    b.close()


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """A score log and an audit log whose every piece of user text carries markup, written by the real
    CLI on the FakeBackend (tests/fake_models.py): what these tests check is how a report shows a log's
    text and numbers, whatever model wrote them; the plots' and scales' fixtures below run the model."""
    with pytest.MonkeyPatch.context() as mp:
        use_fake_models(mp)
        return _markup_logs(tmp_path_factory.mktemp("html"))


def _markup_logs(d: Path) -> Path:
    (d / "note.txt").write_text(CONTEXT, encoding="utf-8")
    _run(
        ["score", "--context", str(d / "note.txt"), "-q", QUERY, "-r", RESPONSE, "--ngram", "4"]
        + ["--out", str(d / "score.jsonl")]
    )
    rows = [{"text": f"Message {i}: meeting moved to room {i}.", "label": "ham"} for i in range(12)]
    rows += [{"text": f"Win {i} free prizes now {PAYLOADS[i % 4]}", "label": LABEL} for i in range(12)]
    (d / "mail.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    fmt = 'task = "classify"\ninstruction = "Sort the mail.\\n"\nrecord = "Mail: {text}\\nVerdict: {label}\\n"\n'
    (d / "mail.toml").write_text(fmt + 'input = "text"\noutput = "label"\n', encoding="utf-8")
    _run(
        ["audit", "--data", str(d / "mail.jsonl"), "--format", str(d / "mail.toml"), "--trials", "8"]
        + ["--shots", "4", "--queries-per-trial", "4", "--reference-runs", "2", "--utility-queries", "0"]
        + ["--out", str(d / "audit.jsonl")]
    )
    return d


def _report(logs, kind, *extra):
    out = logs / f"{kind}{'-'.join(extra)}.html"
    _run(["report", str(logs / f"{kind}.jsonl"), "--html", str(out), *extra])
    return out


def _result(logs) -> dict:
    """The score log's (only) example's result at its (only) λ."""
    lines = (logs / "score.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if '"result"' in line][0]["result"]["results"][0]


def _load(browser, path, tmp_path, name):
    page, session = browser.load(path.as_uri())
    assert page.errors == [], page.errors
    assert page.requests == [path.as_uri()]  # the file itself, nothing else
    assert browser.evaluate(session, "window.__pwned === undefined") is True
    png = browser.screenshot(session)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    (tmp_path / f"{name}.png").write_bytes(png)
    return session


def test_score_report_shows_private_text_literally_and_runs_nothing(browser, logs, tmp_path):
    path = _report(logs, "score")
    session = _load(browser, path, tmp_path, "score")
    body = browser.evaluate(session, "document.body.innerText")
    assert QUERY in body and RESPONSE.strip() in body
    heat = browser.evaluate(session, "document.querySelector('[data-role=heatmap]').textContent")
    assert heat == CONTEXT
    response = browser.evaluate(session, "document.querySelector('[data-role=response]').textContent")
    assert response == _result(logs)["response"] and RESPONSE in response  # token by token, shaded
    assert browser.evaluate(session, NOTHING_ACTIVE) == 0
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(logs / "score.jsonl").st_mode) == 0o600


def test_heatmap_shading_follows_the_logged_influences(browser, logs):
    """Every span of the context shows the largest logged τ_i of the n-grams covering it, darker
    means larger τ_i, and the log's top n-gram is at its step of the page's one scale."""
    ngrams = _result(logs)["ngrams"]
    session = browser.load(_report(logs, "score").as_uri())[1]
    spans = browser.evaluate(
        session,
        "[...document.querySelectorAll('[data-role=heatmap] .tok')]"
        ".map(s => [s.className, s.dataset.tip, s.dataset.chars])",
    )
    assert len(spans) >= len(ngrams) - 1
    shaded = []
    for cls, tip, chars in spans:
        a, b = map(int, chars.split())
        covering = [g for g in ngrams if g["char_start"] <= a and b <= g["char_end"]]
        best = max(covering, key=lambda g: g["influence"])
        assert float(re.search(r"τ_i = (-?[\d.]+) nats", tip).group(1)) == pytest.approx(best["influence"], abs=5e-5)
        assert ("above" in cls.split()) == bool(best["above_noise"])
        shaded.append((best["influence"], int(re.search(r"\bh(\d)\b", cls).group(1))))
    shaded.sort()
    assert [level for _, level in shaded] == sorted(level for _, level in shaded)  # monotone in τ_i
    top = max(max(g["influence"] for g in ngrams), *_result(logs)["token_influence"])  # the page's one scale
    assert shaded[-1] == (max(g["influence"] for g in ngrams), int(heat_class(shaded[-1][0], top)[1:]))


def test_audit_report_with_markup_in_labels_runs_nothing(browser, logs, tmp_path):
    path = _report(logs, "audit")
    session = _load(browser, path, tmp_path, "audit")
    body = browser.evaluate(session, "document.body.innerText")
    assert LABEL in body and "Trials per ε" in body
    assert browser.evaluate(session, "document.querySelectorAll('svg').length") >= 2  # ROC, histogram
    assert browser.evaluate(session, NOTHING_ACTIVE) == 0


@pytest.mark.parametrize("kind", ["score", "audit"])
def test_no_text_report_holds_no_private_text(browser, logs, tmp_path, kind):
    path = _report(logs, kind, "--no-text")
    raw = path.read_text(encoding="utf-8")
    secrets = ["Whitcombe", "lisinopril", "Larkspur", "meeting moved", "free prizes", *PAYLOADS, LABEL]
    leaked = [s for s in secrets if s in raw or html.escape(s, quote=True) in raw]
    assert leaked == [] and "sha256" in raw
    _load(browser, path, tmp_path, f"{kind}-no-text")


def test_no_text_needs_html():
    r = CliRunner().invoke(main, ["report", "x.jsonl", "--no-text"])
    assert r.exit_code == 2 and "--html" in r.output


@pytest.mark.parametrize("kind", ["score", "audit"])
def test_a_partial_log_is_reported_as_partial(browser, logs, tmp_path, kind):
    """A run that did not finish (no end line) renders what it has, marked partial."""
    lines = (logs / f"{kind}.jsonl").read_text(encoding="utf-8").splitlines()
    partial = tmp_path / f"{kind}-partial.jsonl"
    partial.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    out = tmp_path / f"{kind}-partial.html"
    r = CliRunner().invoke(main, ["report", str(partial), "--html", str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    session = _load(browser, out, tmp_path, f"{kind}-partial")
    assert browser.evaluate(session, "document.querySelectorAll('[data-partial]').length") == 1
    if kind == "audit":  # the trials so far are plotted, no estimates yet
        assert browser.evaluate(session, "document.querySelectorAll('svg').length") >= 2


def test_report_prints_one_headline_per_finished_run(logs):
    """The line a person reads first: the log's largest n-gram influence, or its strongest bound."""
    tau = max(g["influence"] for g in _result(logs)["ngrams"])
    r = CliRunner().invoke(main, ["report", str(logs / "score.jsonl")], catch_exceptions=False)
    assert f"score: largest n-gram influence {tau:.2f} nats in example at λ = 1" in r.stderr
    r = CliRunner().invoke(main, ["report", str(logs / "audit.jsonl"), "--json"], catch_exceptions=False)
    row = max(json.loads(r.stdout)["rows"], key=lambda row: row["epsilon_lower_bound"])
    assert f"certified ε ≥ {row['epsilon_lower_bound']:.3f} at 95% confidence" in r.stderr


def test_context_size_curve_is_plotted_with_its_numbers(browser, logs, tmp_path, monkeypatch):
    """A run with --context-sizes gets the curve of mean document influence against k, and its table
    (the run on the FakeBackend: the page is drawn from the log's numbers, whatever model wrote them)."""
    use_fake_models(monkeypatch)
    data = tmp_path / "d.jsonl"
    rows = [{"id": f"e{i}", "context": CONTEXT, "query": "What?", "response": f"Lisinopril {i} mg."} for i in (5, 10)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    log, out = tmp_path / "sizes.jsonl", tmp_path / "sizes.html"
    _run(["score", "--data", str(data), "--doc", "--context-sizes", "8,24", "--out", str(log)])
    _run(["report", str(log), "--html", str(out)])
    session = _load(browser, out, tmp_path, "sizes")
    assert browser.evaluate(
        session,
        "[...document.querySelectorAll('svg title')]"
        ".some(t => t.textContent === 'Document influence against context size')",
    )
    summary = [json.loads(line) for line in log.read_text().splitlines()][-1]["end"]["summary"]
    body = browser.evaluate(session, "document.body.innerText")
    for key in ("1.0@8", "1.0@24"):
        assert f"{summary[key]['document_influence']['mean']:.4g}" in body


SCREENSHOTS = REPO / "docs" / "img"
FIGURES = """Object.fromEntries([...document.querySelectorAll('figure')].filter(f => f.querySelector('svg')).map(f => {
  const t = f.nextElementSibling, svg = f.querySelector('svg');
  return [svg.querySelector('title').textContent, {
    width: svg.getBoundingClientRect().width,
    texts: [...svg.querySelectorAll('text')].map(x => x.textContent),
    lines: svg.querySelectorAll('path').length,
    diagonal: svg.querySelectorAll('line[stroke-dasharray="1 3"]').length,
    caption: (f.querySelector('figcaption') || {}).textContent || '',
    table: t && t.tagName === 'TABLE' ? [...t.rows].map(r => [...r.cells].map(c => c.textContent)) : null}];
}))"""


def _figures(browser, session) -> dict:
    """Each plot of the page by its title: its size, texts, lines, caption and the table right below it."""
    return browser.evaluate(session, FIGURES)


def _g(v) -> str:
    return f"{v:.4g}"  # how the report's tables print a number


def _readme_screenshot(browser, session, name: str, selector: str | None = None) -> None:
    """The README's picture of a report: an 880 × 640 viewport (about 50–90 KB), written into docs/img
    only when CTXLITE_UPDATE_SCREENSHOTS=1 (so a test run never dirties the tree)."""
    png = browser.viewport_screenshot(session, 880, 640, selector=selector)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[16:24] == (880).to_bytes(4, "big") + (640).to_bytes(4, "big")
    if os.environ.get("CTXLITE_UPDATE_SCREENSHOTS") == "1":
        (SCREENSHOTS / name).write_bytes(png)


@pytest.fixture(scope="module")
def plot_logs(tmp_path_factory):
    """Real runs small enough for the suite: a score run of one short example with a reference answer
    at λ = 1 and 1.5 (responses generated, 6 tokens; 4 16-grams), and an RNM audit at ε = 1 and 8 with a
    utility query (6 trials, 2 ensembles)."""
    d = tmp_path_factory.mktemp("plots")
    first = json.loads((REPO / "ctxlite" / "data" / "score_sample.jsonl").read_text(encoding="utf-8").splitlines()[0])
    note = first["context"]  # its header and its plan: the answer's facts in 54 tokens
    plan = note[note.index("Plan:") : note.index(". ", note.index("Plan:")) + 1]
    example = {k: first[k] for k in ("id", "query", "answer")} | {"context": f"{note[: note.index(', DOB')]}. {plan}"}
    (d / "note.jsonl").write_text(json.dumps(example) + "\n", encoding="utf-8")
    _run(
        ["score", "--data", str(d / "note.jsonl"), "--lam", "1,1.5", "--max-new-tokens", "6", "--min-new-tokens", "2"]
        + ["--ngram", "16", "--null-ablations", "1", "--out", str(d / "sweep.jsonl")]
    )
    _run(
        ["audit", "--data", str(REPO / "ctxlite" / "data" / "classify_sample.jsonl"), "--mechanism", "rnm"]
        + ["--temperature", "0", "--epsilon", "1,8", "--trials", "6", "--ensembles", "2", "--utility-queries", "1"]
        + ["--reference-runs", "1", "--out", str(d / "rnm.jsonl")]
    )
    return d


def _end(path):
    return json.loads(path.read_text(encoding="utf-8").splitlines()[-1])["end"]


def test_score_report_plots_the_sweep_utility_and_profiles_with_their_tables(browser, plot_logs, tmp_path):
    log = plot_logs / "sweep.jsonl"
    out = tmp_path / "sweep.html"
    _run(["report", str(log), "--html", str(out)])
    session = _load(browser, out, tmp_path, "sweep")
    figures = _figures(browser, session)
    assert all(f["width"] > 0 and f["table"] for f in figures.values()), figures  # drawn, numbers below
    summary = _end(log)["summary"]
    results = [json.loads(line) for line in log.read_text().splitlines() if '"result"' in line][0]["result"]["results"]
    assert [r["lam"] for r in results] == [1.0, 1.5] and all(r["utility"] for r in results)

    sweep = figures["Influence across the λ sweep"]
    assert sweep["lines"] == 2 and sweep["table"][0] == ["λ", "document influence", "largest τ_i"]
    assert sweep["table"][1:] == [
        [_g(r["lam"]), _g(r["document_influence"]), _g(r["max_ngram_influence"])] for r in results
    ]

    tradeoff = figures["Utility against influence across λ"]
    assert "ROUGE-L F" in tradeoff["texts"] and "mean document influence (nats)" in tradeoff["texts"]
    want = [[k, _g(s["document_influence"]["mean"]), _g(s["utility"]["mean"])] for k, s in summary.items()]
    assert [row[:3] for row in tradeoff["table"][1:]] == want

    response = figures["Mean τ_t at each response position"]
    assert response["lines"] == 2 and response["table"][0] == ["response token t", "λ = 1", "λ = 1.5"]
    assert len(response["table"]) - 1 == max(len(s["response_position_profile"]) for s in summary.values())
    assert response["table"][1][1] == _g(summary["1.0"]["response_position_profile"][0])
    ngram = figures["Mean τ_i at each n-gram start"]
    profile = summary["1.5"]["ngram_position_profile"]
    assert [row[0] for row in ngram["table"][1:]] == [str(s) for s in profile["starts"]]
    assert [row[2] for row in ngram["table"][1:]] == [_g(m) for m in profile["means"]]
    _readme_screenshot(browser, session, "report.png", selector='[data-lambda="1.5"]')


def test_audit_report_plots_bounds_against_epsilon_and_utility_with_their_tables(browser, plot_logs, tmp_path):
    log = plot_logs / "rnm.jsonl"
    out = tmp_path / "rnm.html"
    _run(["report", str(log), "--html", str(out)])
    session = _load(browser, out, tmp_path, "rnm")
    figures = _figures(browser, session)
    assert all(f["width"] > 0 and f["table"] for f in figures.values()), figures
    report = _end(log)["report"]
    rows = report["rows"]
    assert [r["epsilon"] for r in rows] == [1.0, 8.0] and report["settings"]["confidence"] == 0.95

    eps = figures["Empirical ε against theoretical ε"]
    legend = [
        "lower bound (95% conf.)",
        "point estimate",
        "GDP estimate (no bound)",
        "ε of pair (exact/upper)",
        "ε = ε",
    ]
    assert [t for t in eps["texts"] if t in legend] == legend and eps["diagonal"] == 2  # the line, its key
    assert "ε ≥ it with 95% confidence" in eps["caption"] and rows[0]["lower_bound_method"] in eps["caption"]
    assert "estimates, not bounds" in eps["caption"]
    assert eps["table"][0] == ["theoretical ε", *legend[:4]]
    for row, r in zip(eps["table"][1:], rows):
        assert row[:2] == [_g(r["epsilon"]), _g(r["epsilon_lower_bound"])]
        assert row[4] == _g(r["epsilon_upper_bound"])  # the pair's ε: for rnm an upper bound

    utility = figures["Privacy–utility trade-off"]
    assert utility["lines"] == 1 and utility["table"][0] == ["theoretical ε", report["utility_metric"]]
    assert utility["table"][1:] == [[_g(r["epsilon"]), _g(r["utility"])] for r in rows]

    settings = browser.evaluate(
        session,
        "[...document.querySelectorAll('h2')].find(h => h.textContent === 'Settings of the estimates')"
        ".nextElementSibling.innerText",
    )
    assert "confidence\t0.95" in settings and f"lower bound method\t{rows[0]['lower_bound_method']}" in settings
    _readme_screenshot(browser, session, "audit.png")


@pytest.fixture(scope="module")
def eps_log(tmp_path_factory):
    """A real ε sweep small enough for the suite: two sample notes cut to their first sentences, with their
    reference answers and no given response, at λ = 1 and 1.5 and ε = 1 and 4 (document level, 6 tokens)."""
    d = tmp_path_factory.mktemp("eps")
    lines = (REPO / "ctxlite" / "data" / "score_sample.jsonl").read_text(encoding="utf-8").splitlines()[:2]
    rows = []
    for line in lines:
        ex = json.loads(line)
        first = ex["context"][: ex["context"].index(". ", 160) + 1]
        rows.append({k: ex[k] for k in ("id", "query", "answer")} | {"context": first})
    (d / "notes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    args = ["score", "--data", str(d / "notes.jsonl"), "--lam", "1,1.5", "--epsilon", "4,1", "--doc"]
    args += ["--max-new-tokens", "6", "--min-new-tokens", "2", "--out", str(d / "eps.jsonl")]
    r = _run(args)
    return d / "eps.jsonl", args, r


def test_score_report_plots_influence_and_utility_against_epsilon(browser, eps_log, tmp_path):
    """--epsilon 4,1: a result per λ and ε in the log, an entry per λ and ε in the summary, and the report's
    privacy–utility plots across ε (a curve per λ) with the summary's numbers in the tables below them."""
    log, args, first = eps_log
    summary = _end(log)["summary"]
    assert list(summary) == ["1.0/eps=1.0", "1.0/eps=4.0", "1.5/eps=1.0", "1.5/eps=4.0"]
    assert "λ=1.5 ε=4: document influence" in first.stderr  # the summary lines name the ε
    records = [json.loads(line)["result"] for line in log.read_text().splitlines() if '"result"' in line]
    for rec in records:
        pairs = [(r["lam"], r["epsilon"], r["generation"]["epsilon"]) for r in rec["results"]]
        assert pairs == [(1.0, 1.0, 1.0), (1.0, 4.0, 4.0), (1.5, 1.0, 1.0), (1.5, 4.0, 4.0)]
    out = tmp_path / "eps.html"
    _run(["report", str(log), "--html", str(out)])
    session = _load(browser, out, tmp_path, "eps")
    figures = _figures(browser, session)
    assert all(f["width"] > 0 and f["table"] for f in figures.values()), figures

    influence = figures["Mean document influence against ε"]
    assert influence["lines"] == 2 and "λ = 1" in influence["texts"] and "λ = 1.5" in influence["texts"]
    assert "ε of ε-bounded CID" in influence["texts"] and "at most ε" in influence["caption"]
    assert influence["table"][0] == ["λ", "ε", "examples", "mean document influence", "95% CI low", "95% CI high",
                                     "realised ε mean", "realised ε max"]  # fmt: skip
    want = []
    for s in summary.values():
        d, e = s["document_influence"], s["realised_epsilon"]
        assert e["max"] <= s["epsilon"] + 1e-9
        want.append([_g(s["lam"]), _g(s["epsilon"]), "2", *map(_g, [d["mean"], *d["ci"], e["mean"], e["max"]])])
    assert influence["table"][1:] == want

    utility = figures["Mean utility against ε"]
    assert utility["lines"] == 2 and "ROUGE-L F" in utility["texts"]
    assert utility["table"][0] == ["λ", "ε", "mean ROUGE-L F", "95% CI low", "95% CI high", "examples"]
    assert utility["table"][1:] == [
        [_g(s["lam"]), _g(s["epsilon"]), _g(s["utility"]["mean"]), *map(_g, s["utility"]["ci"]), "2"]
        for s in summary.values()
    ]
    headings = browser.evaluate(session, "[...document.querySelectorAll('h3[data-epsilon]')].map(h => h.textContent)")
    assert headings == ["λ = 1 · ε = 1", "λ = 1 · ε = 4", "λ = 1.5 · ε = 1", "λ = 1.5 · ε = 4"] * 2

    compact = json.loads(CliRunner().invoke(main, ["report", str(log), "--json"], catch_exceptions=False).stdout)
    assert [(r["lam"], r["epsilon"]) for r in compact["examples"][0]["results"]] == [p[:2] for p in pairs]
    table = CliRunner().invoke(main, ["report", str(log)], catch_exceptions=False).stdout.splitlines()
    assert table[0].split()[:4] == ["example", "λ", "ε", "tokens"] and table[4].split()[1:3] == ["1.5", "4"]
    again = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)  # --resume: all four reused
    assert again.exit_code == 0 and json.loads(again.stdout)["reused"] == [r["id"] for r in records]
    other = CliRunner().invoke(main, [*args[:6], "1", *args[7:]])  # another ε sweep on the same log
    assert other.exit_code == 4 and "settings.epsilons" in other.output


@pytest.fixture(scope="module")
def two_examples(tmp_path_factory):
    """A score log of two examples, one copying a novel code from its context (large τ_i), one
    answering a fact the model knows (small τ_i)."""
    d = tmp_path_factory.mktemp("scale")
    rows = [
        {"id": "novel", "context": "Vault note. The vault code is 7351-QX-8842. Staff meet on Mondays.",
         "query": "What is the vault code?", "response": "The vault code is 7351-QX-8842."},
        {"id": "known", "context": "Geography note. Paris is the capital of France. The Seine runs through it.",
         "query": "What is the capital of France?", "response": "Paris."},
    ]  # fmt: skip
    (d / "two.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    _run(["score", "--data", str(d / "two.jsonl"), "--ngram", "4", "--out", str(d / "two.jsonl.log")])
    return d / "two.jsonl.log"


def _shades(page: str) -> list[tuple[int, float]]:
    """(shade level, τ) of every shaded token of a page: context n-grams (τ_i) and response tokens (τ_t)."""
    out = []
    for level, tip in re.findall(r'class="tok h(\d)[^"]*"[^>]*data-tip="([^"]*)"', page):
        out.append((int(level), float(re.search(r"τ_[it] = (-?[\d.]+) nats", html.unescape(tip)).group(1))))
    return out


def test_one_colour_scale_per_page_anchors_per_example_and_the_verdict_on_top(two_examples, logs, tmp_path):
    """Issue 24 §4: every example was shaded against its own maximum, so a known fact looked as dark
    as a novel one. One scale for the page (in every legend), an anchor per example, the verdict first."""
    out = tmp_path / "two.html"
    r = CliRunner().invoke(main, ["report", str(two_examples), "--html", str(out), "--fail-above-influence", "1000",
                                  "--json"])  # fmt: skip
    verdict = json.loads(r.stdout)["verdict"]["verdict"]
    page = out.read_text(encoding="utf-8")
    first = re.search(r"</h1>(<section[^>]*>)", page).group(1)
    assert 'data-role="verdict"' in first and f'data-verdict="{verdict}"' in first
    records = [json.loads(line) for line in two_examples.read_text(encoding="utf-8").splitlines()]
    results = {rec["key"]: rec["result"]["results"][0] for rec in records if "result" in rec}
    tau_max = {k: max(g["influence"] for g in res["ngrams"]) for k, res in results.items()}
    top = max(max(tau_max.values()), *(t for res in results.values() for t in res["token_influence"]))
    assert tau_max["known"] < tau_max["novel"] * 6 / 7, tau_max  # the premise: two different leaks
    legends = re.findall(r'<p class="legend">[^:]*: (.*?)</p>', page)
    assert len(legends) >= 3 and len(set(legends)) == 1  # the page's scale, then each heatmap's: all one
    assert f"largest influence on it, {top:.4g} nats" in page
    shades = _shades(page)
    assert shades and all(level == int(heat_class(tau, top)[1:]) for level, tau in shades)
    sections = re.findall(r'<section id="(example-\d+)" data-example="([^"]+)"', page)
    assert sections == [("example-1", "novel"), ("example-2", "known")]
    assert all(f'href="#{anchor}"' in page for anchor, _ in sections)
    novel, known = page.split('<section id="example-2"')  # the known fact's context is lighter than the novel one's
    darkest = [max(level for level, _ in _shades(part)) for part in (novel, known)]
    assert darkest[1] < darkest[0]
    audit_out = tmp_path / "audit.html"
    r = CliRunner().invoke(main, ["report", str(logs / "audit.jsonl"), "--html", str(audit_out),
                                  "--fail-above-epsilon", "1000", "--json"])  # fmt: skip
    first = re.search(r"</h1>(<section[^>]*>)", audit_out.read_text(encoding="utf-8")).group(1)
    assert f'data-verdict="{json.loads(r.stdout)["verdict"]["verdict"]}"' in first


def test_the_response_caption_defines_tau_t_as_the_table_shows_it():
    """The table shows τ_t ≥ 0 (the absolute log-ratio, summed to the document influence); the
    caption defined it without the absolute value. A response token whose log-probability falls
    with the context has a positive τ_t in the table and the caption says why."""
    from ctxlite.reporting.page import Redactor
    from ctxlite.reporting.score_page import _response

    one = result(token_influence=(0.5, 0.25), response="ab", response_token_chars=[(0, 1), (1, 2)])
    one.token_pmi = [-0.5, 0.25]
    out = _response(one, Redactor(False), 1.0)
    assert "τ_t = |log p(y_t | D) − log p(y_t | ∅)|" in out


def test_the_committed_reproduction_report_shows_every_claims_verdict(browser, tmp_path):
    """docs/reproduction/reproduce.html (``make reproduce``'s page, committed) opens offline without an
    error or a request, and its verdict table is the committed JSON's: every claim, in order, with its
    outcome and reason; a plot per claim that has a figure. Its picture in docs/img is the page's top."""
    page_path = REPO / "docs" / "reproduction" / "reproduce.html"
    claims = json.loads((page_path.parent / "reproduce.json").read_text(encoding="utf-8"))["claims"]
    session = _load(browser, page_path, tmp_path, "reproduction")
    rows = browser.evaluate(
        session,
        "[...document.querySelector('table').tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent))",
    )
    assert [r[:2] for r in rows] == [[c["id"], c["outcome"]] for c in claims]
    assert [r[3] for r in rows] == [c["reason"] for c in claims]
    plotted = browser.evaluate(session, "document.querySelectorAll('svg').length")
    assert plotted >= sum(1 for c in claims if c.get("figures"))
    _readme_screenshot(browser, session, "reproduction.png")
