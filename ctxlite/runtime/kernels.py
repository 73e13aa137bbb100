"""Fast kernels over logits rows and mechanism outputs (the only module that calls C).

Hazardous-materials layer in the argon2-cffi sense: one function per C call.
Each wrapper checks and converts its inputs (C-contiguous arrays of the exact
C type; float32 logits are read in place, without a copy), allocates the
outputs, calls ``ctxlite.runtime._kernels.lib`` and hands a non-zero status to
one helper, :func:`_check`, which raises :class:`ctxlite.errors.InvalidParameter`
as ``function: bad value: reason``: the reason is the C side's
``ctxlite_strerror(status)``, the bad value is found from the C side's
``err_at`` in the arrays and scalars the wrapper passed.  The status codes
themselves come from the C header through ``lib``.

``tests/reference/kernels_reference.py`` has slow, obviously-right numpy versions of
every function here with the same signatures; the tests compare the two.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from ctxlite._version import __version__
from ctxlite.errors import InvalidParameter

try:
    from ctxlite.runtime._kernels import ffi, lib
except ImportError as exc:  # pragma: no cover - depends on the build
    raise ImportError(
        f"ctxlite's C kernels are not built ({exc}); rebuild with `pip install -e .` "
        "(or `python setup.py build_ext --inplace`)"
    ) from exc

_BUILT_VERSION = ffi.string(lib.ctxlite_kernels_version()).decode("ascii")
if _BUILT_VERSION != __version__:  # pragma: no cover - depends on the build
    raise ImportError(
        f"ctxlite._kernels was built for ctxlite {_BUILT_VERSION} but this is ctxlite "
        f"{__version__}: the compiled kernels are stale; rebuild with `pip install -e .`"
    )


def drop_log_address() -> int:
    """The address of ``ctxlite_drop_log``, a C log callback that drops llama.cpp's messages."""
    return int(ffi.cast("uintptr_t", ffi.addressof(lib, "ctxlite_drop_log")))


__all__ = [
    "drop_log_address",
    "MixedLogprob",
    "NoisyHistogram",
    "embed_aggregate",
    "logprob_gather",
    "mixed_logprob",
    "nearest_cosine",
    "noisy_histogram",
    "sample_rows",
]

_INT32 = np.iinfo(np.int32)


# --------------------------------------------------------------------------
# input conversion


