/* SPDX-License-Identifier: MIT */

#include "frame-kind.h"
#include "macro.h"

static const EpFrameKind frame_kinds[_EP_FRAME_KIND_MAX] = {
        [EP_FRAME_UNKNOWN] = {
                .name = "unknown", .otlp_type = "unknown", .identity = EP_FRAME_ID_NONE,
        },
        [EP_FRAME_NATIVE] = {
                .name = "native", .otlp_type = "native", .identity = EP_FRAME_ID_FILE_OFFSET,
                .symbols_persist = true, .view = "native",
        },
        [EP_FRAME_KERNEL] = {
                .name = "kernel", .otlp_type = "kernel", .identity = EP_FRAME_ID_KERNEL_ADDR,
                .view = "kernel",
        },
        /* JIT code and anonymous memory: named from the process's perf map, if it has one. */
        [EP_FRAME_UNMAPPED] = {
                .name = "unmapped", .otlp_type = "native", .identity = EP_FRAME_ID_PROCESS_ADDR,
                .view = "native", .unnamed = "unmapped",
        },
        [EP_FRAME_ABORT] = {
                .name = "abort", .otlp_type = "abort-marker", .identity = EP_FRAME_ID_NONE,
        },
        /* A code object in the process's memory, named by symbolizer/resolve-cpython.c. */
        [EP_FRAME_CPYTHON] = {
                .name = "cpython", .otlp_type = "cpython", .identity = EP_FRAME_ID_PROCESS_ADDR,
                .view = "python", .module = "python", .unnamed = "python code",
                .addr_mask = (1ULL << 48) - 1,
        },
};

const EpFrameKind *ep_frame_kind(unsigned kind) {
        return kind < ELEMENTSOF(frame_kinds) && frame_kinds[kind].name ? &frame_kinds[kind] : NULL;
}
