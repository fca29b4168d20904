/* SPDX-License-Identifier: MIT */
#pragma once

/* Pure parts of loading unwind tables into BPF (bpf/profiler.h, "native unwinding maps"):
 *
 *   - EpRuleSet: the rules of all loaded files, de-duplicated into one array indexed by u16
 *     (unwind_rules), reference-counted by the files that use them; index 0 is always the
 *     EP_CFA_INVALID rule.
 *   - ep_table_page(): one file's validated blob (common/unwind-table.h) → its deltas, cut in
 *     64 KiB pages, each page starting with a delta at offset_low 0 (a synthetic one carrying
 *     the rule in effect where the page does not start with an entry), so the BPF search never
 *     looks outside one page. Pages lying entirely in a gap (rule INVALID) are left out: a
 *     missing page means "not covered".
 *
 * No BPF and no I/O here: tests/unit/test-loader-tables.c checks both against the blob's own
 * lookup (ep_unwind_table_find) through bpf/unwind-pages.h, the BPF program's search. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"
#include "profiler.h"
#include "unwind-table.h"

typedef struct EpRuleSet EpRuleSet;

/* capacity: number of slots (≤ EP_BPF_MAX_RULES). */
int ep_rule_set_new(uint32_t capacity, EpRuleSet **ret);
EpRuleSet *ep_rule_set_free(EpRuleSet *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpRuleSet *, ep_rule_set_free);

/* Takes a reference on rule's slot, creating it if needed (*ret_new = true: the caller writes it
 * to BPF). -ENOSPC when every slot is in use. */
int ep_rule_set_ref(EpRuleSet *s, const struct ep_unwind_rule *rule, uint16_t *ret_index, bool *ret_new);
/* Drops a reference taken by ep_rule_set_ref(); a slot nobody uses is reused later. */
void ep_rule_set_unref(EpRuleSet *s, uint16_t index);
/* The rule in a slot (EP_CFA_INVALID for a free one). */
struct ep_unwind_rule ep_rule_set_get(const EpRuleSet *s, uint16_t index);
/* Slots in use, INVALID included. */
uint32_t ep_rule_set_used(const EpRuleSet *s);
uint32_t ep_rule_set_capacity(const EpRuleSet *s);

typedef struct EpTablePage {
        uint32_t page; /* file offset >> EP_BPF_PAGE_SHIFT */
        struct ep_bpf_page v;
} EpTablePage;

typedef struct EpPagedTable {
        struct ep_bpf_delta *deltas; /* n_deltas, page by page */
        uint32_t n_deltas;
        EpTablePage *pages; /* ascending page numbers */
        uint32_t n_pages;
} EpPagedTable;

/* Pages a validated blob. global_rule[i] is the rule set index of the blob's rule i. */
int ep_table_page(const void *blob, const uint16_t *global_rule, EpPagedTable *ret);
void ep_paged_table_done(EpPagedTable *t);
