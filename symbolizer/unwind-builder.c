/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"
#include "unwind-builder.h"

typedef struct Span {
        uint64_t start, end;
        struct ep_unwind_rule rule;
        uint32_t seq;
} Span;

struct EpUnwindBuilder {
        Span *spans;
        size_t n, allocated, max;
};

/* While finishing: entries and rules grow, rules are found by value. */
typedef struct Table {
        EpUnwindEntry *entries;
        size_t n_entries, allocated;
        struct ep_unwind_rule *rules;
        size_t n_rules, rules_allocated;
        EpHashmap *index; /* rule (8 bytes) → uint16_t */
} Table;

int ep_unwind_builder_new(size_t max_spans, EpUnwindBuilder **ret) {
        EpUnwindBuilder *b = calloc(1, sizeof(EpUnwindBuilder));

        if (!b)
                return -ENOMEM;
        b->max = max_spans;
        *ret = b;
        return 0;
}

EpUnwindBuilder *ep_unwind_builder_free(EpUnwindBuilder *b) {
        if (!b)
                return NULL;
        free(b->spans);
        free(b);
        return NULL;
}

size_t ep_unwind_builder_spans(const EpUnwindBuilder *b) {
        return b->n;
}

static bool rule_eq(const struct ep_unwind_rule *a, const struct ep_unwind_rule *b) {
        return a->cfa_kind == b->cfa_kind && a->fp_rule == b->fp_rule && a->fp_offset == b->fp_offset &&
               a->cfa_offset == b->cfa_offset;
}

int ep_unwind_builder_add(EpUnwindBuilder *b, uint64_t start, uint64_t end, const struct ep_unwind_rule *rule) {
        if (end <= start)
                return 0;
        if (end > UINT32_MAX)
                return -EFBIG;

        if (b->n > 0) {
                Span *last = &b->spans[b->n - 1];
                if (last->end == start && rule_eq(&last->rule, rule)) {
                        last->end = end;
                        return 0;
                }
        }

        if (b->n >= b->max)
                return -E2BIG;
        if (b->n == b->allocated) {
                size_t n = MIN(MAX(b->allocated * 2, (size_t) 4096), b->max);
                Span *a = reallocarray(b->spans, n, sizeof(Span));
                if (!a)
                        return -ENOMEM;
                b->spans = a;
                b->allocated = n;
        }
        b->spans[b->n] = (Span) { .start = start, .end = end, .rule = *rule, .seq = (uint32_t) b->n };
        b->n++;
        return 0;
}

