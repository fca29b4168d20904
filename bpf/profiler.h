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
#define EP_BPF_MAX_USER_FRAMES 1536   /* user frames, the interrupted PC included */
#define EP_BPF_MAX_FRAMES (EP_BPF_MAX_KERNEL_FRAMES + EP_BPF_MAX_USER_FRAMES)

/* User frames carry the EP_UNWIND_F_* flags of bpf/native-unwind.h (how the frame was
 * reached: return address, frame-pointer step, signal frame; as ep_unwind_frame_flags() records
 * them, so a signal trampoline has no return-address flag) in their top byte; user
 * addresses stay below 2^56 even with 5-level paging. Kernel frames carry no flags. */
#define EP_BPF_FRAME_FLAGS_SHIFT 56
#define EP_BPF_FRAME_ADDR_MASK ((1ULL << EP_BPF_FRAME_FLAGS_SHIFT) - 1)

/* An interpreter runtime's frame takes two slots (the runtime says what they hold: bpf/NAME.h);
 * the first carries EP_BPF_FRAME_F_RUNTIME in its top byte instead, with no EP_UNWIND_F_* bit.
 * Which runtime is the process's own (a process runs one). When the native walk stops short
 * (a table not loaded yet, a mapping unknown, no unwind information), the thread's interpreter
 * frames it did not reach follow the last native frame with EP_BPF_FRAME_F_UNPLACED: their
 * interpreter loop's native frames were not seen, so the BPF side cannot say where they go. The
 * first frame of each interpreter-loop activation among them also has EP_BPF_FRAME_F_ACTIVATION.
 * The loader places them when it unwinds the sample again (unwinder-loader/interp-splice.c). */
#define EP_BPF_FRAME_F_RUNTIME 0x80u
#define EP_BPF_FRAME_F_UNPLACED 0x40u
#define EP_BPF_FRAME_F_ACTIVATION 0x20u

#define EP_BPF_RINGBUF_SIZE (4u << 20)
/* The BPF side only wakes the loader once this much is waiting; the loader also drains on a
 * short timer, so samples never wait long and a busy machine does not cost one wake-up per
 * sample. A sample of a process the BPF side has no mappings for wakes the loader at once
 * (at most every EP_BPF_UNKNOWN_WAKEUP_NS per CPU), so new processes are synchronised fast. */
#define EP_BPF_WAKEUP_BYTES (256u << 10)
#define EP_BPF_UNKNOWN_WAKEUP_NS (10 * 1000 * 1000ULL)

/* Record types in the BPF ring buffer (first u32 of every record). */
enum {
        EP_BPF_REC_SAMPLE = 1, /* struct ep_bpf_sample, truncated after frames[n_kernel+n_user] */
        EP_BPF_REC_EXIT = 2,   /* struct ep_bpf_task_event: the last thread of pid exited */
        EP_BPF_REC_EXEC = 3,   /* struct ep_bpf_task_event: pid called execve() */
};

/* ep_bpf_sample.flags */
enum {
        EP_BPF_SAMPLE_UNKNOWN_PROCESS = 1 << 0, /* no mappings were loaded for pid */
        EP_BPF_SAMPLE_STACK_COPY = 1 << 1,      /* a struct ep_bpf_stack_copy follows frames[] */
};

struct ep_bpf_sample {
        __u32 type; /* EP_BPF_REC_SAMPLE */
        __u32 pid;  /* tgid, host pid namespace */
        __u32 tid;
        __u32 cpu;
        __u64 time_ns; /* CLOCK_BOOTTIME */
        __u16 n_kernel; /* frames[0 .. n_kernel-1]: kernel return addresses, leaf first */
        __u16 n_user;   /* frames[n_kernel ..]: interrupted user PC, then return addresses */
        __u16 stop_reason; /* EP_STOP_* of the user-space walk */
        __u16 flags;       /* EP_BPF_SAMPLE_* */
        char comm[16];
        /* Whose mappings the walk used (ep_bpf_proc.owner): pid's own, or its parent's when
         * BPF gave the child its parent's entry at fork and the loader has not written the
         * child's yet. Before an exec such a child runs its parent's image; the loader reads
         * the child's mappings later, maybe after the exec, so it places the PCs in the parent's
         * mappings. 0: no entry. */
        __u32 maps_owner;
        __u32 reserved;
        __u64 frames[EP_BPF_MAX_FRAMES];
};

