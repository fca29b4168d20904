/* SPDX-License-Identifier: MIT */
#pragma once

/* Extraction of a file we have not seen, in the sandbox (sandbox.h). libdw trusts CFI more
 * than we may: a register number in a CFI program sizes its register table (up to ~2 GiB for
 * one crafted 1 KiB file), and any user can map such a file. */

#include <stddef.h>
#include <stdint.h>

#include "sandbox.h"
#include "unwind-extract.h"

typedef EpSandboxLimits EpUnwindSandboxLimits;

/* Same contract as ep_unwind_extract_full(); in addition -E2BIG when the child hit the memory
 * limit or was killed by a signal, -ETIME when it used up its CPU time (the file is the
 * problem), -ETIMEDOUT when it ran out of wall-clock time (the machine may be). */
int ep_unwind_extract_sandboxed(int fd, const uint8_t file_id[EP_FILE_ID_SIZE],
                                const EpUnwindExtractOptions *options, const EpUnwindSandboxLimits *limits,
                                void **ret_blob, size_t *ret_size, uint32_t *ret_flags,
                                EpUnwindExtractStats *ret_stats);