static int span_cmp(const void *a, const void *b) {
        const Span *x = a, *y = b;

        if (x->start != y->start)
                return x->start < y->start ? -1 : 1;
        return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int rule_index(Table *t, const struct ep_unwind_rule *rule, uint16_t *ret) {
        void *v;
        int r;

        r = ep_hashmap_put(t->index, rule, &v);
        if (r < 0)
                return r;
        if (r == 0) {
                memcpy(ret, v, sizeof(uint16_t));
                return 0;
        }

        if (t->n_rules >= EP_UNWIND_TABLE_MAX_RULES)
                return -E2BIG;
        if (t->n_rules == t->rules_allocated) {
                size_t n = MAX(t->rules_allocated * 2, (size_t) 64);
                struct ep_unwind_rule *a = reallocarray(t->rules, n, sizeof(*a));
                if (!a)
                        return -ENOMEM;
                t->rules = a;
                t->rules_allocated = n;
        }
        uint16_t idx = (uint16_t) t->n_rules;
        t->rules[t->n_rules++] = *rule;
        memcpy(v, &idx, sizeof idx);
        *ret = idx;
        return 0;
}

static int emit(Table *t, uint64_t offset, const struct ep_unwind_rule *rule) {
        uint16_t idx;
        int r;

        r = rule_index(t, rule, &idx);
        if (r < 0)
                return r;
        if (t->n_entries > 0 && t->entries[t->n_entries - 1].rule == idx)
                return 0; /* same rule continues */
        if (t->n_entries >= EP_UNWIND_TABLE_MAX_ENTRIES)
                return -E2BIG;
        if (t->n_entries == t->allocated) {
                size_t n = MAX(t->allocated * 2, (size_t) 1024);
                EpUnwindEntry *a = reallocarray(t->entries, n, sizeof(EpUnwindEntry));
                if (!a)
                        return -ENOMEM;
                t->entries = a;
                t->allocated = n;
        }
        t->entries[t->n_entries++] = (EpUnwindEntry) { .file_offset = (uint32_t) offset, .rule = idx };
        return 0;
}

static int assemble(const Table *t, const uint8_t file_id[EP_FILE_ID_SIZE], uint32_t flags, void **ret_blob,
                    size_t *ret_size) {
        size_t size = ep_unwind_table_size((uint32_t) t->n_rules, (uint32_t) t->n_entries);
        EpUnwindTableHeader *h;
        void *blob;

        /* malloc's alignment (16) satisfies the blob's 8. */
        blob = malloc(size);
        if (!blob)
                return -ENOMEM;
        h = blob;
        *h = (EpUnwindTableHeader) {
                .magic = EP_UNWIND_TABLE_MAGIC,
                .version = EP_UNWIND_TABLE_VERSION,
                .n_rules = (uint32_t) t->n_rules,
                .n_entries = (uint32_t) t->n_entries,
                .flags = flags,
        };
        memcpy(h->file_id, file_id, EP_FILE_ID_SIZE);
        memcpy((void *) ep_unwind_table_rules(blob), t->rules, t->n_rules * sizeof(struct ep_unwind_rule));
        memcpy((void *) ep_unwind_table_entries(blob), t->entries, t->n_entries * sizeof(EpUnwindEntry));

        *ret_blob = blob;
        *ret_size = size;
        return 0;
}

static void table_done(Table *t) {
        free(t->entries);
        free(t->rules);
        ep_hashmap_free(t->index);
}

int ep_unwind_table_new_fp_fallback(const uint8_t file_id[EP_FILE_ID_SIZE], uint32_t flags, void **ret_blob,
                                    size_t *ret_size) {
        struct ep_unwind_rule rule = { .cfa_kind = EP_CFA_FP_FALLBACK };
        EpUnwindEntry entry = { .file_offset = 0, .rule = 0 };
        Table t = { .entries = &entry, .n_entries = 1, .rules = &rule, .n_rules = 1 };

        return assemble(&t, file_id, flags | EP_UNWIND_FP_FALLBACK, ret_blob, ret_size);
}

int ep_unwind_builder_finish(EpUnwindBuilder *b, const uint8_t file_id[EP_FILE_ID_SIZE], uint32_t flags,
                             void **ret_blob, size_t *ret_size) {
        const struct ep_unwind_rule invalid = { .cfa_kind = EP_CFA_INVALID };
        Table t = {};
        uint64_t pos = 0;
        bool have = false;
        int r;

        if (b->n == 0)
                return ep_unwind_table_new_fp_fallback(file_id, flags, ret_blob, ret_size);

        t.index = ep_hashmap_new(sizeof(struct ep_unwind_rule), sizeof(uint16_t));
        if (!t.index)
                return -ENOMEM;

        /* Extraction adds spans in address order but for a few marks: sort only if needed. */
        for (size_t i = 1; i < b->n; i++)
                if (span_cmp(&b->spans[i - 1], &b->spans[i]) > 0) {
                        qsort(b->spans, b->n, sizeof(Span), span_cmp);
                        break;
                }

        for (size_t i = 0; i < b->n; i++) {
                const Span *s = &b->spans[i];
                uint64_t start = have ? MAX(s->start, pos) : s->start;

                if (start >= s->end)
                        continue; /* wholly inside what came before */
                if (have && start - pos >= EP_UNWIND_PADDING_GAP) {
                        r = emit(&t, pos, &invalid);
                        if (r < 0)
                                goto finish;
                }
                r = emit(&t, start, &s->rule);
                if (r < 0)
                        goto finish;
                pos = s->end;
                have = true;
        }

        /* The end of the covered range. An INVALID span may have been last: it still needs its
         * own terminating entry only if the last entry is not INVALID already. */
        r = emit(&t, pos, &invalid);
        if (r < 0)
                goto finish;
        if (t.rules[t.entries[t.n_entries - 1].rule].cfa_kind != EP_CFA_INVALID) {
                r = -EINVAL; /* cannot happen: the last emit was INVALID */
                goto finish;
        }

        r = assemble(&t, file_id, flags, ret_blob, ret_size);
finish:
        table_done(&t);
        return r;
}
