/* SPDX-License-Identifier: MIT */
/* The program whose CFI the unwind-extraction tests read (never run by them). It is built in
 * several ways (symbolizer/meson.build): -O2 with and without frame pointers (.eh_frame),
 * with .debug_frame only, with .debug_frame only in a separate debug file, and without any
 * CFI. Every function the tests look at is named unw_* and kept out of line; prologues are
 * not shrink-wrapped, so the first instruction of a function that saves registers is a push. */

#include <alloca.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

volatile int unw_sink;

__asm__(".text\n"
        /* No CFI at all and longer than alignment padding: the table must mark it invalid. */
        ".p2align 4\n"
        ".globl unw_nocfi\n"
        ".type unw_nocfi, @function\n"
        "unw_nocfi:\n"
        ".rept 48\n"
        "nop\n"
        ".endr\n"
        "ret\n"
        ".size unw_nocfi, .-unw_nocfi\n"
        /* A private rt_sigreturn trampoline without CFI, recognised by its name (the nop
         * before it as in libcs, for unwinders that look up return address - 1). */
        ".p2align 4\n"
        "nop\n"
        ".type __restore_rt, @function\n"
        "__restore_rt:\n"
        "mov $15, %rax\n"
        "syscall\n"
        ".size __restore_rt, .-__restore_rt\n");

__attribute__((noinline)) int unw_leaf(int x) {
        return x * 3 + unw_sink;
}

int (*volatile unw_callee)(int) = unw_leaf;

/* Keeps values alive across calls the compiler cannot see into, so it saves callee-saved
 * registers. */
__attribute__((noinline)) int unw_pusher(int n) {
        int a = 0, b = 1;
        for (int i = 0; i < n; i++) {
                a += unw_callee(i + b);
                b ^= unw_callee(a);
        }
        return a + b;
}

/* Stack realignment through a DRAP register: gcc describes it as CFA = *(rbp - 8). */
__attribute__((noinline, force_align_arg_pointer)) int unw_realigned(int n) {
        char *p = alloca((size_t) n + 1);
        memset(p, 1, (size_t) n + 1);
        return unw_pusher(p[n]);
}

/* A call through the PLT. */
__attribute__((noinline)) int unw_plt_caller(void) {
        return (int) getpid() & 1;
}

__attribute__((noinline)) int unw_chain(int n) {
        return unw_realigned(n) + unw_plt_caller();
}

int main(int argc, char **argv) {
        printf("%d\n", unw_chain(argc));
        return 0;
}
