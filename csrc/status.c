/*
 * status.c -- what the kernels report about themselves: the version stamped
 * in at build time and a message for every status code they return.
 */
#include "ctxlite_kernels.h"

#ifndef CTXLITE_VERSION
#error "CTXLITE_VERSION must be defined by the build (ctxlite/runtime/_build_kernels.py)"
#endif

const char *ctxlite_kernels_version(void) { return CTXLITE_VERSION; }

const char *ctxlite_strerror(int status)
{
    switch (status) {
    case CTXLITE_OK:
        return "success";
    case CTXLITE_ERR_NONFINITE:
        return "NaN or infinite value in an input (only logits may be -inf)";
    case CTXLITE_ERR_BAD_INDEX:
        return "index out of range (a target must be a token id of its row, a vote a class)";
    case CTXLITE_ERR_BAD_SIZE:
        return "bad size (rows, vocabulary, votes, classes and dimensions must be >= 1, "
               "a banned list needs its per-row flags)";
    case CTXLITE_ERR_BAD_TEMPERATURE:
        return "temperature must be finite and > 0 (sampling also takes 0: greedy)";
    case CTXLITE_ERR_BAD_LAMBDA:
        return "lambda must be finite and >= 0";
    case CTXLITE_ERR_BAD_CLIP:
        return "clip norm must be finite and > 0";
    case CTXLITE_ERR_EMPTY_ROW:
        return "every allowed (non-banned) token has logit -inf, so softmax is undefined";
    case CTXLITE_ERR_BAD_BANNED:
        return "banned ids must be strictly increasing and lie in [0, V)";
    case CTXLITE_ERR_BAD_WINDOW:
        return "window must be > 0 (inf allowed)";
    case CTXLITE_ERR_BAD_UNIFORM:
        return "uniform draw outside [0, 1)";
    default:
        return "unknown ctxlite kernel status";
    }
}

void ctxlite_drop_log(int level, const char *text, void *user_data)
{
    (void)level;
    (void)text;
    (void)user_data;
}
