/* SPDX-License-Identifier: MIT */
/* trace-cache.c: a conversion comes back for exactly the raw slots and the process state it was
 * made in, and for nothing else; the kept conversions stay within the byte budget. */

#include <stdint.h>
#include <string.h>

#include "tests.h"
#include "trace-cache.h"

static const TraceCacheState STATE = {
        .pid = 42, .start_time_ns = 1000, .maps_gen = 3, .runtime = &STATE, .runtime_version = 0x30b, .ring_gen = 7,
};

/* n raw slots and their frames, different for each seed. */
static void make(unsigned seed, unsigned n, uint64_t *raw, EpFrame *frames) {
        for (unsigned i = 0; i < n; i++) {
                raw[i] = 0x400000ULL + seed * 0x1000ULL + i * 16;
                frames[i] = (EpFrame) { .addr = raw[i] - 0x400000ULL, .file_key = seed % 5 + 1, .kind = 1 };
        }
}

static void test_found_only_in_its_state(void) {
        uint64_t raw[30];
        EpFrame frames[30];
        unsigned n = 0, n_interp = 0;
        TraceCache *c = NULL;
        const EpFrame *got;

        ASSERT_OK(trace_cache_new(64, 1 << 20, &c));
        make(1, 30, raw, frames);
        ASSERT_TRUE(trace_cache_find(c, &STATE, raw, 30, &n, &n_interp) == NULL);
        trace_cache_add(c, &STATE, raw, 30, frames, 28, 2);

        got = trace_cache_find(c, &STATE, raw, 30, &n, &n_interp);
        ASSERT_TRUE(got != NULL);
        ASSERT_EQ(n, 28u);
        ASSERT_EQ(n_interp, 2u);
        ASSERT_TRUE(memcmp(got, frames, 28 * sizeof *frames) == 0);

        /* each part of the state on its own makes it another conversion */
        TraceCacheState other[] = { STATE, STATE, STATE, STATE, STATE, STATE };
        other[0].pid = 43;
        other[1].start_time_ns = 1001; /* the pid used again */
        other[2].maps_gen = 4;
        other[3].runtime = NULL;
        other[4].runtime_version = 0x30c;
        other[5].ring_gen = 8; /* a new consumer: the files are not announced to it */
        for (size_t i = 0; i < sizeof other / sizeof *other; i++)
                ASSERT_TRUE(trace_cache_find(c, &other[i], raw, 30, &n, &n_interp) == NULL);

        /* other slots: one more, one less, one different */
        ASSERT_TRUE(trace_cache_find(c, &STATE, raw, 29, &n, &n_interp) == NULL);
        raw[17] ^= 8;
        ASSERT_TRUE(trace_cache_find(c, &STATE, raw, 30, &n, &n_interp) == NULL);
        raw[17] ^= 8;
        ASSERT_TRUE(trace_cache_find(c, &STATE, raw, 30, &n, &n_interp) != NULL);

        ASSERT_EQ(trace_cache_stats(c).hits, 2u);
        ASSERT_EQ(trace_cache_stats(c).added, 1u);
        c = trace_cache_free(c);
}

static void test_budget(void) {
        const size_t budget = 16 << 10;
        uint64_t raw[800];
        EpFrame frames[800];
        unsigned n = 0, n_interp = 0;
        TraceCache *c = NULL;

        ASSERT_TRUE(trace_cache_new(100, budget, &c) == -EINVAL); /* not a power of two */
        ASSERT_OK(trace_cache_new(256, budget, &c));
        /* 200 conversions of 24 slots and frames (960 bytes each) into 16 KiB */
        for (unsigned seed = 0; seed < 200; seed++) {
                make(seed, 24, raw, frames);
                trace_cache_add(c, &STATE, raw, 24, frames, 24, 0);
                ASSERT_TRUE(trace_cache_stats(c).bytes <= budget);
                /* the one just added is always there */
                ASSERT_TRUE(trace_cache_find(c, &STATE, raw, 24, &n, &n_interp) != NULL);
        }
        ASSERT_TRUE(trace_cache_stats(c).evicted > 0);
        ASSERT_EQ(trace_cache_stats(c).added, 200u);

        /* larger than the whole budget (800 slots and frames: 19,200 bytes): not kept, and
         * nothing else is given up for it but its own slot */
        size_t before = trace_cache_stats(c).bytes;
        make(500, 800, raw, frames);
        trace_cache_add(c, &STATE, raw, 800, frames, 800, 0);
        ASSERT_TRUE(trace_cache_find(c, &STATE, raw, 800, &n, &n_interp) == NULL);
        ASSERT_TRUE(trace_cache_stats(c).bytes + 960 >= before);
        ASSERT_EQ(trace_cache_stats(c).added, 200u);
        c = trace_cache_free(c);
}

int main(void) {
        test_found_only_in_its_state();
        test_budget();
        printf("OK\n");
        return 0;
}
