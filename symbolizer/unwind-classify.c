/* SPDX-License-Identifier: MIT */
#include <dwarf.h>
#include <stdint.h>

#include "unwind-classify.h"

/* DWARF register numbers of x86-64 (System V psABI). */
#define X86_64_RBP 6
#define X86_64_RSP 7
#define X86_64_RA 16

/* A register-relative operation (DW_OP_bregN or DW_OP_bregx): its register and offset. */
static bool op_breg(const Dwarf_Op *op, unsigned *ret_reg, int64_t *ret_off) {
        if (op->atom >= DW_OP_breg0 && op->atom <= DW_OP_breg31) {
                *ret_reg = op->atom - DW_OP_breg0;
                *ret_off = (int64_t) op->number;
                return true;
        }
        if (op->atom == DW_OP_bregx) {
                if (op->number > UINT32_MAX)
                        return false;
                *ret_reg = (unsigned) op->number;
                *ret_off = (int64_t) op->number2;
                return true;
        }
        return false;
}

/* The binutils x86-64 lazy PLT expression:
 *   DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_lit11 (or lit10); DW_OP_ge;
 *   DW_OP_lit3; DW_OP_shl; DW_OP_plus
 * i.e. CFA = rsp + 8 + (((rip & 15) >= 11) << 3). Returns the threshold literal, or 0. */
static unsigned plt_threshold(const Dwarf_Op *ops, size_t n) {
        unsigned reg;
        int64_t off;

        if (n != 9)
                return 0;
        if (!op_breg(&ops[0], &reg, &off) || reg != X86_64_RSP || off != 8)
                return 0;
        if (!op_breg(&ops[1], &reg, &off) || reg != X86_64_RA || off != 0)
                return 0;
        if (ops[2].atom != DW_OP_lit15 || ops[3].atom != DW_OP_and ||
            (ops[4].atom != DW_OP_lit11 && ops[4].atom != DW_OP_lit10) || ops[5].atom != DW_OP_ge ||
            ops[6].atom != DW_OP_lit3 || ops[7].atom != DW_OP_shl || ops[8].atom != DW_OP_plus)
                return 0;
        return ops[4].atom - DW_OP_lit0;
}

bool ep_unwind_cfa_from_ops(const Dwarf_Op *ops, size_t n, struct ep_unwind_rule *rule) {
        unsigned reg, threshold;
        int64_t off;

        if (n == 1 && op_breg(&ops[0], &reg, &off)) {
                if (off < INT32_MIN || off > INT32_MAX)
                        return false;
                if (reg == X86_64_RSP)
                        rule->cfa_kind = EP_CFA_SP;
                else if (reg == X86_64_RBP)
                        rule->cfa_kind = EP_CFA_FP;
                else
                        return false;
                rule->cfa_offset = (int32_t) off;
                return true;
        }

        /* Realigned frames (gcc): CFA = *(rbp + N). */
        if (n == 2 && op_breg(&ops[0], &reg, &off) && reg == X86_64_RBP && ops[1].atom == DW_OP_deref) {
                if (off < INT32_MIN || off > INT32_MAX)
                        return false;
                rule->cfa_kind = EP_CFA_DEREF_FP;
                rule->cfa_offset = (int32_t) off;
                return true;
        }

        threshold = plt_threshold(ops, n);
        if (threshold > 0) {
                /* The contract's PLT command fixes the threshold at 11; the offset field carries
                 * the one this table used, for the rare toolchain that says 10. */
                *rule = ep_unwind_command(EP_CFA_PLT);
                rule->cfa_offset = (int32_t) threshold;
                return true;
        }
        return false;
}

bool ep_unwind_fp_from_ops(const Dwarf_Op *ops, size_t n, bool undefined, struct ep_unwind_rule *rule) {
        unsigned reg;
        int64_t off = 0;

        if (n == 0) {
                /* libdw: no operations and ops_mem → "undefined"; a NULL pointer → "same value". */
                rule->fp_rule = undefined ? EP_FP_UNDEFINED : EP_FP_SAME;
                rule->fp_offset = 0;
                return true;
        }
        if (ops[0].atom != DW_OP_call_frame_cfa)
                return false;

        /* offset(N): saved at CFA + N. */
        if (n == 1 || (n == 2 && ops[1].atom == DW_OP_plus_uconst)) {
                if (n == 2)
                        off = (int64_t) ops[1].number;
                if (off < INT16_MIN || off > INT16_MAX)
                        return false;
                rule->fp_rule = EP_FP_AT_CFA;
                rule->fp_offset = (int16_t) off;
                return true;
        }

        /* expression(DW_OP_breg6 N): saved at rbp + N (libdw puts the CFA first, unused). */
        if (n == 2 && op_breg(&ops[1], &reg, &off) && reg == X86_64_RBP) {
                if (off < INT16_MIN || off > INT16_MAX)
                        return false;
                rule->fp_rule = EP_FP_AT_FP;
                rule->fp_offset = (int16_t) off;
                return true;
        }
        return false;
}

static bool ra_is_standard(const Dwarf_Op *ops, size_t n) {
        return n == 2 && ops[0].atom == DW_OP_call_frame_cfa && ops[1].atom == DW_OP_plus_uconst &&
               (int64_t) ops[1].number == -8;
}

unsigned ep_unwind_classify_x86_64(Dwarf_Frame *frame, struct ep_unwind_rule *ret) {
        Dwarf_Op mem[3], *ops = NULL;
        struct ep_unwind_rule rule = {};
        size_t n = 0;
        unsigned flags = 0;

        *ret = ep_unwind_command(EP_CFA_INVALID);

        /* The return address first: undefined marks the outermost frame, whatever the CFA. */
        if (dwarf_frame_register(frame, X86_64_RA, mem, &ops, &n) < 0)
                return EP_ROW_LIBDW_ERROR;
        if (n == 0 && ops == mem) {
                *ret = ep_unwind_command(EP_CFA_STOP);
                return 0;
        }
        if (!ra_is_standard(ops, n))
                return EP_ROW_RA_UNSUPPORTED;

        ops = NULL;
        n = 0;
        if (dwarf_frame_cfa(frame, &ops, &n) < 0)
                return EP_ROW_LIBDW_ERROR;
        if (!ops || !ep_unwind_cfa_from_ops(ops, n, &rule))
                return EP_ROW_CFA_UNSUPPORTED;
        if (rule.cfa_kind == EP_CFA_PLT) {
                *ret = rule;
                return 0;
        }

        ops = NULL;
        n = 0;
        if (dwarf_frame_register(frame, X86_64_RBP, mem, &ops, &n) < 0)
                return EP_ROW_LIBDW_ERROR;
        if (!ep_unwind_fp_from_ops(ops, n, n == 0 && ops == mem, &rule)) {
                rule.fp_rule = EP_FP_UNDEFINED;
                rule.fp_offset = 0;
                flags |= EP_ROW_FP_UNSUPPORTED;
        }

        *ret = rule;
        return flags;
}
