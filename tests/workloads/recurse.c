/* SPDX-License-Identifier: MIT */
/* A recursion 1000 frames deep without frame pointers: main → recurse × 1000 → recurse_spin,
 * the innermost frame spinning on the CPU. Usage: recurse SECONDS [DEPTH] */
#include "workload.h"

volatile uint64_t sink;

__attribute__((noinline)) uint64_t recurse_spin(double until) {
        uint64_t x = sink;
        while (workload_now() < until)
                x = workload_burst(x);
        sink = x;
        return x;
}

/* The result is used after the call, so the recursion cannot become a loop. */
__attribute__((noinline)) uint64_t recurse(int depth, double until) {
        uint64_t r = depth > 1 ? recurse(depth - 1, until) : recurse_spin(until);
        sink += (uint64_t) depth;
        return r + (uint64_t) depth;
}

int main(int argc, char **argv) {
        double until = workload_deadline(argc, argv);
        int depth = argc > 2 ? atoi(argv[2]) : 1000;
        sink += recurse(depth > 0 ? depth : 1, until);
        return 0;
}
