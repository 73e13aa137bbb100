"""The FakeBackend keeps the contracts the model-free tests lean on: it has exactly the capabilities it
declares, its rows are a function of the token prefix alone (however they are asked for), and its
prefix reuse follows the engine's contract (and is refused the same way)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxlite.errors import InvalidParameter
from ctxlite.runtime.backend import (
    CAPABILITIES,
    Backend,
    CountsDecodes,
    DryRun,
    Embeddings,
    LogitRows,
    PrefixReuse,
    SampledCompletions,
    Streams,
    TeacherForcing,
    Tiling,
    Vocabulary,
    require,
)
from ctxlite.runtime.fake import DEFAULT_CAPABILITIES, EOS, FakeBackend

ALL = (Vocabulary, TeacherForcing, LogitRows, PrefixReuse, Streams, Embeddings, SampledCompletions, CountsDecodes)
TEXT = "Alice Smith, born 1970-01-02, account 4411-2233. Alice Smith is the account's owner."


@pytest.mark.parametrize(
    "capabilities",
    [
        DEFAULT_CAPABILITIES,
        (TeacherForcing,),
        (SampledCompletions,),
        (Embeddings,),
        (TeacherForcing, LogitRows),
        (*DEFAULT_CAPABILITIES, DryRun),
        ALL,
    ],
)
def test_it_has_exactly_the_capabilities_it_declares(capabilities):
    backend = FakeBackend(capabilities=capabilities)
    assert isinstance(backend, Backend)
    for protocol in (*ALL, DryRun):  # DryRun is in no set but one
        assert isinstance(backend, protocol) == (protocol in capabilities), protocol.__name__
    missing = [c for c in CAPABILITIES if c not in capabilities]
    if missing:
        with pytest.raises(InvalidParameter, match="the fake backend does not provide"):
            require(backend, missing[:1], "this test")


def _rows_one_by_one(backend, tokens, targets_from):
    return np.stack([backend.next_logits(tokens[:i]) for i in range(targets_from, len(tokens))])


def test_rows_are_a_function_of_the_prefix_however_they_are_asked_for():
    backend = FakeBackend(seed=4)
    tokens = backend.tokenize(TEXT, add_bos=True)
    rows = backend.logits_rows(tokens, 5)
    assert np.array_equal(rows, _rows_one_by_one(backend, tokens, 5))
    assert np.array_equal(backend.streams([tokens[:9]]).step([tokens[9]])[0], rows[10 - 5])  # the row after tokens[:10]
    seen = {}
    backend.load_base(tokens, 5, lambda view, first: seen.update({first + j: row.copy() for j, row in enumerate(view)}))
    assert sorted(seen) == list(range(len(tokens) - 5))  # in several chunks, each at its offset
    assert np.array_equal(np.stack([seen[j] for j in sorted(seen)]), rows)


def test_every_token_of_the_prefix_moves_every_later_row():
    backend = FakeBackend(seed=4)
    tokens = backend.tokenize(TEXT, add_bos=True)
    changed = tokens[:3] + [tokens[3] + 1] + tokens[4:]
    assert not np.any(np.all(backend.logits_rows(tokens, 4) == backend.logits_rows(changed, 4), axis=1))


def test_a_repeated_text_is_predicted_better_the_second_time():
    """The induction term: text seen in the prompt is copied (a context influences a response)."""
    backend = FakeBackend(seed=4)
    once = backend.tokenize("The code is 7f3a9c.", add_bos=True)
    twice = backend.tokenize("The code is 7f3a9c. The code is 7f3a9c.", add_bos=True)
    n = len(once) - 1
    assert backend.logprobs(twice, len(twice) - n).sum() > backend.logprobs(once, 1).sum() + 5


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_reuse_equals_a_decode_from_scratch(data):
    backend = FakeBackend(seed=2)
    base = backend.tokenize(TEXT, add_bos=True)
    targets_from = len(base) - 10
    backend.load_base(base, targets_from)
    for _ in range(3):  # several variants in any order: the cache keeps what each shares with the base
        a = data.draw(st.integers(1, targets_from - 4))
        b = data.draw(st.integers(a + 1, targets_from - 1))
        variant = base[:a] + base[b:]
        got = {}
        backend.score_variant(variant, a, targets_from - (b - a), lambda v, f: got.update({f: v.copy()}))
        rows = np.concatenate([got[f] for f in sorted(got)])
        assert np.array_equal(rows, backend.logits_rows(variant, targets_from - (b - a)))
        backend.load_base(base, targets_from)  # logits_rows cleared the cache, as the engine's does


def test_reuse_decodes_only_what_the_variant_does_not_share():
    backend = FakeBackend()
    base = backend.tokenize(TEXT, add_bos=True)
    backend.load_base(base, len(base) - 5)
    before = backend.tokens_decoded
    backend.score_variant(base[:30] + base[34:], 30, len(base) - 9, lambda v, f: None)
    assert backend.tokens_decoded - before == len(base) - 4 - 30
    before = backend.tokens_decoded
    backend.score_variant(base[:20] + base[24:], 20, len(base) - 9, lambda v, f: None, exact=True)
    assert backend.tokens_decoded - before == len(base) - 4


def test_a_variant_is_held_to_the_engines_contract():
    backend = FakeBackend()
    base = backend.tokenize(TEXT, add_bos=True)
    with pytest.raises(InvalidParameter, match="load_base"):
        backend.score_variant(base[:5] + base[6:], 5, 20, lambda v, f: None)
    backend.load_base(base, 30)
    with pytest.raises(InvalidParameter, match="must share its first"):
        backend.score_variant(base[:5] + base[6:], 7, 29, lambda v, f: None)  # it shares only 5
    with pytest.raises(InvalidParameter, match="targets_from"):
        backend.logprobs(base, 0)


def test_tiling_noise_moves_only_a_decode_in_another_tiling():
    backend = FakeBackend(tiling_noise=1e-3)
    base = backend.tokenize(TEXT, add_bos=True)
    canonical, tiled = {}, {}
    backend.load_base(base, 40, lambda v, f: canonical.update({f: v.copy()}))
    backend.score_variant(base, 30, 40, lambda v, f: tiled.update({f: v.copy()}), tiling=Tiling(3, 5))
    a, b = (np.concatenate([d[f] for f in sorted(d)]) for d in (canonical, tiled))
    assert 0 < np.abs(a - b).max() < 0.01
    backend.score_variant(base, 30, 40, lambda v, f: tiled.update({f: v.copy()}))
    assert np.array_equal(a, np.concatenate([tiled[f] for f in sorted(tiled)]))


@settings(deadline=None)  # no wall-clock threshold: the machine may be loaded
@given(st.text(max_size=60))
def test_text_round_trips_through_the_tokenizer(text):
    backend = FakeBackend()
    tokens = backend.tokenize(text)
    assert backend.detokenize(tokens) == text
    spans = backend.char_spans(tokens)
    assert len(spans) == len(tokens) and (not spans or spans[-1][1] == len(text))


def test_the_judges_words_are_single_tokens_that_differ():
    backend = FakeBackend()
    assert len(backend.tokenize(" Yes")) == len(backend.tokenize(" No")) == 1
    assert backend.tokenize(" Yes") != backend.tokenize(" No")


def test_sampled_completions_are_seeded_and_stop_at_the_end_of_generation():
    backend = FakeBackend(capabilities=(SampledCompletions,))
    prompt = backend.tokenize("Label:", add_bos=True)
    texts = backend.sample_texts([(prompt, 1), (prompt, 1), (prompt, 2)], 1.0, 12)
    assert texts[0] == texts[1] and all(len(t.encode()) <= 12 * 4 for t in texts)
    assert backend.sample_texts([(prompt, 1)], 0.0, 12) == backend.sample_texts([(prompt, 5)], 0.0, 12)
    assert EOS not in backend.tokenize("".join(texts))


def test_the_identity_names_the_tables_and_changes_with_them():
    a, b = FakeBackend(seed=1).identity(), FakeBackend(seed=2).identity()
    assert a["model"]["sha256"] != b["model"]["sha256"] and a["software"]["ctxlite"]
    assert FakeBackend(seed=1).identity() == a