#define EP_BPF_SAMPLE_HEADER_SIZE 56 /* offsetof(struct ep_bpf_sample, frames) */

/* When the unwind could not use tables for the whole stack (the process or a mapping was not
 * known yet, a table was not loaded yet), the sample is sent as a fixed-size record of
 * EP_BPF_STACK_COPY_RECORD_SIZE bytes that also carries the user registers and a window of the
 * user stack above rsp, at EP_BPF_STACK_COPY_OFFSET (after room for the most frames). The
 * loader unwinds it again with the same code (bpf/native-unwind.h) once it knows the mappings
 * and has the tables, so the first samples of a new process keep their whole stack. The
 * window is the rest of rsp's page, then whole pages up to the first unreadable one. */
#define EP_BPF_STACK_COPY_MAX (64u << 10)
#define EP_BPF_STACK_COPY_RING_LIMIT (1u << 20) /* no copies while this much is unread */

struct ep_bpf_stack_copy {
        __u64 pc, sp, fp; /* the user registers the unwind started from */
        __u32 len;        /* bytes of stack from sp in data[] */
        __u32 reserved;
        __u8 data[];
};

#define EP_BPF_STACK_COPY_HEADER_SIZE 32
#define EP_BPF_STACK_COPY_OFFSET (EP_BPF_SAMPLE_HEADER_SIZE + EP_BPF_MAX_FRAMES * 8)
#define EP_BPF_STACK_COPY_RECORD_SIZE \
        (EP_BPF_STACK_COPY_OFFSET + EP_BPF_STACK_COPY_HEADER_SIZE + EP_BPF_STACK_COPY_MAX)

struct ep_bpf_task_event {
        __u32 type; /* EP_BPF_REC_EXIT or EP_BPF_REC_EXEC */
        __u32 pid;
        __u64 time_ns; /* CLOCK_BOOTTIME */
};

/* ---- native unwinding maps (filled by the loader, read by bpf/native-unwind.h's hooks) ---- */

/* proc_mappings: pid (tgid) → the process's executable file mappings, sorted by start, found
 * by binary search. A process with more mappings keeps EP_BPF_MAX_MAPPINGS of them (the
 * loader counts the overflow); PCs in the others take the frame-pointer step. The array size
 * is a power of two so the search indexes it with a mask (see ep_find_mapping). */
#define EP_BPF_MAPPING_SEARCH_STEPS 9
#define EP_BPF_MAX_MAPPINGS (1 << EP_BPF_MAPPING_SEARCH_STEPS) /* 512 */

struct ep_bpf_mapping {
        __u64 start;
        __u64 bias;     /* file offset = pc - bias (start - pgoff) */
        __u32 size;     /* end - start, clamped to 4 GiB - 1 */
        __u32 file_num; /* index into unwind_tables/file_state; 0 = no file (vdso, anon) */
};

struct ep_bpf_proc {
        __u32 n;
        __u32 owner; /* the pid the loader wrote it for (a forked child has its parent's copy) */
        struct ep_bpf_mapping m[EP_BPF_MAX_MAPPINGS];
};

/* Files: file_num 1..max_files-1. unwind_tables[file_num] is the file's table, an inner ARRAY
 * sized to the file whose 8-byte elements each hold two struct ep_bpf_delta (delta i is half
 * i & 1 of element i >> 1: array elements are 8-byte aligned, single 4-byte deltas would waste
 * half the memory); file_state[file_num] says why there is none. */
