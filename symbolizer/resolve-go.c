/* SPDX-License-Identifier: MIT */
/* Go programs: function, file and line from .gopclntab, also when the program is stripped. */

#include <errno.h>
#include <stdlib.h>

#include "resolver-internal.h"

void ep_resolve_go_free(EpResolver *r) {
        free(r->go);
        r->go = NULL;
}

int ep_resolve_go(EpResolver *r, const uint8_t file_id[EP_FILE_ID_SIZE], EpElfFile *elf, uint64_t lookup,
                  uint64_t elf_addr, EpSymResult *out) {
        return 0;
}
