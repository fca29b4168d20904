/* SPDX-License-Identifier: MIT */
#pragma once

/* Pieces every protobuf-c message builder here needs (the OTLP encoder, the CLI's pprof
 * writer): messages allocated in an arena, repeated fields as growing pointer arrays, and
 * string-table indexes. */

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "intern.h"
#include "profile-model.h"

/* A growing array of message pointers: a repeated field being built. */
typedef struct ExpPtrVec {
        void **v;
        size_t n, cap;
} ExpPtrVec;

static inline int exp_ptrvec_push(ExpPtrVec *p, void *x) {
        int r = exp_grow((void **) &p->v, &p->cap, p->n + 1, sizeof(void *));
        if (r < 0)
                return r;
        p->v[p->n++] = x;
        return 0;
}

/* A zeroed message from the arena, set up by its protobuf-c init function; NULL when out of
 * memory. */
static inline void *exp_arena_new_msg(ExpArena *a, size_t size, void (*init)(void *)) {
        void *m = exp_arena_alloc(a, size);
        if (m)
                init(m);
        return m;
}
#define EXP_NEW_MSG(arena, type, init) \
        ((type *) exp_arena_new_msg((arena), sizeof(type), (void (*)(void *)) (init)))

/* Index of s in a string table whose entry 0 is "" (both formats require it): NULL and ""
 * are 0. */
static inline int exp_string_index(ExpIntern *strings, const char *s, uint32_t *ret) {
        if (!s || !*s) {
                *ret = 0;
                return 0;
        }
        return exp_intern_put_str(strings, s, ret);
}
