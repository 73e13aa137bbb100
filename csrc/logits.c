/*
 * logits.c -- fused single-pass kernels over float32 logits rows
 * (logprob_gather, mixed_logprob, sample_rows).
 *
 * Design (see ctxlite_kernels.h for the contracts, simd.h for the
 * vector helpers):
 *
 *  - Blocked online log-sum-exp.  Each row is walked once, in pieces of at
 *    most CTX_BLOCK floats (L1-resident).  For a piece we take its maximum,
 *    move the running reference point up if the maximum grew (rescaling the
 *    running sum by one scalar exp), then add sum exp((x - max) / T) over the
 *    piece: exactly one exp per element, the piece read twice from L1 and
 *    once from memory.  Partial sums are float per piece, double across.
 *
 *  - exp_neg() is a branch-free Cephes-style expf (Cody-Waite range
 *    reduction, degree-6 polynomial, 2^n built in the exponent bits).  glibc
 *    expf does not vectorise without -ffast-math, which we cannot use (we
 *    need -inf and NaN semantics); this one is plain arithmetic and selects,
 *    so gcc vectorises it at -O3.
 *
 *  - Hot loops use GCC vector extensions CTX_LANES wide with per-lane
 *    accumulators (one zmm, two ymm or four xmm per clone): without
 *    -ffast-math gcc will neither reorder a scalar sum nor vectorise a
 *    float max reduction on its own.
 *
 *  - Banned tokens (e.g. EOS before min_new_tokens) are
 *    skipped by cutting the row into runs between the sorted banned ids, so
 *    the inner loops stay unmasked and vectorised and the vocabulary is
 *    never compacted: targets always index the full row.
 *
 *  - The row-level functions are compiled for AVX-512, AVX2+FMA and a
 *    portable baseline (gcc target_clones); the loader picks one per CPU.
 */
#include "ctxlite_kernels.h"
#include "simd.h"

/* ------------------------------------------------------------------------ */
/* Running log-sum-exp                                                      */
/* ------------------------------------------------------------------------ */

/* sum = sum_v exp((x_v - max) / T) over everything seen so far (raw units). */
typedef struct {
    double max;
    double sum;
} lse_state;

static const lse_state LSE_EMPTY = {-INFINITY, 0.0};

/* Move the reference point up to new_max, rescaling the partial sum. */
static inline void lse_raise(lse_state *s, double new_max, double t)
{
    if (new_max > s->max) {
        if (s->sum != 0.0)
            s->sum *= exp((s->max - new_max) / t);
        s->max = new_max;
    }
}

/* log sum_v exp(x_v / T); -inf when nothing finite was seen. */
static inline double lse_value(const lse_state *s, double t)
{
    return s->sum > 0.0 ? s->max / t + log(s->sum) : -INFINITY;
}

/* log softmax(x / T) at a logit value x (x = -inf gives -inf). */
static inline double lse_logprob(const lse_state *s, double x, double t)
{
    return x == -INFINITY ? -INFINITY : (x - s->max) / t - log(s->sum);
}

/* Max of a float block; *bad |= NaN or +inf present. */
CTX_INLINE float block_max_f32(const float *x, size_t n, int *bad)
{
    vf mx = vf_splat(-INFINITY);
    vf flags = {0};
    for (size_t i = 0; i < n; i += CTX_LANES) {
        const vf v = load_f32(x, i, n);
        mx = vf_select(v > mx, v, mx);
        flags = flag_nonfinite(flags, v);
    }
    *bad |= any_flagged(flags);
    return hmax_f32(mx);
}

/* sum exp((x - m) * inv_t) over a float block, all x <= m. */
CTX_INLINE double block_sumexp_f32(const float *x, size_t n, float m, float inv_t)
{
    vf acc = {0};
    for (size_t i = 0; i < n; i += CTX_LANES)
        acc += exp_neg((load_f32(x, i, n) - m) * inv_t);
    return hsum_f32(acc);
}

