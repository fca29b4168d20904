/* SPDX-License-Identifier: MIT */

/* The sampling program: runs on every tick of a software CPU-clock perf event on each CPU,
 * records who was running, the kernel stack and the user stack, and hands the record to the
 * loader through the BPF ring buffer. The user stack is walked here by frame pointers; that
 * walk (walk_user_stack) is the seam the stack-delta unwinder replaces later. */

#include "vmlinux-min.h"

#include <bpf/bpf_helpers.h>

#include "profiler.h"
#include "wire.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by the loader before load. */
const volatile bool include_idle = false;

struct {
        __uint(type, BPF_MAP_TYPE_RINGBUF);
        __uint(max_entries, EP_BPF_RINGBUF_SIZE);
} events SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, EP_BPF_CNT_MAX);
        __type(key, __u32);
        __type(value, __u64);
} counters SEC(".maps");

/* The record is far too big for the 512-byte BPF stack: build it in a per-CPU slot. */
struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, struct ep_bpf_sample);
} scratch SEC(".maps");

_Static_assert(__builtin_offsetof(struct ep_bpf_sample, frames) == EP_BPF_SAMPLE_HEADER_SIZE,
               "EP_BPF_SAMPLE_HEADER_SIZE out of date");
_Static_assert(EP_BPF_CNT_STOP_BASE + _EP_STOP_MAX <= EP_BPF_CNT_MAX, "counters map too small");

static __always_inline void count(__u32 idx) {
        __u64 *v = bpf_map_lookup_elem(&counters, &idx);
        if (v)
                *v += 1; /* per-CPU slot: no other writer */
}

static __always_inline __u64 wakeup_flags(void) {
        return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= EP_BPF_WAKEUP_BYTES
                       ? BPF_RB_FORCE_WAKEUP
                       : BPF_RB_NO_WAKEUP;
}

struct walk_state {
        struct ep_bpf_sample *rec;
        __u64 fp;     /* frame pointer of the frame whose caller comes next */
        __u32 n;      /* frames filled in rec->frames */
        __u32 left;   /* user frames still allowed */
        __u32 stop;   /* EP_STOP_* */
};

/* One frame-pointer step: [fp] is the caller's frame pointer, [fp+8] the return address. */
static long walk_step(__u64 index, void *data) {
        struct walk_state *st = data;
        struct ep_bpf_sample *rec = st->rec;
        __u64 frame[2];
        __u32 n = st->n;

        if (st->fp == 0) {
                st->stop = EP_STOP_OK;
                return 1;
        }
        if (st->left == 0 || n >= EP_BPF_MAX_FRAMES) {
                st->stop = EP_STOP_MAX_DEPTH;
                return 1;
        }
        if (st->fp & 7) {
                st->stop = EP_STOP_BAD_FP;
                return 1;
        }
        if (bpf_probe_read_user(frame, sizeof(frame), (const void *) st->fp) < 0) {
                st->stop = EP_STOP_READ_FAILED;
                return 1;
        }
        if (frame[1] == 0) {
                st->stop = frame[0] == 0 ? EP_STOP_OK : EP_STOP_PC_ZERO;
                return 1;
        }
        rec->frames[n] = frame[1];
        st->n = n + 1;
        st->left--;
        if (frame[0] == 0) {
                st->stop = EP_STOP_OK; /* the outermost frame cleared its frame pointer */
                return 1;
        }
        if (frame[0] <= st->fp) {
                st->stop = EP_STOP_BAD_FP;
                return 1;
        }
        st->fp = frame[0];
        return 0;
}

