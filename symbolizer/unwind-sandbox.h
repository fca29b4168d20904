/* SPDX-License-Identifier: MIT */
#pragma once

/* Extraction of a file we have not seen, in a forked child with an address-space limit and a
 * time limit. libdw trusts CFI more than we may: a register number in a CFI program sizes its
 * register table (up to ~2 GiB for one crafted 1 KiB file), and any user can map such a file.
 * Whatever the child does — allocate without bound, loop, crash — costs that child and one
 * BadFile answer, never the symbolizer. Its time is bounded in CPU time, which is what a
 * hostile file costs: a cold disk or a loaded machine stretches the wall-clock time of any file
 * (a first extraction took ~45 s on a fresh CI machine), and a wall-clock limit would kill
 * good files there, again at every retry. A far longer wall-clock limit only catches a child
 * stuck in I/O. */

#include <stddef.h>
#include <stdint.h>

#include "unwind-extract.h"

typedef struct EpUnwindSandboxLimits {
        uint64_t memory_bytes; /* address space the child may add; 0 = 1 GiB */
        uint64_t cpu_usec;     /* CPU time, rounded up to whole seconds; 0 = 30 s */
        uint64_t timeout_usec; /* wall-clock time; 0 = 5 min */
} EpUnwindSandboxLimits;

/* Same contract as ep_unwind_extract_full(); in addition -E2BIG when the child hit the memory
 * limit or was killed by a signal, -ETIME when it used up its CPU time (the file is the
 * problem), -ETIMEDOUT when it ran out of wall-clock time (the machine may be). */
int ep_unwind_extract_sandboxed(int fd, const uint8_t file_id[EP_FILE_ID_SIZE],
                                const EpUnwindExtractOptions *options, const EpUnwindSandboxLimits *limits,
                                void **ret_blob, size_t *ret_size, uint32_t *ret_flags,
                                EpUnwindExtractStats *ret_stats);
