/* SPDX-License-Identifier: MIT */
#pragma once

/* The CPython frame walk: written once, compiled twice (as bpf/native-unwind.h is).
 *
 *   - into the BPF sampler through bpf/cpython.bpf.h, which keeps the walk in a per-CPU map,
 *     reads the interpreter's memory with bpf_probe_read_user() and counts in the counters map;
 *   - as ordinary C into the replay tests (tests/replay/replay-python.c), over a core dump.
 *
 * The per-process input is struct ep_bpf_py_proc (bpf/cpython.h), as the loader builds it
 * (unwinder-loader/python-entry.c). Interleaved with the native walk: when a native frame's PC
 * lies in the process's _PyEval_EvalFrameDefault (or its .cold part), the Python frames that
 * eval-loop activation runs are emitted first, innermost first, then the native frame itself
 * (kept: it shows where the interpreter was called from C). One cursor (py_walk.frame) runs
 * down the thread's frame chain across the activations of one sample:
 *   3.6–3.10  one PyFrameObject per activation (f_back);
 *   3.11      frames up to and including the one with is_entry set;
 *   3.12–3.13 frames up to the next one owned by the C stack (the activation's shim), which is
 *             skipped.
 * The thread state is found once per sample, at the first eval-loop frame: the one in the
 * interpreters' thread lists whose thread_id (pthread_self()) is the task's fsbase. A failed
 * read ends the Python frames of the sample (counted); the native walk goes on.
 *
 * ---- INCLUDE CONTRACT ------------------------------------------------------------------------
 *
 * Before the #include the includer declares (static inline functions or macros):
 *
 *   EP_PY_CTX   a macro naming the type of an opaque context handed unchanged to the hooks;
 *   int ep_py_read(EP_PY_CTX ctx, void *dst, __u32 size, __u64 addr);
 *               copies size bytes (1, 4 or 8) of the target's memory at addr: 0, or < 0
 *               when it cannot be read;
 *   void ep_py_count(EP_PY_CTX ctx, __u32 counter);
 *               one more of counter (EP_BPF_PY_* of bpf/cpython.h);
 *   ep_py_loop(n, callback, data)
 *               calls long callback(__u64 index, void *data) at most n times, until it
 *               returns non-zero (BPF: bpf_loop; a plain loop makes the verifier follow every
 *               iteration).
 *
 * and may declare, to route the nested calls through functions of its own (BPF: the global
 * functions the verifier checks once each); by default they are the functions below:
 *
 *   ep_py_call_find_thread(ctx, w)   ep_py_find_thread(ctx, w)
 *   ep_py_call_next(ctx, w, out)     ep_py_next(ctx, w, out)
 *
 * Types __u8 … __u64 come from bpf/cpython.h (vmlinux-min.h in BPF, linux/types.h in C).
 *
 * ---- USE -------------------------------------------------------------------------------------
 *
 *   ep_py_walk_start(&w, &proc, fsbase);           // a sample (a thread) starts
 *   per native frame, before recording it (lookup: pc, or pc - 1 for return addresses):
 *       if (ep_py_enter(ctx, &w, lookup))
 *               while (ep_py_next(ctx, &w, &out) == 1)
 *                       emit(out.code, out.offset);
 *   after a native walk that stopped short: ep_py_next_unplaced() until it returns -1. */

#include "cpython.h"

#ifndef EP_PY_INLINE
#define EP_PY_INLINE static inline __attribute__((always_inline))
#endif

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

struct py_frame_out {
        __u64 code;
        __s64 offset;
};

#ifndef ep_py_call_find_thread
#define ep_py_call_find_thread(ctx, w) ep_py_find_thread(ctx, w)
#endif
#ifndef ep_py_call_next
#define ep_py_call_next(ctx, w, out) ep_py_next(ctx, w, out)
#endif

/* Arms the walk of a sample of a process whose interpreter cfg describes; fsbase is the
 * sampled thread's thread pointer (not 0). */
