/* SPDX-License-Identifier: MIT */
#pragma once

/* De-duplicating table of byte strings: each distinct key gets the next index, in insertion
 * order. Used to build the OTLP dictionary tables (strings, functions, mappings, attributes,
 * stacks), whose index is their position. Keys are copied and kept NUL-terminated. */

#include <stddef.h>
#include <stdint.h>

typedef struct ExpInternEntry {
        char *data;
        size_t len;
        uint64_t hash;
} ExpInternEntry;

typedef struct ExpIntern {
        ExpInternEntry *entries;
        size_t n_entries, cap_entries;
        uint32_t *slots; /* entry index + 1; 0 = empty */
        size_t n_slots;  /* power of two */
} ExpIntern;

void exp_intern_init(ExpIntern *t);
void exp_intern_done(ExpIntern *t);
/* Returns 1 when the key was added, 0 when it was there; *ret_index is its index either way. */
int exp_intern_put(ExpIntern *t, const void *key, size_t len, uint32_t *ret_index);
int exp_intern_put_str(ExpIntern *t, const char *s, uint32_t *ret_index);
/* -ENOENT when absent. */
int exp_intern_find(const ExpIntern *t, const void *key, size_t len, uint32_t *ret_index);
static inline size_t exp_intern_size(const ExpIntern *t) {
        return t->n_entries;
}
static inline const char *exp_intern_get(const ExpIntern *t, uint32_t i) {
        return t->entries[i].data;
}
