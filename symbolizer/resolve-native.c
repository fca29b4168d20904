/* SPDX-License-Identifier: MIT */
/* Native frames: a file offset in an ELF file, named from .gopclntab (Go programs), DWARF
 * inline chains and lines (the file or its separate debug file), then symbol tables
 * (native-file.c). The file is parsed by the resolver's native parser (the native worker,
 * native-worker.h) when it has one, else here; either way the answer comes with the file's record (what it was computed
 * with), which the resolver persists and watches for a debug file that appears later. */

#include <errno.h>
#include <stdlib.h>

#include "dwarf-lines.h"
#include "elf-symbols.h"
#include "native-file.h"
#include "resolver-internal.h"

/* Hands lines (owned) to out; they are freed on failure. */
static int result_set_lines(EpSymResult *out, uint64_t elf_addr, EpSymLine *lines, size_t n) {
        int k;

        k = ep_resolver_result_set(out, EP_SYM_OK, elf_addr, "", NULL);
        if (k < 0) {
                ep_sym_lines_free(lines, n);
                return k;
        }
        out->lines = lines;
        out->n_lines = (uint16_t) MIN(n, (size_t) UINT16_MAX);
        /* n is at most EP_DWARF_MAX_CHAIN; the MIN above only keeps the types honest. */
        return 0;
}

/* The record of an answer computed from elf. */
static int answer_record(EpElfFile *elf, const char *path_hint, EpNativeAnswer *a) {
        EpNativeDebugInfo info;
        int k;

        k = ep_native_debug_info(elf, path_hint, &info);
        if (k >= 0)
                k = ep_resolver_file_record(elf, &info, &a->record);
        a->has_record = k >= 0;
        return k;
}

/* The answer from the opened file, without its record. */
static int answer_from_file(EpResolver *r, const EpSymRequest *req, EpElfFile *elf, EpNativeAnswer *a) {
        EpSymResult *out = &a->result;
        EpSymLine *lines = NULL;
        size_t n_lines = 0;
        uint64_t vaddr;
        int k;

        k = ep_elf_offset_to_vaddr(elf, req->addr, &vaddr);
        if (k == -EIO) {
                ep_resolver_bad_file_seen(r, req->file_id, k);
                return ep_resolver_result_set(out, EP_SYM_BAD_FILE, 0, "", NULL);
        }
        if (k < 0) {
                a->cacheable = true;
                return ep_resolver_result_set(out, EP_SYM_NOT_FOUND, 0, "", NULL);
        }

        /* A return address points after the call; the call itself is the byte before. */
        uint64_t lookup = (req->flags & EP_FRAME_FLAG_RETURN_ADDRESS) && vaddr > 0 ? vaddr - 1 : vaddr;

        k = ep_resolve_go(r, req->file_id, elf, lookup, vaddr, out);
        if (k != 0) {
                a->cacheable = k > 0;
                return MIN(k, 0);
        }

        k = ep_native_symbolize(elf, req->path, lookup, &lines, &n_lines);
        if (k == -ENOMEM)
                return k;
        if (k == -ENOEXEC || k == -EIO) {
                ep_resolver_bad_file_seen(r, req->file_id, k);
                return ep_resolver_result_set(out, EP_SYM_BAD_FILE, vaddr, "", NULL);
        }
        a->cacheable = true;
        if (k < 0)
                return ep_resolver_result_set(out, EP_SYM_NOT_FOUND, vaddr, "", NULL);
        return result_set_lines(out, vaddr, lines, n_lines);
}

int ep_native_answer(EpResolver *r, const EpSymRequest *req, EpNativeAnswer *a) {
        EpElfFile *elf;
        int k;

        a->cacheable = false;
        k = ep_resolver_get_file(r, req->file_id, &elf);
        if (k == -ENOMEM)
                return k;
        if (k == -ENOEXEC || k == -EIO)
                return ep_resolver_result_set(&a->result, EP_SYM_BAD_FILE, 0, "", NULL);
        if (k < 0)
                return ep_resolver_result_set(&a->result, ep_resolver_missing_status(k), 0, "", NULL);

        k = answer_from_file(r, req, elf, a);
        if (k < 0 || !a->cacheable)
                return k;
        return answer_record(elf, req->path, a) == -ENOMEM ? -ENOMEM : 0;
}

int ep_resolve_native(EpResolver *r, const EpSymRequest *req, EpSymResult *out, bool *ret_cacheable) {
        _cleanup_(ep_native_answer_done) EpNativeAnswer a = {};
        int k;

        *ret_cacheable = false;
        k = r->native_parser.answer ? r->native_parser.answer(r->native_parser.userdata, req, &a) : ep_native_answer(r, req, &a);
        if (k < 0)
                return k;
        if (a.has_record) {
                k = ep_resolver_native_record_take(r, req->file_id, &a.record);
                if (k < 0)
                        return k;
        }
        *out = a.result;
        a.result = (EpSymResult) {};
        *ret_cacheable = a.cacheable;
        return 0;
}
