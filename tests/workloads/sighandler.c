/* SPDX-License-Identifier: MIT */
/* Spins inside a signal handler, so a signal frame is on every stack:
 *   handler_spin → on_alarm → __restore_rt (signal frame) → wait_inner → wait_outer → main
 * The handler is installed with sigaction (SA_SIGINFO) for SIGALRM; a one-shot 10 ms timer
 * delivers it while wait_inner spins on a flag, and the handler then spins until the deadline.
 * Built without frame pointers. Usage: sighandler SECONDS */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "workload.h"

volatile uint64_t sink;
static volatile sig_atomic_t handled;
static double until;

#define NOINLINE __attribute__((noinline))

NOINLINE uint64_t handler_spin(void) {
        uint64_t x = sink;
        while (workload_now() < until)
                x = workload_burst(x);
        return x;
}

NOINLINE void on_alarm(int sig, siginfo_t *info, void *uc) {
        sink += handler_spin() + (uint64_t) sig;
        handled = 1;
}

NOINLINE uint64_t wait_inner(void) {
        uint64_t x = 1;
        /* Pure computation until the handler has run: the signal interrupts this loop. */
        while (!handled && workload_now() < until + 1.0)
                for (int i = 0; i < 1000 && !handled; i++)
                        x = x * 2862933555777941757u + 3037000493u;
        return x;
}

NOINLINE uint64_t wait_outer(void) {
        uint64_t r = wait_inner();
        sink += r;
        return r;
}

int main(int argc, char **argv) {
        struct sigaction sa;
        struct itimerval it = { .it_value = { .tv_sec = 0, .tv_usec = 10000 } };

        until = workload_deadline(argc, argv);
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_alarm;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGALRM, &sa, NULL) < 0 || setitimer(ITIMER_REAL, &it, NULL) < 0) {
                perror("sigaction/setitimer");
                return 1;
        }
        sink += wait_outer();
        return handled ? 0 : 1;
}
