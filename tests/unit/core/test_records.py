"""Tests for ctxlite.records: JSONL input validation (every error names file:line)
and the append-only, resumable RecordLog (header, resume, refusal, torn lines)."""

import json
import os

import pytest

from ctxlite.chain import link
from ctxlite.errors import CtxliteError, DataError, OutputError
from ctxlite.records import Line, RecordLog, read_jsonl, read_run_log, read_text
from tests.diskfull import enospc_after


def write_lines(path, lines, newline_at_end=True):
    text = "\n".join(lines) + ("\n" if newline_at_end else "")
    path.write_text(text, encoding="utf-8")
    return path


def obj(**kw):
    return json.dumps(kw)


# ---------------------------------------------------------------------------
# read_jsonl: good input


def test_read_jsonl_returns_objects_with_their_line_numbers_and_skips_blank_lines(tmp_path):
    p = write_lines(tmp_path / "d.jsonl", [obj(context="a", id="1"), "", "   ", obj(context="b"), "\t"])
    lines = read_jsonl(p, required=["context"], strings=["context", "id"])
    assert lines == [Line(1, {"context": "a", "id": "1"}), Line(4, {"context": "b"})]


def test_read_jsonl_accepts_crlf_line_endings(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_bytes(b'{"context": "a"}\r\n\r\n{"context": "b"}\r\n')
    assert [(l.number, l.data["context"]) for l in read_jsonl(p, ["context"])] == [(1, "a"), (3, "b")]


def test_optional_string_field_may_be_absent_or_null(tmp_path):
    p = write_lines(tmp_path / "d.jsonl", [obj(context="a"), obj(context="b", response=None)])
    assert len(read_jsonl(p, ["context"], strings=["response"])) == 2


# ---------------------------------------------------------------------------
# read_jsonl: every error is a DataError naming file:line


def assert_data_error(path, where, *, required=("context",), strings=("context",), match=None):
    with pytest.raises(DataError) as info:
        read_jsonl(path, required=required, strings=strings)
    msg = str(info.value)
    assert where in msg, msg
    if match is not None:
        assert match in msg, msg
    return msg


def test_malformed_json_names_file_and_line(tmp_path):
    p = write_lines(tmp_path / "d.jsonl", [obj(context="a"), "", '{"context": "b"', obj(context="c")])
    assert_data_error(p, f"{p}:3:", match="malformed JSON")


@pytest.mark.parametrize("line, kind", [("[1, 2]", "list"), ('"text"', "str"), ("42", "int"), ("null", "NoneType")])
def test_non_object_line_names_file_line_and_type(tmp_path, line, kind):
    p = write_lines(tmp_path / "d.jsonl", [obj(context="a"), line])
    assert_data_error(p, f"{p}:2:", match=kind)


@pytest.mark.parametrize("record", [{"query": "q"}, {"context": None}, {"context": ""}, {"context": "  \n\t"}])
def test_missing_or_empty_required_field_names_file_line_and_field(tmp_path, record):
    p = write_lines(tmp_path / "d.jsonl", [obj(context="a"), obj(context="b"), json.dumps(record)])
    assert_data_error(p, f"{p}:3:", match="'context'")


@pytest.mark.parametrize("value, kind", [(3, "int"), (["a"], "list"), ({"a": 1}, "dict"), (True, "bool")])
def test_non_string_field_names_file_line_field_and_type(tmp_path, value, kind):
    p = write_lines(tmp_path / "d.jsonl", [obj(context="a"), json.dumps({"context": "b", "query": value})])
    msg = assert_data_error(p, f"{p}:2:", strings=("context", "query"), match="'query'")
    assert kind in msg


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_empty_file_is_a_data_error(tmp_path, content):
    p = tmp_path / "d.jsonl"
    p.write_bytes(content)
    assert_data_error(p, str(p), match="no records")


@pytest.mark.parametrize("bad_line", [1, 2, 5])
def test_non_utf8_bytes_report_the_right_line(tmp_path, bad_line):
    lines = [obj(context=f"line {i}").encode() for i in range(1, 7)]
    lines[bad_line - 1] = b'{"context": "caf\xe9"}'  # latin-1 e-acute
    p = tmp_path / "d.jsonl"
    p.write_bytes(b"\n".join(lines) + b"\n")
    msg = assert_data_error(p, f"{p}:{bad_line}:", match="not UTF-8")
    assert "0xe9" in msg


def test_missing_file_is_a_data_error(tmp_path):
    p = tmp_path / "nope.jsonl"
    assert_data_error(p, str(p), match="not found")


def test_directory_is_a_data_error(tmp_path):
    assert_data_error(tmp_path, str(tmp_path), match="directory")


def test_read_text_errors_are_ctxlite_errors_with_exit_code_4(tmp_path):
    with pytest.raises(CtxliteError) as info:
        read_text(tmp_path / "missing.txt", "context file")
    assert info.value.exit_code == 4
    assert "context file not found" in str(info.value)


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\u0085"])
def test_unicode_line_separators_inside_json_strings_are_data_not_line_breaks(tmp_path, sep):
    p = tmp_path / "d.jsonl"
    p.write_text(
        json.dumps({"context": f"a{sep}b"}, ensure_ascii=False) + "\n" + obj(context="c") + "\n", encoding="utf-8"
    )
    lines = read_jsonl(p, ["context"])
    assert [(l.number, l.data["context"]) for l in lines] == [(1, f"a{sep}b"), (2, "c")]


# ---------------------------------------------------------------------------
# RecordLog

PARAMS = {"ngram": 8, "lambdas": (0.5, 1.0), "template": "qa"}


@pytest.mark.hand_made_logs  # toy records of a score/audit kind, not a run's
def test_new_log_writes_the_header_first(tmp_path):
    p = tmp_path / "sub" / "run.jsonl"
    with RecordLog(p, PARAMS, kind="score-run") as log:
        assert len(log) == 0 and not log.done("x")
    lines = p.read_text(encoding="utf-8").splitlines()
    header = {
        "type": "score-run",
        "schema_version": 1,
        "identity": {"ngram": 8, "lambdas": [0.5, 1.0], "template": "qa"},
    }
    assert [json.loads(l) for l in lines] == [{**header, "chain": link(None, header)}]  # the chain starts here
    assert p.stat().st_mode & 0o777 == 0o600  # the log holds private text: owner-only


def test_append_then_reopen_with_same_params_resumes(tmp_path):
    p = tmp_path / "run.jsonl"
    with RecordLog(p, PARAMS) as log:
        log.append("ex-1", {"result": {"v": 1}})
        log.append("ex-2", {"result": {"v": 2}})
        assert log.done("ex-1") and len(log) == 2
    # each append is a durable line on disk
    assert len(p.read_text(encoding="utf-8").splitlines()) == 3
    with RecordLog(p, dict(PARAMS)) as log:
        assert log.done("ex-1") and log.done("ex-2") and not log.done("ex-3")
        assert len(log) == 2
        assert log.records["ex-2"] == {"key": "ex-2", "result": {"v": 2}}
        assert [r["key"] for r in log] == ["ex-1", "ex-2"]
        log.append("ex-3", {"result": {"v": 3}})
    with RecordLog(p, PARAMS) as log:
        assert sorted(log.records) == ["ex-1", "ex-2", "ex-3"]
    header = json.loads(p.read_text(encoding="utf-8").splitlines()[0])
    assert header["type"] == "run"  # the header was not rewritten or duplicated
    assert sum(1 for l in p.read_text(encoding="utf-8").splitlines() if '"type": "run"' in l) == 1


def test_tuple_and_list_params_are_the_same_params(tmp_path):
    p = tmp_path / "run.jsonl"
    RecordLog(p, {"lambdas": (1.0, 2.0)}).close()
    with RecordLog(p, {"lambdas": [1.0, 2.0]}) as log:
        assert len(log) == 0


@pytest.mark.parametrize(
    "changed, key",
    [
        ({"ngram": 4}, "ngram"),
        ({"template": "notes"}, "template"),
        ({"extra": 1}, "extra"),
        ({"lambdas": (1.0,)}, "lambdas"),
    ],
)
def test_reopen_with_different_params_is_refused_naming_the_key(tmp_path, changed, key):
    p = tmp_path / "run.jsonl"
    with RecordLog(p, PARAMS) as log:
        log.append("ex-1", {"v": 1})
    before = p.read_bytes()
    with pytest.raises(DataError) as info:
        RecordLog(p, {**PARAMS, **changed})
    msg = str(info.value)
    assert f"({key} differ)" in msg, msg
    others = set(PARAMS) - {key}
    assert not any(o in msg.split("different run")[1] for o in others), msg
    assert p.read_bytes() == before


def test_missing_key_counts_as_a_differing_param(tmp_path):
    p = tmp_path / "run.jsonl"
    RecordLog(p, PARAMS).close()
    with pytest.raises(DataError, match=r"\(ngram differ\)"):
        RecordLog(p, {k: v for k, v in PARAMS.items() if k != "ngram"})


@pytest.mark.hand_made_logs  # toy records of a score/audit kind, not a run's
def test_different_kind_is_refused(tmp_path):
    p = tmp_path / "run.jsonl"
    RecordLog(p, PARAMS, kind="score-run").close()
    with pytest.raises(DataError, match="not a ctxlite audit-run log"):
        RecordLog(p, PARAMS, kind="audit-run")


@pytest.mark.parametrize("partial", ['{"key": "ex-3", "result": {"v"', '{"key": "ex-3"}', "{"])
def test_torn_last_line_is_dropped_and_the_file_repaired(tmp_path, partial):
    p = tmp_path / "run.jsonl"
    with RecordLog(p, PARAMS) as log:
        log.append("ex-1", {"v": 1})
        log.append("ex-2", {"v": 2})
    good = p.read_text(encoding="utf-8")
    with open(p, "a", encoding="utf-8") as f:  # a crash mid-write: no newline
        f.write(partial)
    with RecordLog(p, PARAMS) as log:
        assert sorted(log.records) == ["ex-1", "ex-2"]
        assert not log.done("ex-3")
        assert p.read_text(encoding="utf-8") == good  # repaired before anything is appended
        log.append("ex-3", {"v": 3})
    lines = p.read_text(encoding="utf-8").splitlines()
    assert [json.loads(l).get("key") for l in lines] == [None, "ex-1", "ex-2", "ex-3"]
    with RecordLog(p, PARAMS) as log:
        assert log.records["ex-3"] == {"key": "ex-3", "v": 3}


def test_corrupt_record_in_the_middle_names_the_line(tmp_path):
    p = tmp_path / "run.jsonl"
    with RecordLog(p, PARAMS) as log:
        log.append("ex-1", {"v": 1})
    with open(p, "a", encoding="utf-8") as f:
        f.write("garbage\n" + json.dumps({"key": "ex-2"}) + "\n")
    with pytest.raises(DataError, match=f"{p}:3:"):
        RecordLog(p, PARAMS)


@pytest.mark.parametrize(
    "content",
    [
        "just some notes\n",
        '{"type": "other", "identity": {}}\n',
        '{"not": "a header"}\n',
        "\n",
        '{"type": "run", "params": {}}\n',
    ],
)
def test_a_file_that_is_not_a_log_is_refused(tmp_path, content):
    p = tmp_path / "notes.txt"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match="not a ctxlite run log"):
        RecordLog(p, PARAMS)
    assert p.read_text(encoding="utf-8") == content


