/* SPDX-License-Identifier: MIT */
#pragma once

/* CPython: the types bpf/cpython.bpf.h shares with the loader (unwinder-loader/runtime-cpython.c
 * writes py_procs, trace-convert.c decodes the frames, loader-bus.c names the counters).
 * Included by bpf/profiler.h. */

#ifdef __bpf__
#include "vmlinux-min.h"
#else
#include <linux/types.h>
#endif

/* A CPython frame takes two user slots: the first carries EP_BPF_FRAME_F_RUNTIME in its top
 * byte (bpf/profiler.h) and the code object's address below; the second is the byte
 * offset of the current instruction from the start of the code's bytecode, as a signed 64-bit
 * number (3.11/3.12's prev_instr is one code unit before the first instruction at the start:
 * -2). The loader makes one EP_FRAME_CPYTHON frame of the pair. The Python frames of one
 * _PyEval_EvalFrameDefault activation come right before (leaf-side of) that eval loop's own
 * native frame, innermost first. */

/* Counters of the CPython walk (EP_BPF_CNT_PY_BASE + these). */
enum {
        EP_BPF_PY_SAMPLES = 0,          /* samples of a CPython process that reached an eval loop */
        EP_BPF_PY_FRAMES = 1,           /* Python frames emitted */
        EP_BPF_PY_ACTIVATIONS = 2,      /* eval-loop native frames met during the walks */
        EP_BPF_PY_THREAD_NOT_FOUND = 3, /* no thread state with the task's fsbase as thread_id */
        EP_BPF_PY_READ_FAILED = 4,      /* a read of the interpreter's memory failed */
        EP_BPF_PY_NO_FRAME = 5,         /* an eval-loop activation without a Python frame left */
        EP_BPF_PY_TRUNCATED = 6,        /* stopped at EP_BPF_PY_MAX_FRAMES or out of frame slots */
        EP_BPF_PY_UNPLACED = 7,         /* frames emitted after a native walk that stopped short */
        _EP_BPF_PY_MAX,
};

/* Python frames per sample: as many as the user frame slots hold (two slots each), so that the
 * walk never drops Python frames that would fit (3.11+ runs a whole Python call chain in one
 * eval-loop activation: 500 frames of a recursion take 1000 slots). A stack deeper than the
 * slots is cut where the native walk is cut too, EP_STOP_MAX_DEPTH, and that is marked. Needs
 * EP_BPF_MAX_USER_FRAMES (bpf/profiler.h includes this file after defining it). */
#define EP_BPF_PY_MAX_FRAMES (EP_BPF_MAX_USER_FRAMES / 2)
#define EP_BPF_PY_MAX_THREADS 64  /* thread states looked at per sample (all interpreters) */
#define EP_BPF_PY_MAX_INTERPS 8   /* interpreters looked at */
#define EP_BPF_PY_EVAL_RANGES 2   /* _PyEval_EvalFrameDefault and its .cold part */

/* ep_bpf_py_proc.frame_kind: EpPyFrameKind of common/python-layout.h */
enum {
        EP_BPF_PY_FRAMES_OBJECT = 1, /* 3.6–3.10: one PyFrameObject per eval activation */
        EP_BPF_PY_FRAMES_CFRAME = 2, /* 3.11–3.12: tstate->cframe->current_frame */
        EP_BPF_PY_FRAMES_TSTATE = 3, /* 3.13: tstate->current_frame */
};

/* py_procs: pid (tgid) → where that process's CPython keeps its threads and frames. Written
 * by the loader (runtime-cpython.c) for processes that map a CPython runtime; absolute
 * addresses (load bias applied). Offsets are those of common/python-layout.h;
 * EP_BPF_PY_NONE for a field the version lacks. */
#define EP_BPF_PY_NONE 0xffffffffu

struct ep_bpf_py_proc {
        __u64 eval_start[EP_BPF_PY_EVAL_RANGES]; /* [start, end); empty ranges are 0, 0 */
        __u64 eval_end[EP_BPF_PY_EVAL_RANGES];
        __u64 interp_head;          /* address of the pointer to the first interpreter:
                                     * &_PyRuntime.interpreters.head, 3.6: &interp_head */
        __u16 version;              /* major << 8 | minor */
        __u8 frame_kind;            /* EP_BPF_PY_FRAMES_* */
        __u8 lasti_unit;            /* bytes per f_lasti unit (3.6–3.10), 0 from 3.11 */
        __u32 interp_next;
        __u32 interp_tstate_head;
        __u32 tstate_next;
        __u32 tstate_thread_id;
        __u32 tstate_frame;         /* tstate->frame, ->cframe or ->current_frame */
        __u32 cframe_current_frame; /* 3.11–3.12, else EP_BPF_PY_NONE */
        __u32 frame_back;
        __u32 frame_code;
        __u32 frame_lasti;          /* f_lasti (int, 3.6–3.10) or prev_instr/instr_ptr */
        __u32 frame_is_entry;       /* 3.11 */
        __u32 frame_owner;          /* 3.12+ (3.11 has it but the walk uses is_entry) */
        __u32 frame_owner_cstack;   /* FRAME_OWNED_BY_CSTACK's value */
        __u32 co_code_adaptive;     /* 3.11+ */
};
