/* SPDX-License-Identifier: MIT */
/* The BPF ring buffer's size rule (unwinder-loader/ring-size.c): what the kernel accepts (a
 * power of two, whole pages), the floor stack copies need, growth with rate and CPUs, and
 * the ceiling. */

#include "profiler.h"
#include "ring-size.h"
#include "tests.h"

static void check_valid(uint32_t size) {
        ASSERT_TRUE(size >= EP_BPF_RINGBUF_MIN && size <= EP_BPF_RINGBUF_MAX);
        ASSERT_EQ(size & (size - 1), 0u);
        ASSERT_EQ(size % 4096, 0u);
}

int main(void) {
        static const uint32_t rates[] = { 1, 20, 99, 1000, 10000 };
        static const unsigned cpus[] = { 1, 2, 16, 64, 512, 4096 };

        /* The installed service's 20 Hz: the floor up to a few hundred CPUs, half of the
         * fixed 4 MiB of before on small machines. */
        ASSERT_EQ(ep_bpf_ringbuf_size(20, 2), EP_BPF_RINGBUF_MIN);
        ASSERT_EQ(ep_bpf_ringbuf_size(20, 51), EP_BPF_RINGBUF_MIN);
        ASSERT_EQ(ep_bpf_ringbuf_size(20, 52), 2 * EP_BPF_RINGBUF_MIN);
        ASSERT_TRUE(EP_BPF_RINGBUF_MIN > EP_BPF_STACK_COPY_RING_LIMIT + EP_BPF_STACK_COPY_RECORD_SIZE);
        /* Room for a second of samples once above the floor. */
        ASSERT_EQ(ep_bpf_ringbuf_size(1000, 2), 4u << 20);
        ASSERT_TRUE(ep_bpf_ringbuf_size(1000, 16) >= 1000u * 16 * EP_BPF_RINGBUF_BYTES_PER_HZ);
        ASSERT_EQ(ep_bpf_ringbuf_size(10000, 4096), EP_BPF_RINGBUF_MAX);
        for (size_t i = 0; i < ELEMENTSOF(rates); i++)
                for (size_t j = 0; j < ELEMENTSOF(cpus); j++) {
                        uint32_t size = ep_bpf_ringbuf_size(rates[i], cpus[j]);

                        check_valid(size);
                        /* Never less than needed below the ceiling, never twice as much. */
                        uint64_t want = (uint64_t) rates[i] * cpus[j] * EP_BPF_RINGBUF_BYTES_PER_HZ;
                        if (size < EP_BPF_RINGBUF_MAX)
                                ASSERT_TRUE(size >= want);
                        if (size > EP_BPF_RINGBUF_MIN)
                                ASSERT_TRUE(size < 2 * want);
                }
        return tests_summary("loader-ring-size");
}
