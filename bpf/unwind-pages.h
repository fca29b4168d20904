/* SPDX-License-Identifier: MIT */
#pragma once

/* The search inside one 64 KiB page of a file's unwind deltas (the layout of bpf/profiler.h:
 * unwind_pages + the file's inner array of struct ep_bpf_delta). Compiled into the BPF sampler
 * and into the loader's unit test, which checks that what unwinder-loader/table-pages.c builds
 * is found again by exactly this code.
 *
 * Include contract: the includer defines
 *   EP_PAGES_CTX                         type handed to the hook (the inner map in BPF)
 *   int ep_page_delta(EP_PAGES_CTX ctx, uint32_t index, struct ep_bpf_delta *ret);
 *                                        0, or < 0 when index is outside the array
 * and includes bpf/profiler.h first. */

#ifndef EP_PAGES_CTX
#error "Define EP_PAGES_CTX and ep_page_delta() before including unwind-pages.h"
#endif

#ifndef EP_UNWIND_INLINE
#define EP_UNWIND_INLINE static inline __attribute__((always_inline))
#endif

/* The global rule index of the delta in effect at offset_low within the page, or -1 when the
 * page is malformed (empty, too large, sub-page index out of order, unreadable). Bounded:
 * at most EP_BPF_PAGE_SEARCH_STEPS + 1 reads, log2(deltas in the sub-page) + 1 in practice. */
EP_UNWIND_INLINE int ep_page_search(EP_PAGES_CTX ctx, const struct ep_bpf_page *pg, uint32_t offset_low) {
        uint32_t k = (offset_low >> EP_BPF_SUBPAGE_SHIFT) & (EP_BPF_SUBPAGES - 1);
        uint32_t lo, hi, next; /* the answer is in [lo, hi) */
        struct ep_bpf_delta d;
        int rule;

        if (pg->count == 0 || pg->count > (1u << EP_BPF_PAGE_SHIFT) || pg->first + pg->count < pg->first)
                return -1;
        next = k + 1;
        /* Opaque to the compiler, so the mask below is what bounds the index for the BPF
         * verifier (rather than k's bound plus a folded offset). */
        __asm__ volatile("" : "+r"(next));
        lo = pg->first + pg->sub[k];
        hi = next < EP_BPF_SUBPAGES ? pg->first + pg->sub[next & (EP_BPF_SUBPAGES - 1)] + 1
                                    : pg->first + pg->count;
        if (hi > pg->first + pg->count || lo >= hi)
                return -1;
        /* The delta in effect at the sub-page's start: at or before offset_low. */
        if (ep_page_delta(ctx, lo, &d) < 0 || d.offset_low > offset_low)
                return -1;
        rule = d.rule;
        for (int i = 0; i < EP_BPF_PAGE_SEARCH_STEPS; i++) {
                uint32_t mid;

                if (hi - lo <= 1)
                        break;
                mid = lo + (hi - lo) / 2;
                if (ep_page_delta(ctx, mid, &d) < 0)
                        return -1;
                if (d.offset_low <= offset_low) {
                        lo = mid;
                        rule = d.rule;
                } else
                        hi = mid;
        }
        return rule;
}
