/* SPDX-License-Identifier: MIT */
#pragma once

/* Growing arrays: ensure room for need elements, doubling. */

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "hashmap.h"

static inline int array_reserve(void **p, size_t *cap, size_t need, size_t elem) {
        size_t n;
        void *q;

        if (need <= *cap)
                return 0;
        n = *cap ? *cap : 16;
        while (n < need) {
                if (n > ((size_t) -1) / 2 / elem)
                        return -ENOMEM;
                n *= 2;
        }
        q = realloc(*p, n * elem);
        if (!q)
                return -ENOMEM;
        *p = q;
        *cap = n;
        return 0;
}

#define ARRAY_RESERVE(p, cap, need) array_reserve((void **) &(p), &(cap), (need), sizeof(*(p)))

/* Appends one element; evaluates to 0 or -ENOMEM. */
#define ARRAY_PUSH(p, n, cap, v)                                          \
        ({                                                                \
                int _r_ = ARRAY_RESERVE(p, cap, (size_t) (n) + 1);        \
                if (_r_ >= 0)                                             \
                        (p)[(n)++] = (v);                                 \
                _r_;                                                      \
        })

/* The start of interning into a de-duplication table: items (n of them) with an index mapping
 * keys to uint32_t item numbers. Returns 0 with *ret_idx set when key is there already; 1 when it
 * is not and items has room for one more at n, for the caller to fill and put in the index. */
static inline int intern_find_or_reserve(EpHashmap *index, const void *key, void **items, size_t *cap,
                                         size_t n, size_t elem, uint32_t *ret_idx) {
        const uint32_t *v = ep_hashmap_get(index, key);
        int r;

        if (v) {
                *ret_idx = *v;
                return 0;
        }
        if (n >= UINT32_MAX)
                return -E2BIG;
        r = array_reserve(items, cap, n + 1, elem);
        return r < 0 ? r : 1;
}

#define INTERN_FIND_OR_RESERVE(index, key, items, cap, n, ret_idx) \
        intern_find_or_reserve((index), (key), (void **) &(items), &(cap), (n), sizeof(*(items)), (ret_idx))
