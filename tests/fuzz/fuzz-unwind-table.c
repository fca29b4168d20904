/* SPDX-License-Identifier: MIT */
/* libFuzzer target: arbitrary bytes as an unwind table blob from the symbolizer
 * (Symbolizer1.GetUnwindTable), through what the loader does with one: validation, then for a
 * table that passes, its rules into the global rule set and its entries cut into BPF pages.
 * Any crash, sanitizer report or leak is a bug; a table that validates must page, and every
 * entry must be found at its own offset. Built with clang by tests/fuzz/meson.build; seeds in
 * corpus-unwind-table/ (tables the symbolizer extracted from small programs). */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "table-pages.h"
#include "unwind-table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The rules of a validated blob into set: *ret_global[i] is rule i's slot. false when the set
 * is full (the loader then loads the table later, or not at all). */
static bool rules_in(EpRuleSet *set, const void *blob, uint16_t *global, uint32_t *ret_n) {
        const EpUnwindTableHeader *h = ep_unwind_table_header(blob);
        const struct ep_unwind_rule *rules = ep_unwind_table_rules(blob);
        uint32_t i;

        for (i = 0; i < h->n_rules; i++) {
                bool created;
                if (ep_rule_set_ref(set, &rules[i], &global[i], &created) < 0)
                        break;
        }
        *ret_n = i;
        return i == h->n_rules;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static EpRuleSet *set;
        void *blob;

        if (!set && ep_rule_set_new(EP_BPF_MAX_RULES, &set) < 0)
                abort();
        /* The loader maps the blob from a memfd: page-aligned, like malloc's 16 bytes here. */
        blob = malloc(size ?: 1);
        if (!blob)
                return 0;
        memcpy(blob, data, size);
        if (ep_unwind_table_validate(blob, size) < 0) {
                free(blob);
                return 0;
        }

        const EpUnwindTableHeader *h = ep_unwind_table_header(blob);
        const EpUnwindEntry *entries = ep_unwind_table_entries(blob);
        uint16_t *global = calloc(h->n_rules ?: 1, sizeof *global);
        uint32_t n_ref = 0;

        if (!global)
                abort();
        if (rules_in(set, blob, global, &n_ref)) {
                EpPagedTable pt = {};
                int r = ep_table_page(blob, global, &pt);

                /* A valid table pages, unless it is empty or memory ran out. */
                if (r < 0 && r != -ENOMEM && !(r == -EINVAL && h->n_entries == 0))
                        abort();
                ep_paged_table_done(&pt);
        }
        for (uint32_t i = 0; i < h->n_entries; i++)
                if (ep_unwind_table_find(blob, entries[i].file_offset) != (long) i)
                        abort();
        for (uint32_t i = 0; i < n_ref; i++)
                ep_rule_set_unref(set, global[i]);
        /* Every reference given back: the set holds INVALID only, input after input. */
        if (ep_rule_set_used(set) != 1)
                abort();
        free(global);
        free(blob);
        return 0;
}
