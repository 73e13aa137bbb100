"""Tests for ctxlite.runtime.templates (the prompt convention of Flemings et al.'s code):
built-ins, parts/render, the empty-slot prompt, validation, and get_template by name / file /
literal."""

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxlite.errors import InvalidParameter
from ctxlite.runtime.templates import PromptTemplate, audit_templates, builtin_templates, get_template

FAST = settings(max_examples=60, deadline=None)


def fields(text):
    return [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]


# ---------------------------------------------------------------------------
# built-ins


def test_builtins_load_and_each_has_exactly_one_context_slot():
    b = builtin_templates()
    assert {"qa", "qa_inline", "summarize", "pubmedqa", "notes"} <= set(b)
    for name, text in b.items():
        assert fields(text).count("context") == 1, name
        assert text.count("{context}") == 1, name
        t = get_template(name)
        assert t.name == name and t.text == text


def test_audit_templates_load():
    assert isinstance(audit_templates(), dict) and audit_templates()


def test_qa_inline_matches_the_spec_example():
    t = get_template("qa_inline")
    assert t.render("D", "Q") == "Document: D. Question: Q. Answer:"
    # as the reference code's template_empty_input: without the context = the same template
    # with an empty slot, not the bare query
    assert t.render("", "Q") == "Document: . Question: Q. Answer:"


# ---------------------------------------------------------------------------
# parts / render


def test_parts_split_at_the_context_slot_with_the_query_filled_in():
    t = PromptTemplate("Document: {context}\nQuestion: {query}\nAnswer:")
    assert t.parts("Why?") == ("Document: ", "\nQuestion: Why?\nAnswer:")
    assert t.parts() == ("Document: ", "\nQuestion: \nAnswer:")
    assert t.uses_query


def test_query_before_the_context():
    t = PromptTemplate("Q: {query}\nC: {context}\nA:")
    assert t.parts("x") == ("Q: x\nC: ", "\nA:")
    assert t.render("ctx", "x") == "Q: x\nC: ctx\nA:"


def test_template_without_query_slot():
    t = PromptTemplate("Article: {context}\nSummary:")
    assert not t.uses_query
    assert t.render("abc", "ignored") == "Article: abc\nSummary:"


def test_escaped_braces_are_literal():
    t = PromptTemplate('{{"doc": "{context}", "q": "{query}"}}')
    assert t.render("D", "Q") == '{"doc": "D", "q": "Q"}'


braces_free = st.text(alphabet=st.characters(blacklist_characters="{}", blacklist_categories=("Cs",)), max_size=20)
anything = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)


@FAST
@given(braces_free, braces_free, braces_free, anything, anything)
def test_render_is_prefix_context_suffix_and_empty_slot_is_the_same_template(a, b, c, context, query):
    t = PromptTemplate(a + "{context}" + b + "{query}" + c)
    prefix, suffix = t.parts(query)
    assert prefix == a and suffix == b + query + c
    assert t.render(context, query) == a + context + b + query + c
    # the prompt without the context is the same template with an empty slot
    assert t.render("", query) == prefix + suffix == a + b + query + c
    # braces in the context or query are data, not format fields
    assert t.render("{query}", "{context}") == a + "{query}" + b + "{context}" + c


# ---------------------------------------------------------------------------
# validation


@pytest.mark.parametrize(
    "text",
    [
        "no slot at all",
        "{context} and {context}",
        "{context} {query} {query}",
        "{context} {document}",
        "{context} {}",
        "{context} {0}",
        "{context[0]}",
        "{context.attr}",
        "{query}",
        "",
    ],
)
def test_invalid_templates_are_rejected(text):
    with pytest.raises(InvalidParameter):
        PromptTemplate(text)


def test_error_names_the_template():
    with pytest.raises(InvalidParameter, match="'mine'"):
        PromptTemplate("no slot", name="mine")


@pytest.mark.parametrize(
    "text", ["{context} }", "Data: {context} {", "{context!r}", "{context:>5}", "{{context}} {context}"]
)
def test_malformed_templates_raise_invalid_parameter_at_construction(text):
    with pytest.raises(InvalidParameter):
        t = PromptTemplate(text)
        t.parts("q")  # anything accepted must also render
        raise ValueError("accepted a template that should have been rejected")


# ---------------------------------------------------------------------------
# get_template


def test_get_template_from_a_file(tmp_path):
    p = tmp_path / "my_template.txt"
    p.write_text("Notes: {context}\nAsk: {query}\n", encoding="utf-8")
    t = get_template(str(p))
    assert t.name == "my_template.txt"
    assert t.render("D", "Q") == "Notes: D\nAsk: Q\n"


def test_get_template_file_without_slot_is_invalid(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_text("no slot here", encoding="utf-8")
    with pytest.raises(InvalidParameter, match="bad.txt"):
        get_template(str(p))


def test_get_template_file_not_utf8(tmp_path):
    p = tmp_path / "latin1.txt"
    p.write_bytes(b"caf\xe9 {context}")
    with pytest.raises(InvalidParameter, match="not UTF-8"):
        get_template(str(p))


def test_get_template_from_a_literal():
    t = get_template("Ctx: {context} -> {query}")
    assert t.name == "custom"
    assert t.render("D", "Q") == "Ctx: D -> Q"


def test_get_template_literal_with_bad_field_is_invalid():
    with pytest.raises(InvalidParameter):
        get_template("{context} {nope}")


@pytest.mark.parametrize("name", ["qaa", "QA", "no-such-template", ""])
def test_unknown_name_is_invalid_and_lists_the_builtins(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no file of that name either
    with pytest.raises(InvalidParameter) as info:
        get_template(name)
    assert "qa_inline" in str(info.value)


def test_a_directory_is_not_a_template(tmp_path):
    with pytest.raises(InvalidParameter):
        get_template(str(tmp_path))
