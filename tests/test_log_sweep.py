"""The schema sweep of fixture logs (tests/conftest.py) fails the run it is part of, with and
without pytest-xdist: a pytest-xdist worker's own exit status never reaches the controller, so a
sweep that only set it passed every ``make test``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.paths import REFERENCE, REPO


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_an_off_schema_fixture_log_fails_the_run(workers):
    probe = REFERENCE / "sweep_probe.py"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers, str(probe)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, run.stdout[-2000:]
    assert "logs that do not follow ctxlite/data/log.schema.json" in run.stdout and "2 passed, 1 error" in run.stdout
