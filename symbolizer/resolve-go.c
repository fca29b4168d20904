/* SPDX-License-Identifier: MIT */
/* Go programs: function, file and line from .gopclntab, also when the program is stripped
 * (gopclntab.h). Parsed tables are kept per file ID in a small LRU; a table points into the
 * mapping of the EpElfFile it came from, which the resolver's file cache owns and may close
 * at any time, so every use first checks that the file handed in is still that same mapping. */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gopclntab.h"
#include "log.h"
#include "resolver-internal.h"

#define GO_TABLES_MAX 8u
#define GO_FILE_NAME_MAX 4096u /* longer source paths are cut */

typedef enum GoState {
        GO_NONE,  /* not a Go program (or a layout not read here): other sources name it */
        GO_TABLE, /* table parsed */
        GO_BAD,   /* malformed table: logged once, other sources name it */
} GoState;

typedef struct GoSlot {
        GoState state;
        /* The mapping the table points into, as seen when it was parsed. */
        const EpElfFile *elf;
        const char *image;
        size_t image_size;
        EpGoTable *table;
} GoSlot;

struct ResolverGo {
        EpLru *lru;
        GoSlot slots[GO_TABLES_MAX];
        uint64_t malformed; /* tables or lookups found malformed */
};

static void slot_done(GoSlot *s) {
        ep_gopclntab_free(s->table);
        *s = (GoSlot) {};
}

uint64_t ep_resolver_go_malformed(const EpResolver *r) {
        if (r->native_parser.answer)
                return r->native_parser.go_malformed(r->native_parser.userdata);
        return r->go ? r->go->malformed : 0;
}

void ep_resolve_go_free(EpResolver *r) {
        if (!r->go)
                return;
        for (size_t i = 0; i < GO_TABLES_MAX; i++)
                slot_done(&r->go->slots[i]);
        ep_lru_free(r->go->lru);
        free(r->go);
        r->go = NULL;
}

static int go_state_new(EpResolver *r) {
        ResolverGo *go;
        int k;

        if (r->go)
                return 0;
        go = calloc(1, sizeof(ResolverGo));
        if (!go)
                return -ENOMEM;
        k = ep_lru_new(EP_FILE_ID_SIZE, GO_TABLES_MAX, &go->lru);
        if (k < 0) {
                free(go);
                return k;
        }
        r->go = go;
        return 0;
}

static void malformed(EpResolver *r, const uint8_t file_id[EP_FILE_ID_SIZE], const char *what, int error) {
        r->go->malformed++;
        log_once_errno(LOG_WARNING, error, "Go table of file %02x%02x%02x%02x…: %s: %m (counted, not logged again)",
                       file_id[0], file_id[1], file_id[2], file_id[3], what);
        ep_sym_stats_error(r->stats, "malformed Go table in file %02x%02x%02x%02x…: %s", file_id[0], file_id[1],
                           file_id[2], file_id[3], what);
}

/* Parses the table of elf into s. Everything but -ENOMEM ends in a state. */
static int slot_fill(EpResolver *r, const uint8_t file_id[EP_FILE_ID_SIZE], EpElfFile *elf, GoSlot *s) {
        Elf *e = ep_elf_handle(elf);
        size_t size = 0;
        const char *image = elf_rawfile(e, &size);
        int k;

        *s = (GoSlot) { .state = GO_NONE, .elf = elf, .image = image, .image_size = size };
        if (!image)
                return 0;

        k = ep_gopclntab_from_elf(e, (const uint8_t *) image, size, &s->table);
        if (k == -ENOMEM)
                return k;
        if (ep_elf_check(elf) < 0) {
                /* Truncated under us: the table may hold zeros; the native path reports it. */
                ep_gopclntab_free(TAKE_PTR(s->table));
                return 0;
        }
        if (k == -ENOEXEC) {
                malformed(r, file_id, "bad header", k);
                s->state = GO_BAD;
                return 0;
        }
        if (k == -ENOTSUP)
                log_once(LOG_INFO, "Go table of a layout not read here (Go < 1.16, 32-bit or big-endian): "
                                   "such programs are named from ELF symbols only");
        if (k < 0)
                return 0;
        s->state = GO_TABLE;
        return 0;
}