def test_empty_existing_file_becomes_a_new_log(tmp_path):
    p = tmp_path / "run.jsonl"
    p.write_bytes(b"")
    RecordLog(p, PARAMS).close()
    assert json.loads(p.read_text(encoding="utf-8"))["type"] == "run"


def test_refusing_a_foreign_file_does_not_modify_it(tmp_path):
    p = tmp_path / "notes.txt"
    content = "important first line\nimportant last line without newline"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(DataError):
        RecordLog(p, PARAMS)
    assert p.read_text(encoding="utf-8") == content


@pytest.mark.parametrize("first", ["[1, 2, 3]", "42", '"hello"'])
def test_a_foreign_jsonl_file_with_non_object_first_line_is_a_data_error(tmp_path, first):
    p = tmp_path / "other.jsonl"
    p.write_text(first + "\n", encoding="utf-8")
    with pytest.raises(DataError):
        RecordLog(p, PARAMS)


@pytest.mark.parametrize("header", ['{"type": "run"}', '{"type": "run", "identity": 5}'])
def test_a_header_without_params_object_is_a_data_error(tmp_path, header):
    p = tmp_path / "run.jsonl"
    p.write_text(header + "\n", encoding="utf-8")
    with pytest.raises(DataError):
        RecordLog(p, PARAMS)


