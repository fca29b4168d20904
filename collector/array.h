/* SPDX-License-Identifier: MIT */
#pragma once

/* De-duplication tables: growing arrays of items with a hash index. */

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "grow-array.h"
#include "hashmap.h"

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
