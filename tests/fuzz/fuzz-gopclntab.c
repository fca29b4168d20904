/* SPDX-License-Identifier: MIT */
/* libFuzzer target: arbitrary bytes as a raw Go pc-line table (symbolizer/gopclntab.c) loaded
 * at 0x10000, which also serves as the memory of its inline trees (go.func.* = 0x10000, and
 * 1.16 funcdata pointers into it), then lookups around the entries of the first functions and
 * at addresses taken from the input. Any crash or sanitizer report is a bug; frames that come
 * out must point into the input. The seeds in corpus-gopclntab/ are the main.* functions of
 * tests/workloads/go/gospin.go rewritten in the 1.16, 1.18 and 1.20 layouts by
 * tests/unit/test-symbolizer-gopclntab.c (GOPCLNTAB_WRITE_SEEDS=DIR). */

#include <stdlib.h>
#include <string.h>

#include "gopclntab.h"

#define BLOB_VADDR 0x10000u
#define FUNCS_TRIED 32u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_frames(const uint8_t *data, size_t size, const EpGoFrame *frames, size_t n, size_t max) {
        if (n == 0 || n > max)
                abort();
        for (size_t i = 0; i < n; i++) {
                const uint8_t *fn = (const uint8_t *) frames[i].function, *file = (const uint8_t *) frames[i].file;

                if (fn < data || fn >= data + size)
                        abort();
                if (file[0] != 0 && (file < data || file >= data + size))
                        abort();
                /* NUL-terminated inside the input (ASan would also catch a read past it). */
                if (!memchr(fn, 0, (size_t) (data + size - fn)))
                        abort();
        }
}

static void try_pc(const EpGoTable *t, const uint8_t *data, size_t size, uint64_t pc) {
        EpGoFrame frames[EP_GO_MAX_FRAMES];
        uint64_t entry;
        size_t n;
        int r;

        r = ep_gopclntab_lookup(t, pc, frames, EP_GO_MAX_FRAMES, &n, &entry);
        if (r == 0) {
                check_frames(data, size, frames, n, EP_GO_MAX_FRAMES);
                if (entry > pc)
                        abort();
        } else if (r != -ENOENT && r != -ENOEXEC)
                abort();

        r = ep_gopclntab_lookup(t, pc, frames, 1, &n, NULL);
        if (r == 0)
                check_frames(data, size, frames, n, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        EpGoRegion region = { BLOB_VADDR, data, size };
        EpGoTable *t = NULL;
        int r;

        r = ep_gopclntab_open(data, size, BLOB_VADDR, &t);
        if (r < 0) {
                if (r != -ENOEXEC && r != -ENOTSUP)
                        abort();
                return 0;
        }
        ep_gopclntab_set_funcdata(t, BLOB_VADDR, &region, 1);

        size_t nfunc = ep_gopclntab_func_count(t);
        for (size_t i = 0; i < nfunc && i < FUNCS_TRIED; i++) {
                uint64_t entry;

                if (ep_gopclntab_func_entry(t, i, &entry) < 0)
                        continue;
                try_pc(t, data, size, entry - 1);
                try_pc(t, data, size, entry);
                try_pc(t, data, size, entry + 1);
                /* Offsets into the function from the input's bytes. */
                try_pc(t, data, size, entry + data[(i * 7) % size]);
                try_pc(t, data, size, entry + 4 * (uint64_t) data[(i * 13 + 5) % size]);
        }
        if (ep_gopclntab_func_entry(t, nfunc, &(uint64_t) { 0 }) != -ERANGE)
                abort();

        /* An address from the last 8 bytes. */
        if (size >= 16) {
                uint64_t pc = 0;
                memcpy(&pc, data + size - 8, 8);
                try_pc(t, data, size, pc);
        }

        ep_gopclntab_free(t);
        return 0;
}
