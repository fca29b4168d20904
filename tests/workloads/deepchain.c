/* SPDX-License-Identifier: MIT */
/* A known call chain of depth 25 without frame pointers: main → f01 → f02 → … → f25, f25
 * spinning on the CPU. Built with -O2 -fomit-frame-pointer; every function is noinline and
 * uses its callee's result after the call, so no call becomes a jump. Some frames have shapes
 * that need more than "CFA = rsp + N" to unwind: f05 allocates with alloca (CFA from rbp),
 * f10 realigns its stack for a 64-byte aligned local (CFA through a saved pointer), f15 has a
 * large stack frame, f20 keeps many values live in callee-saved registers.
 * Usage: deepchain SECONDS */
#include <alloca.h>
#include <string.h>

#include "workload.h"

volatile uint64_t sink;

#define NOINLINE __attribute__((noinline))

NOINLINE uint64_t f25(double until) {
        uint64_t x = sink;
        while (workload_now() < until)
                x = workload_burst(x);
        sink = x;
        return x;
}

/* A plain link: call the next function, then use its result. */
#define LINK(name, next)                                  \
        NOINLINE uint64_t name(double until) {            \
                uint64_t r = next(until);                 \
                sink += r;                                \
                return r + 1;                             \
        }

LINK(f24, f25)
LINK(f23, f24)
LINK(f22, f23)
LINK(f21, f22)

NOINLINE uint64_t f20(double until) {
        /* Values live across the call: they sit in callee-saved registers (pushed on entry). */
        uint64_t a = sink, b = a * 3, c = b ^ 7, d = c + a, e = d * b, g = e - c;
        uint64_t r = f21(until);
        sink += a + b + c + d + e + g + r;
        return r ^ a ^ b ^ c ^ d ^ e ^ g;
}

LINK(f19, f20)
LINK(f18, f19)
LINK(f17, f18)
LINK(f16, f17)

NOINLINE uint64_t f15(double until) {
        volatile char big[8192];
        big[0] = (char) sink;
        big[sizeof big - 1] = (char) (sink >> 8);
        uint64_t r = f16(until);
        return r + (uint64_t) big[0] + (uint64_t) big[sizeof big - 1];
}

LINK(f14, f15)
LINK(f13, f14)
LINK(f12, f13)
LINK(f11, f12)

NOINLINE uint64_t f10(double until) {
        /* Over-aligned local: gcc realigns the stack and describes the CFA as *(rbp - 8). */
        volatile uint64_t aligned[8] __attribute__((aligned(64)));
        aligned[0] = sink;
        uint64_t r = f11(until);
        return r + aligned[0];
}

LINK(f09, f10)
LINK(f08, f09)
LINK(f07, f08)
LINK(f06, f07)

NOINLINE uint64_t f05(double until) {
        /* A variable-size allocation: the frame is addressed from rbp, so the CFA is rbp-based
         * even though the build omits frame pointers. */
        size_t n = 64 + (sink & 63);
        volatile char *p = alloca(n);
        p[0] = 1;
        p[n - 1] = 2;
        uint64_t r = f06(until);
        return r + p[0] + p[n - 1];
}

LINK(f04, f05)
LINK(f03, f04)
LINK(f02, f03)
LINK(f01, f02)

int main(int argc, char **argv) {
        double until = workload_deadline(argc, argv);
        uint64_t r = f01(until);
        sink += r;
        return 0;
}
