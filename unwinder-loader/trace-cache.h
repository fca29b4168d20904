/* SPDX-License-Identifier: MIT */
#pragma once

/* The loader's conversions of user stacks it saw before (docs/ARCHITECTURE.md, "A stack seen
 * before"): BPF's raw user slots of a sample → the trace frames trace-convert.c made of them.
 * A busy process repeats a few stacks thousands of times; converting one again costs a lookup
 * of its mapping and an announcement check per frame, where a hit costs a hash and a compare
 * of the raw slots. A conversion is only valid in the state it was made in: the same process,
 * start time, mappings generation, runtime and trace ring generation (the files it names
 * announced); the caller gives that state with each call, and a conversion made in another
 * state is a miss. Direct-mapped, bounded in bytes: a slot is replaced by the next stack that
 * hashes to it, and a conversion that does not fit the budget frees other slots in turn. */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire.h"

typedef struct TraceCacheState {
        pid_t pid;
        uint16_t runtime_version;
        uint64_t start_time_ns; /* with pid, the process: a pid used again is another one */
        const void *runtime;    /* the process's runtime (NULL: none) */
        uint64_t maps_gen;
        uint64_t ring_gen;
} TraceCacheState;

typedef struct TraceCacheStats {
        uint64_t hits, added;
        uint64_t evicted; /* conversions freed to make room in the byte budget */
        size_t bytes;     /* held now */
} TraceCacheStats;

typedef struct TraceCache TraceCache;

/* slots: a power of two; max_bytes: what the kept conversions may hold together. */
int trace_cache_new(size_t slots, size_t max_bytes, TraceCache **ret);
TraceCache *trace_cache_free(TraceCache *c);

/* The frames of a conversion of exactly raw[0..n_raw) made in state st, and in *ret_n their
 * number and in *ret_n_interp how many were interpreter frames; NULL when there is none. The
 * frames stay valid until the next trace_cache_add(). */
const EpFrame *trace_cache_find(TraceCache *c, const TraceCacheState *st, const uint64_t *raw, unsigned n_raw,
                                unsigned *ret_n, unsigned *ret_n_interp);

/* Keeps a conversion, replacing whatever its slot held; one larger than the whole budget is
 * not kept. */
void trace_cache_add(TraceCache *c, const TraceCacheState *st, const uint64_t *raw, unsigned n_raw,
                     const EpFrame *frames, unsigned n, unsigned n_interp);

TraceCacheStats trace_cache_stats(const TraceCache *c);