EP_PY_INLINE void ep_py_walk_start(struct py_walk *w, const struct ep_bpf_py_proc *cfg, __u64 fsbase) {
        w->cfg = *cfg;
        w->fsbase = fsbase;
        w->frame = 0;
        w->emitted = 0;
        w->activation_done = 0;
        w->state = PY_WALK_NEED_THREAD;
}

EP_PY_INLINE int py_read_ptr(EP_PY_CTX ctx, __u64 *dst, __u64 addr) {
        return ep_py_read(ctx, dst, sizeof(*dst), addr);
}

struct py_thread_search {
        EP_PY_CTX ctx;
        struct py_walk *w;
        __u64 interp, tstate;
        __u32 interps, threads;
        int result; /* 1 found (tstate), 0 not found, -1 read failed */
};

/* One step through the interpreters' thread lists (the ep_py_loop callback). */
static long py_thread_step(__u64 index, void *data) {
        struct py_thread_search *s = data;
        struct py_walk *w = s->w;
        __u64 tid = 0;

        if (s->tstate == 0) {
                if (s->interp == 0 || s->interps >= EP_BPF_PY_MAX_INTERPS)
                        return 1;
                s->interps++;
                if (py_read_ptr(s->ctx, &s->tstate, s->interp + w->cfg.interp_tstate_head) < 0 ||
                    py_read_ptr(s->ctx, &s->interp, s->interp + w->cfg.interp_next) < 0) {
                        s->result = -1;
                        return 1;
                }
                return 0;
        }
        if (s->threads++ >= EP_BPF_PY_MAX_THREADS)
                return 1;
        if (py_read_ptr(s->ctx, &tid, s->tstate + w->cfg.tstate_thread_id) < 0) {
                s->result = -1;
                return 1;
        }
        if (tid == w->fsbase) {
                s->result = 1;
                return 1;
        }
        if (py_read_ptr(s->ctx, &s->tstate, s->tstate + w->cfg.tstate_next) < 0) {
                s->result = -1;
                return 1;
        }
        return 0;
}

/* Finds the sampled thread's state and its innermost frame: 0, or -1 (counted). */
EP_PY_INLINE int ep_py_find_thread(EP_PY_CTX ctx, struct py_walk *w) {
        struct py_thread_search s = { .ctx = ctx };
        __u64 frame = 0;

        w->state = PY_WALK_OFF;
        s.w = w;
        if (py_read_ptr(ctx, &s.interp, w->cfg.interp_head) < 0)
                goto read_failed;
        ep_py_loop(EP_BPF_PY_MAX_THREADS + EP_BPF_PY_MAX_INTERPS + 1, py_thread_step, &s);
        if (s.result < 0)
                goto read_failed;
        if (s.result == 0) {
                ep_py_count(ctx, EP_BPF_PY_THREAD_NOT_FOUND);
                return -1;
        }
        if (py_read_ptr(ctx, &frame, s.tstate + w->cfg.tstate_frame) < 0)
                goto read_failed;
        if (w->cfg.cframe_current_frame != EP_BPF_PY_NONE && frame != 0 &&
            py_read_ptr(ctx, &frame, frame + w->cfg.cframe_current_frame) < 0)
                goto read_failed;
        w->frame = frame;
        w->state = PY_WALK_READY;
        return 0;
read_failed:
        ep_py_count(ctx, EP_BPF_PY_READ_FAILED);
        return -1;
}

/* 1 when pc (the lookup address of a native frame) is in the eval loop and Python frames are
 * to be emitted before it; 0 otherwise. */
EP_PY_INLINE int ep_py_enter(EP_PY_CTX ctx, struct py_walk *w, __u64 pc) {
        if (w->state == PY_WALK_OFF)
                return 0;
        if (!(pc - w->cfg.eval_start[0] < w->cfg.eval_end[0] - w->cfg.eval_start[0]) &&
            !(pc - w->cfg.eval_start[1] < w->cfg.eval_end[1] - w->cfg.eval_start[1]))
                return 0;
        ep_py_count(ctx, EP_BPF_PY_ACTIVATIONS);
        if (w->state == PY_WALK_NEED_THREAD) {
                if (ep_py_call_find_thread(ctx, w) < 0)
                        return 0;
                ep_py_count(ctx, EP_BPF_PY_SAMPLES);
        }
        if (w->frame == 0) {
                ep_py_count(ctx, EP_BPF_PY_NO_FRAME);
                return 0;
        }
        w->activation_done = 0;
        return 1;
}

