/* SPDX-License-Identifier: MIT */
#pragma once

/* What each frame kind (EP_FRAME_* of wire.h) is, described once: the collector, the store,
 * the symbolizer, the exporter and the CLI read this table instead of switching on the kind,
 * so a runtime whose frames belong to one process is one row here and no edit there
 * (docs/ARCHITECTURE.md, "How to add a runtime"). */

#include <stdbool.h>
#include <stdint.h>

#include "wire.h"

/* What identifies a frame of the kind, and so who can name it. */
typedef enum EpFrameIdentity {
        EP_FRAME_ID_NONE,         /* nothing to name: a marker (addr is a stop reason) */
        EP_FRAME_ID_FILE_OFFSET,  /* a file (file_key / file ID) and an offset in it */
        EP_FRAME_ID_KERNEL_ADDR,  /* a kernel address */
        EP_FRAME_ID_PROCESS_ADDR, /* an address in one process (pid and start time) */
} EpFrameIdentity;

typedef struct EpFrameKind {
        const char *name;        /* stable: "native", "kernel", "unmapped", "abort", "cpython" */
        const char *otlp_type;   /* OTLP profile.frame.type of its frames */
        EpFrameIdentity identity;
        bool symbols_persist;    /* names may be cached across restarts (same content, same name) */
        const char *view;        /* the views' class of a named frame ("native", "python", ...) */
        const char *module;      /* the views' module of a process frame ("python"); NULL: none */
        const char *unnamed;     /* a process frame without a name is shown as "[unnamed]", or
                                  * "[unnamed 0x…]" with its address ANDed with addr_mask */
        uint64_t addr_mask;      /* 0: the address is not shown */
} EpFrameKind;

/* The row of kind, or NULL for a value outside the table (a record to reject). */
const EpFrameKind *ep_frame_kind(unsigned kind);

/* Frames whose address means something only in their process (the collector keys them by
 * process, the symbolizer needs the process). */
static inline bool ep_frame_kind_per_process(unsigned kind) {
        const EpFrameKind *k = ep_frame_kind(kind);
        return k && k->identity == EP_FRAME_ID_PROCESS_ADDR;
}

static inline bool ep_frame_kind_has_file(unsigned kind) {
        const EpFrameKind *k = ep_frame_kind(kind);
        return k && k->identity == EP_FRAME_ID_FILE_OFFSET;
}
