/* SPDX-License-Identifier: MIT */
#pragma once

/* The size of the BPF ring buffer (bpf/profiler.bpf.c "events"), chosen at load from the
 * sampling rate and the number of CPUs instead of one size for every machine: the kernel
 * allocates all of it up front, and the loader's mapping of it (its data pages twice, for
 * wrap-around) is resident for the loader's whole life. */

#include <stdint.h>

/* Stack copies (bpf/profiler.h) stop while EP_BPF_STACK_COPY_RING_LIMIT (1 MiB) is unread:
 * the floor leaves as much again for the samples that follow. */
#define EP_BPF_RINGBUF_MIN (2u << 20)
#define EP_BPF_RINGBUF_MAX (64u << 20)
/* Room per sample a second: one second of samples of up to 2 KiB (a 250-frame stack), five
 * times what waits between the loader's drains (every 200 ms, or at 256 KiB). */
#define EP_BPF_RINGBUF_BYTES_PER_HZ 2048u

/* A power of two from EP_BPF_RINGBUF_MIN to EP_BPF_RINGBUF_MAX holding hz * n_cpus samples
 * of EP_BPF_RINGBUF_BYTES_PER_HZ bytes. */
uint32_t ep_bpf_ringbuf_size(uint32_t hz, unsigned n_cpus);
