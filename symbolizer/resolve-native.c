/* SPDX-License-Identifier: MIT */
/* Native frames: a file offset in an ELF file, named from .gopclntab (Go programs), DWARF
 * inline chains and lines (the file or its separate debug file), then symbol tables
 * (native-file.c). */

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

int ep_resolve_native(EpResolver *r, const EpSymRequest *req, EpSymResult *out, bool *ret_cacheable) {
        EpElfFile *elf;
        EpSymLine *lines = NULL;
        size_t n_lines = 0;
        uint64_t vaddr;
        int k;

        *ret_cacheable = false;

        k = ep_resolver_get_file(r, req->file_id, &elf);
        if (k == -ENOMEM)
                return k;
        if (k == -ENOEXEC || k == -EIO)
                return ep_resolver_result_set(out, EP_SYM_BAD_FILE, 0, "", NULL);
        if (k < 0)
                return ep_resolver_result_set(out, ep_resolver_missing_status(k), 0, "", NULL);

        k = ep_elf_offset_to_vaddr(elf, req->addr, &vaddr);
        if (k == -EIO) {
                ep_resolver_bad_file_seen(r, req->file_id, k);
                return ep_resolver_result_set(out, EP_SYM_BAD_FILE, 0, "", NULL);
        }
        if (k < 0) {
                *ret_cacheable = true;
                return ep_resolver_result_set(out, EP_SYM_NOT_FOUND, 0, "", NULL);
        }

        /* A return address points after the call; the call itself is the byte before. */
        uint64_t lookup = (req->flags & EP_FRAME_FLAG_RETURN_ADDRESS) && vaddr > 0 ? vaddr - 1 : vaddr;

        k = ep_resolve_go(r, req->file_id, elf, lookup, vaddr, out);
        if (k < 0)
                return k;
        if (k > 0) {
                *ret_cacheable = true;
                return 0;
        }

        k = ep_native_symbolize(elf, req->path, lookup, &lines, &n_lines);
        if (k == -ENOMEM)
                return k;
        if (k == -ENOEXEC || k == -EIO) {
                ep_resolver_bad_file_seen(r, req->file_id, k);
                return ep_resolver_result_set(out, EP_SYM_BAD_FILE, vaddr, "", NULL);
        }
        *ret_cacheable = true;
        if (ep_resolver_debug_watch_elf(r, req->file_id, elf, req->path) == -ENOMEM) {
                ep_sym_lines_free(lines, n_lines);
                return -ENOMEM;
        }
        if (k < 0)
                return ep_resolver_result_set(out, EP_SYM_NOT_FOUND, vaddr, "", NULL);
        return result_set_lines(out, vaddr, lines, n_lines);
}
