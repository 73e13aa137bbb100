/*
 * simd.h -- internal to csrc/ (not part of the public header, not seen by cffi).
 *
 * What the kernel families share: the build switches (CTX_MULTIVERSION,
 * CTX_BLOCK, CTX_LANES), set_err(), and the CTX_LANES-wide vector helpers
 * used by the logits family -- a branch-free exp for u <= 0, NaN/+inf
 * flagging in float arithmetic, horizontal max/sum, and -inf-padded loads.
 * Everything here is static inline, so each translation unit gets its own
 * copy and the target_clones of the row kernels inline them per ISA.
 */
#ifndef CTXLITE_SIMD_H
#define CTXLITE_SIMD_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define CTX_MULTIVERSION \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CTX_MULTIVERSION
#endif

#define CTX_BLOCK 2048 /* floats per piece: 8 KiB, stays in L1 */
#define CTX_LANES 16   /* independent accumulators per reduction */

/* Store the offending row/element index where the caller asked for it. */
static inline void set_err(int64_t *err_at, int64_t where)
{
    if (err_at != NULL)
        *err_at = where;
}

/* ------------------------------------------------------------------------ */
/* Vectors                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * GCC/Clang vector extensions, CTX_LANES wide.  Each clone lowers them to its
 * own registers (one zmm, two ymm, four xmm), so the hot loops are vector
 * code by construction rather than by the auto-vectoriser's judgement (it
 * refuses scalar max reductions without -ffinite-math-only).
 */
typedef float vf __attribute__((vector_size(CTX_LANES * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(CTX_LANES * sizeof(int32_t))));
/* doubles come in half-width vectors of the same byte size (wider generic
 * vectors get scalarised by GCC's lowering) */
typedef double vd __attribute__((vector_size(CTX_LANES * sizeof(float))));
typedef int64_t vl __attribute__((vector_size(CTX_LANES * sizeof(float))));
typedef float vh __attribute__((vector_size(CTX_LANES / 2 * sizeof(float))));
#define CTX_HALF (CTX_LANES / 2)

#define CTX_INLINE static inline __attribute__((always_inline))

CTX_INLINE vf vf_splat(float x) { return (vf){0} + x; }
CTX_INLINE vd vd_splat(double x) { return (vd){0} + x; }
/* mask lanes are all-ones (true) or zero, as vector comparisons produce */
CTX_INLINE vf vf_select(vi mask, vf a, vf b) { return (vf)((mask & (vi)a) | (~mask & (vi)b)); }
CTX_INLINE vd vd_select(vl mask, vd a, vd b) { return (vd)((mask & (vl)a) | (~mask & (vl)b)); }

/* low / high half of v as doubles, and two double halves packed back to floats */
CTX_INLINE vd lo_pd(vf v)
{
    return __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), vd);
}
CTX_INLINE vd hi_pd(vf v)
{
    return __builtin_convertvector(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15), vd);
}
CTX_INLINE vf pack_ps(vd lo, vd hi)
{
    return __builtin_shufflevector(__builtin_convertvector(lo, vh), __builtin_convertvector(hi, vh),
                                   0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

CTX_INLINE double hmax_pd(vd v)
{
    double m = v[0];
    for (int j = 1; j < CTX_HALF; j++)
        m = v[j] > m ? v[j] : m;
    return m;
}

/* x[i .. i + CTX_LANES), lanes at or past n read as -inf, which is neutral
 * everywhere below (max ignores it, exp gives 0, mixing keeps it -inf). */
CTX_INLINE vf load_f32(const float *x, size_t i, size_t n)
{
    vf v;
    if (i + CTX_LANES <= n) {
        memcpy(&v, x + i, sizeof v);
    } else {
        for (size_t j = 0; j < CTX_LANES; j++)
            v[j] = i + j < n ? x[i + j] : -INFINITY;
    }
    return v;
}

/*
 * NaN/+inf detection in float arithmetic (GCC scalarises vector compare
 * masks that are kept as integers, but not float selects): -inf is mapped to
 * 0, then v * 0 is 0 for finite v and NaN exactly for NaN and +inf, so the
 * lanes of the accumulator stay 0 until a bad value passes.
 */
CTX_INLINE vf flag_nonfinite(vf flags, vf v)
{
    return flags + vf_select(v < vf_splat(-FLT_MAX), vf_splat(0.0f), v) * 0.0f;
}

CTX_INLINE int any_flagged(vf flags)
{
    int any = 0;
    for (int j = 0; j < CTX_LANES; j++)
        any |= flags[j] != 0.0f; /* NaN != 0 */
    return any;
}

/*
 * e^u for u <= 0 (u = -inf allowed).  u < -87 returns 0 (e^-87 ~ 1.6e-38 is
 * at the float normal limit; such terms cannot move a sum containing e^0).
 * Max error ~2 ulp.
 *   u = n ln2 + r, |r| <= ln2/2, n = round(u / ln2)
 *   e^u = 2^n * (1 + r + r^2 P(r))   (Cephes expf coefficients)
 * Rounding uses the 1.5 * 2^23 trick: magic + x lands on an integer and its
 * bit pattern minus magic's is that integer, so no float->int conversion.
 */
CTX_INLINE vf exp_neg(vf u)
{
    const vf magic = vf_splat(12582912.0f);
    const vi underflow = u < vf_splat(-87.0f);
    u = vf_select(underflow, vf_splat(-87.0f), u);

    vf fn = u * 1.44269504088896341f + magic;
    const vi n = (vi)fn - (vi)magic; /* n in [-126, 0] */
    fn -= magic;
    vf r = u - fn * 0.693359375f; /* ln2 split: high part exact in float ... */
    r = r - fn * -2.12194440e-4f; /* ... and the low remainder */

    vf p = vf_splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;

    const vf scale = (vf)((n + 127) << 23); /* 2^n, a normal float */
    return vf_select(underflow, vf_splat(0.0f), p * scale);
}

CTX_INLINE float hmax_f32(vf v)
{
    float m = v[0];
    for (int j = 1; j < CTX_LANES; j++)
        m = v[j] > m ? v[j] : m;
    return m;
}

CTX_INLINE double hsum_f32(vf v)
{
    double s = 0.0;
    for (int j = 0; j < CTX_LANES; j++)
        s += v[j];
    return s;
}

#endif /* CTXLITE_SIMD_H */
