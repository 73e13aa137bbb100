/*
 * ctxlite_kernels.h -- the one public header of the C kernels behind
 * ctxlite.runtime.kernels (logits family in logits.c, mechanisms in
 * mechanisms.c, version and messages in status.c; simd.h is internal).
 *
 * Every kernel returns a status code (CTXLITE_OK or one of the
 * CTXLITE_ERR_* values below) and, on error, writes the offending row or
 * element index to *err_at when err_at is not NULL; ctxlite_strerror()
 * describes a code.  Python maps the codes to
 * ctxlite.errors.InvalidParameter; nothing here allocates or keeps state.
 *
 * Logits rows are float32, row-major, n_rows x V, read in place.  A -inf
 * logit is valid (probability 0); NaN or +inf anywhere is an error.
 *
 * The text between CDEF BEGIN and CDEF END is fed verbatim to cffi's cdef(),
 * so it must stay plain declarations and integer #defines.
 */
#ifndef CTXLITE_KERNELS_H
#define CTXLITE_KERNELS_H

#include <stdint.h>

/* CDEF BEGIN */
#define CTXLITE_OK                   0
#define CTXLITE_ERR_NONFINITE        1  /* NaN or +inf in an input; err_at = row (logits) or flat
                                           element, -1 - i for element i of a second array */
#define CTXLITE_ERR_BAD_INDEX        2  /* target or vote out of range; err_at = its position */
#define CTXLITE_ERR_BAD_SIZE         3  /* a size (n_rows, V, m, d, k, n_classes) is < 1 */
#define CTXLITE_ERR_BAD_TEMPERATURE  4  /* T not finite or T <= 0 */
#define CTXLITE_ERR_BAD_LAMBDA       5  /* lambda not finite or lambda < 0 */
#define CTXLITE_ERR_BAD_CLIP         6  /* clip norm C not finite or C <= 0 */
#define CTXLITE_ERR_EMPTY_ROW        7  /* every allowed logit of a row is -inf; err_at = row */
#define CTXLITE_ERR_BAD_BANNED       8  /* banned ids not strictly increasing in [0, V); err_at = position */
#define CTXLITE_ERR_BAD_WINDOW       9  /* sampling window NaN or <= 0 */
#define CTXLITE_ERR_BAD_UNIFORM     10  /* a uniform draw outside [0, 1); err_at = row */

/* Package version stamped at build time; checked by ctxlite.runtime.kernels on import. */
const char *ctxlite_kernels_version(void);

/* A static, non-empty one-line message for a status code (a generic one for
 * a code not listed above); never NULL. */
const char *ctxlite_strerror(int status);

/* A llama.cpp/ggml log callback that drops the message.  It is C so that no
 * Python runs inside llama.cpp's calls: a Ctrl-C landing in a Python callback
 * is printed and swallowed by ctypes, and the run would go on. */
void ctxlite_drop_log(int level, const char *text, void *user_data);

/*
 * out[r] = log softmax(rows[r] / T)[targets[r]].
 * On rows with ban_row[r] != 0 the tokens banned_ids[0..n_banned) get
 * probability 0 (their logits count as -inf); the vocabulary is never
 * compacted, so targets index the full row.  A target that is banned on its
 * row (or whose logit is -inf) yields out[r] = -inf.
 * banned_ids must be strictly increasing; banned_ids/ban_row may be NULL
 * when n_banned == 0.
 */
int ctxlite_logprob_gather(const float *rows, int64_t n_rows, int64_t V,
                           const int32_t *targets, double temperature,
                           const int32_t *banned_ids, int64_t n_banned,
                           const uint8_t *ban_row,
                           double *out, int64_t *err_at);

/*
 * Context-influence mixing (Flemings et al., ACL 2025):
 *   z = (lam * a + (1 - lam) * b) / T,   out_logprob[r] = log softmax(z)[y_r]
 * with a = with-context row, b = without-context row.  lam == 0 gives z = b/T
 * and lam == 1 gives z = a/T exactly; otherwise a -inf in a or b makes z -inf.
 * If out_max_abs_pmi is not NULL it receives max_v |log q_a(v) - log q_b(v)|
 * over allowed v, q_a = softmax(a/T), q_b = softmax(b/T), both renormalised
 * over the allowed tokens.  Tokens with a = b = -inf are skipped;
 * a token with exactly one of a, b = -inf makes the maximum +inf.
 */
int ctxlite_mixed_logprob(const float *a, const float *b, int64_t n_rows, int64_t V,
                          const int32_t *targets, double lam, double temperature,
                          const int32_t *banned_ids, int64_t n_banned,
                          const uint8_t *ban_row,
                          double *out_logprob, double *out_max_abs_pmi,
                          int64_t *err_at);

/*
 * One token per row from softmax(rows[r] / T) by inversion:
 * over the allowed tokens v (not banned on the row) whose
 * z_v = (x_v - max) / T >= -window (max over allowed tokens; window = +inf
 * keeps every token), with p_v = exp(z_v) and P = sum p_v,
 *   out[r] = the first v in id order with sum_{u <= v} p_u > uniforms[r] * P.
 * The window leaves out mass below V * e^-window (2e-8 for V = 262144 and
 * window = 30).  p and the running sums are float per block, double across
 * (relative error ~1e-6: a draw can differ from an exact-arithmetic
 * inversion only when u * P lies that close to a boundary).  T == 0 is greedy: the lowest allowed id with the largest
 * logit.  uniforms[r] must lie in [0, 1).
 */
int ctxlite_sample_rows(const float *rows, int64_t n_rows, int64_t V, double temperature,
                        double window, const int32_t *banned_ids, int64_t n_banned,
                        const uint8_t *ban_row, const double *uniforms,
                        int32_t *out, int64_t *err_at);

/*
 * Report-noisy-max histogram (Dwork & Roth 2014, sec. 3.3; the RNM of DP-ICL,
 * Wu et al. 2024): out_counts[j] = #{i : votes[i] == j},
 * out_noisy[j] = out_counts[j] + noise[j], *out_argmax = argmax_j out_noisy[j]
 * (lowest index on ties).
 */
int ctxlite_noisy_histogram(const int32_t *votes, int64_t m, int64_t n_classes,
                            const double *noise, int64_t *out_counts,
                            double *out_noisy, int64_t *out_argmax, int64_t *err_at);

/*
 * Embedding-space aggregation (the ESA of DP-ICL, Wu et al. 2024):
 *   out_mean = (sum_i E_i * min(1, C / ||E_i||) + noise) / m
 * (a zero row stays zero).
 */
int ctxlite_embed_aggregate(const double *E, int64_t m, int64_t d, double clip_norm,
                            const double *noise, double *out_mean, int64_t *err_at);

/*
 * *out_index = argmax_i cos(q, cands[i]) (lowest index on ties); a zero-norm
 * candidate (or a zero query) has similarity 0.
 */
int ctxlite_nearest_cosine(const double *q, const double *cands, int64_t k, int64_t d,
                           int64_t *out_index, int64_t *err_at);
/* CDEF END */

#endif /* CTXLITE_KERNELS_H */
