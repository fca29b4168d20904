/* SPDX-License-Identifier: MIT */
/* A fixed amount of CPU work at the bottom of a deep stack without frame pointers, for timing
 * (bench/report-slowdown.py): main → fixedwork × DEPTH → fixedwork_spin, which runs BURSTS
 * bursts of computation (~1 ms each) and returns. Usage: fixedwork BURSTS [DEPTH] */
#include "workload.h"

volatile uint64_t sink;

__attribute__((noinline)) uint64_t fixedwork_spin(long bursts) {
        uint64_t x = sink;
        for (long i = 0; i < bursts; i++)
                x = workload_burst(x);
        sink = x;
        return x;
}

/* The result is used after the call, so the recursion cannot become a loop. */
__attribute__((noinline)) uint64_t fixedwork(int depth, long bursts) {
        uint64_t r = depth > 1 ? fixedwork(depth - 1, bursts) : fixedwork_spin(bursts);
        sink += (uint64_t) depth;
        return r + (uint64_t) depth;
}

int main(int argc, char **argv) {
        long bursts = argc > 1 ? atol(argv[1]) : 1000;
        int depth = argc > 2 ? atoi(argv[2]) : 30;
        sink += fixedwork(depth > 0 ? depth : 1, bursts);
        return 0;
}
