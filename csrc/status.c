/*
 * status.c -- what the kernels report about themselves: the version stamped
 * in at build time.
 */
#include "ctxlite_kernels.h"

#ifndef CTXLITE_VERSION
#error "CTXLITE_VERSION must be defined by the build (ctxlite/runtime/_build_kernels.py)"
#endif

const char *ctxlite_kernels_version(void) { return CTXLITE_VERSION; }
