/* SPDX-License-Identifier: MIT */

/* CPython frames in the BPF sampler (issue #8): everything the sampling program knows about
 * CPython. Included once by bpf/profiler.bpf.c, after count() and the native frame step; its
 * types shared with the loader are in bpf/cpython.h. The seams profiler.bpf.c calls (through
 * its runtimes_* hooks):
 *
 *   cpython_sample_start(pid, fsbase)   a sample of pid starts: true when pid runs CPython
 *                                       (py_procs has it) and the walk below is armed;
 *   cpython_on_native_frame(pc)         a native frame at pc (pc-1 for return addresses) is
 *                                       about to be recorded: 1 when it is an eval-loop
 *                                       activation whose Python frames come first;
 *   cpython_next_frame(slots)           the next Python frame of that activation, encoded in
 *                                       two frame slots (bpf/cpython.h): 1, or 0 when none left;
 *   cpython_next_unplaced(slots)        after the native walk stopped short: the next Python
 *                                       frame it did not reach (bpf/profiler.h, UNPLACED);
 *   cpython_frame_dropped()             a frame was left out for lack of slots (counted);
 *   cpython_process_gone(pid)           exec/exit: forget pid;
 *   cpython_process_forked(parent, pid) fork: the child runs the same interpreter.
 *
 * docs/ARCHITECTURE.md, "Interpreter runtimes: the seams" and "CPython". */

_Static_assert(EP_BPF_CNT_PY_BASE + _EP_BPF_PY_MAX <= EP_BPF_CNT_MAX, "counters map too small");

/* py_procs is written by the loader (unwinder-loader/runtime-cpython.c), py_walk is the walk of
 * the sample being unwound on this CPU. */

struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(map_flags, BPF_F_NO_PREALLOC);
        __uint(max_entries, 4096);
        __type(key, __u32);
        __type(value, struct ep_bpf_py_proc);
} py_procs SEC(".maps");

enum {
        PY_WALK_OFF = 0,         /* not a CPython process, or the walk gave up for this sample */
        PY_WALK_NEED_THREAD = 1, /* the thread state is looked for at the first eval-loop frame */
        PY_WALK_READY = 2,       /* frame is the next Python frame to emit (0: none left) */
};

struct py_walk {
        struct ep_bpf_py_proc cfg;
        __u64 fsbase; /* the sampled thread's thread pointer = its tstate's thread_id */
        __u64 frame;  /* cursor: the innermost Python frame not emitted yet */
        __u32 state;  /* PY_WALK_* */
        __u32 emitted;
        __u32 activation_done; /* the current eval-loop activation has no more frames */
        __u32 reserved;
};

struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, struct py_walk);
} py_walk SEC(".maps");

/* Interleaved with the native walk: when a native frame's PC lies in the process's
 * _PyEval_EvalFrameDefault (or its .cold part), the Python frames that eval-loop activation
 * runs are emitted first, innermost first, then the native frame itself (kept: it shows where
 * the interpreter was called from C). One cursor (py_walk.frame) runs down the thread's frame
 * chain across the activations of one sample:
 *   3.6–3.10  one PyFrameObject per activation (f_back);
 *   3.11      frames up to and including the one with is_entry set;
 *   3.12–3.13 frames up to the next one owned by the C stack (the activation's shim), which is
 *             skipped.
 * The thread state is found once per sample, at the first eval-loop frame: the one in the
 * interpreters' thread lists whose thread_id (pthread_self()) is the task's fsbase. A failed
 * read ends the Python frames of the sample (counted); the native walk goes on. */

static __always_inline int py_read_ptr(__u64 *dst, __u64 addr) {
        return bpf_probe_read_user(dst, sizeof(*dst), (const void *) addr);
}

struct py_thread_search {
        struct py_walk *w;
        __u64 interp, tstate;
        __u32 interps, threads;
        int result; /* 1 found (tstate), 0 not found, -1 read failed */
};

/* One step through the interpreters' thread lists (bpf_loop callback: a plain loop makes the
 * verifier follow every iteration with its own counters). */
static long py_thread_step(__u64 index, void *data) {
        struct py_thread_search *s = data;
        struct py_walk *w = s->w;
        __u64 tid = 0;

        if (s->tstate == 0) {
                if (s->interp == 0 || s->interps >= EP_BPF_PY_MAX_INTERPS)
                        return 1;
                s->interps++;
                if (py_read_ptr(&s->tstate, s->interp + w->cfg.interp_tstate_head) < 0 ||
                    py_read_ptr(&s->interp, s->interp + w->cfg.interp_next) < 0) {
                        s->result = -1;
                        return 1;
                }
                return 0;
        }
        if (s->threads++ >= EP_BPF_PY_MAX_THREADS)
                return 1;
        if (py_read_ptr(&tid, s->tstate + w->cfg.tstate_thread_id) < 0) {
                s->result = -1;
                return 1;
        }
        if (tid == w->fsbase) {
                s->result = 1;
                return 1;
        }
        if (py_read_ptr(&s->tstate, s->tstate + w->cfg.tstate_next) < 0) {
                s->result = -1;
                return 1;
        }
        return 0;
}

