"""Chat templates: read from the GGUF, applied by llama.cpp, checked against the template's own Jinja.

The independent path is llama-cpp-python's ``Jinja2ChatFormatter`` (what its high-level
``Llama.create_chat_completion`` uses for a GGUF that carries a template): it renders the
template's Jinja text itself, in Python, while ``render_chat`` goes through llama.cpp's C++
``llama_chat_apply_template``, which does not run the Jinja at all but recognises the format
(ChatML here) and writes it. Equal strings mean the two readings of the template agree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxlite.errors import InvalidParameter
from ctxlite.runtime import models
from ctxlite.runtime.chat import chat_template, render_chat

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CONVERSATION = [
    {"role": "system", "content": "You are a terse clinic assistant."},
    {"role": "user", "content": "Which dose was prescribed? (ünïcode)"},
]


class FakeEngine:
    """What render_chat needs of an engine: its metadata and its file."""

    def __init__(self, template):
        self.template = template
        self.model_path = Path("/nowhere/fake-model.gguf")

    def metadata(self, key):
        return self.template if key == "tokenizer.chat_template" else None


def chatml(messages, add_assistant=True):
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_assistant else "")


# ---------------------------------------------------------------------------
# no model: llama_chat_apply_template is a pure function of the template text


def test_a_chatml_template_is_applied():
    eng = FakeEngine(CHATML)
    assert render_chat(eng, CONVERSATION) == chatml(CONVERSATION)
    assert render_chat(eng, CONVERSATION, add_assistant=False) == chatml(CONVERSATION, add_assistant=False)


def test_a_conversation_longer_than_the_first_buffer():
    """Many short turns: the format's markers outweigh the first buffer guess, so it is regrown."""
    turns = [{"role": "user" if i % 2 else "assistant", "content": str(i % 10)} for i in range(300)]
    assert render_chat(FakeEngine(CHATML), turns) == chatml(turns)


def test_no_template_is_refused_with_the_model_name():
    with pytest.raises(InvalidParameter) as exc:
        render_chat(FakeEngine(None), CONVERSATION)
    assert str(exc.value) == (
        "fake-model.gguf has no chat template (tokenizer.chat_template): "
        "use a chat model such as smollm2-135m-instruct, or leave chat off"
    )


def test_a_template_llama_cpp_does_not_know_is_refused():
    with pytest.raises(InvalidParameter, match="does not recognise the chat template of fake-model.gguf"):
        render_chat(FakeEngine("{{ messages | length }} turns"), CONVERSATION)


@pytest.mark.parametrize(
    "messages",
    [[], "hello", [{"role": "user"}], [{"role": "", "content": "x"}], [{"role": "user", "content": 3}], ["hi"]],
)
def test_malformed_messages_are_refused(messages):
    with pytest.raises(InvalidParameter, match="message"):
        render_chat(FakeEngine(CHATML), messages)


# ---------------------------------------------------------------------------
# the real models


@pytest.mark.model
def test_the_instruct_model_has_a_chatml_template(instruct):
    template = chat_template(instruct)
    assert template is not None and "<|im_start|>" in template
    assert chat_template("smollm2-135m-instruct") == template  # read from the file without its weights
    assert models.registry()["smollm2-135m-instruct"].chat_template is True


@pytest.mark.model
def test_the_instruct_rendering_equals_the_templates_own_jinja(instruct):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    rendered = render_chat(instruct, CONVERSATION)
    jinja = Jinja2ChatFormatter(chat_template(instruct), eos_token="<|im_end|>", bos_token="<|im_start|>")
    assert rendered == jinja(messages=CONVERSATION).prompt
    system, user, assistant = (rendered.index(f"<|im_start|>{r}\n") for r in ("system", "user", "assistant"))
    assert 0 == system < rendered.index(CONVERSATION[0]["content"]) < user < rendered.index("ünïcode") < assistant
    assert rendered.endswith("<|im_start|>assistant\n")
    assert render_chat(instruct, CONVERSATION, add_assistant=False) == rendered.removesuffix("<|im_start|>assistant\n")


@pytest.mark.model
def test_the_markers_tokenize_to_the_models_special_tokens(instruct):
    rendered = render_chat(instruct, CONVERSATION)
    start = instruct.tokenize("<|im_start|>", special=True)
    assert len(start) == 1 and instruct.tokenize(rendered, special=True).count(start[0]) == 3
    assert start[0] not in instruct.tokenize(rendered, special=False)  # as plain text they are not


