"""The browser tests' set-up: where chromium cannot be had they skip, except under CI, where they fail."""

from __future__ import annotations

import pytest

from tests import browser


@pytest.mark.parametrize("ci", ["true", "1", "TRUE"])
def test_missing_chromium_fails_under_ci(monkeypatch, ci):
    monkeypatch.setattr(browser, "ensure_chromium", lambda: None)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="the HTML report tests must run in CI"):
        browser.require_chromium()


@pytest.mark.parametrize("ci", [None, "", "false"])
def test_missing_chromium_skips_elsewhere_with_the_reason(monkeypatch, ci):
    monkeypatch.setattr(browser, "ensure_chromium", lambda: None)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="chromium is not installed and cannot be installed here"):
        browser.require_chromium()


def test_an_installed_chromium_is_used(monkeypatch):
    monkeypatch.setattr(browser, "ensure_chromium", lambda: "/usr/bin/chromium")
    monkeypatch.setenv("CI", "true")
    assert browser.require_chromium() == "/usr/bin/chromium"
