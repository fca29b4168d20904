/* SPDX-License-Identifier: MIT */
#include "hashmap.h"
#include "table-pages.h"

struct EpRuleSet {
        EpHashmap *index;            /* struct ep_unwind_rule → uint16_t slot */
        struct ep_unwind_rule *rules; /* by slot */
        uint32_t *refs;              /* by slot; 0 = free */
        uint16_t *free_list;
        uint32_t n_free;
        uint32_t next;               /* slots below were handed out at least once */
        uint32_t capacity;
        uint32_t used;
};

_Static_assert(sizeof(struct ep_unwind_rule) == 8, "rules are hashed as 8 bytes without padding");

EpRuleSet *ep_rule_set_free(EpRuleSet *s) {
        if (!s)
                return NULL;
        ep_hashmap_free(s->index);
        free(s->rules);
        free(s->refs);
        free(s->free_list);
        free(s);
        return NULL;
}

int ep_rule_set_new(uint32_t capacity, EpRuleSet **ret) {
        _cleanup_(ep_rule_set_freep) EpRuleSet *s = NULL;
        void *slot;
        uint16_t zero = EP_BPF_RULE_INVALID;

        if (capacity < 1 || capacity > EP_BPF_MAX_RULES)
                return -EINVAL;
        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->index = ep_hashmap_new(sizeof(struct ep_unwind_rule), sizeof(uint16_t));
        s->rules = calloc(capacity, sizeof *s->rules);
        s->refs = calloc(capacity, sizeof *s->refs);
        s->free_list = calloc(capacity, sizeof *s->free_list);
        if (!s->index || !s->rules || !s->refs || !s->free_list)
                return -ENOMEM;
        s->capacity = capacity;

        /* Slot 0: EP_CFA_INVALID, permanently (the synthetic delta of pages in gaps, and what
         * BPF reads for a zeroed array element). */
        if (ep_hashmap_put(s->index, &s->rules[0], &slot) < 0)
                return -ENOMEM;
        memcpy(slot, &zero, sizeof zero);
        s->refs[0] = 1;
        s->next = 1;
        s->used = 1;
        *ret = TAKE_PTR(s);
        return 0;
}

int ep_rule_set_ref(EpRuleSet *s, const struct ep_unwind_rule *rule, uint16_t *ret_index, bool *ret_new) {
        struct ep_unwind_rule key = {
                .cfa_kind = rule->cfa_kind,
                .fp_rule = rule->fp_rule,
                .fp_offset = rule->fp_offset,
                .cfa_offset = rule->cfa_offset,
        };
        uint16_t idx;
        void *slot;
        int r;

        if (key.cfa_kind == EP_CFA_INVALID)
                key = (struct ep_unwind_rule) {}; /* one INVALID rule, whatever its other fields */

        slot = ep_hashmap_get(s->index, &key);
        if (slot) {
                memcpy(&idx, slot, sizeof idx);
                if (idx != EP_BPF_RULE_INVALID)
                        s->refs[idx]++;
                *ret_index = idx;
                *ret_new = false;
                return 0;
        }

        if (s->n_free > 0)
                idx = s->free_list[--s->n_free];
        else if (s->next < s->capacity)
                idx = (uint16_t) s->next++;
        else
                return -ENOSPC;

        r = ep_hashmap_put(s->index, &key, &slot);
        if (r < 0) {
                s->free_list[s->n_free++] = idx;
                return r;
        }
        memcpy(slot, &idx, sizeof idx);
        s->rules[idx] = key;
        s->refs[idx] = 1;
        s->used++;
        *ret_index = idx;
        *ret_new = true;
        return 0;
}

void ep_rule_set_unref(EpRuleSet *s, uint16_t index) {
        if (index == EP_BPF_RULE_INVALID || index >= s->next || s->refs[index] == 0)
                return;
        if (--s->refs[index] > 0)
                return;
        (void) ep_hashmap_remove(s->index, &s->rules[index], NULL);
        s->free_list[s->n_free++] = index;
        s->used--;
}

struct ep_unwind_rule ep_rule_set_get(const EpRuleSet *s, uint16_t index) {
        if (index >= s->next || s->refs[index] == 0)
                return (struct ep_unwind_rule) {};
        return s->rules[index];
}

uint32_t ep_rule_set_used(const EpRuleSet *s) {
        return s->used;
}

uint32_t ep_rule_set_capacity(const EpRuleSet *s) {
        return s->capacity;
}

/* ---- paging ---- */

void ep_paged_table_done(EpPagedTable *t) {
        free(t->deltas);
        free(t->pages);
        *t = (EpPagedTable) {};
}

int ep_table_page(const void *blob, const uint16_t *global_rule, EpPagedTable *ret) {
        const EpUnwindTableHeader *h = ep_unwind_table_header(blob);
        const EpUnwindEntry *e = ep_unwind_table_entries(blob);
        uint32_t n = h->n_entries, first_page, last_page, i = 0;
        uint16_t in_effect = EP_BPF_RULE_INVALID; /* rule of the last entry before the page */
        _cleanup_free_ struct ep_bpf_delta *deltas = NULL;
        _cleanup_free_ EpTablePage *pages = NULL;
        size_t n_deltas = 0, n_pages = 0, max_pages;

        if (n == 0)
                return -EINVAL;
        first_page = e[0].file_offset >> EP_BPF_PAGE_SHIFT;
        last_page = e[n - 1].file_offset >> EP_BPF_PAGE_SHIFT;
        max_pages = (size_t) last_page - first_page + 1;
        /* Every entry, plus at most one synthetic delta per page. */
        deltas = malloc(((size_t) n + max_pages) * sizeof *deltas);
        pages = malloc(max_pages * sizeof *pages);
        if (!deltas || !pages)
                return -ENOMEM;

        for (uint64_t page = first_page; page <= last_page; page++) {
                uint64_t page_start = page << EP_BPF_PAGE_SHIFT, page_end = (page + 1) << EP_BPF_PAGE_SHIFT;
                size_t first = n_deltas;

                if (i == n || e[i].file_offset != page_start) {
                        if (in_effect == EP_BPF_RULE_INVALID && (i == n || e[i].file_offset >= page_end))
                                continue; /* a page entirely in a gap */
                        deltas[n_deltas++] = (struct ep_bpf_delta) { .offset_low = 0, .rule = in_effect };
                }
                for (; i < n && e[i].file_offset < page_end; i++) {
                        in_effect = global_rule[e[i].rule];
                        deltas[n_deltas++] = (struct ep_bpf_delta) {
                                .offset_low = (uint16_t) (e[i].file_offset - page_start),
                                .rule = in_effect,
                        };
                }
                pages[n_pages] = (EpTablePage) {
                        .page = (uint32_t) page,
                        .v = { .first = (uint32_t) first, .count = (uint32_t) (n_deltas - first) },
                };
                /* sub[k]: the last delta at or before offset_low k << 12. */
                for (uint32_t k = 0, j = 0; k < EP_BPF_SUBPAGES; k++) {
                        uint32_t at = k << EP_BPF_SUBPAGE_SHIFT;
                        while (first + j + 1 < n_deltas && deltas[first + j + 1].offset_low <= at)
                                j++;
                        pages[n_pages].v.sub[k] = (uint16_t) j;
                }
                n_pages++;
        }

        *ret = (EpPagedTable) {
                .deltas = TAKE_PTR(deltas),
                .n_deltas = (uint32_t) n_deltas,
                .pages = TAKE_PTR(pages),
                .n_pages = (uint32_t) n_pages,
        };
        return 0;
}
