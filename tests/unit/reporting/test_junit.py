"""ctxlite.reporting.junit: the JUnit file a CI server reads (issue 46, 4: a case a reader understands)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from importlib import resources

import pytest
from click.testing import CliRunner

from ctxlite.cli import main
from tests.fake_models import use_fake_models

CLASSIFY = str(resources.files("ctxlite").joinpath("data", "classify_sample.jsonl"))
GAME = ["--trials", "6", "--queries-per-trial", "2", "--reference-runs", "1", "--utility-queries", "0"]


@pytest.fixture(autouse=True)
def fake(monkeypatch):
    use_fake_models(monkeypatch)


def _cases(tmp_path, *args) -> list[str]:
    junit = tmp_path / "a.xml"
    r = CliRunner().invoke(main, ["audit", "--data", CLASSIFY, *GAME, *args, "--junit", str(junit)])
    assert r.exit_code == 0, r.output
    return [tc.get("name") for tc in ET.parse(junit).getroot().iter("testcase")]


@pytest.mark.parametrize(
    "mechanism, name",
    [("none", "mechanism=none (undefended, no epsilon)"), ("prompt-l1", "mechanism=prompt-l1 (heuristic, no epsilon)")],
)
def test_an_audit_without_a_theoretical_epsilon_names_its_mechanism(tmp_path, mechanism, name):
    """The issue's reproducer: the case of an undefended (or heuristic) audit was named ``epsilon=none``,
    which says nothing to the person reading the CI report."""
    assert _cases(tmp_path, "--mechanism", mechanism, "--n-ctx", "4096") == [name]


def test_a_dp_audits_cases_name_their_epsilon_and_say_when_it_is_no_noise(tmp_path):
    assert _cases(tmp_path, "--mechanism", "rnm", "--epsilon", "1,inf") == ["epsilon=1", "epsilon=inf (no noise)"]