/* Fills rec->frames[n ..] from the user registers and returns the stop reason. */
static __always_inline __u32 walk_user_stack(struct ep_bpf_sample *rec, __u32 n, __u64 pc,
                                             __u64 sp, __u64 fp) {
        struct walk_state st = {
                .rec = rec,
                .fp = fp,
                .n = n,
                .left = EP_BPF_MAX_USER_FRAMES - 1,
                .stop = EP_STOP_MAX_DEPTH,
        };

        if (pc == 0)
                return EP_STOP_PC_ZERO;
        if (n >= EP_BPF_MAX_FRAMES)
                return EP_STOP_MAX_DEPTH;
        rec->frames[n] = pc;
        st.n = n + 1;

        if (fp != 0 && fp < sp)
                st.stop = EP_STOP_BAD_FP; /* not pointing into the stack: no frame chain */
        else
                bpf_loop(EP_BPF_MAX_USER_FRAMES, walk_step, &st, 0);

        rec->n_user = st.n - n;
        return st.stop;
}

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx) {
        __u64 pid_tgid = bpf_get_current_pid_tgid();
        struct ep_bpf_sample *rec;
        struct task_struct *task;
        __u32 zero = 0, stop, n;
        __u64 size;
        long r;

        if ((pid_tgid >> 32) == 0 && !include_idle) {
                count(EP_BPF_CNT_IDLE_SKIPPED);
                return 0;
        }
        count(EP_BPF_CNT_SAMPLES);

        rec = bpf_map_lookup_elem(&scratch, &zero);
        if (!rec)
                return 0;

        rec->type = EP_BPF_REC_SAMPLE;
        rec->pid = pid_tgid >> 32;
        rec->tid = (__u32) pid_tgid;
        rec->cpu = bpf_get_smp_processor_id();
        rec->time_ns = bpf_ktime_get_boot_ns();
        rec->n_kernel = 0;
        rec->n_user = 0;
        bpf_get_current_comm(rec->comm, sizeof(rec->comm));

        r = bpf_get_stack(ctx, rec->frames, EP_BPF_MAX_KERNEL_FRAMES * sizeof(__u64), 0);
        if (r < 0)
                count(EP_BPF_CNT_KSTACK_FAILED);
        else
                rec->n_kernel = r / sizeof(__u64);
        n = rec->n_kernel;
        if (n > EP_BPF_MAX_KERNEL_FRAMES)
                n = EP_BPF_MAX_KERNEL_FRAMES;

        task = bpf_get_current_task_btf();
        if ((ctx->regs.cs & 3) == 3) {
                /* The tick interrupted user mode: ctx->regs are the user registers. */
                stop = walk_user_stack(rec, n, ctx->regs.ip, ctx->regs.sp, ctx->regs.bp);
        } else if ((task->flags & PF_KTHREAD) || !task->mm) {
                stop = EP_STOP_NO_USER_REGS; /* kernel thread (or idle, or a task past exit_mm) */
        } else {
                /* In the kernel on behalf of a user task: continue from the registers saved
                 * when it entered the kernel. */
                struct pt_regs *regs = (struct pt_regs *) bpf_task_pt_regs(task);
                if (!regs)
                        stop = EP_STOP_NO_USER_REGS;
                else
                        stop = walk_user_stack(rec, n, regs->ip, regs->sp, regs->bp);
        }
        rec->stop_reason = stop;
        if (stop < _EP_STOP_MAX)
                count(EP_BPF_CNT_STOP_BASE + stop);

        size = (__u64) n + rec->n_user;
        barrier_var(size);
        if (size > EP_BPF_MAX_FRAMES)
                size = EP_BPF_MAX_FRAMES;
        size = EP_BPF_SAMPLE_HEADER_SIZE + size * sizeof(__u64);
        if (bpf_ringbuf_output(&events, rec, size, wakeup_flags()) < 0)
                count(EP_BPF_CNT_RINGBUF_FULL);
        return 0;
}

static __always_inline void send_task_event(__u32 type) {
        struct ep_bpf_task_event ev = {
                .type = type,
                .pid = bpf_get_current_pid_tgid() >> 32,
                .time_ns = bpf_ktime_get_boot_ns(),
        };
        if (bpf_ringbuf_output(&events, &ev, sizeof(ev), wakeup_flags()) < 0)
                count(EP_BPF_CNT_EVENTS_LOST);
}

SEC("raw_tp/sched_process_exit")
int on_exit(void *ctx) {
        struct task_struct *task = bpf_get_current_task_btf();

        /* Raw tracepoints need no tracefs mount. Every thread passes here; only the last one of
         * the group ends the process. */
        if (task->flags & PF_KTHREAD)
                return 0;
        if (task->signal->live.counter != 0)
                return 0;
        send_task_event(EP_BPF_REC_EXIT);
        return 0;
}

SEC("raw_tp/sched_process_exec")
int on_exec(void *ctx) {
        send_task_event(EP_BPF_REC_EXEC);
        return 0;
}
