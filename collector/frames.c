/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "array.h"
#include "frames.h"
#include "frame-kind.h"
#include "macro.h"
#include "wire.h"

typedef struct FrameKey {
        uint64_t addr;
        uint32_t file; /* per-process kinds (UNMAPPED, CPYTHON): the process; they have no file */
        uint8_t kind;
        uint8_t flags;
        uint16_t zero;
} FrameKey;

int frame_table_init(FrameTable *t) {
        *t = (FrameTable) {};
        t->index = ep_hashmap_new(sizeof(FrameKey), sizeof(uint32_t));
        return t->index ? 0 : -ENOMEM;
}

void frame_table_done(FrameTable *t) {
        for (size_t i = 0; i < t->n; i++) {
                free(t->items[i].module);
                sym_lines_free(t->items[i].lines, t->items[i].n_lines);
        }
        free(t->items);
        ep_hashmap_free(t->index);
        *t = (FrameTable) {};
}

int frame_table_intern(FrameTable *t, uint8_t kind, uint8_t flags, uint32_t file, uint32_t process,
                       uint64_t addr, uint32_t *ret_idx) {
        bool unmapped = ep_frame_kind_per_process(kind);
        FrameKey key = {
                .addr = addr,
                .file = unmapped ? process : file,
                .kind = kind,
                .flags = flags & EP_FRAME_FLAG_RETURN_ADDRESS,
        };
        uint32_t *v;
        int r;

        r = INTERN_FIND_OR_RESERVE(t->index, &key, t->items, t->cap, t->n, ret_idx);
        if (r <= 0)
                return r;
        r = ep_hashmap_put(t->index, &key, (void **) &v);
        if (r < 0)
                return r;
        *v = (uint32_t) t->n;
        t->items[t->n] = (Frame) {
                .addr = addr,
                .file = unmapped ? 0 : file,
                .process = unmapped ? process : 0,
                .kind = kind,
                .flags = key.flags,
        };
        *ret_idx = (uint32_t) t->n++;
        return 1;
}

void frame_set_symbol(Frame *f, uint8_t status, uint64_t elf_addr, char *module, SymLine *lines,
                      uint32_t n_lines) {
        f->sym_state = SYM_STATE_DONE;
        if (f->n_lines > 0 && status != EP_SYM_OK) {
                /* Asked again (its file's answers changed) and failed: the name stays, as in
                 * the store. */
                free(module);
                sym_lines_free(lines, n_lines);
                return;
        }
        free(f->module);
        sym_lines_free(f->lines, f->n_lines);
        f->status = status;
        f->elf_addr = elf_addr;
        f->module = module;
        f->lines = lines;
        f->n_lines = n_lines;
}
