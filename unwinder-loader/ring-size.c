/* SPDX-License-Identifier: MIT */
#include "profiler.h"
#include "ring-size.h"

_Static_assert(EP_BPF_RINGBUF_MIN >= 2 * EP_BPF_STACK_COPY_RING_LIMIT,
               "stack copies could fill the ring buffer");

uint32_t ep_bpf_ringbuf_size(uint32_t hz, unsigned n_cpus) {
        uint64_t want = (uint64_t) hz * n_cpus * EP_BPF_RINGBUF_BYTES_PER_HZ;
        uint32_t size = EP_BPF_RINGBUF_MIN;

        while (size < want && size < EP_BPF_RINGBUF_MAX)
                size <<= 1;
        return size;
}
