/* SPDX-License-Identifier: MIT */
/* The loader's table paging and global rule de-duplication (unwinder-loader/table-pages.c),
 * checked through bpf/unwind-pages.h — the very search the BPF program runs — against the
 * blob's own lookup (ep_unwind_table_find). */

#include <stdint.h>

#include "table-pages.h"
#include "tests.h"

typedef struct PagedCtx {
        const EpPagedTable *t;
} PagedCtx;

#define EP_PAGES_CTX const PagedCtx *
static inline int ep_page_delta(const PagedCtx *c, uint32_t index, struct ep_bpf_delta *ret) {
        if (index >= c->t->n_deltas)
                return -1;
        *ret = c->t->deltas[index];
        return 0;
}
#include "unwind-pages.h"

/* The global rule in effect at off as BPF would find it; EP_BPF_RULE_INVALID when not covered. */
static int paged_lookup(const EpPagedTable *t, uint32_t off) {
        PagedCtx c = { .t = t };
        uint32_t page = off >> EP_BPF_PAGE_SHIFT;

        for (uint32_t i = 0; i < t->n_pages; i++)
                if (t->pages[i].page == page)
                        return ep_page_search(&c, &t->pages[i].v, off & 0xffff);
        return EP_BPF_RULE_INVALID;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(void) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return (uint32_t) rng_state;
}

/* A blob with n_rules rules (rule 0 INVALID) and entries at the given offsets. */
static void *make_blob(uint32_t n_rules, const uint32_t *offsets, const uint16_t *rules, uint32_t n, size_t *ret_size) {
        size_t size = ep_unwind_table_size(n_rules, n);
        void *blob = aligned_alloc(8, ALIGN8(size));
        EpUnwindTableHeader *h = blob;
        struct ep_unwind_rule *r;
        EpUnwindEntry *e;

        ASSERT_TRUE(blob);
        memset(blob, 0, size);
        *h = (EpUnwindTableHeader) {
                .magic = EP_UNWIND_TABLE_MAGIC,
                .version = EP_UNWIND_TABLE_VERSION,
                .n_rules = n_rules,
                .n_entries = n,
                .flags = EP_UNWIND_FROM_EH_FRAME,
        };
        r = (struct ep_unwind_rule *) ep_unwind_table_rules(blob);
        for (uint32_t i = 1; i < n_rules; i++)
                r[i] = (struct ep_unwind_rule) {
                        .cfa_kind = EP_CFA_SP,
                        .fp_rule = i % 2 ? EP_FP_SAME : EP_FP_AT_CFA,
                        .fp_offset = -16,
                        .cfa_offset = (int32_t) (8 * i),
                };
        e = (EpUnwindEntry *) ep_unwind_table_entries(blob);
        for (uint32_t i = 0; i < n; i++)
                e[i] = (EpUnwindEntry) { .file_offset = offsets[i], .rule = rules[i] };
        *ret_size = size;
        return blob;
}

static void check_equivalent(const void *blob, const uint16_t *global, const EpPagedTable *t, uint32_t off) {
        long i = ep_unwind_table_find(blob, off);
        int want = i < 0 ? EP_BPF_RULE_INVALID : global[ep_unwind_table_entries(blob)[i].rule];
        int got = paged_lookup(t, off);

        if (got != want)
                fprintf(stderr, "offset 0x%x: paged rule %d, blob rule %d\n", off, got, want);
        ASSERT_EQ(got, want);
}

static void test_paging_random(void) {
        for (int round = 0; round < 200; round++) {
                uint32_t n = 2 + rnd() % (round < 100 ? 50 : 5000), n_rules = 3 + rnd() % 20; /* 3: a terminator, and two rules to alternate before it */
                uint32_t *offsets = calloc(n, sizeof *offsets);
                uint16_t *rules = calloc(n, sizeof *rules), *global = calloc(n_rules, sizeof *global);
                uint32_t off = rnd() % 0x30000;
                EpPagedTable t = {};
                size_t size;
                void *blob;

                for (uint32_t i = 0; i < n; i++) {
                        /* Mostly small steps, sometimes a jump over several pages. */
                        off += (rnd() % 8 == 0) ? 1 + rnd() % 0x50000 : 1 + rnd() % 64;
                        offsets[i] = off;
                        if (i == n - 1) {
                                rules[i] = 0; /* the terminator */
                                break;
                        }
                        do
                                rules[i] = (uint16_t) (rnd() % n_rules);
                        while ((i > 0 && rules[i] == rules[i - 1]) || (i == n - 2 && rules[i] == 0));
                }
                blob = make_blob(n_rules, offsets, rules, n, &size);
                ASSERT_OK(ep_unwind_table_validate(blob, size));
                global[0] = EP_BPF_RULE_INVALID;
                for (uint32_t i = 1; i < n_rules; i++)
                        global[i] = (uint16_t) (100 + i);
                ASSERT_OK(ep_table_page(blob, global, &t));

                /* Structure: ascending pages, every page starts at offset 0, ≤ 2^16 deltas. */
                for (uint32_t p = 0; p < t.n_pages; p++) {
                        ASSERT_TRUE(p == 0 || t.pages[p].page > t.pages[p - 1].page);
                        ASSERT_TRUE(t.pages[p].v.count >= 1 && t.pages[p].v.count <= 65536);
                        ASSERT_EQ(t.deltas[t.pages[p].v.first].offset_low, 0);
                }
                ASSERT_TRUE(t.n_deltas <= n + t.n_pages);

                /* Every entry, its neighbours, every page boundary, random offsets. */
                for (uint32_t i = 0; i < n; i++) {
                        check_equivalent(blob, global, &t, offsets[i]);
                        check_equivalent(blob, global, &t, offsets[i] - 1);
                        check_equivalent(blob, global, &t, offsets[i] + 1);
                }
                for (uint32_t pg = (offsets[0] >> 16); pg <= (offsets[n - 1] >> 16) + 1; pg++) {
                        check_equivalent(blob, global, &t, pg << 16);
                        check_equivalent(blob, global, &t, (pg << 16) - 1);
                        check_equivalent(blob, global, &t, (pg << 16) + (rnd() & 0xffff));
                }
                check_equivalent(blob, global, &t, 0);
                check_equivalent(blob, global, &t, UINT32_MAX);

                ep_paged_table_done(&t);
                free(blob);
                free(offsets);
                free(rules);
                free(global);
        }
}