enum {
        EP_BPF_FILE_NO_TABLE = 0, /* not loaded (yet): frame-pointer step, "table-missing" */
        EP_BPF_FILE_FP_ONLY = 1,  /* the file has no CFI: frame-pointer step as its rule */
};

/* unwind_pages: (file_num, file offset >> 16) → the file's deltas for that 64 KiB page:
 * inner[first .. first + count - 1], sorted by offset_low. The first delta of every page is at
 * offset_low 0 (a synthetic one carries the rule in effect), so no lookup crosses a page.
 * sub[k] (relative to first) is the delta in effect at offset_low k << 12: a search for an
 * offset in 4 KiB sub-page k only looks between sub[k] and sub[k + 1] (the page's last delta
 * for k = 15), a sixteenth of the page on average. */
#define EP_BPF_PAGE_SHIFT 16
#define EP_BPF_SUBPAGE_SHIFT 12
#define EP_BPF_SUBPAGES (1 << (EP_BPF_PAGE_SHIFT - EP_BPF_SUBPAGE_SHIFT))
#define EP_BPF_PAGE_SEARCH_STEPS 17 /* a page holds at most 2^16 deltas */

struct ep_bpf_page_key {
        __u32 file_num;
        __u32 page;
};

struct ep_bpf_page {
        __u32 first;
        __u32 count;
        __u16 sub[EP_BPF_SUBPAGES];
};

struct ep_bpf_delta {
        __u16 offset_low; /* file offset & 0xffff */
        __u16 rule;       /* index into unwind_rules (rules shared by all files) */
};

struct ep_bpf_delta_pair {
        struct ep_bpf_delta d[2];
};

#define EP_BPF_MAX_RULES 65536 /* u16 rule index */
#define EP_BPF_RULE_INVALID 0  /* unwind_rules[0] is always { EP_CFA_INVALID } */

/* Per-CPU counters (index into the "counters" PERCPU_ARRAY map). */
enum {
        EP_BPF_CNT_SAMPLES = 0,         /* samples of non-idle tasks (recorded or lost) */
        EP_BPF_CNT_RINGBUF_FULL = 1,    /* samples lost: the BPF ring buffer was full */
        EP_BPF_CNT_IDLE_SKIPPED = 2,    /* samples of the idle task, not recorded */
        EP_BPF_CNT_KSTACK_FAILED = 3,   /* bpf_get_stack() failed; sent without kernel frames */
        EP_BPF_CNT_EVENTS_LOST = 4,     /* exit/exec events lost: ring buffer full */
        EP_BPF_CNT_UNKNOWN_PROCESS = 5, /* samples of processes without loaded mappings */
        EP_BPF_CNT_FORK_INHERITED = 6,  /* forked processes given their parent's mappings */
        EP_BPF_CNT_STACK_COPIES = 7,    /* samples sent with a stack copy */
        EP_BPF_CNT_STEP_BASE = 8,       /* + EP_UNWIND_STEP_*: how each caller was found */
        EP_BPF_CNT_STOP_BASE = 16,      /* + EP_STOP_*: why each user walk stopped */
        EP_BPF_CNT_OTHER_PID_NS = 40,   /* samples of tasks outside the loader's PID namespace,
                                         * not recorded (a loader in a container) */
        EP_BPF_CNT_RUNTIME_NO_PROGRAM = 41, /* samples of an interpreter's process whose
                                             * runtime program could not be called */
        EP_BPF_CNT_PY_BASE = 48,        /* + EP_BPF_PY_*: the CPython walk (property PythonCounters) */
        EP_BPF_CNT_MAX = 64,
};

/* ---- interpreter runtimes: one header of types shared with the loader each (the seams:
 * docs/ARCHITECTURE.md, "Interpreter runtimes: the seams, and how to add a runtime") ---- */

#include "cpython.h"