def test_nested_identity_differences_are_named_by_dotted_path(tmp_path):
    p = tmp_path / "run.jsonl"
    ident = {"model": {"sha256": "a"}, "settings": {"ngram": 8, "sampling": {"seed": 0}}}
    RecordLog(p, ident).close()
    changed = {"model": {"sha256": "b"}, "settings": {"ngram": 8, "sampling": {"seed": 1}}}
    with pytest.raises(DataError, match=r"\(model\.sha256, settings\.sampling\.seed differ\)"):
        RecordLog(p, changed)


def test_a_record_is_reused_only_for_its_own_input_hash(tmp_path):
    p = tmp_path / "run.jsonl"
    with RecordLog(p, PARAMS) as log:
        log.append("ex-1", {"v": 1}, input_hash="sha256:aa")
    with RecordLog(p, PARAMS) as log:
        assert log.get("ex-1", "sha256:aa")["v"] == 1
        assert log.get("ex-1", "sha256:bb") is None  # same key, other input: not this input's result
        log.append("ex-1", {"v": 2}, input_hash="sha256:bb")  # the recomputed record supersedes the old one
    with RecordLog(p, PARAMS) as log:
        assert log.get("ex-1", "sha256:bb")["v"] == 2 and log.get("ex-1", "sha256:aa") is None