/* Same over a double block of mixed logits, all z <= m; z is padded with
 * -inf up to a multiple of CTX_LANES (see block_mix). */
CTX_INLINE double block_sumexp_f64(const double *z, size_t n, double m, double inv_t)
{
    vf acc = {0};
    for (size_t i = 0; i < n; i += CTX_LANES) {
        vd lo, hi;
        memcpy(&lo, z + i, sizeof lo);
        memcpy(&hi, z + i + CTX_HALF, sizeof hi);
        acc += exp_neg(pack_ps((lo - m) * inv_t, (hi - m) * inv_t));
    }
    return hsum_f32(acc);
}

/* Fold one float block into a running log-sum-exp; returns nonzero on NaN/+inf. */
CTX_INLINE int lse_add_block_f32(lse_state *s, const float *x, size_t n, double t)
{
    int bad = 0;
    const float bm = block_max_f32(x, n, &bad);
    if (bad)
        return 1;
    if (bm == -INFINITY)
        return 0; /* all -inf: contributes nothing */
    lse_raise(s, bm, t);
    s->sum += block_sumexp_f32(x, n, (float)s->max, (float)(1.0 / t));
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Mixing (context-influence decoding)                                      */
/* ------------------------------------------------------------------------ */

/*
 * lam*a + (1-lam)*b in double, with weights wa = lam, wb = 1 - lam.  A -inf
 * side with a zero weight is ignored (so lam = 0 gives b and lam = 1 gives a
 * exactly, never 0 * -inf = NaN); a -inf side with a non-zero weight makes
 * the mix -inf (for lam > 1 the weight of b is negative and would otherwise
 * turn -inf into +inf).  Written once for vectors; the scalar target lookup
 * uses a one-lane call through mix_value().
 */
CTX_INLINE vd mix_vec(vd a, vd b, double wa, double wb)
{
    const vd ninf = vd_splat(-INFINITY), zero = vd_splat(0.0);
    vd z = wa * vd_select(a == ninf, zero, a) + wb * vd_select(b == ninf, zero, b);
    if (wa != 0.0) /* loop-invariant branches; masks stay in select form */
        z = vd_select(a == ninf, ninf, z);
    if (wb != 0.0)
        z = vd_select(b == ninf, ninf, z);
    return z;
}

static inline double mix_value(float a, float b, double wa, double wb)
{
    return mix_vec(vd_splat(a), vd_splat(b), wa, wb)[0];
}

/* z[i] = mix of a[i], b[i] for i < n, -inf up to the next multiple of
 * CTX_LANES; returns max z; *bad |= NaN/+inf in a or b. */
CTX_INLINE double block_mix(const float *a, const float *b, size_t n, double wa, double wb,
                            double *z, int *bad)
{
    vd mx = vd_splat(-INFINITY);
    vf flags = {0};
    for (size_t i = 0; i < n; i += CTX_LANES) {
        const vf av = load_f32(a, i, n), bv = load_f32(b, i, n);
        flags = flag_nonfinite(flag_nonfinite(flags, av), bv);
        const vd zlo = mix_vec(lo_pd(av), lo_pd(bv), wa, wb);
        const vd zhi = mix_vec(hi_pd(av), hi_pd(bv), wa, wb);
        memcpy(z + i, &zlo, sizeof zlo);
        memcpy(z + i + CTX_HALF, &zhi, sizeof zhi);
        mx = vd_select(zlo > mx, zlo, mx);
        mx = vd_select(zhi > mx, zhi, mx);
    }
    *bad |= any_flagged(flags);
    return hmax_pd(mx);
}

/*
 * Running max and min of d = a - b (exact in double).  IEEE does the -inf
 * bookkeeping for us: a = b = -inf gives NaN, which never wins a comparison
 * (both q are 0 there, so pmi is undefined and the token is skipped); exactly
 * one -inf gives d = +-inf, which makes max |pmi| = +inf as it should.
 */
CTX_INLINE void block_diff_range(const float *a, const float *b, size_t n,
                                 double *dmax, double *dmin)
{
    vd hi = vd_splat(*dmax), lo = vd_splat(*dmin);
    for (size_t i = 0; i < n; i += CTX_LANES) {
        const vf av = load_f32(a, i, n), bv = load_f32(b, i, n);
        const vd d0 = lo_pd(av) - lo_pd(bv), d1 = hi_pd(av) - hi_pd(bv);
        hi = vd_select(d0 > hi, d0, hi);
        hi = vd_select(d1 > hi, d1, hi);
        lo = vd_select(d0 < lo, d0, lo);
        lo = vd_select(d1 < lo, d1, lo);
    }
    for (int j = 0; j < CTX_HALF; j++) {
        *dmax = hi[j] > *dmax ? hi[j] : *dmax;
        *dmin = lo[j] < *dmin ? lo[j] : *dmin;
    }
}

/* ------------------------------------------------------------------------ */
/* Walking a row around banned ids                                          */
/* ------------------------------------------------------------------------ */

/* Yields [lo, lo + len) pieces of at most CTX_BLOCK consecutive allowed ids. */
typedef struct {
    const int32_t *banned; /* strictly increasing, all in [0, V) */
    size_t n_banned;
    size_t next_ban; /* first banned id not yet passed */
    size_t pos;
    size_t V;
} piece_iter;

static inline piece_iter pieces(size_t V, const int32_t *banned, size_t n_banned)
{
    piece_iter it = {banned, n_banned, 0, 0, V};
    return it;
}

static inline int piece_next(piece_iter *it, size_t *lo, size_t *len)
{
    while (it->pos < it->V) {
        size_t end = it->next_ban < it->n_banned ? (size_t)it->banned[it->next_ban] : it->V;
        if (it->pos == end) { /* sitting on a banned id: step over it */
            it->pos++;
            it->next_ban++;
            continue;
        }
        /* pieces end on multiples of CTX_BLOCK, so after a banned id the
         * following pieces are back on the row's alignment */
        size_t hi = (it->pos / CTX_BLOCK + 1) * CTX_BLOCK;
        hi = hi < end ? hi : end;
        *lo = it->pos;
        *len = hi - it->pos;
        it->pos = hi;
        return 1;
    }
    return 0;
}

static int is_banned(int32_t id, const int32_t *banned, size_t n_banned)
{
    size_t lo = 0, hi = n_banned;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (banned[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n_banned && banned[lo] == id;
}

/* NaN/+inf at the banned positions (skipped by the pieces, still an error). */
static int banned_entries_bad(const float *x, const int32_t *banned, size_t n_banned)
{
    for (size_t k = 0; k < n_banned; k++)
        if (!(x[banned[k]] <= FLT_MAX))
            return 1;
    return 0;
}

/* Shared argument checks of the two logits kernels. */
static int check_logits_args(int64_t n_rows, int64_t V, double t, const int32_t *banned,
                             int64_t n_banned, const uint8_t *ban_row, int64_t *err_at)
{
    if (n_rows < 1 || V < 1 || V > INT32_MAX || n_banned < 0)
        return CTXLITE_ERR_BAD_SIZE;
    if (!(t > 0.0) || !(t <= DBL_MAX))
        return CTXLITE_ERR_BAD_TEMPERATURE;
    if (n_banned > 0 && (banned == NULL || ban_row == NULL))
        return CTXLITE_ERR_BAD_SIZE;
    for (int64_t k = 0; k < n_banned; k++)
        if (banned[k] < 0 || banned[k] >= V || (k > 0 && banned[k] <= banned[k - 1])) {
            set_err(err_at, k);
            return CTXLITE_ERR_BAD_BANNED;
        }
    return CTXLITE_OK;
}

/* ------------------------------------------------------------------------ */
/* Row kernels (multiversioned)                                             */
/* ------------------------------------------------------------------------ */

CTX_MULTIVERSION
static int gather_row(const float *x, size_t V, const int32_t *banned, size_t n_banned,
                      double t, int32_t y, double *out)
{
    if (banned_entries_bad(x, banned, n_banned))
        return CTXLITE_ERR_NONFINITE;
    lse_state s = LSE_EMPTY;
    piece_iter it = pieces(V, banned, n_banned);
    size_t lo, n;
    while (piece_next(&it, &lo, &n))
        if (lse_add_block_f32(&s, x + lo, n, t))
            return CTXLITE_ERR_NONFINITE;
    if (!(s.sum > 0.0))
        return CTXLITE_ERR_EMPTY_ROW;
    const double xy = is_banned(y, banned, n_banned) ? -INFINITY : (double)x[y];
    *out = lse_logprob(&s, xy, t);
    return CTXLITE_OK;
}

CTX_MULTIVERSION
static int mixed_row(const float *a, const float *b, size_t V, const int32_t *banned,
                     size_t n_banned, double lam, double t, int32_t y, double *out_logprob,
                     double *out_max_abs_pmi)
{
    if (banned_entries_bad(a, banned, n_banned) || banned_entries_bad(b, banned, n_banned))
        return CTXLITE_ERR_NONFINITE;
    const double wa = lam, wb = 1.0 - lam;
    double z[CTX_BLOCK + CTX_LANES]; /* mixed logits of one piece, padded */
    lse_state sz = LSE_EMPTY, sa = LSE_EMPTY, sb = LSE_EMPTY;
    double dmax = -INFINITY, dmin = INFINITY;
    piece_iter it = pieces(V, banned, n_banned);
    size_t lo, n;
    while (piece_next(&it, &lo, &n)) {
        int bad = 0;
        double zm = block_mix(a + lo, b + lo, n, wa, wb, z, &bad);
        if (bad)
            return CTXLITE_ERR_NONFINITE;
        if (zm > -INFINITY) {
            lse_raise(&sz, zm, t);
            sz.sum += block_sumexp_f64(z, n, sz.max, 1.0 / t);
        }
        if (out_max_abs_pmi != NULL) {
            lse_add_block_f32(&sa, a + lo, n, t);
            lse_add_block_f32(&sb, b + lo, n, t);
            block_diff_range(a + lo, b + lo, n, &dmax, &dmin);
        }
    }
    if (!(sz.sum > 0.0))
        return CTXLITE_ERR_EMPTY_ROW;
    const double zy = is_banned(y, banned, n_banned) ? -INFINITY : mix_value(a[y], b[y], wa, wb);
    *out_logprob = lse_logprob(&sz, zy, t);

    if (out_max_abs_pmi != NULL) {
        if (!(sa.sum > 0.0) || !(sb.sum > 0.0))
            return CTXLITE_ERR_EMPTY_ROW;
        /* pmi(v) = (a_v - b_v)/T - (lse(a/T) - lse(b/T)) is monotone in a_v - b_v,
         * so its extremes sit at dmax and dmin.  Any +-inf difference makes the
         * answer +inf through these expressions; if no allowed token had a finite
         * difference then one of dmax/dmin is infinite and so is the answer. */
        const double c = lse_value(&sa, t) - lse_value(&sb, t);
        const double hi = fabs(dmax / t - c), lo_ = fabs(dmin / t - c);
        *out_max_abs_pmi = hi > lo_ ? hi : lo_;
    }
    return CTXLITE_OK;
}

/*
 * p = exp((x - m) / T) for one float block, 0 outside the window or on -inf;
 * summed, and written to p (padded to a multiple of CTX_LANES) unless NULL.
 */
CTX_INLINE double block_window_probs(const float *x, size_t n, float m, float inv_t, float neg_window,
                                     float *p)
{
    vf acc = {0};
    for (size_t i = 0; i < n; i += CTX_LANES) {
        const vf z = (load_f32(x, i, n) - m) * inv_t;
        /* select before exp: a select of exp's result made gcc keep the mask as
         * integers and run 6x slower */
        const vf e = exp_neg(vf_select(z >= vf_splat(neg_window), z, vf_splat(-INFINITY)));
        if (p != NULL)
            memcpy(p + i, &e, sizeof e);
        acc += e;
    }
    return hsum_f32(acc);
}

/*
 * Inverse-CDF draw from the windowed softmax (contract in the header).  Pass
 * 1 is the vectorised block max; pass 2 sums p block by block with the
 * vectorised exp and keeps the first CTX_SAMPLE_PIECES block sums; pass 3
 * adds those (recomputing, bit-identically, any beyond) until the block where
 * the running sum passes u * P, and walks that block's p in id order.  If
 * rounding inside the block leaves the walk short, the block's last token
 * with p > 0 is taken.
 */
#define CTX_SAMPLE_PIECES 1024 /* 2M tokens without a ban before sums are recomputed */
CTX_MULTIVERSION
static int sample_row(const float *x, size_t V, const int32_t *banned, size_t n_banned,
                      double t, double window, double u, int32_t *out)
{
    if (banned_entries_bad(x, banned, n_banned))
        return CTXLITE_ERR_NONFINITE;
    float m = -INFINITY;
    piece_iter it = pieces(V, banned, n_banned);
    size_t lo, n;
    while (piece_next(&it, &lo, &n)) {
        int bad = 0;
        const float bm = block_max_f32(x + lo, n, &bad);
        if (bad)
            return CTXLITE_ERR_NONFINITE;
        m = bm > m ? bm : m;
    }
    if (m == -INFINITY)
        return CTXLITE_ERR_EMPTY_ROW;
    if (t == 0.0) { /* greedy: first allowed id holding the max */
        it = pieces(V, banned, n_banned);
        while (piece_next(&it, &lo, &n))
            for (size_t i = lo; i < lo + n; i++)
                if (x[i] == m) {
                    *out = (int32_t)i;
                    return CTXLITE_OK;
                }
        return CTXLITE_ERR_EMPTY_ROW; /* unreachable */
    }
    const float inv_t = (float)(1.0 / t);
    const float neg_window = window < FLT_MAX ? (float)-window : -INFINITY;
    float p[CTX_BLOCK + CTX_LANES];
    double sums[CTX_SAMPLE_PIECES];
    double total = 0.0;
    size_t k = 0;
    it = pieces(V, banned, n_banned);
    for (; piece_next(&it, &lo, &n); k++) {
        const double block = block_window_probs(x + lo, n, m, inv_t, neg_window, NULL);
        if (k < CTX_SAMPLE_PIECES)
            sums[k] = block;
        total += block;
    }
    const double target = u * total;
    double acc = 0.0;
    it = pieces(V, banned, n_banned);
    for (k = 0; piece_next(&it, &lo, &n); k++) {
        const double block =
            k < CTX_SAMPLE_PIECES ? sums[k] : block_window_probs(x + lo, n, m, inv_t, neg_window, NULL);
        if (acc + block <= target) {
            acc += block;
            continue;
        }
        block_window_probs(x + lo, n, m, inv_t, neg_window, p);
        int32_t last = -1;
        for (size_t i = 0; i < n; i++) {
            if (p[i] > 0.0f) {
                last = (int32_t)(lo + i);
                acc += p[i];
                if (acc > target)
                    break;
            }
        }
        if (last >= 0) {
            *out = last;
            return CTXLITE_OK;
        }
    }
    /* u * P rounded past the last block sum: the last token with p > 0 */
    for (size_t i = V; i-- > 0;)
        if (!is_banned((int32_t)i, banned, n_banned) && ((double)x[i] - m) * inv_t >= neg_window &&
            x[i] > -INFINITY) {
            *out = (int32_t)i;
            return CTXLITE_OK;
        }
    return CTXLITE_ERR_EMPTY_ROW; /* unreachable: the max itself has p = 1 */
}

/* ------------------------------------------------------------------------ */
/* Public logits kernels                                                    */
/* ------------------------------------------------------------------------ */

int ctxlite_logprob_gather(const float *rows, int64_t n_rows, int64_t V,
                           const int32_t *targets, double temperature,
                           const int32_t *banned_ids, int64_t n_banned,
                           const uint8_t *ban_row, double *out, int64_t *err_at)
{
    int st = check_logits_args(n_rows, V, temperature, banned_ids, n_banned, ban_row, err_at);
    if (st != CTXLITE_OK)
        return st;
    for (int64_t r = 0; r < n_rows; r++) {
        if (targets[r] < 0 || targets[r] >= V) {
            set_err(err_at, r);
            return CTXLITE_ERR_BAD_INDEX;
        }
        const size_t nb = (n_banned > 0 && ban_row[r]) ? (size_t)n_banned : 0;
        st = gather_row(rows + (size_t)r * (size_t)V, (size_t)V, banned_ids, nb, temperature,
                        targets[r], &out[r]);
        if (st != CTXLITE_OK) {
            set_err(err_at, r);
            return st;
        }
    }
    return CTXLITE_OK;
}

int ctxlite_mixed_logprob(const float *a, const float *b, int64_t n_rows, int64_t V,
                          const int32_t *targets, double lam, double temperature,
                          const int32_t *banned_ids, int64_t n_banned,
                          const uint8_t *ban_row, double *out_logprob,
                          double *out_max_abs_pmi, int64_t *err_at)
{
    int st = check_logits_args(n_rows, V, temperature, banned_ids, n_banned, ban_row, err_at);
    if (st != CTXLITE_OK)
        return st;
    if (!(lam >= 0.0) || !(lam <= DBL_MAX))
        return CTXLITE_ERR_BAD_LAMBDA;
    for (int64_t r = 0; r < n_rows; r++) {
        if (targets[r] < 0 || targets[r] >= V) {
            set_err(err_at, r);
            return CTXLITE_ERR_BAD_INDEX;
        }
        const size_t off = (size_t)r * (size_t)V;
        const size_t nb = (n_banned > 0 && ban_row[r]) ? (size_t)n_banned : 0;
        st = mixed_row(a + off, b + off, (size_t)V, banned_ids, nb, lam, temperature,
                       targets[r], &out_logprob[r],
                       out_max_abs_pmi != NULL ? &out_max_abs_pmi[r] : NULL);
        if (st != CTXLITE_OK) {
            set_err(err_at, r);
            return st;
        }
    }
    return CTXLITE_OK;
}

int ctxlite_sample_rows(const float *rows, int64_t n_rows, int64_t V, double temperature,
                        double window, const int32_t *banned_ids, int64_t n_banned,
                        const uint8_t *ban_row, const double *uniforms,
                        int32_t *out, int64_t *err_at)
{
    /* T == 0 (greedy) is allowed here; the shared check wants T > 0 */
    int st = check_logits_args(n_rows, V, temperature == 0.0 ? 1.0 : temperature, banned_ids,
                               n_banned, ban_row, err_at);
    if (st != CTXLITE_OK)
        return st;
    if (!(window > 0.0))
        return CTXLITE_ERR_BAD_WINDOW;
    for (int64_t r = 0; r < n_rows; r++) {
        if (!(uniforms[r] >= 0.0 && uniforms[r] < 1.0)) {
            set_err(err_at, r);
            return CTXLITE_ERR_BAD_UNIFORM;
        }
        const size_t nb = (n_banned > 0 && ban_row[r]) ? (size_t)n_banned : 0;
        st = sample_row(rows + (size_t)r * (size_t)V, (size_t)V, banned_ids, nb, temperature,
                        window, uniforms[r], &out[r]);
        if (st != CTXLITE_OK) {
            set_err(err_at, r);
            return st;
        }
    }
    return CTXLITE_OK;
}
