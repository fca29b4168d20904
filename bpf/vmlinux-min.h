/* SPDX-License-Identifier: MIT */
#pragma once

/* The few kernel types bpf/ uses, written by hand so the build never reads the build
 * machine's /sys/kernel/btf/vmlinux. Kernel-internal structs carry preserve_access_index:
 * only the fields named here exist, and libbpf relocates every access (CO-RE) against the
 * running kernel's BTF at load time, so field order and offsets here do not matter.
 * UAPI structs (fixed ABI) are declared without it. x86-64 only for now. */

#ifndef __x86_64__
#if !defined(__TARGET_ARCH_x86)
#error "bpf/ supports x86-64 only (build with -D__TARGET_ARCH_x86)"
#endif
#endif

typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;

typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef _Bool bool;
#define true 1
#define false 0

/* ---- UAPI (include/uapi/linux/bpf.h), stable numbers ---- */
enum bpf_map_type {
        BPF_MAP_TYPE_HASH = 1,
        BPF_MAP_TYPE_ARRAY = 2,
        BPF_MAP_TYPE_PROG_ARRAY = 3,
        BPF_MAP_TYPE_PERCPU_ARRAY = 6,
        BPF_MAP_TYPE_ARRAY_OF_MAPS = 12,
        BPF_MAP_TYPE_HASH_OF_MAPS = 13,
        BPF_MAP_TYPE_RINGBUF = 27,
};

enum {
        BPF_ANY = 0,
        BPF_NOEXIST = 1,
        BPF_EXIST = 2,
};

/* map_flags */
enum {
        BPF_F_NO_PREALLOC = 1U << 0,
        BPF_F_INNER_MAP = 1U << 12,
};

/* bpf_ringbuf_output()/submit() flags and bpf_ringbuf_query() selectors */
enum {
        BPF_RB_NO_WAKEUP = 1ULL << 0,
        BPF_RB_FORCE_WAKEUP = 1ULL << 1,
};
enum {
        BPF_RB_AVAIL_DATA = 0,
};

/* x86-64 struct pt_regs as user space sees it (arch/x86/include/uapi/asm/ptrace.h): the
 * layout of bpf_user_pt_regs_t, i.e. of a perf_event program's ctx->regs. */
struct ep_uapi_pt_regs {
        unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
        unsigned long ax, cx, dx, si, di, orig_ax;
        unsigned long ip, cs, flags, sp, ss;
};

/* include/uapi/linux/bpf_perf_event.h */
struct bpf_perf_event_data {
        struct ep_uapi_pt_regs regs;
        __u64 sample_period;
        __u64 addr;
};

/* include/uapi/linux/bpf.h: what bpf_get_ns_current_pid_tgid() fills in */
struct bpf_pidns_info {
        __u32 pid;
        __u32 tgid;
};

/* ---- kernel-internal types, relocated with CO-RE ---- */
struct pt_regs {
        unsigned long bp;
        unsigned long sp;
        unsigned long ip;
} __attribute__((preserve_access_index));

typedef struct {
        int counter;
} atomic_t;

struct mm_struct;

struct signal_struct {
        atomic_t live; /* threads of the group still alive */
} __attribute__((preserve_access_index));

struct thread_struct {
        unsigned long fsbase; /* x86-64: the user thread pointer (what pthread_self() returns) */
} __attribute__((preserve_access_index));

struct task_struct {
        unsigned int flags; /* PF_* */
        struct thread_struct thread;
        int pid;
        int tgid;
        struct mm_struct *mm;
        struct signal_struct *signal;
} __attribute__((preserve_access_index));

#define PF_KTHREAD 0x00200000 /* include/linux/sched.h */

/* BPF programs themselves, for the iterator over them (prog-list.bpf.c). */
struct seq_file;

struct bpf_iter_meta {
        struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_prog;

struct bpf_prog_aux {
        __u32 id;
        __u32 func_cnt;         /* subprograms, the main one included; 0 when there are none */
        struct bpf_prog **func; /* their own bpf_prog */
        char name[16];
} __attribute__((preserve_access_index));

struct bpf_prog {
        __u32 jited_len;
        __u8 tag[8];
        void *bpf_func; /* the JIT image (the interpreter when not JIT-compiled) */
        struct bpf_prog_aux *aux;
} __attribute__((preserve_access_index));

struct bpf_iter__bpf_prog {
        struct bpf_iter_meta *meta;
        struct bpf_prog *prog; /* NULL in the call after the last one */
} __attribute__((preserve_access_index));
