"""Engine on the real default model: teacher forcing, prefix reuse vs exact, streams, errors."""

from __future__ import annotations

import numpy as np
import pytest

from ctxlite.errors import ContextOverflow, DecodeError, InvalidParameter
from ctxlite.influence.scorer import Example, InfluenceScorer, InfluenceSettings, ngram_starts
from ctxlite.runtime import kernels

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


def test_null_variant_reproduces_base_within_batch_shape_rounding(engine, score_examples):
    """s = L−1 (nothing removed; the last prompt token and y re-decoded in place).

    llama.cpp's CPU kernels round by batch shape (a token decoded at another
    row of its batch can differ in the last bits), so the null variant equals
    the base only up to that rounding on some builds: it was bit-exact on the
    build the suite was written on, and differs on one token by 0.15 nats on
    this machine's native build (issue 13 makes reuse canonical). The noise floor reports exactly this difference.
    """
    for d in score_examples[:6]:
        ex = dict(d, response=d.get("response") or "The answer is in the document above, as stated.")
        enc, y = _workload(engine, ex)
        toks, tf = enc.with_context + y, len(enc.with_context)
        base, null = _Gather(y), _Gather(y)
        engine.load_base(toks, tf, base)
        engine.score_variant(toks, tf - 1, tf, null)
        diff = np.abs(base.out - null.out)
        assert float(diff.max()) <= 0.5, (d["id"], float(diff.max()))  # rounding, not a wrong prefix
        assert np.mean(diff == 0) >= 0.9, (d["id"], diff)  # most tokens stay bit-identical


def test_reuse_path_matches_exact_path(with_response):
    """Every window at strides 1 and 8, scored in decreasing split order on the reuse path,
    reproduces the from-scratch decode bit for bit, and null ablations are exactly 0.

    With ``ROW_TILE = 1`` (no aligned restart) this test fails at stride 1: null ablations move
    the log-probs by 0.16 nats. Batch cuts (an 886-token context across the default ``n_batch`` of 512) are cut
    where a from-scratch decode cuts them; that was checked by hand, at 15 windows around the cut,
    and is too slow for the suite on a 2-core machine. (Copying the prefix into a second sequence instead moved
    summed log-probs by up to ~2 nats: see ``score_variant``.)
    """
    from ctxlite.runtime.engine import Engine, EngineConfig

    n = 8
    with Engine(None, EngineConfig(n_threads=1)) as engine:
        ex = dict(with_response[0])
        ex["context"] = " ".join(
            ex["context"].split()[:8]
        )  # ~30 tokens, 12 response tokens: every window stays affordable
        enc, y = _workload(engine, ex, n)
        y = y[:12]
        full, tf, p = enc.with_context, len(enc.with_context), len(enc.prefix)
        base = _Gather(y)
        engine.load_base(full + y, tf, base)
        for stride in (1, 8):
            starts = ngram_starts(len(enc.context), n, stride)[::-1]
            reuse, nulls, exact = [], [], []
            for c in starts:
                g = _Gather(y)
                engine.score_variant(full[: p + c] + full[p + c + n :] + y, p + c, tf - n, g)
                reuse.append(g.out)
                g = _Gather(y)
                engine.score_variant(full + y, p + c, tf, g)
                nulls.append(np.abs(g.out - base.out).sum())
            for c in starts:
                g = _Gather(y)
                engine.score_variant(full[: p + c] + full[p + c + n :] + y, p + c, tf - n, g, exact=True)
                exact.append(g.out)
            engine.load_base(full + y, tf, _Gather(y))  # the exact decodes replaced the base
            assert max(nulls) == 0.0, stride
            differ = [c for c, r, e in zip(starts, reuse, exact) if not np.array_equal(r, e)]
            assert differ == [], (stride, differ)
            assert max(np.abs(r - base.out).sum() for r in reuse) > 0.5  # the ablations do change the log-probs


