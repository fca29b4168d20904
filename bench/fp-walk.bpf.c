/* SPDX-License-Identifier: MIT */
/* The baseline of bench/bpf-cost.py: the kernel's own frame-pointer walk of the user stack
 * (bpf_get_stack with BPF_F_USER_STACK, what perf -g and frame-pointer eBPF profilers use),
 * one per sample, counting the frames it found. Loaded by bench/fp-walk.c. */

#include "vmlinux-min.h"
#include <bpf/bpf_helpers.h>

#define MAX_FRAMES 2048
#ifndef BPF_F_USER_STACK
#define BPF_F_USER_STACK (1ULL << 8)
#endif

struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, __u64[MAX_FRAMES]);
} stack_buf SEC(".maps");

/* [0] samples with a user stack, [1] frames walked */
struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 2);
        __type(key, __u32);
        __type(value, __u64);
} totals SEC(".maps");

static __always_inline void add(__u32 idx, __u64 n) {
        __u64 *v = bpf_map_lookup_elem(&totals, &idx);

        if (v)
                *v += n;
}

SEC("perf_event")
int fp_walk(void *ctx) {
        __u32 zero = 0;
        __u64 *buf = bpf_map_lookup_elem(&stack_buf, &zero);
        long n;

        if (!buf)
                return 0;
        n = bpf_get_stack(ctx, buf, MAX_FRAMES * sizeof(__u64), BPF_F_USER_STACK);
        if (n > 0) {
                add(0, 1);
                add(1, (__u64) n / sizeof(__u64));
        }
        return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
