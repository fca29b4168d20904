/* SPDX-License-Identifier: MIT */
#include <stddef.h>

#include "stop-reason.h"

static const char *const stop_names[_EP_STOP_MAX] = {
        [EP_STOP_OK] = "ok",
        [EP_STOP_MAX_DEPTH] = "max-depth",
        [EP_STOP_READ_FAILED] = "read-failed",
        [EP_STOP_BAD_FP] = "bad-frame-pointer",
        [EP_STOP_NO_USER_REGS] = "no-user-registers",
        [EP_STOP_PC_ZERO] = "pc-zero",
        [EP_STOP_NO_UNWIND_INFO] = "no-unwind-info",
        [EP_STOP_NO_MAPPING] = "no-mapping",
        [EP_STOP_TABLE_MISSING] = "table-missing",
        [EP_STOP_UNKNOWN_PROCESS] = "unknown-process",
        [EP_STOP_BAD_CFA] = "bad-cfa",
        [EP_STOP_BAD_PC] = "bad-pc",
        [EP_STOP_FP_UNDEFINED] = "fp-undefined",
        [EP_STOP_TABLE_ERROR] = "table-error",
};

const char *ep_stop_reason_name(uint64_t reason) {
        return reason < _EP_STOP_MAX && stop_names[reason] ? stop_names[reason] : NULL;
}