def test_a_finished_read_only_log_can_be_read(tmp_path):
    p = tmp_path / "run.jsonl"
    with RecordLog(p, PARAMS) as log:
        log.append("ex-1", {"v": 1})
    with open(p, "a", encoding="utf-8") as f:
        f.write('{"key": "torn')  # a torn line too: cutting it needs write access, reading does not
    p.chmod(0o444)
    try:
        with RecordLog(p, PARAMS) as log:
            assert log.get("ex-1")["v"] == 1
            if os.geteuid() != 0:  # root may write anyway
                with pytest.raises(OutputError, match="cannot write the result log"):
                    log.append("ex-2", {"v": 2})
    finally:
        p.chmod(0o644)


@pytest.mark.parametrize("where", ["under_a_file", "directory"])
def test_an_unwritable_log_path_is_an_output_error(tmp_path, where):
    target = tmp_path / "file.txt"
    target.write_text("x", encoding="utf-8")
    p = target / "run.jsonl" if where == "under_a_file" else tmp_path
    with pytest.raises(OutputError, match="cannot write the result log") as info:
        RecordLog(p, PARAMS)
    assert info.value.exit_code == 7


@pytest.mark.hand_made_logs  # toy records of a score/audit kind, not a run's
def test_check_existing_ignores_only_the_named_paths(tmp_path):
    p = tmp_path / "run.jsonl"
    ident = {"settings": {"template_index": 0, "trials": 10}}
    RecordLog(p, ident, kind="audit").close()
    RecordLog.check_existing(
        p, {"settings": {"template_index": 3, "trials": 10}}, kind="audit", ignore=("settings.template_index",)
    )
    with pytest.raises(DataError, match=r"settings\.trials differ"):
        RecordLog.check_existing(
            p, {"settings": {"template_index": 3, "trials": 11}}, kind="audit", ignore=("settings.template_index",)
        )
    RecordLog.check_existing(tmp_path / "absent.jsonl", ident, kind="audit")  # nothing to check