static void test_paging_big_page(void) {
        /* A page with 65536 entries (one per byte) and a synthetic-only page after it. */
        uint32_t n = 65536 + 2;
        uint32_t *offsets = calloc(n, sizeof *offsets);
        uint16_t *rules = calloc(n, sizeof *rules), global[3] = { 0, 7, 9 };
        EpPagedTable t = {};
        size_t size;
        void *blob;

        for (uint32_t i = 0; i < 65536; i++) {
                offsets[i] = 0x10000 + i;
                rules[i] = 1 + (i & 1);
        }
        offsets[65536] = 0x20000 + 0x10000 + 5; /* page 3; page 2 is covered by the last rule */
        rules[65536] = 1;
        offsets[65537] = 0x30000 + 0x100;
        rules[65537] = 0;
        blob = make_blob(3, offsets, rules, n, &size);
        ASSERT_OK(ep_unwind_table_validate(blob, size));
        ASSERT_OK(ep_table_page(blob, global, &t));
        ASSERT_EQ(t.n_pages, 3);
        ASSERT_EQ(t.pages[0].v.count, 65536);
        ASSERT_EQ(t.pages[1].page, 2);
        ASSERT_EQ(t.pages[1].v.count, 1);
        ASSERT_EQ(t.pages[2].v.count, 3); /* synthetic + 2 entries */
        for (uint32_t off = 0xff00; off < 0x30200; off += 1)
                check_equivalent(blob, global, &t, off);
        ep_paged_table_done(&t);
        free(blob);
        free(offsets);
        free(rules);
}

static void test_rule_set(void) {
        _cleanup_(ep_rule_set_freep) EpRuleSet *s = NULL;
        struct ep_unwind_rule a = { .cfa_kind = EP_CFA_SP, .cfa_offset = 8 };
        struct ep_unwind_rule b = { .cfa_kind = EP_CFA_FP, .fp_rule = EP_FP_AT_CFA, .fp_offset = -16, .cfa_offset = 16 };
        struct ep_unwind_rule inv = { .cfa_kind = EP_CFA_INVALID, .cfa_offset = 99 };
        uint16_t ia, ia2, ib, ic, ii;
        bool created;

        ASSERT_OK(ep_rule_set_new(4, &s));
        ASSERT_EQ(ep_rule_set_used(s), 1);

        ASSERT_OK(ep_rule_set_ref(s, &inv, &ii, &created));
        ASSERT_EQ(ii, EP_BPF_RULE_INVALID);
        ASSERT_TRUE(!created);

        ASSERT_OK(ep_rule_set_ref(s, &a, &ia, &created));
        ASSERT_TRUE(created);
        ASSERT_TRUE(ia != EP_BPF_RULE_INVALID);
        ASSERT_OK(ep_rule_set_ref(s, &a, &ia2, &created)); /* another file, same rule */
        ASSERT_TRUE(!created);
        ASSERT_EQ(ia, ia2);
        ASSERT_OK(ep_rule_set_ref(s, &b, &ib, &created));
        ASSERT_TRUE(created && ib != ia);
        ASSERT_EQ(ep_rule_set_used(s), 3);

        /* Full: one slot left, then -ENOSPC. */
        struct ep_unwind_rule c = { .cfa_kind = EP_CFA_SP, .cfa_offset = 24 };
        struct ep_unwind_rule d = { .cfa_kind = EP_CFA_SP, .cfa_offset = 32 };
        ASSERT_OK(ep_rule_set_ref(s, &c, &ic, &created));
        ASSERT_EQ(ep_rule_set_ref(s, &d, &ic, &created), -ENOSPC);

        /* a is still used once; releasing b frees its slot for d. */
        ep_rule_set_unref(s, ia);
        ASSERT_EQ(ep_rule_set_used(s), 4);
        ep_rule_set_unref(s, ib);
        ASSERT_EQ(ep_rule_set_used(s), 3);
        ASSERT_OK(ep_rule_set_ref(s, &d, &ic, &created));
        ASSERT_TRUE(created);
        ASSERT_EQ(ic, ib);
        /* b is gone: it gets a new slot only when one is free. */
        ASSERT_EQ(ep_rule_set_ref(s, &b, &ib, &created), -ENOSPC);
        ep_rule_set_unref(s, EP_BPF_RULE_INVALID); /* never released */
        ASSERT_OK(ep_rule_set_ref(s, &inv, &ii, &created));
        ASSERT_EQ(ii, EP_BPF_RULE_INVALID);
}

int main(void) {
        test_rule_set();
        test_paging_big_page();
        test_paging_random();
        return tests_summary("test-loader-tables");
}
