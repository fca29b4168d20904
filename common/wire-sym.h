/* SPDX-License-Identifier: MIT */
#pragma once

/* EP_MSG_SYM_REQUEST in one place for its writer (the collector, tests) and its reader (the
 * symbolizer's session); the layout is documented in wire.h. */

#include <stdbool.h>

#include "wire-buf.h"
#include "wire.h"

typedef struct EpSymRequestMsg {
        uint64_t cookie;
        uint8_t kind, flags;
        uint8_t file_id[EP_FILE_ID_SIZE];
        uint64_t addr;
        const char *path;       /* writing: a C string; reading: points into the record, not
                                 * NUL-terminated, path_len bytes */
        size_t path_len;
        uint32_t pid;           /* EP_FRAME_UNMAPPED; else 0 */
        uint64_t start_time_ns; /* EP_FRAME_UNMAPPED; else 0 */
} EpSymRequestMsg;

static inline void ep_put_sym_request(EpWriter *w, const EpSymRequestMsg *m) {
        ep_put_u64(w, m->cookie);
        ep_put_u8(w, m->kind);
        ep_put_bytes(w, m->file_id, EP_FILE_ID_SIZE);
        ep_put_u64(w, m->addr);
        ep_put_u8(w, m->flags);
        ep_put_str(w, m->path ?: "");
        ep_put_u32(w, m->pid);
        ep_put_u64(w, m->start_time_ns);
}

/* Returns false when the record does not have exactly this layout. */
static inline bool ep_get_sym_request(EpReader *rd, size_t path_max, EpSymRequestMsg *ret) {
        *ret = (EpSymRequestMsg) {};
        ret->cookie = ep_get_u64(rd);
        ret->kind = ep_get_u8(rd);
        ep_get_bytes(rd, ret->file_id, EP_FILE_ID_SIZE);
        ret->addr = ep_get_u64(rd);
        ret->flags = ep_get_u8(rd);
        ret->path = ep_get_blob(rd, path_max, &ret->path_len);
        ret->pid = ep_get_u32(rd);
        ret->start_time_ns = ep_get_u64(rd);
        return ep_reader_done(rd);
}
