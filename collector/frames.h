/* SPDX-License-Identifier: MIT */
#pragma once

/* Unique frames, de-duplicated by (kind, file, addr, return-address flag), and for
 * EP_FRAME_UNMAPPED by (process, addr, return-address flag): an address outside any file (JIT
 * code) means something in one process only, and is named from that process's perf map. A
 * frame's index is stable for the life of the collector; it is also the cookie of its
 * symbolization request. Frames are never freed, so the process table keeps the entries
 * UNMAPPED frames refer to (processes.h, pinned). */

#include <stdbool.h>
#include <stdint.h>

#include "hashmap.h"
#include "symbol.h"

typedef struct Frame {
        uint64_t addr;     /* file offset (native) / kernel address / raw value */
        uint64_t elf_addr; /* once symbolized */
        int64_t store_id;  /* frames.id, 0 while not in the store */
        uint64_t mark;     /* interval seq that last collected it */
        uint32_t file;     /* FileTable index, 0 = none */
        uint32_t process;  /* EP_FRAME_UNMAPPED: ProcessTable index; else 0 */
        uint32_t ref;      /* frame_ref inside the export group being built (valid with mark) */
        uint32_t n_lines;
        uint8_t kind;      /* EP_FRAME_* */
        uint8_t flags;     /* EP_FRAME_FLAG_* that take part in identity */
        uint8_t sym_state; /* SymState */
        uint8_t status;    /* EP_SYM_* once sym_state == SYM_STATE_DONE */
        bool store_dirty;  /* symbolized after the row was written: UPDATE pending */
        uint8_t sym_asks;  /* EP_FRAME_UNMAPPED: requests sent (a miss is asked again later) */
        uint16_t asked_seq; /* ... low bits of the interval seq of the last request */
        uint8_t retries;   /* EP_SYM_RETRY answers so far: the back-off of the next ask */
        char *module;
        SymLine *lines;    /* innermost first */
} Frame;

typedef struct FrameTable {
        Frame *items;
        size_t n, cap;
        EpHashmap *index; /* FrameKey → u32 index */
} FrameTable;

int frame_table_init(FrameTable *t);
void frame_table_done(FrameTable *t);

/* Returns 1 when the frame is new, 0 when known; *ret_idx either way. process (a
 * ProcessTable index) is part of the identity of EP_FRAME_UNMAPPED frames only and ignored
 * for other kinds. */
int frame_table_intern(FrameTable *t, uint8_t kind, uint8_t flags, uint32_t file, uint32_t process,
                       uint64_t addr, uint32_t *ret_idx);

/* Takes ownership of module and lines. A frame that has a name keeps it when the new answer is
 * a failure (a name is only ever replaced by a name). */
void frame_set_symbol(Frame *f, uint8_t status, uint64_t elf_addr, char *module, SymLine *lines,
                      uint32_t n_lines);

static inline Frame *frame_table_get(FrameTable *t, uint32_t idx) {
        return idx < t->n ? &t->items[idx] : NULL;
}
