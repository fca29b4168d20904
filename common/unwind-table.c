/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "unwind-table.h"

int ep_unwind_table_validate(const void *blob, size_t size) {
        const EpUnwindTableHeader *h = blob;
        const struct ep_unwind_rule *rules;
        const EpUnwindEntry *e;

        if (size < sizeof *h || ((uintptr_t) blob & 7))
                return -EBADMSG;
        if (h->magic != EP_UNWIND_TABLE_MAGIC || h->version != EP_UNWIND_TABLE_VERSION ||
            h->n_rules == 0 || h->n_rules > EP_UNWIND_TABLE_MAX_RULES || h->n_entries == 0 ||
            h->n_entries > EP_UNWIND_TABLE_MAX_ENTRIES ||
            size != ep_unwind_table_size(h->n_rules, h->n_entries))
                return -EBADMSG;

        rules = ep_unwind_table_rules(blob);
        for (uint32_t i = 0; i < h->n_rules; i++)
                if (rules[i].cfa_kind >= _EP_CFA_MAX || rules[i].fp_rule >= _EP_FP_MAX)
                        return -EBADMSG;

        e = ep_unwind_table_entries(blob);
        for (uint32_t i = 0; i < h->n_entries; i++) {
                if (e[i].rule >= h->n_rules)
                        return -EBADMSG;
                if (i > 0 && (e[i].file_offset <= e[i - 1].file_offset || e[i].rule == e[i - 1].rule))
                        return -EBADMSG;
        }
        if (rules[e[h->n_entries - 1].rule].cfa_kind != EP_CFA_INVALID &&
            !(h->flags & EP_UNWIND_FP_FALLBACK))
                return -EBADMSG;
        return 0;
}

long ep_unwind_table_find(const void *blob, uint32_t off) {
        const EpUnwindTableHeader *h = blob;
        const EpUnwindEntry *e = ep_unwind_table_entries(blob);
        long lo = 0, hi = (long) h->n_entries - 1, found = -1;

        while (lo <= hi) {
                long mid = lo + (hi - lo) / 2;
                if (e[mid].file_offset <= off) {
                        found = mid;
                        lo = mid + 1;
                } else
                        hi = mid - 1;
        }
        return found;
}