/* Finds the sampled thread's state and its innermost frame: 0, or -1 (counted). */
__noinline int ep_bpf_py_find_thread(void) {
        __u32 zero = 0;
        struct py_walk *w = bpf_map_lookup_elem(&py_walk, &zero);
        struct py_thread_search s = {};
        __u64 frame = 0;

        if (!w)
                return -1;
        w->state = PY_WALK_OFF;
        s.w = w;
        if (py_read_ptr(&s.interp, w->cfg.interp_head) < 0)
                goto read_failed;
        bpf_loop(EP_BPF_PY_MAX_THREADS + EP_BPF_PY_MAX_INTERPS + 1, py_thread_step, &s, 0);
        if (s.result < 0)
                goto read_failed;
        if (s.result == 0) {
                count(EP_BPF_CNT_PY_BASE + EP_BPF_PY_THREAD_NOT_FOUND);
                return -1;
        }
        if (py_read_ptr(&frame, s.tstate + w->cfg.tstate_frame) < 0)
                goto read_failed;
        if (w->cfg.cframe_current_frame != EP_BPF_PY_NONE && frame != 0 &&
            py_read_ptr(&frame, frame + w->cfg.cframe_current_frame) < 0)
                goto read_failed;
        w->frame = frame;
        w->state = PY_WALK_READY;
        return 0;
read_failed:
        count(EP_BPF_CNT_PY_BASE + EP_BPF_PY_READ_FAILED);
        return -1;
}

/* 1 when pc (the lookup address of a native frame) is in the eval loop and Python frames are
 * to be emitted before it; 0 otherwise. */
__noinline int ep_bpf_py_enter(__u64 pc) {
        __u32 zero = 0;
        struct py_walk *w = bpf_map_lookup_elem(&py_walk, &zero);

        if (!w || w->state == PY_WALK_OFF)
                return 0;
        if (!(pc - w->cfg.eval_start[0] < w->cfg.eval_end[0] - w->cfg.eval_start[0]) &&
            !(pc - w->cfg.eval_start[1] < w->cfg.eval_end[1] - w->cfg.eval_start[1]))
                return 0;
        count(EP_BPF_CNT_PY_BASE + EP_BPF_PY_ACTIVATIONS);
        if (w->state == PY_WALK_NEED_THREAD) {
                if (ep_bpf_py_find_thread() < 0)
                        return 0;
                count(EP_BPF_CNT_PY_BASE + EP_BPF_PY_SAMPLES);
        }
        if (w->frame == 0) {
                count(EP_BPF_CNT_PY_BASE + EP_BPF_PY_NO_FRAME);
                return 0;
        }
        w->activation_done = 0;
        return 1;
}

struct py_frame_out {
        __u64 code;
        __s64 offset;
};

/* The next Python frame of the current activation: 1 with *out filled, 0 when the activation
 * has no more (or the walk gave up). */
__noinline int ep_bpf_py_next(struct py_frame_out *out) {
        __u64 f, code = 0, back = 0, instr = 0;
        __u32 zero = 0;
        __u8 b = 0;
        int lasti = 0;
        struct py_walk *w = bpf_map_lookup_elem(&py_walk, &zero);

        if (!w || !out)
                return 0;
        f = w->frame;
        if (w->state != PY_WALK_READY || w->activation_done || f == 0)
                return 0;
        if (w->emitted >= EP_BPF_PY_MAX_FRAMES) {
                count(EP_BPF_CNT_PY_BASE + EP_BPF_PY_TRUNCATED);
                w->state = PY_WALK_OFF;
                return 0;
        }
        if (py_read_ptr(&back, f + w->cfg.frame_back) < 0)
                goto read_failed;
        if (w->cfg.frame_kind == EP_BPF_PY_FRAMES_OBJECT) {
                if (py_read_ptr(&code, f + w->cfg.frame_code) < 0 ||
                    bpf_probe_read_user(&lasti, sizeof(lasti), (const void *) (f + w->cfg.frame_lasti)) < 0)
                        goto read_failed;
                out->offset = (__s64) lasti * w->cfg.lasti_unit;
                w->activation_done = 1; /* one frame object per activation */
        } else {
                if (w->cfg.frame_owner_cstack != EP_BPF_PY_NONE) {
                        /* 3.12+: the C stack's shim ends the activation and is skipped. */
                        if (bpf_probe_read_user(&b, 1, (const void *) (f + w->cfg.frame_owner)) < 0)
                                goto read_failed;
                        if (b == w->cfg.frame_owner_cstack) {
                                w->frame = back;
                                w->activation_done = 1;
                                return 0;
                        }
                }
                if (py_read_ptr(&code, f + w->cfg.frame_code) < 0 || py_read_ptr(&instr, f + w->cfg.frame_lasti) < 0)
                        goto read_failed;
                out->offset = (__s64) (instr - (code + w->cfg.co_code_adaptive));
                if (w->cfg.frame_is_entry != EP_BPF_PY_NONE) {
                        /* 3.11: the activation's first frame is marked. */
                        if (bpf_probe_read_user(&b, 1, (const void *) (f + w->cfg.frame_is_entry)) < 0)
                                goto read_failed;
                        if (b)
                                w->activation_done = 1;
                }
        }
        out->code = code;
        w->frame = back;
        w->emitted++;
        count(EP_BPF_CNT_PY_BASE + EP_BPF_PY_FRAMES);
        return 1;
read_failed:
        count(EP_BPF_CNT_PY_BASE + EP_BPF_PY_READ_FAILED);
        w->state = PY_WALK_OFF;
        return 0;
}

