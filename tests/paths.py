"""Where things are, for tests in any folder of ``tests/``: the repository, the package's bundled
data, the C sources and the tests' own reference files."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
DATA = REPO / "ctxlite" / "data"
CSRC = REPO / "csrc"
GOLDEN = TESTS / "golden"
REFERENCE = TESTS / "reference"
