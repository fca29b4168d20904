/* SPDX-License-Identifier: MIT */
/* DWARF inline chains: spins in ic_inner, inlined into ic_middle, inlined into ic_outer,
 * inlined into the one real function ic_spin (built -O2 -g). The tests find the expected
 * lines by the LINE: markers below (tests/unit/test-symbolizer-dwarf.c,
 * tests/integration/test_symbolize_native.py), and the symbol ic_inner_mark marks an
 * instruction inside ic_inner.
 * Usage: inlinechain SECONDS */
#include <stdint.h>

#include "workload.h"

volatile uint64_t sink;

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE uint64_t ic_inner(uint64_t x) {
        __asm__ volatile(".globl ic_inner_mark\nic_inner_mark: nop"); /* LINE:inner-mark */
        for (int i = 0; i < 200000; i++)                               /* LINE:inner-first */
                x = x * 6364136223846793005u + 1442695040888963407u;
        return x ^ (x >> 17);                                           /* LINE:inner-last */
}

ALWAYS_INLINE uint64_t ic_middle(uint64_t x) {
        return ic_inner(x + 3) * 5; /* LINE:middle-call */
}

ALWAYS_INLINE uint64_t ic_outer(uint64_t x) {
        return ic_middle(x ^ 0x55) + 7; /* LINE:outer-call */
}

__attribute__((noinline)) uint64_t ic_spin(uint64_t x) {
        return ic_outer(x) - 1; /* LINE:spin-call */
}

int main(int argc, char **argv) {
        double until = workload_deadline(argc, argv);
        uint64_t x = (uint64_t) argc;

        do
                x = ic_spin(x);
        while (workload_now() < until);
        sink = x;
        return 0;
}