/* ---- the seams (called by profiler.bpf.c's runtimes_* hooks) ---- */

/* Starts (or turns off) the CPython walk of a sample of pid. True when pid runs CPython. */
static __always_inline bool cpython_sample_start(__u32 pid, __u64 fsbase) {
        __u32 zero = 0;
        struct py_walk *w = bpf_map_lookup_elem(&py_walk, &zero);
        struct ep_bpf_py_proc *py;

        if (!w)
                return false;
        py = bpf_map_lookup_elem(&py_procs, &pid);
        if (!py || fsbase == 0) {
                w->state = PY_WALK_OFF;
                return false;
        }
        w->cfg = *py;
        w->fsbase = fsbase;
        w->frame = 0;
        w->emitted = 0;
        w->activation_done = 0;
        w->state = PY_WALK_NEED_THREAD;
        return true;
}

static __always_inline bool cpython_on_native_frame(__u64 pc) {
        return ep_bpf_py_enter(pc) != 0;
}

/* The next Python frame of the activation cpython_on_native_frame() accepted, as the two frame slots of
 * bpf/cpython.h: 1, or 0 when that activation has no more. */
/* A frame's two slots (bpf/cpython.h); flags: EP_BPF_FRAME_F_RUNTIME and placement flags. */
static __always_inline void py_encode(const struct py_frame_out *out, __u64 flags, __u64 *slots) {
        slots[0] = (out->code & EP_BPF_FRAME_ADDR_MASK) | (flags << EP_BPF_FRAME_FLAGS_SHIFT);
        slots[1] = (__u64) out->offset;
}

static __always_inline int cpython_next_frame(__u64 *slots) {
        struct py_frame_out out = {};

        if (ep_bpf_py_next(&out) != 1)
                return 0;
        py_encode(&out, EP_BPF_FRAME_F_RUNTIME, slots);
        return 1;
}

/* After the native walk stopped short: the next Python frame the walk did not reach, as two
 * slots flagged EP_BPF_FRAME_F_UNPLACED (and EP_BPF_FRAME_F_ACTIVATION on an activation's first
 * frame). 1: a frame; 0: an activation ended without one (3.12+'s shim), call again; -1: no
 * more. The cursor is at an activation's start here: the native walk emits whole activations. */
static __always_inline int cpython_next_unplaced(__u64 *slots) {
        __u64 flags = EP_BPF_FRAME_F_RUNTIME | EP_BPF_FRAME_F_UNPLACED;
        struct py_frame_out out = {};
        __u32 zero = 0;
        struct py_walk *w = bpf_map_lookup_elem(&py_walk, &zero);

        if (!w)
                return -1;
        if (w->state == PY_WALK_NEED_THREAD) {
                if (ep_bpf_py_find_thread() < 0)
                        return -1;
                count(EP_BPF_CNT_PY_BASE + EP_BPF_PY_SAMPLES);
                w->activation_done = 1;
        }
        if (w->state != PY_WALK_READY || w->frame == 0)
                return -1;
        if (w->activation_done) {
                w->activation_done = 0;
                flags |= EP_BPF_FRAME_F_ACTIVATION;
        }
        if (ep_bpf_py_next(&out) != 1)
                return w->state == PY_WALK_READY && w->activation_done ? 0 : -1;
        count(EP_BPF_CNT_PY_BASE + EP_BPF_PY_UNPLACED);
        py_encode(&out, flags, slots);
        return 1;
}

static __always_inline void cpython_frame_dropped(void) {
        count(EP_BPF_CNT_PY_BASE + EP_BPF_PY_TRUNCATED);
}

static __always_inline void cpython_process_gone(__u32 pid) {
        bpf_map_delete_elem(&py_procs, &pid);
}

/* The same address space, so the same interpreter at the same addresses. */
static __always_inline void cpython_process_forked(__u32 parent, __u32 pid) {
        struct ep_bpf_py_proc *py = bpf_map_lookup_elem(&py_procs, &parent);

        if (py)
                bpf_map_update_elem(&py_procs, &pid, py, BPF_NOEXIST);
}
