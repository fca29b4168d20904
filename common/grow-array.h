/* SPDX-License-Identifier: MIT */
#pragma once

/* Growing arrays: ensure room for need elements, doubling. */

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

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
