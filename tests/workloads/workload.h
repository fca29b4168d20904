/* SPDX-License-Identifier: MIT */
#pragma once

/* Helpers shared by the native-unwinding workloads. Everything here is inlined into its caller,
 * so no helper ever appears as a frame of its own: the tests hold the exact expected chains. */

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#ifdef __cplusplus
#define WORKLOAD_SINK extern "C" volatile uint64_t
#else
#define WORKLOAD_SINK extern volatile uint64_t
#endif

static inline double workload_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* SECONDS from argv[1] (default 5), as an absolute CLOCK_MONOTONIC deadline. */
static inline double workload_deadline(int argc, char **argv) {
        double seconds = argc > 1 ? atof(argv[1]) : 5.0;
        return workload_now() + seconds;
}

/* Sleeps argv[2] seconds (default 0), for workloads that must start doing their thing only
 * after a profiler started next to them is running. */
static inline void workload_delay(int argc, char **argv) {
        double delay = argc > 2 ? atof(argv[2]) : 0;

        if (delay > 0) {
                struct timespec ts = { .tv_sec = (time_t) delay,
                                       .tv_nsec = (long) ((delay - (double) (time_t) delay) * 1e9) };
                nanosleep(&ts, NULL);
        }
}

/* One burst of pure computation (~1 ms): the time check between bursts is the only call, so
 * nearly every sample and core dump catches the spinning function in its own code. */
static inline uint64_t workload_burst(uint64_t x) {
        for (int i = 0; i < 1000000; i++)
                x = x * 6364136223846793005u + 1442695040888963407u;
        return x;
}
