/* SPDX-License-Identifier: MIT */
#pragma once

/* CPython line tables decoded into (start offset, line) entries: pure functions over the bytes
 * of a code object's co_lnotab / co_linetable (resolve-cpython.c reads them from the process).
 *
 *   EP_PY_LINES_LNOTAB (3.6–3.9): pairs (offset increment in bytes, line increment as a signed
 *     byte); the increments of a pair apply from the offset the pair reaches on.
 *   EP_PY_LINES_LINETABLE (3.10, PEP 626): pairs (range length in bytes, line delta as a
 *     signed byte, -128: the range has no line); each pair is the next range.
 *   EP_PY_LINES_LOCATIONS (3.11+, the location table): entries of a first byte 1CCCCLLL
 *     (code C, length LLL+1 code units) and what the code says follows: 15 no location,
 *     14 long form (signed varint line delta, then end line, column, end column varints),
 *     13 no column (signed varint line delta), 10–12 one line of delta C-10 (two column
 *     bytes), 0–9 the same line (one column byte). Varints are 6-bit groups, least
 *     significant first, 0x40 meaning "more"; a signed varint keeps the sign in bit 0.
 *
 * Offsets out of the decoder are always bytes (3.10+ tables count 16-bit code units in the
 * location table; the 3.10 table counts bytes). Only offsets below EP_PY_LINES_MAX_OFFSET are
 * decoded (an EP_FRAME_CPYTHON request cannot carry larger ones), so a table's entries are
 * bounded by its size and by that limit. */

#include <stddef.h>
#include <stdint.h>

#include "python-layout.h"

#define EP_PY_LINES_MAX_OFFSET 0x10000u

typedef struct EpPyLineEntry {
        uint32_t start; /* byte offset where this line starts */
        int32_t line;   /* 0: no line for this range */
} EpPyLineEntry;

typedef struct EpPyLines {
        EpPyLineEntry *entries; /* sorted by start, strictly increasing, neighbours differ */
        uint32_t n;
        uint32_t end;           /* offsets from here on have no line (UINT32_MAX: co_lnotab,
                                 * whose last line runs to the end of the code) */
} EpPyLines;

/* Decodes table (size bytes) of kind for a code object whose co_firstlineno is firstlineno.
 * partial: table is a prefix of the real one (a malformed or cut last entry just ends the
 * decoding). 0, -EBADMSG (malformed), -EPROTONOSUPPORT (unknown kind), -ENOMEM. */
int ep_py_lines_decode(EpPyLineTable kind, const uint8_t *table, size_t size, int32_t firstlineno,
                       int partial, EpPyLines *ret);
/* The line of the instruction at byte offset, 0 when the table gives none. */
int32_t ep_py_lines_lookup(const EpPyLines *l, uint32_t offset);
/* Heap bytes the entries take. */
size_t ep_py_lines_memory(const EpPyLines *l);
void ep_py_lines_done(EpPyLines *l);