/* The slot for this file, parsed if needed. */
static int get_slot(EpResolver *r, const uint8_t file_id[EP_FILE_ID_SIZE], EpElfFile *elf, GoSlot **ret) {
        size_t size = 0;
        const char *image = elf_rawfile(ep_elf_handle(elf), &size);
        bool evicted;
        int slot, k;

        slot = ep_lru_get(r->go->lru, file_id);
        if (slot >= 0) {
                GoSlot *s = &r->go->slots[slot];

                /* Same object, same mapping, same size: the table's pointers are still valid. */
                if (s->elf == elf && s->image == image && s->image_size == size) {
                        *ret = s;
                        return 0;
                }
                slot_done(s);
        } else {
                slot = ep_lru_insert(r->go->lru, file_id, &evicted);
                if (slot < 0)
                        return slot;
                slot_done(&r->go->slots[slot]);
        }

        k = slot_fill(r, file_id, elf, &r->go->slots[slot]);
        if (k < 0) {
                slot_done(&r->go->slots[slot]);
                (void) ep_lru_remove(r->go->lru, file_id);
                return k;
        }
        *ret = &r->go->slots[slot];
        return 0;
}

static void forget(EpResolver *r, const uint8_t file_id[EP_FILE_ID_SIZE]) {
        int slot = ep_lru_remove(r->go->lru, file_id);

        if (slot >= 0)
                slot_done(&r->go->slots[slot]);
}

static int fill_result(EpSymResult *out, uint64_t elf_addr, const EpGoFrame *frames, size_t n) {
        ep_sym_result_done(out);
        out->status = EP_SYM_OK;
        out->elf_addr = elf_addr;
        out->module = strdup("");
        if (!out->module)
                return -ENOMEM;
        out->lines = calloc(n, sizeof(EpSymLine));
        if (!out->lines)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                EpSymLine *l = &out->lines[out->n_lines++];

                l->function = strndup(frames[i].function, EP_SYMBOL_NAME_MAX);
                l->file = strndup(frames[i].file, GO_FILE_NAME_MAX);
                l->line = frames[i].line;
                if (!l->function || !l->file)
                        return -ENOMEM;
        }
        return 0;
}

int ep_resolve_go(EpResolver *r, const uint8_t file_id[EP_FILE_ID_SIZE], EpElfFile *elf, uint64_t lookup,
                  uint64_t elf_addr, EpSymResult *out) {
        EpGoFrame frames[EP_GO_MAX_FRAMES];
        GoSlot *s;
        size_t n;
        int k;

        k = go_state_new(r);
        if (k < 0)
                return k;
        k = get_slot(r, file_id, elf, &s);
        if (k < 0)
                return k;
        if (s->state != GO_TABLE)
                return 0;

        k = ep_gopclntab_lookup(s->table, lookup, frames, ELEMENTSOF(frames), &n, NULL);
        if (ep_elf_check(elf) < 0) {
                /* The file shrank while we read it: what we read may be zeros. The native
                 * path that called us sees the same sticky error and reports the file bad
                 * (doing it here would close the file under our caller). */
                forget(r, file_id);
                return 0;
        }
        if (k == -ENOEXEC) {
                /* One function's data is bad; the rest of the table may be fine. */
                char what[64];
                snprintf(what, sizeof(what), "bad data for address 0x%" PRIx64, lookup);
                malformed(r, file_id, what, k);
                return 0;
        }
        if (k < 0)
                return 0; /* not covered: C code of a cgo program, or not Go at all */

        k = fill_result(out, elf_addr, frames, n);
        if (k < 0) {
                ep_sym_result_done(out);
                return k;
        }
        return 1;
}
