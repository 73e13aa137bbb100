"""Engine on the real default model: teacher forcing, prefix reuse vs exact, streams, errors."""
from __future__ import annotations

import numpy as np
import pytest

from ctxlite import kernels
from ctxlite.errors import ContextOverflow, DecodeError, InvalidParameter
from ctxlite.influence import Example, InfluenceScorer, InfluenceSettings, ngram_starts

pytestmark = pytest.mark.model


def _log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def _workload(engine, example, n=4):
    scorer = InfluenceScorer(engine, "qa", InfluenceSettings(ngram=n))
    enc = scorer.encode(Example(example["context"], example["query"]))
    y = scorer.encode_response(enc, example["response"])
    return enc, y


class _Gather:
    """Callback collecting log p(y_t) from in-place logits views."""

    def __init__(self, targets):
        self.targets = np.asarray(targets, dtype=np.int32)
        self.out = np.full(len(targets), np.nan)

    def __call__(self, view, first):
        sl = slice(first, first + len(view))
        self.out[sl] = kernels.logprob_gather(view, self.targets[sl], 1.0)


def test_tokenize_roundtrip_and_spans(engine):
    text = "Patient: Marisol Quintero-Hale, MRN 4471-0392 — café"
    toks = engine.tokenize(text)
    assert engine.detokenize(toks) == text
    spans = engine.char_spans(toks)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(a <= b for a, b in spans) and all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
    assert engine.bos_id is not None and engine.eog_ids.size >= 1 and engine.n_vocab == 262144


def test_teacher_forcing_matches_numpy_and_is_deterministic(engine, with_response):
    enc, y = _workload(engine, with_response[0])
    toks, tf = enc.with_context + y, len(enc.with_context)
    lp = engine.logprobs(toks, tf)
    rows = engine.logits_rows(toks, tf)
    ref = _log_softmax(rows)[np.arange(len(y)), y]
    np.testing.assert_allclose(lp, ref, atol=1e-4)
    assert np.array_equal(lp, engine.logprobs(toks, tf)), "same tokens, same layout must be bit-identical"
    assert np.all(lp <= 0) and np.isfinite(lp).all()


def test_logits_copies_survive_later_decodes(engine, with_response):
    """No dangling views: copies stay valid after the buffer is overwritten."""
    enc, y = _workload(engine, with_response[0])
    toks, tf = enc.with_context + y, len(enc.with_context)
    rows = engine.logits_rows(toks, tf)
    keep = rows.copy()
    engine.logprobs(engine.tokenize("An unrelated sentence about the weather today."), 2)
    assert np.array_equal(rows, keep)


def test_null_variant_at_last_prompt_token_reproduces_base(engine, score_examples):
    """s = L−1 (nothing removed; only the last prompt token and y re-decoded).

    With the suffix's cells aligned (EngineConfig.kv_align) this reproduces the
    base bit-exactly in most layouts (measured 4 of these 6); the rest stay
    within the null-ablation noise floor. Without alignment it was 0 of 6.
    """
    hits = 0
    for d in score_examples[:6]:
        ex = dict(d, response=d.get("response") or "The answer is in the document above, as stated.")
        enc, y = _workload(engine, ex)
        toks, tf = enc.with_context + y, len(enc.with_context)
        base, null = _Gather(y), _Gather(y)
        engine.load_base(toks, tf, base)
        engine.score_variant(toks, tf - 1, tf, null)
        hits += np.array_equal(base.out, null.out)
        assert np.abs(base.out - null.out).sum() < 1.5
    assert hits >= 3


def test_reuse_path_matches_exact_path(engine, with_response):
    """Per-variant summed |Δ log p| within the measured noise floor; correlation ≥ 0.99.

    Noise floor: 2 × the largest null-ablation sum (re-decoding the unchanged
    suffix from split points), because reuse and exact can each be off by one
    floor in opposite directions. Measured: the worst ratio is ~0.6 of this.
    """
    n = 4
    enc, y = _workload(engine, with_response[0], n)
    full, tf, p = enc.with_context, len(enc.with_context), len(enc.prefix)
    base = _Gather(y)
    engine.load_base(full + y, tf, base)
    starts = ngram_starts(len(enc.context), n, n)[::3]
    reuse, nulls = [], []
    for c in starts:
        g = _Gather(y)
        engine.score_variant(full[: p + c] + full[p + c + n :] + y, p + c, tf - n, g)
        reuse.append(g.out)
    for c in starts[::2]:
        g = _Gather(y)
        engine.score_variant(full + y, p + c, tf, g)
        nulls.append(np.abs(g.out - base.out).sum())
    exact = []
    for c in starts:
        g = _Gather(y)
        engine.score_variant(full[: p + c] + full[p + c + n :] + y, p + c, tf - n, g, exact=True)
        exact.append(g.out)
    floor = 2 * max(max(nulls), 0.05)
    gaps = [np.abs(r - e).sum() for r, e in zip(reuse, exact)]
    assert max(gaps) <= floor, (gaps, nulls)
    infl_r = [np.abs(r - base.out).sum() for r in reuse]
    infl_e = [np.abs(e - base.out).sum() for e in exact]
    assert np.corrcoef(infl_r, infl_e)[0, 1] >= 0.99
    assert sum(np.array_equal(r, e) for r, e in zip(reuse, exact)) >= len(reuse) // 2


def test_variant_must_share_prefix(engine, with_response):
    enc, y = _workload(engine, with_response[0])
    toks, tf = enc.with_context + y, len(enc.with_context)
    engine.load_base(toks, tf)
    other = list(toks)
    other[3] = (other[3] + 1) % engine.n_vocab
    with pytest.raises(InvalidParameter):
        engine.score_variant(other, 10, tf, lambda v, f: None)
    with pytest.raises(InvalidParameter):
        engine.score_variant(toks, tf, tf, lambda v, f: None)  # row predicting y_0 would be skipped


def test_context_overflow_names_both_numbers(engine):
    toks = [engine.bos_id] + engine.tokenize("word " * (engine.config.n_ctx + 10))
    with pytest.raises(ContextOverflow, match=rf"{len(toks)} tokens.*{engine.config.n_ctx} tokens"):
        engine.logprobs(toks, 1)


def test_decode_failure_is_an_exception_not_an_abort(engine):
    with pytest.raises(DecodeError, match="llama_decode returned"):
        engine.logprobs([engine.bos_id, engine.n_vocab + 5, 3], 1)
    # the process and the engine are still usable
    assert np.isfinite(engine.logprobs(engine.tokenize("still alive", add_bos=True), 1)).all()


def test_streams_share_prompt_and_match_teacher_forcing(engine):
    prompt = engine.tokenize("The capital of France is", add_bos=True)
    streams = engine.streams([prompt, prompt, prompt])
    assert np.array_equal(streams.last_logits[0], streams.last_logits[2])
    nxt = engine.tokenize(" Paris")[0]
    rows = streams.step([nxt, nxt, nxt], active=[True, False, True])
    assert np.array_equal(rows[0], rows[2])
    tf_rows = engine.logits_rows(prompt + [nxt, nxt], len(prompt) + 1)
    lp_stream = _log_softmax(rows[0:1])[0, nxt]
    lp_tf = _log_softmax(tf_rows[0:1])[0, nxt]
    assert abs(lp_stream - lp_tf) < 0.2