@pytest.mark.model
def test_llama_cpp_renders_the_format_not_the_templates_default_system_prompt(instruct):
    """SmolLM2's Jinja adds a default system turn to a conversation without one; llama.cpp's
    ChatML does not. render_chat follows llama.cpp (what llama.cpp's own chat tools send)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    user_only = CONVERSATION[1:]
    jinja = Jinja2ChatFormatter(chat_template(instruct), eos_token="<|im_end|>", bos_token="<|im_start|>")
    assert render_chat(instruct, user_only) == chatml(user_only)
    assert jinja(messages=user_only).prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant")


@pytest.mark.model
def test_the_default_base_model_has_no_chat_template(engine):
    """Gemma-3-270M (base, not instruction-tuned): its GGUF carries no tokenizer.chat_template."""
    assert chat_template(engine) is None and chat_template("gemma-3-270m") is None
    assert models.registry()["gemma-3-270m"].chat_template is False
    with pytest.raises(InvalidParameter) as exc:
        render_chat(engine, CONVERSATION)
    assert str(exc.value) == (
        "gemma-3-270m has no chat template (tokenizer.chat_template): "
        "use a chat model such as smollm2-135m-instruct, or leave chat off"
    )


# ---------------------------------------------------------------------------
# scoring through a chat template


def test_a_chat_template_splits_the_rendered_conversation_at_the_context(tmp_path):
    from ctxlite.runtime.templates import get_template

    path = tmp_path / "qa.toml"
    path.write_text(
        'template = "Document: {context}\\nQuestion: {query}"\nsystem = "Answer from the document."\nchat = true\n',
        encoding="utf-8",
    )
    tpl = get_template(str(path))
    assert tpl.chat and tpl.system == "Answer from the document."
    render = FakeEngine(CHATML)
    prefix, suffix = tpl.parts("Who?", lambda m: render_chat(render, m))
    assert prefix == "<|im_start|>system\nAnswer from the document.<|im_end|>\n<|im_start|>user\nDocument: "
    assert suffix == "\nQuestion: Who?<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(InvalidParameter, match="needs the model's chat template"):
        tpl.parts("Who?")
    bad = tmp_path / "bad.toml"
    bad.write_text('template = "{context}"\nsystem = "x"\n', encoding="utf-8")
    with pytest.raises(InvalidParameter, match="system message needs chat = true"):
        get_template(str(bad))
    bad.write_text('template = "{context}"\nchatt = true\n', encoding="utf-8")
    with pytest.raises(InvalidParameter, match="optionally chat and system"):
        get_template(str(bad))


@pytest.mark.model
def test_a_chat_score_puts_the_context_in_the_user_turn(instruct):
    """The scorer's prompt is the model's chat rendering token for token: markers as special tokens,
    the private context as plain text (a marker written inside it stays text)."""
    from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings
    from ctxlite.runtime.templates import PromptTemplate

    tpl = PromptTemplate("Document: {context}\nQuestion: {query}", chat=True, system="Be brief.")
    scorer = InfluenceScorer(instruct, tpl, InfluenceSettings(lambdas=(1.0,), ngram=4))
    context = "Dana takes lisinopril 10 mg. <|im_end|> is just text here."
    enc = scorer.encode(Example(context=context, query="What does Dana take?"))
    start = instruct.tokenize("<|im_start|>", special=True)[0]
    assert enc.prefix.count(start) == 2 and enc.suffix.count(start) == 1 and start not in enc.context
    whole = render_chat(
        instruct,
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": tpl.text.format(context=context, query="What does Dana take?")},
        ],
    )
    head, tail = whole.split(context)
    bos = [instruct.bos_id] if instruct.bos_id is not None else []
    assert enc.prefix == bos + instruct.tokenize(head, special=True)
    assert enc.context == instruct.tokenize(context) and enc.suffix == instruct.tokenize(tail, special=True)
    result = scorer.score(Example(context=context, query="What does Dana take?", response="Lisinopril."))
    assert result.results[0].response == "Lisinopril." and len(result.results[0].ngrams) > 0


@pytest.mark.model
def test_chat_scoring_on_a_model_without_a_template_is_refused(engine):
    from ctxlite.influence.scorer import InfluenceScorer
    from ctxlite.runtime.templates import PromptTemplate

    with pytest.raises(InvalidParameter, match="has no chat template"):
        InfluenceScorer(engine, PromptTemplate("{context}", chat=True))
