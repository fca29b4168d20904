/* SPDX-License-Identifier: MIT */
#pragma once

/* Bump allocator for short-lived object graphs (one encoded request): everything is released
 * at once by exp_arena_done(). Allocations are zeroed and 16-byte aligned. */

#include <stddef.h>

typedef struct ExpArenaChunk ExpArenaChunk;

typedef struct ExpArena {
        ExpArenaChunk *chunks;
        size_t used, size; /* of the current (first) chunk */
        size_t total;      /* bytes allocated from the system */
} ExpArena;

void *exp_arena_alloc(ExpArena *a, size_t n);
void *exp_arena_alloc_array(ExpArena *a, size_t n, size_t elem_size);
char *exp_arena_strdup(ExpArena *a, const char *s);
void exp_arena_done(ExpArena *a);