def test_out_of_order_variants_are_still_correct(engine, with_response):
    """An increasing split order re-decodes the missing base tokens: slower, same numbers. The last
    split is the last cell of a row tile: its variant restarts at that tile's start, and a reuse
    one cell too long would restart after it, keeping the base's token where the variant has another."""
    from ctxlite.runtime.engine import ROW_TILE

    enc, y = _workload(engine, with_response[0])
    full, tf, p = enc.with_context, len(enc.with_context), len(enc.prefix)
    engine.load_base(full + y, tf)
    splits = (40, 0, 80, 3 * ROW_TILE - 1 - p)  # 0 then 80 forces re-decoding base tokens [p, p + 80)
    assert (p + splits[-1]) % ROW_TILE == ROW_TILE - 1 and full[p + splits[-1]] != full[p + splits[-1] + 4]
    got = []
    for c in splits:
        g = _Gather(y)
        engine.score_variant(full[: p + c] + full[p + c + 4 :] + y, p + c, tf - 4, g)
        got.append(g.out)
    for c, out in zip(splits, got):
        g = _Gather(y)
        engine.score_variant(full[: p + c] + full[p + c + 4 :] + y, p + c, tf - 4, g, exact=True)
        assert np.array_equal(out, g.out)


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


def _greedy_rows(engine, prompts, steps=5):
    """Logits rows of greedy lock-step streams: (steps + 1, n_streams, V)."""
    streams = engine.streams(prompts)
    out = [streams.last_logits.copy()]
    for _ in range(steps):
        streams.step(np.argmax(streams.last_logits, axis=1))
        out.append(streams.last_logits.copy())
    return np.array(out)


def test_streams_reuse_held_prompt(engine):
    """Held and prefix-sharing prompts reuse cells: repeated prompts give the identical rows, and for
    these short prompts (suffixes decoded in batches of the same shape) reuse is bit-exact too. In
    general it is not: llama.cpp's CPU kernels round by batch shape (see next_logits(exact=True))."""
    head = "Text: the sky is blue today\nLabel: objective\nText: "
    a = engine.tokenize(head + "I love this film so much\nLabel: subjective\nText: water boils", add_bos=True)
    b = engine.tokenize(head + "I hate rainy mornings\nLabel: subjective\nText: water boils", add_bos=True)
    fresh = {}
    for name, prompts in (("a", [a, a, a]), ("ba", [b, a, b])):
        engine.clear()
        fresh[name] = _greedy_rows(engine, prompts)
    engine.clear()
    fresh_b = engine.next_logits(b).copy()
    # now without clearing: the same prompts, a prompt that shares a prefix, after teacher forcing
    for name, prompts in (("a", [a, a, a]), ("ba", [b, a, b]), ("a", [a, a, a])):
        assert np.array_equal(_greedy_rows(engine, prompts), fresh[name]), name
    assert np.array_equal(engine.next_logits(b), fresh_b)
    assert np.array_equal(engine.next_logits(b), fresh_b)  # the held row itself
    engine.load_base(a, len(a) - 3)
    assert np.array_equal(engine.next_logits(b), fresh_b)
    assert np.array_equal(_greedy_rows(engine, [a, a, a]), fresh["a"])


def test_next_logits_exact_depends_on_the_prompt_alone(engine):
    toks = engine.tokenize("Text: The cat sat on the mat.\nLabel:", add_bos=True)
    fresh = engine.next_logits(toks, exact=True).copy()
    engine.next_logits(toks[:-3])  # another history: the prefix held, then the suffix reused
    engine.next_logits(toks)
    assert np.array_equal(engine.next_logits(toks, exact=True), fresh)


def _rows_moved_by_history(engine) -> list[int]:
    """The shared lengths k after which the row after a held prompt is not its empty-cache row: the
    cache held the prompt's first k tokens and then other ones, for every third k."""
    toks = engine.tokenize(
        "Clinic note. Patient: Dana Whitcombe, DOB 04/09/1971. Prescribed lisinopril 10 mg daily for her "
        "blood pressure; review in six weeks.\n\nQuestion: Who is the patient?\nAnswer:",
        add_bos=True,
    )
    other = engine.tokenize(" Billing: covered by insurance.")
    fresh = engine.next_logits(toks, exact=True).copy()
    moved = []
    for k in range(1, len(toks) + 1, 3):
        engine.next_logits(toks[:k] + other)  # the history: the first k tokens, then other ones
        moved += [k] if not np.array_equal(engine.next_logits(toks), fresh) else []
    return moved


