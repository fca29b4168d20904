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
 * docs/ARCHITECTURE.md, "Interpreter runtimes: the seams, and how to add a runtime" and "CPython". */

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

/* The walk itself is bpf/cpython-walk.h (also compiled as ordinary C by the replay tests); its
 * hooks here: reads with bpf_probe_read_user(), counts in the counters map, the thread search
 * in a bpf_loop, and the thread search and the next frame through the global functions below,
 * which the verifier checks once each (their pointer arguments cannot carry the map value, so
 * each looks py_walk up again). */

#define EP_PY_CTX __u32 /* unused */
#define ep_py_read(ctx, dst, size, addr) bpf_probe_read_user(dst, size, (const void *) (addr))
#define ep_py_count(ctx, counter) count(EP_BPF_CNT_PY_BASE + (counter))
#define ep_py_loop(n, callback, data) bpf_loop(n, callback, data, 0)
#define ep_py_call_find_thread(ctx, w) ep_bpf_py_find_thread()
#define ep_py_call_next(ctx, w, out) ep_bpf_py_next(out)

struct py_frame_out;
__noinline int ep_bpf_py_find_thread(void);
__noinline int ep_bpf_py_next(struct py_frame_out *out);

#include "cpython-walk.h"

struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, struct py_walk);
} py_walk SEC(".maps");

/* Finds the sampled thread's state and its innermost frame: 0, or -1 (counted). */
__noinline int ep_bpf_py_find_thread(void) {
        __u32 zero = 0;
        struct py_walk *w = bpf_map_lookup_elem(&py_walk, &zero);

        if (!w)
                return -1;
        return ep_py_find_thread(0, w);
}

/* 1 when pc (the lookup address of a native frame) is in the eval loop and Python frames are
 * to be emitted before it; 0 otherwise. */
__noinline int ep_bpf_py_enter(__u64 pc) {
        __u32 zero = 0;
        struct py_walk *w = bpf_map_lookup_elem(&py_walk, &zero);

        if (!w)
                return 0;
        return ep_py_enter(0, w, pc);
}

/* The next Python frame of the current activation: 1 with *out filled, 0 when the activation
 * has no more (or the walk gave up). */
__noinline int ep_bpf_py_next(struct py_frame_out *out) {
        __u32 zero = 0;
        struct py_walk *w = bpf_map_lookup_elem(&py_walk, &zero);

        if (!w || !out)
                return 0;
        return ep_py_next(0, w, out);
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
        ep_py_walk_start(w, py, fsbase);
        return true;
}

static __always_inline bool cpython_on_native_frame(__u64 pc) {
        return ep_bpf_py_enter(pc) != 0;
}

/* A frame's two slots (bpf/cpython.h); flags: EP_BPF_FRAME_F_RUNTIME and placement flags. */
static __always_inline void py_encode(const struct py_frame_out *out, __u64 flags, __u64 *slots) {
        slots[0] = (out->code & EP_BPF_FRAME_ADDR_MASK) | (flags << EP_BPF_FRAME_FLAGS_SHIFT);
        slots[1] = (__u64) out->offset;
}

/* The next Python frame of the activation cpython_on_native_frame() accepted, as the two frame
 * slots of bpf/cpython.h: 1, or 0 when that activation has no more. */
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
        __u32 zero = 0, first = 0;
        struct py_walk *w = bpf_map_lookup_elem(&py_walk, &zero);
        int r;

        if (!w)
                return -1;
        r = ep_py_next_unplaced(0, w, &out, &first);
        if (r == 1)
                py_encode(&out, first ? flags | EP_BPF_FRAME_F_ACTIVATION : flags, slots);
        return r;
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
