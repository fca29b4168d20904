/* SPDX-License-Identifier: MIT */
#pragma once

/* How to step from one native frame to its caller at a given code address: the compact form
 * of the DWARF CFI rows of x86-64 code ("stack deltas"). Produced by the symbolizer
 * (symbolizer/unwind-extract.c), stored per file in the table blob (common/unwind-table.h),
 * loaded by the loader into BPF maps, executed by the BPF unwinder (bpf/native-unwind.h) and by
 * the replay tests, which compile that same code as ordinary C.
 *
 * On x86-64 the return address is always at CFA - 8 and the caller's stack pointer is the
 * CFA, so a rule only needs: how to compute the CFA, and where the caller's rbp is. The
 * encoding keeps room for arm64 (lr-based rules) in cfa_kind values not yet used. */

#ifndef __bpf__
#include <stdint.h>
#endif

enum {
        EP_CFA_INVALID = 0,     /* no unwind information here (gap): the unwind stops */
        EP_CFA_SP = 1,          /* CFA = rsp + cfa_offset */
        EP_CFA_FP = 2,          /* CFA = rbp + cfa_offset */
        EP_CFA_DEREF_FP = 3,    /* CFA = *(rbp + cfa_offset): realigned stack frames (gcc's
                                 * DW_OP_breg6 N; DW_OP_deref expression) */
        EP_CFA_PLT = 4,         /* lazy-binding PLT stubs: CFA = rsp + 8, plus 8 when
                                 * (pc & 15) >= 11 (the stub's push has executed) */
        EP_CFA_SIGNAL = 5,      /* rt_sigreturn trampoline: all registers come from the
                                 * ucontext at rsp */
        EP_CFA_STOP = 6,        /* outermost frame (return address undefined, _start,
                                 * thread entry): the root was reached */
        EP_CFA_FP_FALLBACK = 7, /* no CFI for this file: walk the frame-pointer chain */
        _EP_CFA_MAX,
};

enum {
        EP_FP_SAME = 0,       /* the caller's rbp is the current rbp */
        EP_FP_AT_CFA = 1,     /* the caller's rbp is saved at CFA + fp_offset */
        EP_FP_AT_FP = 2,      /* the caller's rbp is saved at rbp + fp_offset (realigned frames) */
        EP_FP_UNDEFINED = 3,  /* not recoverable: frame-pointer fallback is impossible above */
        _EP_FP_MAX,
};

struct ep_unwind_rule {
        uint8_t cfa_kind;  /* EP_CFA_* */
        uint8_t fp_rule;   /* EP_FP_* */
        int16_t fp_offset;
        int32_t cfa_offset;
};
