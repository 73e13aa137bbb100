"""Not collected by the suite (no ``test_`` prefix): tests/test_log_sweep.py runs it on purpose. A
module fixture writes an intact, chained log whose record does not follow the log schema."""

import pytest

from ctxlite.records import RecordLog


@pytest.fixture(scope="module")
def off_schema_log(tmp_path_factory):
    folder = tmp_path_factory.mktemp("off-schema")
    with RecordLog(folder / "run.jsonl", {"ngram": 8}, kind="score-run") as log:
        log.append("x", {"type": "example", "not_in_the_schema": 1})
    return folder


def test_uses_the_log(off_schema_log):
    assert (off_schema_log / "run.jsonl").is_file()


def test_another():
    pass
