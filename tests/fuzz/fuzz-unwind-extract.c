/* SPDX-License-Identifier: MIT */
/* libFuzzer target: arbitrary bytes as an ELF file (through a memfd, as the symbolizer gets
 * descriptors) into ep_unwind_extract_full(). Any crash, sanitizer report or leak is a bug;
 * a table that comes out must validate. Separate debug files are looked for under a root
 * that does not exist, so the build-ID and .gnu_debuglink paths run without reading the
 * machine's files. Built with clang by tests/fuzz/meson.build; the seeds are in
 * corpus-unwind-extract/. */

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz-util.h"
#include "unwind-extract.h"
#include "unwind-table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static int fd = -1;
        static const uint8_t id[EP_FILE_ID_SIZE] = { 0xf0, 0x22 };
        EpUnwindExtractOptions opts = {
                .debug_root = "/nonexistent/fuzz-debug-root",
                /* Smaller bounds than the daemon's keep each input fast. */
                .max_fdes = 1u << 16,
                .max_spans = 1u << 20,
                .max_cfa_bytes = 1u << 24,
        };
        void *blob = NULL;
        size_t blob_size = 0;
        uint32_t flags;

        fuzz_memfd_fill(&fd, "fuzz-elf", data, size);

        if (ep_unwind_extract_full(fd, id, "/nonexistent/dir/file.so", &opts, &blob, &blob_size, &flags, NULL) >= 0) {
                if (ep_unwind_table_validate(blob, blob_size) < 0)
                        abort();
                free(blob);
        }
        return 0;
}