def test_a_held_prompt_is_decoded_as_from_an_empty_cache_whatever_the_cache_held(engine):
    """``hold_prompt`` (every stream's first prompt: ``ctxlite serve``'s token loop) after the cache
    held another prompt sharing its first k tokens, for every third k: the row after it is the
    empty-cache decode's, bit for bit. Reusing all k cells (before: the suffix then sat at other
    rows of the kernels' tile) moved it, so a seeded answer depended on the requests before it.
    (With the default batch size; a batch size that is no multiple of ``ROW_TILE`` is not covered:
    at 22 the reused suffix's first batch is a few rows long, and that rounds otherwise too.)"""
    assert _rows_moved_by_history(engine) == []


def _top_logprobs(row, k=10):
    z = row.astype(np.float64)
    z -= z.max()
    lp = z - np.log(np.exp(z).sum())
    top = np.argsort(-lp)[:k]
    return top, lp[top]


def test_held_logits_keep_each_keys_prompt(engine):
    """Alternating prompts decode each once; rows agree with an empty-cache decode up to rounding."""
    head = "Text: the sky is blue today\nLabel: objective\nText: "
    a = engine.tokenize(head + "I love this film so much\nLabel: subjective\nText: water boils\nLabel:", add_bos=True)
    b = engine.tokenize(head + "I hate rainy mornings\nLabel: subjective\nText: water boils\nLabel:", add_bos=True)
    engine.clear()
    n0 = engine.tokens_decoded
    ra = engine.held_logits(a, "a")
    assert engine.tokens_decoded - n0 == len(a)
    rb = engine.held_logits(b, "b")
    shared = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert engine.tokens_decoded - n0 == len(a) + len(b) - shared  # b's prefix shares a's cells
    n1 = engine.tokens_decoded
    for _ in range(3):  # alternating costs nothing more
        assert np.array_equal(engine.held_logits(a, "a"), ra)
        assert np.array_equal(engine.held_logits(b, "b"), rb)
    assert engine.tokens_decoded == n1
    # extend a by one token: one token decoded, in a's sequence
    ext = engine.held_logits(a + [int(np.argmax(ra))], "a")
    assert engine.tokens_decoded == n1 + 1
    for got, toks in ((ra, a), (rb, b), (ext, a + [int(np.argmax(ra))])):
        want = engine.next_logits(toks, exact=True)
        (gt, gl), (wt, wl) = _top_logprobs(got), _top_logprobs(want)
        assert gt[0] == wt[0] and abs(gl[0] - wl[0]) < 0.5  # same best token, close log-prob
    # streams (sequence 0 users) forget every key; results stay correct
    engine.streams([a])
    again = engine.held_logits(a, "a")
    assert _top_logprobs(again)[0][0] == _top_logprobs(ra)[0][0]


def test_held_logits_evicts_by_use_and_capacity():
    from ctxlite.runtime.engine import Engine, EngineConfig

    with Engine(None, EngineConfig(n_ctx=64, kv_slots=2, n_seq_max=3, n_threads=1)) as eng:
        prompts = [eng.tokenize(f"Record {i}: " + "word " * 40, add_bos=True) for i in range(5)]
        rows = [eng.held_logits(p, i).copy() for i, p in enumerate(prompts)]  # 5 keys, 2 sequences, 128 cells
        assert len(eng.kv.keyed) <= 2
        for i in (4, 0, 3):  # evicted or not, every answer is the prompt's row
            got = eng.held_logits(prompts[i], i)
            assert _top_logprobs(got)[0][0] == _top_logprobs(rows[i])[0][0]
