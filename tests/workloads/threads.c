/* SPDX-License-Identifier: MIT */
/* Three threads, each spinning in its own known chain, without frame pointers:
 *   main thread: main → main_spin
 *   worker A:    start_thread → worker_a → a_middle → a_spin      (thread name "worker-a")
 *   worker B:    start_thread → worker_b → b_outer → b_inner → b_spin   ("worker-b")
 * Usage: threads SECONDS */
#include <pthread.h>
#include <stdio.h>

#include "workload.h"

volatile uint64_t sink;
static double until;

#define NOINLINE __attribute__((noinline))

NOINLINE uint64_t a_spin(void) {
        uint64_t x = sink;
        while (workload_now() < until)
                x = workload_burst(x);
        return x;
}

NOINLINE uint64_t a_middle(void) {
        uint64_t r = a_spin();
        sink += r;
        return r;
}

NOINLINE void *worker_a(void *arg) {
        sink += a_middle();
        return arg;
}

NOINLINE uint64_t b_spin(void) {
        uint64_t x = sink ^ 0x5555;
        while (workload_now() < until)
                x = workload_burst(x);
        return x;
}

NOINLINE uint64_t b_inner(void) {
        uint64_t r = b_spin();
        sink += r;
        return r;
}

NOINLINE uint64_t b_outer(void) {
        uint64_t r = b_inner();
        sink += r;
        return r;
}

NOINLINE void *worker_b(void *arg) {
        sink += b_outer();
        return arg;
}

NOINLINE uint64_t main_spin(void) {
        uint64_t x = sink ^ 0xaaaa;
        while (workload_now() < until)
                x = workload_burst(x);
        return x;
}

int main(int argc, char **argv) {
        pthread_t a, b;
        int r;

        until = workload_deadline(argc, argv);
        r = pthread_create(&a, NULL, worker_a, NULL);
        if (r != 0) {
                fprintf(stderr, "pthread_create: error %d\n", r);
                return 1;
        }
        r = pthread_create(&b, NULL, worker_b, NULL);
        if (r != 0) {
                fprintf(stderr, "pthread_create: error %d\n", r);
                return 1;
        }
        pthread_setname_np(a, "worker-a");
        pthread_setname_np(b, "worker-b");
        sink += main_spin();
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        return 0;
}