def test_lone_surrogates_in_a_field_are_a_data_error_naming_the_field(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"context": "ok"}\n{"context": "bad \\ud800 text"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"d\.jsonl:2: field 'context' holds an unpaired surrogate"):
        read_jsonl(p, required=("context",))


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + b'{"context": "x"}\n')
    assert read_jsonl(p, required=("context",))[0].data == {"context": "x"}


def test_first_end_is_the_first_report_even_after_a_resume_reopened_the_run(tmp_path):
    """A re-report appends a new end line and a resume can append records after it (a partial run
    again): the first end line stays the log's first report, what a re-report is compared with."""
    from ctxlite.records import read_run_log

    path = tmp_path / "run.jsonl"
    with RecordLog(path, {"a": 1}) as log:
        log.append("k1", {"x": 1})
        log.finish({"report": 1})
        assert log.first_end == {"report": 1}
        log.finish({"report": 2})
        log.append("k2", {"x": 2})
    run = read_run_log(path)
    assert run.end is None and run.first_end == {"report": 1}
    with RecordLog(path, {"a": 1}) as log:
        assert log.end is None and log.first_end == {"report": 1}
        log.finish({"report": 3})
        assert (log.end, log.first_end) == ({"report": 3}, {"report": 1})


# ---------------------------------------------------------------------------
# the hash chain and the write lock (issue 25 §1, §2)


def _chained_log(p):
    with RecordLog(p, PARAMS) as log:
        log.append("ex-1", {"v": 1}, input_hash="sha256:aa")
        log.append("ex-2", {"v": 2}, input_hash="sha256:bb")
        log.finish({"examples": ["ex-1", "ex-2"]})
        return log.head


def _rewrite(p, edit, chain=False):
    from tests.logtools import edit_log

    edit_log(p, edit, chain)


def test_every_line_is_chained_to_the_one_before_and_the_head_is_the_last(tmp_path):
    from ctxlite.records import read_run_log

    p = tmp_path / "run.jsonl"
    head = _chained_log(p)
    lines = [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines()]
    previous = None
    for line in lines:
        body = {k: v for k, v in line.items() if k != "chain"}
        assert line["chain"] == link(previous, body)
        previous = line["chain"]
    run = read_run_log(p)
    assert run.chained and run.head == head == lines[-1]["chain"] and run.lines == 4
    assert run.records["ex-1"] == {"key": "ex-1", "input": "sha256:aa", "v": 1}  # read without the hash
    with RecordLog(p, PARAMS) as log:  # a resume continues the chain
        assert log.head == head
        log.append("ex-3", {"v": 3})
    assert read_run_log(p).head == json.loads(p.read_text(encoding="utf-8").splitlines()[-1])["chain"] != head


