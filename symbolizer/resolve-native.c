/* SPDX-License-Identifier: MIT */
/* Native frames: a file offset in an ELF file, named from its symbol tables. */

#include <errno.h>
#include <stdlib.h>

#include "elf-symbols.h"
#include "resolver-internal.h"

int ep_resolve_native(EpResolver *r, const EpSymRequest *req, EpSymResult *out, bool *ret_cacheable) {
        EpElfFile *elf;
        uint64_t vaddr;
        char *name = NULL;
        int k;

        *ret_cacheable = false;

        k = ep_resolver_get_file(r, req->file_id, &elf);
        if (k == -ENOMEM)
                return k;
        if (k == -ENOEXEC || k == -EIO)
                return ep_resolver_result_set(out, EP_SYM_BAD_FILE, 0, "", NULL);
        if (k < 0)
                return ep_resolver_result_set(out, EP_SYM_NO_FILE, 0, "", NULL);

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

        k = ep_elf_lookup(elf, lookup, &name, NULL);
        if (k == -ENOMEM)
                return k;
        if (k == -ENOEXEC || k == -EIO) {
                ep_resolver_bad_file_seen(r, req->file_id, k);
                return ep_resolver_result_set(out, EP_SYM_BAD_FILE, vaddr, "", NULL);
        }
        *ret_cacheable = true;
        if (k < 0)
                return ep_resolver_result_set(out, EP_SYM_NOT_FOUND, vaddr, "", NULL);
        return ep_resolver_result_set(out, EP_SYM_OK, vaddr, "", name);
}
