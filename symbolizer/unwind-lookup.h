/* SPDX-License-Identifier: MIT */
#pragma once

/* The unwind table of one file, from the cache when it has it, else extracted and stored:
 * what the symbolizer's worker does per GetUnwindTable request, usable directly by tests and
 * the benchmark. Counters say what happened. */

#include <stddef.h>
#include <stdint.h>

#include "unwind-cache.h"
#include "unwind-extract.h"
#include "wire.h"

typedef struct EpUnwindStats {
        uint64_t tables;         /* tables handed out */
        uint64_t cache_hits;     /* answered from the cache, no parsing */
        uint64_t cache_misses;   /* extracted */
        uint64_t extract_errors; /* extraction failed (or the file was not the one named) */
        uint64_t extract_nsec;   /* time spent extracting, in total */
        uint64_t cache_bytes;    /* stored (compressed) bytes in the cache */
        uint64_t queued;         /* requests not answered yet (a level; the service's only) */
} EpUnwindStats;

/* cache may be NULL (no cache). The file ID is checked against the descriptor first: a
 * mismatch is -ESTALE (the cache is keyed by it, so it must be right). Other errors are those
 * of ep_unwind_extract(). Only *stats's counters are added to. */
int ep_unwind_lookup(EpUnwindCache *cache, int fd, const uint8_t file_id[EP_FILE_ID_SIZE],
                     const EpUnwindExtractOptions *options, EpUnwindStats *stats, void **ret_blob, size_t *ret_size);
