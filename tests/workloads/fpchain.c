/* SPDX-License-Identifier: MIT */
/* A known call chain for the profiler tests: main → alpha → beta → gamma, gamma spinning on the
 * CPU. Built with frame pointers and without sibling-call optimisation so every caller keeps a
 * frame. Usage: fpchain SECONDS */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static volatile uint64_t sink;

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void gamma_spin(double until) {
        while (now() < until)
                for (int i = 0; i < 100000; i++)
                        sink += (uint64_t) i * 2654435761u;
}

__attribute__((noinline)) void beta(double until) {
        gamma_spin(until);
        sink++;
}

__attribute__((noinline)) void alpha(double until) {
        beta(until);
        sink++;
}

int main(int argc, char **argv) {
        double seconds = argc > 1 ? atof(argv[1]) : 5;
        alpha(now() + seconds);
        return 0;
}