@pytest.mark.parametrize(
    "edit, line, what",
    [
        (lambda ls: [*ls[:1], {**ls[1], "v": 9}, *ls[2:]], 2, "record 'ex-1'"),  # a value edited
        (lambda ls: [ls[0], ls[2], ls[1], ls[3]], 2, "record 'ex-2'"),  # two records swapped
        (lambda ls: [ls[0], *ls[2:]], 2, "record 'ex-2'"),  # a record removed
        (lambda ls: [*ls[:3], {"key": "ex-9", "v": 9}, ls[3]], 4, "record 'ex-9'"),  # a record inserted
        (lambda ls: [*ls[:3], {"end": {"examples": ["ex-1"]}, "chain": ls[3]["chain"]}], 4, "the end line"),
        (lambda ls: [{**ls[0], "identity": {"ngram": 4}}, *ls[1:]], 1, "the header"),
    ],
)
def test_a_broken_chain_is_refused_naming_the_first_bad_line(tmp_path, edit, line, what):
    from ctxlite.records import read_run_log

    p = tmp_path / "run.jsonl"
    _chained_log(p)
    _rewrite(p, edit)
    before = p.read_bytes()
    with pytest.raises(DataError, match=rf"{p}:{line}: the hash chain breaks at {what}"):
        read_run_log(p)
    with pytest.raises(DataError, match=rf"{p}:{line}: the hash chain breaks at {what}"):
        RecordLog(p, PARAMS)
    assert p.read_bytes() == before


def test_a_record_held_twice_for_the_same_input_is_refused_even_when_rechained(tmp_path):
    from ctxlite.records import read_run_log

    p = tmp_path / "run.jsonl"
    _chained_log(p)
    _rewrite(p, lambda ls: [*ls[:3], {**ls[1], "v": 7}, ls[3]], chain=True)
    with pytest.raises(DataError, match=rf"{p}:4: duplicate record 'ex-1' \(already at line 2\)"):
        read_run_log(p)
    r = tmp_path / "audit.jsonl"  # audit records carry no input hash: any second one is a duplicate
    with RecordLog(r, PARAMS) as log:
        log.append("eps=inf/trial=0", {"z": 1})
    _rewrite(r, lambda ls: [*ls, {**ls[1], "z": 0}], chain=True)
    with pytest.raises(DataError, match=rf"{r}:3: duplicate record 'eps=inf/trial=0'"):
        read_run_log(r)
    # a record for another input supersedes (a changed example scored again): not a duplicate
    _chained_log(q := tmp_path / "q.jsonl")
    _rewrite(q, lambda ls: [*ls[:3], {**ls[1], "input": "sha256:cc", "v": 7}, ls[3]], chain=True)
    assert read_run_log(q).records["ex-1"]["v"] == 7


def test_a_log_without_a_chain_is_read_but_never_resumed(tmp_path):
    from ctxlite.records import read_run_log

    p = tmp_path / "old.jsonl"
    _chained_log(p)
    _rewrite(p, lambda ls: [{k: v for k, v in line.items() if k != "chain"} for line in ls])
    before = p.read_bytes()
    run = read_run_log(p)
    assert not run.chained and run.head is None and run.complete and sorted(run.records) == ["ex-1", "ex-2"]
    with pytest.raises(DataError, match="before ctxlite chained its logs .* never resumed"):
        RecordLog(p, PARAMS)
    with pytest.raises(DataError, match="before ctxlite chained its logs"):
        RecordLog.check_existing(p, PARAMS)
    _rewrite(p, lambda ls: [ls[0], {**ls[1], "chain": "sha256:00"}, *ls[2:]])  # half chained
    with pytest.raises(DataError, match=":2: a chained line in a log whose header has no chain"):
        read_run_log(p)
    p.write_bytes(before)
    assert p.read_bytes() == before


