/* SPDX-License-Identifier: MIT */
#pragma once

/* Retention of the local store: intervals older than an age, and the oldest intervals while the
 * store is larger than a size, are removed; then the stacks, frames (with their lines),
 * processes and files no sample uses any more; then the file is shrunk (incremental vacuum).
 *
 * The work is cut into steps, each one short transaction (at most RETENTION_BATCH_SAMPLES sample
 * rows, RETENTION_BATCH_STACKS stacks or RETENTION_VACUUM_PAGES pages), so the collector can
 * write intervals between them. Removing an interval is one step: its row goes and its id moves
 * to dead_intervals (readers join intervals, so its samples vanish at once); later steps
 * delete those samples.
 *
 * The collector keeps the row ids of what it wrote. Every step reports the ids of the stacks,
 * frames, processes and files it deleted, so the caller forgets exactly those (and writes the
 * row again the next time it is used) before anything else touches the store. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define RETENTION_DEFAULT_AGE_NS (3ULL * 24 * 3600 * 1000000000ULL)
#define RETENTION_DEFAULT_BYTES (1ULL << 30)
#define RETENTION_DEFAULT_GC_PERIOD_NS (10ULL * 60 * 1000000000ULL)
#define RETENTION_DEFAULT_CHECKPOINT_PERIOD_NS (30ULL * 1000000000ULL)
#define RETENTION_BATCH_SAMPLES 20000
#define RETENTION_BATCH_STACKS 5000
#define RETENTION_BATCH_INTERVALS 1000
#define RETENTION_VACUUM_PAGES 256

typedef struct RetentionPolicy {
        uint64_t max_age_ns; /* 0: no age limit */
        uint64_t max_bytes;  /* 0: no size limit */
        /* Garbage collection of stacks, frames, processes and files after intervals went runs
         * at most this often, unless the store is over its size; 0: every time. */
        uint64_t gc_period_ns;
        /* With a size limit, the WAL is copied into the file only when the file then fits,
         * or the WAL is larger than this. */
        uint64_t max_wal_bytes;
        /* A WAL within its bound, whose copy would fit, is copied at most this often, unless
         * the file is over the size limit (a copy is what lets it shrink); 0: at every run.
         * Each copy costs three fsyncs; the WAL is synced only then (synchronous=NORMAL), so
         * this is also how much a power loss can take. */
        uint64_t checkpoint_period_ns;
} RetentionPolicy;

#define RETENTION_POLICY_DEFAULT                                                       \
        ((RetentionPolicy) { .max_age_ns = RETENTION_DEFAULT_AGE_NS,                   \
                             .max_bytes = RETENTION_DEFAULT_BYTES,                     \
                             .gc_period_ns = RETENTION_DEFAULT_GC_PERIOD_NS,           \
                             .checkpoint_period_ns = RETENTION_DEFAULT_CHECKPOINT_PERIOD_NS })

typedef struct RetentionCounters {
        uint64_t intervals, samples, stacks, frames, processes, files; /* rows deleted */
        uint64_t bytes_reclaimed; /* pages given back to the file system by vacuum */
        uint64_t last_run_ns;     /* CLOCK_REALTIME of the last completed run, 0: none */
} RetentionCounters;

/* Row ids one step deleted, sorted once the step returns. */
typedef struct RetentionDeleted {
        int64_t *stacks, *frames, *processes, *files;
        size_t n_stacks, n_frames, n_processes, n_files;
        size_t cap_stacks, cap_frames, cap_processes, cap_files;
} RetentionDeleted;

void retention_deleted_clear(RetentionDeleted *d);
void retention_deleted_done(RetentionDeleted *d);
bool retention_deleted_contains(const int64_t *ids, size_t n, int64_t id);

typedef enum RetentionGcPhase {
        GC_IDLE,
        GC_STACKS,
        GC_FRAMES,
        GC_PROCESSES,
        GC_FILES,
} RetentionGcPhase;

typedef struct Retention {
        RetentionPolicy policy;
        RetentionCounters counters;
        RetentionGcPhase gc_phase;
        bool gc_wanted;        /* samples were deleted since the last garbage collection */
        int64_t gc_cursor;     /* stacks: the last id looked at */
        uint64_t last_gc_ns;   /* CLOCK_MONOTONIC */
        uint64_t last_checkpoint_ns; /* CLOCK_MONOTONIC, 0: none yet */
        bool did_work;         /* this run deleted something (the caller recomputes totals) */
} Retention;

void retention_init(Retention *rt, const RetentionPolicy *policy);

/* Does one step, and a checkpoint when the file then fits (see max_wal_bytes). now_ns is
 * CLOCK_REALTIME (ages), mono_ns CLOCK_MONOTONIC (the GC period).
 * deleted is cleared, then gets the ids the step deleted. Returns 1 when there is more to do,
 * 0 when the store is within its limits and clean, or a negative errno (the step's
 * transaction is rolled back; deleted is then empty). */
int retention_step(Retention *rt, Store *s, uint64_t now_ns, uint64_t mono_ns, RetentionDeleted *deleted);
