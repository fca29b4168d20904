/* SPDX-License-Identifier: MIT */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"
#include "intern.h"
#include "profile-model.h"

void exp_intern_init(ExpIntern *t) {
        *t = (ExpIntern) {};
}

void exp_intern_done(ExpIntern *t) {
        for (size_t i = 0; i < t->n_entries; i++)
                free(t->entries[i].data);
        free(t->entries);
        free(t->slots);
        *t = (ExpIntern) {};
}

static size_t slot_of(const ExpIntern *t, uint64_t hash, const void *key, size_t len, bool *ret_found) {
        size_t mask = t->n_slots - 1;

        for (size_t i = hash & mask;; i = (i + 1) & mask) {
                uint32_t s = t->slots[i];
                if (s == 0) {
                        *ret_found = false;
                        return i;
                }
                const ExpInternEntry *e = &t->entries[s - 1];
                if (e->hash == hash && e->len == len && memcmp(e->data, key, len) == 0) {
                        *ret_found = true;
                        return i;
                }
        }
}

static int rehash(ExpIntern *t) {
        size_t n = t->n_slots ? t->n_slots * 2 : 64;
        uint32_t *slots = calloc(n, sizeof *slots);

        if (!slots)
                return -ENOMEM;
        free(t->slots);
        t->slots = slots;
        t->n_slots = n;
        for (size_t i = 0; i < t->n_entries; i++) {
                size_t j = t->entries[i].hash & (n - 1);
                while (slots[j])
                        j = (j + 1) & (n - 1);
                slots[j] = (uint32_t) i + 1;
        }
        return 0;
}

int exp_intern_find(const ExpIntern *t, const void *key, size_t len, uint32_t *ret_index) {
        bool found;
        size_t i;

        if (t->n_slots == 0)
                return -ENOENT;
        i = slot_of(t, ep_hash_bytes(key, len), key, len, &found);
        if (!found)
                return -ENOENT;
        *ret_index = t->slots[i] - 1;
        return 0;
}

int exp_intern_put(ExpIntern *t, const void *key, size_t len, uint32_t *ret_index) {
        uint64_t hash = ep_hash_bytes(key, len);
        ExpInternEntry *e;
        bool found;
        size_t i;
        int r;

        /* Keep the load factor under 1/2. */
        if ((t->n_entries + 1) * 2 > t->n_slots) {
                r = rehash(t);
                if (r < 0)
                        return r;
        }
        i = slot_of(t, hash, key, len, &found);
        if (found) {
                *ret_index = t->slots[i] - 1;
                return 0;
        }
        if (t->n_entries >= INT32_MAX - 1)
                return -E2BIG; /* OTLP indices are int32 */
        r = exp_grow((void **) &t->entries, &t->cap_entries, t->n_entries + 1, sizeof *t->entries);
        if (r < 0)
                return r;
        e = &t->entries[t->n_entries];
        e->data = malloc(len + 1);
        if (!e->data)
                return -ENOMEM;
        if (len > 0)
                memcpy(e->data, key, len);
        e->data[len] = 0;
        e->len = len;
        e->hash = hash;
        t->slots[i] = (uint32_t) ++t->n_entries;
        *ret_index = (uint32_t) (t->n_entries - 1);
        return 1;
}

int exp_intern_put_str(ExpIntern *t, const char *s, uint32_t *ret_index) {
        return exp_intern_put(t, s ?: "", s ? strlen(s) : 0, ret_index);
}
