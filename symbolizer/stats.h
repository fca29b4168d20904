/* SPDX-License-Identifier: MIT */
#pragma once

/* Counters shared by the parts of the symbolizer and published as D-Bus properties. */

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "macro.h"
#include "wire.h"

typedef struct EpSymStats {
        uint64_t requests;       /* symbol and file requests read from the request ring */
        uint64_t resolved;       /* symbol responses with status OK */
        uint64_t not_found;      /* symbol responses with status NOT_FOUND */
        uint64_t file_errors;    /* responses (symbol or file) with NO_FILE or BAD_FILE */
        uint64_t retry_answers;  /* responses with RETRY: a passing failure, asked again later */
        uint64_t cache_hits;     /* symbol requests answered from the result cache */
        uint64_t persisted_hits; /* ... answered from the persisted cache (symbol-cache.c) */
        uint64_t bad_requests;   /* records that were not a valid request */
        uint64_t response_drops; /* responses that could not be delivered */
        uint64_t debug_files_appeared; /* files whose debug file showed up after they were answered */
        char last_error[256];
} EpSymStats;

static inline void _printf_(2, 3) ep_sym_stats_error(EpSymStats *s, const char *format, ...) {
        va_list ap;

        if (!s)
                return;
        va_start(ap, format);
        vsnprintf(s->last_error, sizeof(s->last_error), format, ap);
        va_end(ap);
}

/* Counts one answer of that status (EP_SYM_*). */
static inline void ep_sym_stats_count(EpSymStats *s, uint8_t status) {
        switch (status) {
        case EP_SYM_OK:
                s->resolved++;
                break;
        case EP_SYM_NOT_FOUND:
                s->not_found++;
                break;
        case EP_SYM_RETRY:
                s->retry_answers++;
                break;
        default:
                s->file_errors++;
                break;
        }
}
