/* SPDX-License-Identifier: MIT */
#pragma once

/* Turns rule spans (file-offset ranges with an ep_unwind_rule) into the table blob of
 * common/unwind-table.h: sorted entries, consecutive equal rules merged, rules de-duplicated
 * within the file, gaps between spans marked EP_CFA_INVALID and an INVALID entry at the end.
 *
 * Gaps shorter than EP_UNWIND_PADDING_GAP bytes are alignment padding between functions (never
 * executed; a return address there belongs to the call before it, and is looked up at pc - 1):
 * the rule before them extends over them instead of an INVALID entry, which keeps tables small.
 * Where spans overlap (only in broken or hostile CFI), the one starting first keeps the
 * overlapping bytes; at equal starts the one added first. */

#include <stddef.h>
#include <stdint.h>

#include "macro.h"
#include "unwind-table.h"

#define EP_UNWIND_PADDING_GAP 16u

typedef struct EpUnwindBuilder EpUnwindBuilder;

/* max_spans bounds memory for hostile input: adding more is -E2BIG. */
int ep_unwind_builder_new(size_t max_spans, EpUnwindBuilder **ret);
EpUnwindBuilder *ep_unwind_builder_free(EpUnwindBuilder *b);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpUnwindBuilder *, ep_unwind_builder_free);

/* [start, end) in file offsets; empty spans are ignored. A span continuing the previous one
 * with the same rule extends it. -EFBIG beyond 4 GiB, -E2BIG past max_spans, -ENOMEM. */
int ep_unwind_builder_add(EpUnwindBuilder *b, uint64_t start, uint64_t end, const struct ep_unwind_rule *rule);
size_t ep_unwind_builder_spans(const EpUnwindBuilder *b);

/* The blob (malloc'd, 8-byte aligned). With no spans at all it is the one-rule
 * EP_CFA_FP_FALLBACK table and flags gains EP_UNWIND_FP_FALLBACK. -E2BIG when there are more
 * than EP_UNWIND_TABLE_MAX_RULES distinct rules or EP_UNWIND_TABLE_MAX_ENTRIES entries. */
int ep_unwind_builder_finish(EpUnwindBuilder *b, const uint8_t file_id[EP_FILE_ID_SIZE], uint32_t flags,
                             void **ret_blob, size_t *ret_size);

/* The FP_FALLBACK table on its own. */
int ep_unwind_table_new_fp_fallback(const uint8_t file_id[EP_FILE_ID_SIZE], uint32_t flags, void **ret_blob,
                                    size_t *ret_size);
