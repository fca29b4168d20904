/* SPDX-License-Identifier: MIT */
#pragma once

/* Counters of the perf-map resolver (resolve-jit.c), for logs, tests and properties. */

#include <stdint.h>

#include "resolver.h"

/* Bounds of the per-process state. */
#define EP_JIT_MAX_PROCESSES 64u                 /* parsed maps kept (LRU) */
#define EP_JIT_ENTRY_BUDGET (8u << 20)           /* ranges over all kept maps */
#define EP_JIT_MEMORY_BUDGET (512ull << 20)      /* bytes over all kept maps */
#define EP_JIT_MISSING_RETRY_NS (2 * NSEC_PER_SEC)  /* a process without (usable) map */
#define EP_JIT_REREAD_NS (1 * NSEC_PER_SEC)      /* a miss reads what the map gained, this often */

typedef struct EpJitStats {
        uint64_t maps_opened;    /* perf maps the source handed us */
        uint64_t maps_missing;   /* asked, and the process had none (or was gone) */
        uint64_t maps_refused;   /* not a usable map (owner, symlink, size, read error) */
        uint64_t reads;          /* reads of a map's new text (the first included) */
        uint64_t lines_malformed; /* over all reads */
        uint64_t lines_dropped;  /* valid lines over a map's limits */
        uint64_t evictions;      /* maps dropped for the process or memory bounds */
        uint32_t processes;      /* maps kept now */
        uint64_t entries;        /* ranges in the kept maps now */
        uint64_t memory;         /* bytes the kept maps hold now */
} EpJitStats;

void ep_resolver_jit_stats(EpResolver *r, EpJitStats *ret);
