/* SPDX-License-Identifier: MIT */
/* libFuzzer target: arbitrary bytes as a CPython line table (symbolizer/python-lines.c). The
 * first byte picks the kind (lnotab, 3.10 linetable, 3.11+ location table) and whether the
 * table is a prefix, the next four the first line; the rest is the table. Checks beyond "no
 * crash, no sanitizer report, no leak": entries strictly increase, neighbours differ, no
 * entry starts at or past EP_PY_LINES_MAX_OFFSET, and a lookup at every even offset returns
 * the line of the entry covering it. Built with clang by tests/fuzz/meson.build; seeds in
 * corpus-python-lines/ (tables dumped from real interpreters). */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "python-lines.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static const EpPyLineTable kinds[] = { EP_PY_LINES_LNOTAB, EP_PY_LINES_LINETABLE, EP_PY_LINES_LOCATIONS };
        EpPyLines l;
        int32_t first;

        if (size < 5)
                return 0;
        memcpy(&first, data + 1, sizeof first);
        int k = ep_py_lines_decode(kinds[data[0] % 3], data + 5, size - 5, first, (data[0] >> 2) & 1, &l);
        if (k < 0) {
                if (l.entries || l.n)
                        abort();
                return 0;
        }
        for (uint32_t i = 0; i < l.n; i++) {
                if (l.entries[i].start >= EP_PY_LINES_MAX_OFFSET)
                        abort();
                if (i > 0 && (l.entries[i].start <= l.entries[i - 1].start || l.entries[i].line == l.entries[i - 1].line))
                        abort();
        }
        uint32_t e = 0, last = l.n ? l.entries[l.n - 1].start + 64 : 64;
        for (uint32_t off = 0; off < EP_PY_LINES_MAX_OFFSET && off < last; off += 2) {
                while (e + 1 < l.n && l.entries[e + 1].start <= off)
                        e++;
                int32_t want = l.n == 0 || off >= l.end || l.entries[e].start > off ? 0 : l.entries[e].line;
                if (ep_py_lines_lookup(&l, off) != want)
                        abort();
        }
        ep_py_lines_done(&l);
        return 0;
}
