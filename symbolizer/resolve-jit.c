/* SPDX-License-Identifier: MIT */
/* Frames in memory no file backs (JIT code): named from the process's perf map. */

#include <errno.h>
#include <stdlib.h>

#include "resolver-internal.h"

struct ResolverJit {
        int unused;
};

void ep_resolve_jit_free(EpResolver *r) {
        free(r->jit);
        r->jit = NULL;
}

void ep_resolve_jit_source_changed(EpResolver *r) {
}

int ep_resolve_jit(EpResolver *r, const EpSymRequest *req, EpSymResult *out, bool *ret_cacheable) {
        *ret_cacheable = false;
        return ep_resolver_result_set(out, EP_SYM_NOT_FOUND, 0, "", NULL);
}
