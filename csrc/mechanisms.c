/*
 * mechanisms.c -- scalar float64 kernels of the private-aggregation
 * mechanisms (report-noisy-max histogram, clipped embedding mean, nearest
 * candidate by cosine similarity; the RNM and ESA mechanisms of DP-ICL,
 * Wu et al. 2024).  Small inputs, so plain loops; contracts in
 * ctxlite_kernels.h.
 */
#include "ctxlite_kernels.h"
#include "simd.h"

static inline int all_finite(const double *x, size_t n, size_t *first_bad)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            *first_bad = i;
            return 0;
        }
    return 1;
}

/* (max |x_i|, ||x / max|x_i| ||_2): an L2 norm split so it cannot overflow. */
static inline void scaled_norm(const double *x, size_t d, double *scale, double *unit_norm)
{
    double s = 0.0;
    for (size_t i = 0; i < d; i++)
        s = fabs(x[i]) > s ? fabs(x[i]) : s;
    double acc = 0.0;
    if (s > 0.0)
        for (size_t i = 0; i < d; i++) {
            const double v = x[i] / s;
            acc += v * v;
        }
    *scale = s;
    *unit_norm = sqrt(acc);
}

int ctxlite_noisy_histogram(const int32_t *votes, int64_t m, int64_t n_classes,
                            const double *noise, int64_t *out_counts, double *out_noisy,
                            int64_t *out_argmax, int64_t *err_at)
{
    if (m < 0 || n_classes < 1)
        return CTXLITE_ERR_BAD_SIZE;
    size_t bad;
    if (!all_finite(noise, (size_t)n_classes, &bad)) {
        set_err(err_at, (int64_t)bad);
        return CTXLITE_ERR_NONFINITE;
    }
    memset(out_counts, 0, (size_t)n_classes * sizeof *out_counts);
    for (int64_t i = 0; i < m; i++) {
        if (votes[i] < 0 || votes[i] >= n_classes) {
            set_err(err_at, i);
            return CTXLITE_ERR_BAD_INDEX;
        }
        out_counts[votes[i]]++;
    }
    int64_t best = 0;
    for (int64_t j = 0; j < n_classes; j++) {
        out_noisy[j] = (double)out_counts[j] + noise[j];
        if (out_noisy[j] > out_noisy[best]) /* strict: lowest index wins ties */
            best = j;
    }
    *out_argmax = best;
    return CTXLITE_OK;
}

int ctxlite_embed_aggregate(const double *E, int64_t m, int64_t d, double clip_norm,
                            const double *noise, double *out_mean, int64_t *err_at)
{
    if (m < 1 || d < 1)
        return CTXLITE_ERR_BAD_SIZE;
    if (!(clip_norm > 0.0) || !(clip_norm <= DBL_MAX))
        return CTXLITE_ERR_BAD_CLIP;
    size_t bad;
    if (!all_finite(E, (size_t)m * (size_t)d, &bad)) {
        set_err(err_at, (int64_t)bad);
        return CTXLITE_ERR_NONFINITE;
    }
    if (!all_finite(noise, (size_t)d, &bad)) {
        set_err(err_at, -1 - (int64_t)bad); /* negative: position in noise */
        return CTXLITE_ERR_NONFINITE;
    }
    for (int64_t j = 0; j < d; j++)
        out_mean[j] = 0.0;
    for (int64_t i = 0; i < m; i++) {
        const double *row = E + (size_t)i * (size_t)d;
        double s, u;
        scaled_norm(row, (size_t)d, &s, &u);
        /* row * min(1, C / ||row||), with ||row|| = s * u; zero row stays zero */
        const double factor = (s > 0.0 && s * u > clip_norm) ? clip_norm / (s * u) : 1.0;
        for (int64_t j = 0; j < d; j++)
            out_mean[j] += row[j] * factor;
    }
    for (int64_t j = 0; j < d; j++)
        out_mean[j] = (out_mean[j] + noise[j]) / (double)m;
    return CTXLITE_OK;
}

int ctxlite_nearest_cosine(const double *q, const double *cands, int64_t k, int64_t d,
                           int64_t *out_index, int64_t *err_at)
{
    if (k < 1 || d < 1)
        return CTXLITE_ERR_BAD_SIZE;
    size_t bad;
    if (!all_finite(q, (size_t)d, &bad)) {
        set_err(err_at, -1 - (int64_t)bad); /* negative: position in the query */
        return CTXLITE_ERR_NONFINITE;
    }
    if (!all_finite(cands, (size_t)k * (size_t)d, &bad)) {
        set_err(err_at, (int64_t)bad);
        return CTXLITE_ERR_NONFINITE;
    }
    double qs, qu;
    scaled_norm(q, (size_t)d, &qs, &qu);
    int64_t best = 0;
    double best_sim = -INFINITY;
    for (int64_t i = 0; i < k; i++) {
        const double *c = cands + (size_t)i * (size_t)d;
        double cs, cu;
        scaled_norm(c, (size_t)d, &cs, &cu);
        double sim = 0.0; /* zero query or zero candidate: similarity 0 */
        if (qs > 0.0 && cs > 0.0) {
            /* cos = <q/qs, c/cs> / (||q/qs|| ||c/cs||): no overflow for huge entries */
            double dot = 0.0;
            for (int64_t j = 0; j < d; j++)
                dot += (q[j] / qs) * (c[j] / cs);
            sim = dot / (qu * cu);
        }
        if (sim > best_sim) { /* strict: lowest index wins ties */
            best_sim = sim;
            best = i;
        }
    }
    *out_index = best;
    return CTXLITE_OK;
}
