/* SPDX-License-Identifier: MIT */
#pragma once

/* One aggregation interval: sample counts per (process, thread, stack, cpu), with the sample
 * timestamps when someone (the exporter) wants them. */

#include <stdbool.h>
#include <stdint.h>

#include "hashmap.h"
#include "wire.h"

typedef struct SampleKey {
        uint32_t process; /* ProcessTable index */
        uint32_t tid;
        uint32_t stack;   /* StackTable index */
        uint32_t cpu;
} SampleKey;

typedef struct SampleAgg {
        uint64_t count;
        uint64_t *ts;     /* CLOCK_REALTIME ns, in arrival order */
        uint32_t n_ts, cap_ts;
        char thread_name[EP_COMM_LEN + 1];
} SampleAgg;

typedef struct Interval {
        uint64_t seq;      /* collector-local sequence number, starts at 1 */
        uint64_t start_ns, end_ns; /* CLOCK_REALTIME */
        uint64_t n_samples;
        EpHashmap *samples; /* SampleKey → SampleAgg */
} Interval;

int interval_new(uint64_t seq, uint64_t start_ns, Interval **ret);
Interval *interval_free(Interval *iv);
DEFINE_TRIVIAL_CLEANUP_FUNC(Interval *, interval_free);

int interval_add(Interval *iv, const SampleKey *key, const char *thread_name, uint64_t time_ns,
                 bool keep_timestamp);

static inline size_t interval_entries(const Interval *iv) {
        return ep_hashmap_size(iv->samples);
}