/* The next Python frame of the current activation: 1 with *out filled, 0 when the activation
 * has no more (or the walk gave up). */
EP_PY_INLINE int ep_py_next(EP_PY_CTX ctx, struct py_walk *w, struct py_frame_out *out) {
        __u64 f, code = 0, back = 0, instr = 0;
        __u8 b = 0;
        int lasti = 0;

        f = w->frame;
        if (w->state != PY_WALK_READY || w->activation_done || f == 0)
                return 0;
        if (w->emitted >= EP_BPF_PY_MAX_FRAMES) {
                ep_py_count(ctx, EP_BPF_PY_TRUNCATED);
                w->state = PY_WALK_OFF;
                return 0;
        }
        if (py_read_ptr(ctx, &back, f + w->cfg.frame_back) < 0)
                goto read_failed;
        if (w->cfg.frame_kind == EP_BPF_PY_FRAMES_OBJECT) {
                if (py_read_ptr(ctx, &code, f + w->cfg.frame_code) < 0 ||
                    ep_py_read(ctx, &lasti, sizeof(lasti), f + w->cfg.frame_lasti) < 0)
                        goto read_failed;
                out->offset = (__s64) lasti * w->cfg.lasti_unit;
                w->activation_done = 1; /* one frame object per activation */
        } else {
                if (w->cfg.frame_owner_cstack != EP_BPF_PY_NONE) {
                        /* 3.12+: the C stack's shim ends the activation and is skipped. */
                        if (ep_py_read(ctx, &b, 1, f + w->cfg.frame_owner) < 0)
                                goto read_failed;
                        if (b == w->cfg.frame_owner_cstack) {
                                w->frame = back;
                                w->activation_done = 1;
                                return 0;
                        }
                }
                if (py_read_ptr(ctx, &code, f + w->cfg.frame_code) < 0 ||
                    py_read_ptr(ctx, &instr, f + w->cfg.frame_lasti) < 0)
                        goto read_failed;
                out->offset = (__s64) (instr - (code + w->cfg.co_code_adaptive));
                if (w->cfg.frame_is_entry != EP_BPF_PY_NONE) {
                        /* 3.11: the activation's first frame is marked. */
                        if (ep_py_read(ctx, &b, 1, f + w->cfg.frame_is_entry) < 0)
                                goto read_failed;
                        if (b)
                                w->activation_done = 1;
                }
        }
        out->code = code;
        w->frame = back;
        w->emitted++;
        ep_py_count(ctx, EP_BPF_PY_FRAMES);
        return 1;
read_failed:
        ep_py_count(ctx, EP_BPF_PY_READ_FAILED);
        w->state = PY_WALK_OFF;
        return 0;
}

/* After the native walk stopped short: the next Python frame the walk did not reach. 1: *out
 * is one, *ret_first says it is the first of an eval-loop activation; 0: an activation ended
 * without one (3.12+'s shim), call again; -1: no more. The cursor is at an activation's start
 * here: the native walk emits whole activations. */
EP_PY_INLINE int ep_py_next_unplaced(EP_PY_CTX ctx, struct py_walk *w, struct py_frame_out *out, __u32 *ret_first) {
        if (w->state == PY_WALK_NEED_THREAD) {
                if (ep_py_call_find_thread(ctx, w) < 0)
                        return -1;
                ep_py_count(ctx, EP_BPF_PY_SAMPLES);
                w->activation_done = 1;
        }
        if (w->state != PY_WALK_READY || w->frame == 0)
                return -1;
        *ret_first = w->activation_done;
        w->activation_done = 0;
        if (ep_py_call_next(ctx, w, out) != 1)
                return w->state == PY_WALK_READY && w->activation_done ? 0 : -1;
        ep_py_count(ctx, EP_BPF_PY_UNPLACED);
        return 1;
}
