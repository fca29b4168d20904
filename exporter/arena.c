/* SPDX-License-Identifier: MIT */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

#define ARENA_CHUNK (64 * 1024)
#define ARENA_ALIGN 16

struct ExpArenaChunk {
        ExpArenaChunk *next;
        size_t size;
        _Alignas(ARENA_ALIGN) unsigned char data[];
};

static ExpArenaChunk *chunk_new(size_t size) {
        ExpArenaChunk *c = malloc(sizeof *c + size);
        if (c)
                c->size = size;
        return c;
}

void *exp_arena_alloc(ExpArena *a, size_t n) {
        ExpArenaChunk *c;
        void *p;

        n = (n + ARENA_ALIGN - 1) & ~(size_t) (ARENA_ALIGN - 1);
        if (n == 0)
                n = ARENA_ALIGN;
        if (n > ARENA_CHUNK / 4) {
                /* Large: a chunk of its own, kept behind the current one. */
                c = chunk_new(n);
                if (!c)
                        return NULL;
                a->total += n;
                if (a->chunks) {
                        c->next = a->chunks->next;
                        a->chunks->next = c;
                } else {
                        c->next = NULL;
                        a->chunks = c;
                        a->used = a->size = n;
                }
                memset(c->data, 0, n);
                return c->data;
        }
        if (!a->chunks || a->size - a->used < n) {
                c = chunk_new(ARENA_CHUNK);
                if (!c)
                        return NULL;
                a->total += ARENA_CHUNK;
                c->next = a->chunks;
                a->chunks = c;
                a->used = 0;
                a->size = ARENA_CHUNK;
        }
        p = a->chunks->data + a->used;
        a->used += n;
        memset(p, 0, n);
        return p;
}

void *exp_arena_alloc_array(ExpArena *a, size_t n, size_t elem_size) {
        if (elem_size && n > SIZE_MAX / elem_size)
                return NULL;
        return exp_arena_alloc(a, n * elem_size);
}

char *exp_arena_strdup(ExpArena *a, const char *s) {
        size_t n = strlen(s);
        char *p = exp_arena_alloc(a, n + 1);
        if (p)
                memcpy(p, s, n + 1);
        return p;
}

void exp_arena_done(ExpArena *a) {
        ExpArenaChunk *c = a->chunks;
        while (c) {
                ExpArenaChunk *next = c->next;
                free(c);
                c = next;
        }
        *a = (ExpArena) {};
}
