/* SPDX-License-Identifier: MIT */
/* Spins inside a signal handler, so a signal frame is on every stack:
 *   handler_spin → on_signal → __restore_rt (signal frame) → trap_here → trap_caller → main
 * The signal is raised at one known instruction, always the same: trap_here's first one, a
 * ud2 (SIGILL), right after before_trap's last byte. So the frame the signal interrupted is
 * named at its exact address (at that address - 1 it would read before_trap), and the
 * trampoline the handler returns to is named at its exact address too (glibc's __restore_rt:
 * the byte before it is padding, covered by no symbol). The handler spins until the deadline, then
 * steps over the ud2 and returns.
 * Built without frame pointers. Usage: sighandler SECONDS */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>

#include "workload.h"

volatile uint64_t sink;
static volatile sig_atomic_t handled;
static double until;

#define NOINLINE __attribute__((noinline))
#define UD2_SIZE 2

void before_trap(void);
void trap_here(void);

/* No padding between the two: before_trap's ret is the byte before trap_here. */
__asm__(".text\n"
        ".globl before_trap\n"
        ".type before_trap, @function\n"
        "before_trap:\n"
        ".cfi_startproc\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size before_trap, .-before_trap\n"
        ".globl trap_here\n"
        ".type trap_here, @function\n"
        "trap_here:\n"
        ".cfi_startproc\n"
        "ud2\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size trap_here, .-trap_here\n");

NOINLINE uint64_t handler_spin(void) {
        uint64_t x = sink;
        while (workload_now() < until)
                x = workload_burst(x);
        return x;
}

NOINLINE void on_signal(int sig, siginfo_t *info, void *ucv) {
        ucontext_t *uc = ucv;

        sink += handler_spin() + (uint64_t) sig;
        uc->uc_mcontext.gregs[REG_RIP] += UD2_SIZE; /* trap_here goes on with its ret */
        handled = 1;
}

NOINLINE void trap_caller(void) {
        trap_here();
        sink++; /* no tail call: trap_caller stays on the stack */
}

int main(int argc, char **argv) {
        struct sigaction sa;

        until = workload_deadline(argc, argv);
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_signal;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGILL, &sa, NULL) < 0) {
                perror("sigaction");
                return 1;
        }
        trap_caller();
        return handled ? 0 : 1;
}
