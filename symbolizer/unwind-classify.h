/* SPDX-License-Identifier: MIT */
#pragma once

/* One CFI row, as libdw evaluates it, expressed as an ep_unwind_rule (common/unwind-rule.h). Only
 * what the BPF unwinder can execute is accepted; any other row becomes EP_CFA_INVALID and says
 * why, so extraction can count it. x86-64 only for now: the per-machine entry point keeps the
 * door open for arm64 (LR-based rules in the reserved cfa_kind values). */

#include <elfutils/libdw.h>
#include <stdbool.h>
#include <stddef.h>

#include "unwind-rule.h"

enum {
        EP_ROW_CFA_UNSUPPORTED = 1 << 0, /* CFA rule we cannot express (other register, expression) */
        EP_ROW_RA_UNSUPPORTED = 1 << 1,  /* return address not at CFA - 8 and not undefined */
        EP_ROW_FP_UNSUPPORTED = 1 << 2,  /* rbp rule we cannot express: kept as EP_FP_UNDEFINED */
        EP_ROW_LIBDW_ERROR = 1 << 3,     /* libdw could not evaluate the row */
};

/* Classifies one row. Returns a mask of EP_ROW_* (0 when the rule is exact). */
unsigned ep_unwind_classify_x86_64(Dwarf_Frame *frame, struct ep_unwind_rule *ret);

/* The pieces, for tests: libdw's CFA expression → CFA kind and offset; a register's location
 * (dwarf_frame_register() result) → rbp rule. Both return false when not expressible. */
bool ep_unwind_cfa_from_ops(const Dwarf_Op *ops, size_t n, struct ep_unwind_rule *rule);
bool ep_unwind_fp_from_ops(const Dwarf_Op *ops, size_t n, bool undefined, struct ep_unwind_rule *rule);

/* Normalized command rules (only cfa_kind set), so they de-duplicate. */
static inline struct ep_unwind_rule ep_unwind_command(uint8_t kind) {
        return (struct ep_unwind_rule) { .cfa_kind = kind };
}