def test_the_write_lock_refuses_a_second_writer_naming_the_holder(tmp_path):
    from ctxlite.errors import LogInUse
    from ctxlite.lock import LogLock

    p = tmp_path / "run.jsonl"
    with RecordLog(p, PARAMS) as log:
        log.append("ex-1", {"v": 1})
        before = p.read_bytes()
        lock = tmp_path / "run.jsonl.lock"
        assert lock.read_text().strip() == str(os.getpid())
        with pytest.raises(LogInUse, match=rf"being written by another ctxlite run \(PID {os.getpid()}\)") as info:
            RecordLog(p, PARAMS)
        assert info.value.exit_code == 11 and p.read_bytes() == before
        link_path = tmp_path / "alias.jsonl"
        link_path.symlink_to(p)
        with pytest.raises(LogInUse):
            LogLock(link_path).acquire()  # the same log under another name takes the same lock
    assert not lock.exists()  # released with the log
    held = LogLock(p).acquire()
    with pytest.raises(LogInUse):
        RecordLog(p, PARAMS)
    with RecordLog(p, PARAMS, lock=held) as log:  # a lock the caller holds is used, and not released
        log.append("ex-2", {"v": 2})
    assert held.held and lock.exists()
    held.release()
    held.release()  # twice is harmless
    assert not lock.exists()


def test_a_stale_lock_file_does_not_block(tmp_path):
    from ctxlite.lock import LogLock

    p = tmp_path / "run.jsonl"
    (tmp_path / "run.jsonl.lock").write_text("999999\n")  # left by a holder that died
    with LogLock(p) as lock:
        assert lock.held and (tmp_path / "run.jsonl.lock").read_text().strip() == str(os.getpid())


@pytest.mark.hand_made_logs  # toy records of a score kind, not a run's
def test_a_log_is_resumed_only_in_the_format_it_was_written_in(tmp_path):
    p = tmp_path / "run.jsonl"
    with RecordLog(p, PARAMS, kind="score-run") as log:
        log.append("a", {"type": "example", "result": {}})
    with pytest.raises(DataError, match="is a log of format 1, this run writes format 2: choose another --out"):
        RecordLog(p, PARAMS, kind="score-run", schema_version=2)
    with pytest.raises(DataError, match="format 1, this run writes format 2"):
        RecordLog.check_existing(p, PARAMS, "score-run", schema_version=2)
    with RecordLog(p, PARAMS, kind="score-run") as log:  # the format it was written in: resumed
        assert log.done("a")


# ---------------------------------------------------------------------------
# a full disk (issue 46, 4): exit 7 in one line, finished records kept, no stale lock


def _lines(p):
    return p.read_bytes().split(b"\n")


def test_a_header_that_does_not_fit_leaves_no_log_and_no_lock(tmp_path, monkeypatch):
    p = tmp_path / "run.jsonl"
    enospc_after(monkeypatch, p, 40)  # part of the header
    with pytest.raises(OutputError, match="cannot write the result log .*: no space left on the device"):
        RecordLog(p, PARAMS)
    assert list(tmp_path.iterdir()) == []  # a torn header would make the re-run refuse 'not a log'


@pytest.mark.parametrize("at", ["record", "end line"])
def test_a_disk_filling_mid_run_keeps_the_finished_records(tmp_path, monkeypatch, at):
    """The line that does not fit is cut (a reader drops it anyway), the error is an OutputError, and
    closing the log after it raises nothing: closing re-flushed the buffered line and its OSError
    replaced the clean exit 7."""
    p = tmp_path / "run.jsonl"
    log = RecordLog(p, PARAMS)
    log.append("ex-1", {"v": 1})
    full = p.read_bytes()
    enospc_after(monkeypatch, p, 25)
    with pytest.raises(OutputError, match="no space left on the device") as info:
        log.append("ex-2", {"v": 2}) if at == "record" else log.finish({"examples": ["ex-1"]})
    assert info.value.exit_code == 7
    log.close()  # nothing left to flush, nothing raised
    assert p.read_bytes() == full and not (tmp_path / "run.jsonl.lock").exists()
    monkeypatch.undo()
    run = read_run_log(p)
    assert list(run.records) == ["ex-1"] and not run.complete and run.head == link_of_last(p)


def link_of_last(p) -> str:
    return json.loads(_lines(p)[-2])["chain"]