def _float_array(x, name: str, ndim: int, dtype, *, floating_only: bool = False) -> np.ndarray:
    """``x`` as a C-contiguous array of ``dtype`` with ``ndim`` dimensions (no copy if it already is)."""
    arr = np.asarray(x)
    kind_ok = arr.dtype.kind == "f" or (not floating_only and arr.dtype.kind in "iu")
    if not kind_ok:
        wanted = "a floating" if floating_only else "a real numeric"
        raise InvalidParameter(f"{name} must have {wanted} dtype, got {arr.dtype}")
    if arr.ndim != ndim:
        raise InvalidParameter(f"{name} must be {ndim}-D, got shape {arr.shape}")
    if arr.size == 0:
        raise InvalidParameter(f"{name} must not be empty, got shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=dtype)


def _int32_array(x, name: str, length: int | None = None) -> np.ndarray:
    """``x`` as a 1-D C-contiguous int32 array; values must fit in int32."""
    arr = np.asarray(x)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.size and arr.dtype.kind not in "iu":
        raise InvalidParameter(f"{name} must have an integer dtype, got {arr.dtype}")
    if arr.ndim != 1:
        raise InvalidParameter(f"{name} must be 1-D, got shape {arr.shape}")
    if length is not None and arr.shape[0] != length:
        raise InvalidParameter(f"{name} must have length {length}, got {arr.shape[0]}")
    if arr.size:
        outside = (arr < _INT32.min) | (arr > _INT32.max)
        if outside.any():
            i = int(np.flatnonzero(outside)[0])
            raise InvalidParameter(f"{name}[{i}] = {arr[i]} is out of range")
    return np.ascontiguousarray(arr, dtype=np.int32)


def _ptr(ctype: str, arr: np.ndarray | None):
    """A C pointer into ``arr`` (NULL for None); the caller keeps ``arr`` alive."""
    return ffi.NULL if arr is None else ffi.from_buffer(ctype, arr)


def _ban_arrays(banned_ids, ban_rows, n_rows: int):
    """(sorted unique int32 banned ids or None, uint8 per-row flags or None)."""
    if banned_ids is None:
        if ban_rows is not None:
            raise InvalidParameter("ban_rows was given without banned_ids")
        return None, None
    banned = np.unique(_int32_array(banned_ids, "banned_ids"))
    if banned.size == 0:
        return None, None
    if ban_rows is None:
        rows = np.ones(n_rows, dtype=np.uint8)
    else:
        flags = np.asarray(ban_rows)
        if flags.dtype.kind not in "biu":
            raise InvalidParameter(f"ban_rows must be boolean or integer, got {flags.dtype}")
        if flags.shape != (n_rows,):
            raise InvalidParameter(f"ban_rows must have shape ({n_rows},), got {flags.shape}")
        rows = np.ascontiguousarray(flags != 0, dtype=np.uint8)
    return banned, rows


# --------------------------------------------------------------------------
# status codes -> InvalidParameter

# The scalar argument each scalar status is about (the same name in every wrapper).
_SCALAR_OF_STATUS = {
    lib.CTXLITE_ERR_BAD_TEMPERATURE: "temperature",
    lib.CTXLITE_ERR_BAD_LAMBDA: "lam",
    lib.CTXLITE_ERR_BAD_CLIP: "clip_norm",
    lib.CTXLITE_ERR_BAD_WINDOW: "window",
}


def _status_message(status: int) -> str:
    """The C side's one-line description of a kernel status code (``ctxlite_strerror``)."""
    return ffi.string(lib.ctxlite_strerror(int(status))).decode("utf-8")


def _bad_value(status: int, at: int, *, inputs, second, per_row: bool, index, banned, vocab, uniforms, scalars) -> str:
    """Name the value a failed call choked on, from ``err_at`` as the C header defines it per status."""
    if status == lib.CTXLITE_ERR_NONFINITE:
        if at < 0 and second is not None:  # -1 - i: element i of the second array
            name, arr = second
            return f"{name}[{-1 - at}] = {arr[-1 - at]}"
        if per_row:  # logits kernels report the row; -inf is allowed there
            for name, arr in inputs:
                bad = np.flatnonzero(np.isnan(arr[at]) | (arr[at] == np.inf))
                if bad.size:
                    return f"{name}[{at}, {bad[0]}] = {arr[at, bad[0]]}"
            return f"row {at}"  # pragma: no cover - C and numpy disagree on what is finite
        name, arr = inputs[0]  # a flat element index
        pos = np.unravel_index(at, arr.shape)
        return f"{name}[{', '.join(str(int(i)) for i in pos)}] = {arr[pos]}"
    if status == lib.CTXLITE_ERR_BAD_INDEX and index is not None:
        name, arr, bound = index
        return f"{name}[{at}] = {arr[at]}, not in [0, {bound})"
    if status == lib.CTXLITE_ERR_BAD_BANNED and banned is not None:
        return f"banned_ids contains {banned[at]} (V = {vocab})"
    if status == lib.CTXLITE_ERR_EMPTY_ROW:
        return f"row {at}"
    if status == lib.CTXLITE_ERR_BAD_UNIFORM and uniforms is not None:
        return f"uniforms[{at}] = {float(uniforms[at])}"
    if status in _SCALAR_OF_STATUS and _SCALAR_OF_STATUS[status] in scalars:
        name = _SCALAR_OF_STATUS[status]
        return f"{name} = {scalars[name]!r}"
    return f"status {status}, err_at {at}"


def _check(
    status: int,
    err_at,
    function: str,
    *,
    inputs=(),
    second=None,
    per_row: bool = False,
    index=None,
    banned=None,
    vocab=None,
    uniforms=None,
    scalars=None,
) -> None:
    """Raise :class:`InvalidParameter` for a non-zero status of the C kernel ``function``.

    The message is ``function: bad value: reason`` with the reason from
    ``ctxlite_strerror``. What the wrapper passes lets the bad value be named:
    ``inputs`` are the ``(name, array)`` pairs a NaN/inf may sit in (for
    ``per_row`` kernels ``err_at`` is a row of them, otherwise a flat element
    of the first), ``second`` the ``(name, array)`` that a negative ``err_at``
    points into, ``index`` the ``(name, array, bound)`` of targets or votes,
    ``banned`` / ``vocab`` the sorted banned ids and V, ``uniforms`` the
    draws, and ``scalars`` the scalar arguments by name.
    """
    if status == lib.CTXLITE_OK:
        return
    where = _bad_value(
        status,
        int(err_at[0]),
        inputs=inputs,
        second=second,
        per_row=per_row,
        index=index,
        banned=banned,
        vocab=vocab,
        uniforms=uniforms,
        scalars=scalars or {},
    )
    raise InvalidParameter(f"{function}: {where}: {_status_message(status)}")


# --------------------------------------------------------------------------
# logits kernels


def logprob_gather(logits: np.ndarray, targets, temperature: float = 1.0, banned_ids=None, ban_rows=None) -> np.ndarray:
    """Log-probability of one target token per row under a tempered softmax.

    ``out[r] = logits[r, y_r] / T - log sum_v exp(logits[r, v] / T)`` with
    ``y_r = targets[r]``, as float64.  On rows where ``ban_rows[r]`` is true
    (every row when ``ban_rows`` is None) the ``banned_ids`` tokens get
    probability 0 (logit -inf); the vocabulary is never compacted, so targets
    always index the full row, and a banned target gives ``-inf``.

    ``logits`` is 2-D (rows x vocabulary), float32 C-contiguous arrays are read
    in place; other floating dtypes are converted.  -inf logits are allowed;
    NaN, +inf, a row with no finite allowed logit, an out-of-range target or
    ``temperature <= 0`` raise :class:`~ctxlite.errors.InvalidParameter`.

    >>> logprob_gather(np.log(np.array([[0.25, 0.75]], np.float32)), [1]).round(6)
    array([-0.287682])
    """
    rows = _float_array(logits, "logits", 2, np.float32, floating_only=True)
    n_rows, V = rows.shape
    ys = _int32_array(targets, "targets", n_rows)
    banned, ban = _ban_arrays(banned_ids, ban_rows, n_rows)
    out = np.empty(n_rows, dtype=np.float64)
    err_at = ffi.new("int64_t *", -1)
    status = lib.ctxlite_logprob_gather(
        _ptr("float[]", rows),
        n_rows,
        V,
        _ptr("int32_t[]", ys),
        float(temperature),
        _ptr("int32_t[]", banned),
        0 if banned is None else banned.size,
        _ptr("uint8_t[]", ban),
        _ptr("double[]", out),
        err_at,
    )
    _check(
        status,
        err_at,
        "logprob_gather",
        inputs=(("logits", rows),),
        per_row=True,
        index=("targets", ys, V),
        banned=banned,
        vocab=V,
        scalars={"temperature": temperature},
    )
    return out


def sample_rows(
    logits: np.ndarray, uniforms, temperature: float, window: float, banned_ids=None, ban_rows=None
) -> np.ndarray:
    """One token id per row drawn from ``softmax(logits[r] / T)`` by inversion with ``uniforms[r]``.

    Only allowed tokens (see :func:`logprob_gather` for ``banned_ids`` /
    ``ban_rows``) with ``(x_v - max) / T >= -window`` take part, so the mass
    left out is below ``V * exp(-window)``; ``window = inf`` keeps all. With
    ``p_v = exp((x_v - max) / T)`` the result is the first id (in id order)
    whose running sum of ``p`` exceeds ``u * sum p``. ``temperature = 0`` is
    greedy (the lowest allowed id with the largest logit). ``uniforms`` must
    lie in ``[0, 1)``, e.g. ``rng.random(n_rows)``. Returns int32 ids.

    >>> sample_rows(np.log(np.array([[0.25, 0.75]], np.float32)), [0.3], 1.0, 30.0).tolist()
    [1]
    """
    rows = _float_array(logits, "logits", 2, np.float32, floating_only=True)
    n_rows, V = rows.shape
    u = np.ascontiguousarray(uniforms, dtype=np.float64)
    if u.shape != (n_rows,):
        raise InvalidParameter(f"uniforms must have shape ({n_rows},), got {u.shape}")
    if not temperature >= 0:
        raise InvalidParameter(f"temperature must be >= 0 (0 = greedy), got {temperature!r}")
    banned, ban = _ban_arrays(banned_ids, ban_rows, n_rows)
    out = np.empty(n_rows, dtype=np.int32)
    err_at = ffi.new("int64_t *", -1)
    status = lib.ctxlite_sample_rows(
        _ptr("float[]", rows),
        n_rows,
        V,
        float(temperature),
        float(window),
        _ptr("int32_t[]", banned),
        0 if banned is None else banned.size,
        _ptr("uint8_t[]", ban),
        _ptr("double[]", u),
        _ptr("int32_t[]", out),
        err_at,
    )
    _check(
        status,
        err_at,
        "sample_rows",
        inputs=(("logits", rows),),
        per_row=True,
        banned=banned,
        vocab=V,
        uniforms=u,
        scalars={"temperature": temperature, "window": window},
    )
    return out


@dataclass(frozen=True)
class MixedLogprob:
    """Result of :func:`mixed_logprob`: per-row log-probabilities and, if asked, max |pmi|."""

    logprob: np.ndarray
    max_abs_pmi: np.ndarray | None


def mixed_logprob(
    with_context,
    without_context,
    targets,
    lam: float,
    temperature: float = 1.0,
    banned_ids=None,
    ban_rows=None,
    want_max_abs_pmi: bool = False,
) -> MixedLogprob:
    """Context Influence Decoding log-probabilities (CID; Flemings et al., ACL 2025).

    With ``a = with_context[r]``, ``b = without_context[r]`` and ``y = targets[r]``:
    ``logprob[r] = log softmax((lam * a + (1 - lam) * b) / T)[y]``.  ``lam = 0``
    uses ``b / T`` and ``lam = 1`` uses ``a / T`` exactly; otherwise a -inf in
    either row makes the mixed logit -inf.  Bans work as in :func:`logprob_gather`.

    With ``want_max_abs_pmi``, ``max_abs_pmi[r] = max_v |log q_a(v) - log q_b(v)|``
    over allowed tokens, ``q_a = softmax(a / T)``, ``q_b = softmax(b / T)`` (both
    renormalised over the allowed tokens), the quantity in the epsilon-bounded
    CID rule ``lam_t = min(lam, eps / (2 max_v |pmi(v)|))`` (after Flemings et al.'s
    Theorem B.1; docs/design.md#cid).  Tokens where both
    rows are -inf are skipped; one where exactly one is -inf makes it +inf.

    >>> a = np.log(np.array([[0.5, 0.5]], np.float32)); b = np.log(np.array([[0.2, 0.8]], np.float32))
    >>> r = mixed_logprob(a, b, [0], lam=1.0, want_max_abs_pmi=True)
    >>> r.logprob.round(6), r.max_abs_pmi.round(6)
    (array([-0.693147]), array([0.916291]))
    """
    a = _float_array(with_context, "with_context", 2, np.float32, floating_only=True)
    b = _float_array(without_context, "without_context", 2, np.float32, floating_only=True)
    if a.shape != b.shape:
        raise InvalidParameter(f"with_context has shape {a.shape} but without_context has shape {b.shape}")
    n_rows, V = a.shape
    ys = _int32_array(targets, "targets", n_rows)
    banned, ban = _ban_arrays(banned_ids, ban_rows, n_rows)
    logprob = np.empty(n_rows, dtype=np.float64)
    max_abs_pmi = np.empty(n_rows, dtype=np.float64) if want_max_abs_pmi else None
    err_at = ffi.new("int64_t *", -1)
    status = lib.ctxlite_mixed_logprob(
        _ptr("float[]", a),
        _ptr("float[]", b),
        n_rows,
        V,
        _ptr("int32_t[]", ys),
        float(lam),
        float(temperature),
        _ptr("int32_t[]", banned),
        0 if banned is None else banned.size,
        _ptr("uint8_t[]", ban),
        _ptr("double[]", logprob),
        _ptr("double[]", max_abs_pmi),
        err_at,
    )
    _check(
        status,
        err_at,
        "mixed_logprob",
        inputs=(("with_context", a), ("without_context", b)),
        per_row=True,
        index=("targets", ys, V),
        banned=banned,
        vocab=V,
        scalars={"temperature": temperature, "lam": lam},
    )
    return MixedLogprob(logprob=logprob, max_abs_pmi=max_abs_pmi)


# --------------------------------------------------------------------------
# mechanism kernels: RNM and ESA of Wu et al. 2024 (DP in-context learning)


@dataclass(frozen=True)
class NoisyHistogram:
    """Result of :func:`noisy_histogram`."""

    counts: np.ndarray
    noisy_counts: np.ndarray
    argmax: int


def noisy_histogram(votes, n_classes: int, noise) -> NoisyHistogram:
    """Report-noisy-max over ensemble votes (RNM; Wu et al. 2024, "Privacy-preserving in-context learning").

    ``counts[j] = #{i : votes[i] == j}``, ``noisy_counts = counts + noise`` and
    ``argmax`` is the first index of the largest noisy count.  The caller draws
    ``noise`` (e.g. ``N(0, sigma^2)`` per class); this function adds no randomness.

    >>> noisy_histogram([2, 0, 2], 3, [0.0, 0.5, -0.25]).argmax
    2
    """
    n = operator.index(n_classes)
    if n < 1:
        raise InvalidParameter(f"n_classes must be >= 1, got {n}")
    vs = _int32_array(votes, "votes")
    nz = _float_array(noise, "noise", 1, np.float64)
    if nz.shape != (n,):
        raise InvalidParameter(f"noise must have shape ({n},), got {nz.shape}")
    counts = np.empty(n, dtype=np.int64)
    noisy = np.empty(n, dtype=np.float64)
    argmax = ffi.new("int64_t *")
    err_at = ffi.new("int64_t *", -1)
    status = lib.ctxlite_noisy_histogram(
        _ptr("int32_t[]", vs) if vs.size else ffi.NULL,
        vs.size,
        n,
        _ptr("double[]", nz),
        _ptr("int64_t[]", counts),
        _ptr("double[]", noisy),
        argmax,
        err_at,
    )
    _check(status, err_at, "noisy_histogram", inputs=(("noise", nz),), index=("votes", vs, n))
    return NoisyHistogram(counts=counts, noisy_counts=noisy, argmax=int(argmax[0]))


def embed_aggregate(embeddings, clip_norm: float, noise) -> np.ndarray:
    """Clipped, noised mean of ensemble embeddings (ESA; Wu et al. 2024).

    ``(sum_i e_i * min(1, C / ||e_i||_2) + noise) / m`` for the ``m`` rows
    ``e_i`` of ``embeddings``; a zero row stays zero.  Clipping bounds the L2
    sensitivity of the sum by ``2C``, under replacement and, with a fixed
    number of ensembles, under add/remove too (see ``ctxlite.privacy.calibration``).

    >>> embed_aggregate([[3.0, 4.0], [0.0, 0.5]], 1.0, [0.0, 0.0])
    array([0.3 , 0.65])
    """
    E = _float_array(embeddings, "embeddings", 2, np.float64)
    m, d = E.shape
    nz = _float_array(noise, "noise", 1, np.float64)
    if nz.shape != (d,):
        raise InvalidParameter(f"noise must have shape ({d},), got {nz.shape}")
    out = np.empty(d, dtype=np.float64)
    err_at = ffi.new("int64_t *", -1)
    status = lib.ctxlite_embed_aggregate(
        _ptr("double[]", E),
        m,
        d,
        float(clip_norm),
        _ptr("double[]", nz),
        _ptr("double[]", out),
        err_at,
    )
    _check(
        status,
        err_at,
        "embed_aggregate",
        inputs=(("embeddings", E),),
        second=("noise", nz),
        scalars={"clip_norm": clip_norm},
    )
    return out


def nearest_cosine(query, candidates) -> int:
    """Index of the candidate with the largest cosine similarity to ``query``.

    ``argmax_i <q, c_i> / (||q|| ||c_i||)``, lowest index on ties; a zero
    candidate (or a zero query) has similarity 0.  ESA releases the zero-shot
    candidate nearest to the noisy mean embedding (Wu et al. 2024).

    >>> nearest_cosine([1.0, 0.0], [[0.0, 1.0], [2.0, 0.1], [1.0, 1.0]])
    1
    """
    q = _float_array(query, "query", 1, np.float64)
    C = _float_array(candidates, "candidates", 2, np.float64)
    k, d = C.shape
    if q.shape != (d,):
        raise InvalidParameter(f"query must have shape ({d},) to match candidates {C.shape}, got {q.shape}")
    index = ffi.new("int64_t *")
    err_at = ffi.new("int64_t *", -1)
    status = lib.ctxlite_nearest_cosine(_ptr("double[]", q), _ptr("double[]", C), k, d, index, err_at)
    _check(status, err_at, "nearest_cosine", inputs=(("candidates", C),), second=("query", q))
    return int(index[0])
