/* SPDX-License-Identifier: MIT */
#pragma once

/* Types shared by bpf/profiler.bpf.c and the loader (unwinder-loader/): the records the BPF
 * programs put in the BPF ring buffer, the per-CPU counters and the load-time configuration.
 * Stop reasons are the EP_STOP_* numbers of common/wire.h. */

#ifdef __bpf__
#include "vmlinux-min.h"
#else
#include <linux/types.h>
#endif

#define EP_BPF_MAX_KERNEL_FRAMES 127  /* bpf_get_stack(), bounded by kernel.perf_event_max_stack */
#define EP_BPF_MAX_USER_FRAMES 1024   /* user frames, the interrupted PC included */
#define EP_BPF_MAX_FRAMES (EP_BPF_MAX_KERNEL_FRAMES + EP_BPF_MAX_USER_FRAMES)

#define EP_BPF_RINGBUF_SIZE (4u << 20)
/* The BPF side only wakes the loader once this much is waiting; the loader also drains on a
 * short timer, so samples never wait long and a busy machine does not cost one wake-up per
 * sample. */
#define EP_BPF_WAKEUP_BYTES (256u << 10)

/* Record types in the BPF ring buffer (first u32 of every record). */
enum {
        EP_BPF_REC_SAMPLE = 1, /* struct ep_bpf_sample, truncated after frames[n_kernel+n_user] */
        EP_BPF_REC_EXIT = 2,   /* struct ep_bpf_task_event: the last thread of pid exited */
        EP_BPF_REC_EXEC = 3,   /* struct ep_bpf_task_event: pid called execve() */
};

struct ep_bpf_sample {
        __u32 type; /* EP_BPF_REC_SAMPLE */
        __u32 pid;  /* tgid, host pid namespace */
        __u32 tid;
        __u32 cpu;
        __u64 time_ns; /* CLOCK_BOOTTIME */
        __u16 n_kernel; /* frames[0 .. n_kernel-1]: kernel return addresses, leaf first */
        __u16 n_user;   /* frames[n_kernel ..]: interrupted user PC, then return addresses */
        __u32 stop_reason; /* EP_STOP_* of the user-space walk */
        char comm[16];
        __u64 frames[EP_BPF_MAX_FRAMES];
};

#define EP_BPF_SAMPLE_HEADER_SIZE 48 /* offsetof(struct ep_bpf_sample, frames) */

struct ep_bpf_task_event {
        __u32 type; /* EP_BPF_REC_EXIT or EP_BPF_REC_EXEC */
        __u32 pid;
        __u64 time_ns; /* CLOCK_BOOTTIME */
};

/* Per-CPU counters (index into the "counters" PERCPU_ARRAY map). */
enum {
        EP_BPF_CNT_SAMPLES = 0,       /* samples of non-idle tasks (recorded or lost) */
        EP_BPF_CNT_RINGBUF_FULL = 1,  /* samples lost: the BPF ring buffer was full */
        EP_BPF_CNT_IDLE_SKIPPED = 2,  /* samples of the idle task, not recorded */
        EP_BPF_CNT_KSTACK_FAILED = 3, /* bpf_get_stack() failed; sent without kernel frames */
        EP_BPF_CNT_EVENTS_LOST = 4,   /* exit/exec events lost: ring buffer full */
        EP_BPF_CNT_STOP_BASE = 8,     /* + EP_STOP_*: why each user walk stopped */
        EP_BPF_CNT_MAX = 16,
};
