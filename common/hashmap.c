/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"

/* Linear probing over slots of [u64 hash | key | pad | value], the value 8-byte aligned so
 * callers may store pointers and u64s in it directly. A stored hash of 0 marks an empty
 * slot; deletion shifts later members of the probe run back, so there are no tombstones. */
struct EpHashmap {
        size_t key_size, value_size, value_offset, slot_size;
        size_t capacity; /* power of two, or 0 before the first put */
        size_t size;
        uint8_t *slots;
};

static uint64_t hash_word(uint64_t h, uint64_t w) {
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        return h ^ h >> 29;
}

uint64_t ep_hash_bytes_seeded(const void *p, size_t n, uint64_t seed) {
        /* Eight bytes per multiply (the tail zero-padded, the length mixed in), then a final
         * avalanche (splitmix64): fast and good enough for in-memory tables whose keys are not
         * chosen by an attacker to collide. Keys are stacks of hundreds of frames: a byte per
         * multiply, as FNV-1a does, made hashing them the collector's largest cost. */
        const uint8_t *b = p;
        uint64_t h = (0xcbf29ce484222325ULL ^ seed) + (uint64_t) n * 0x9e3779b97f4a7c15ULL, w;

        for (; n >= 8; b += 8, n -= 8) {
                memcpy(&w, b, 8);
                h = hash_word(h, w);
        }
        if (n > 0) {
                w = 0;
                memcpy(&w, b, n);
                h = hash_word(h, w);
        }
        h ^= h >> 30;
        h *= 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 27;
        h *= 0x94d049bb133111ebULL;
        h ^= h >> 31;
        return h;
}

uint64_t ep_hash_bytes(const void *p, size_t n) {
        return ep_hash_bytes_seeded(p, n, 0);
}

static uint64_t slot_hash(const EpHashmap *h, size_t i) {
        uint64_t v;
        memcpy(&v, h->slots + i * h->slot_size, sizeof v);
        return v;
}

static uint8_t *slot_key(const EpHashmap *h, size_t i) {
        return h->slots + i * h->slot_size + sizeof(uint64_t);
}

static uint8_t *slot_value(const EpHashmap *h, size_t i) {
        return h->slots + i * h->slot_size + h->value_offset;
}

static uint64_t key_hash(const EpHashmap *h, const void *key) {
        uint64_t v = ep_hash_bytes(key, h->key_size);
        return v ? v : 1;
}

EpHashmap *ep_hashmap_new(size_t key_size, size_t value_size) {
        EpHashmap *h = calloc(1, sizeof *h);
        if (!h)
                return NULL;
        h->key_size = key_size;
        h->value_size = value_size;
        h->value_offset = sizeof(uint64_t) + ALIGN8(key_size);
        h->slot_size = h->value_offset + ALIGN8(value_size);
        return h;
}

EpHashmap *ep_hashmap_free(EpHashmap *h) {
        if (h) {
                free(h->slots);
                free(h);
        }
        return NULL;
}

size_t ep_hashmap_size(const EpHashmap *h) {
        return h->size;
}

static bool find_slot(const EpHashmap *h, const void *key, uint64_t hash, size_t *ret) {
        size_t mask = h->capacity - 1, i = hash & mask;

        for (;;) {
                uint64_t s = slot_hash(h, i);
                if (s == 0) {
                        *ret = i;
                        return false;
                }
                if (s == hash && memcmp(slot_key(h, i), key, h->key_size) == 0) {
                        *ret = i;
                        return true;
                }
                i = (i + 1) & mask;
        }
}

void *ep_hashmap_get(const EpHashmap *h, const void *key) {
        size_t i;
        if (h->size == 0)
                return NULL;
        return find_slot(h, key, key_hash(h, key), &i) ? slot_value(h, i) : NULL;
}

static int grow(EpHashmap *h) {
        size_t old_cap = h->capacity, new_cap = old_cap ? old_cap * 2 : 16;
        uint8_t *old = h->slots;

        h->slots = calloc(new_cap, h->slot_size);
        if (!h->slots) {
                h->slots = old;
                return -ENOMEM;
        }
        h->capacity = new_cap;
        for (size_t i = 0; i < old_cap; i++) {
                const uint8_t *src = old + i * h->slot_size;
                uint64_t hash;
                size_t j;
                memcpy(&hash, src, sizeof hash);
                if (hash == 0)
                        continue;
                (void) find_slot(h, src + sizeof(uint64_t), hash, &j);
                memcpy(h->slots + j * h->slot_size, src, h->slot_size);
        }
        free(old);
        return 0;
}

int ep_hashmap_put(EpHashmap *h, const void *key, void **ret_value) {
        uint64_t hash = key_hash(h, key);
        size_t i;
        int r;

        if ((h->size + 1) * 10 > h->capacity * 7) {
                r = grow(h);
                if (r < 0)
                        return r;
        }
        if (find_slot(h, key, hash, &i)) {
                if (ret_value)
                        *ret_value = slot_value(h, i);
                return 0;
        }
        memcpy(h->slots + i * h->slot_size, &hash, sizeof hash);
        memcpy(slot_key(h, i), key, h->key_size);
        memset(slot_value(h, i), 0, h->value_size);
        h->size++;
        if (ret_value)
                *ret_value = slot_value(h, i);
        return 1;
}

int ep_hashmap_remove(EpHashmap *h, const void *key, void *ret_value) {
        size_t mask, i, j;

        if (h->size == 0 || !find_slot(h, key, key_hash(h, key), &i))
                return 0;
        if (ret_value)
                memcpy(ret_value, slot_value(h, i), h->value_size);
        mask = h->capacity - 1;
        /* Backward-shift: move later members of the run into the hole when their home slot
         * does not lie (cyclically) after the hole. */
        j = i;
        for (;;) {
                uint64_t s;
                size_t home;
                j = (j + 1) & mask;
                s = slot_hash(h, j);
                if (s == 0)
                        break;
                home = s & mask;
                if (((j - home) & mask) >= ((j - i) & mask)) {
                        memcpy(h->slots + i * h->slot_size, h->slots + j * h->slot_size, h->slot_size);
                        i = j;
                }
        }
        memset(h->slots + i * h->slot_size, 0, h->slot_size);
        h->size--;
        return 1;
}

uint32_t ep_hashmap_count(const EpHashmap *h, const void *key) {
        const void *v = ep_hashmap_get(h, key);
        uint32_t n = 0;

        if (v)
                memcpy(&n, v, sizeof n);
        return n;
}

int ep_hashmap_count_add(EpHashmap *h, const void *key, int delta) {
        uint32_t n = ep_hashmap_count(h, key) + (uint32_t) delta;
        void *v;
        int r;

        if (n == 0) {
                (void) ep_hashmap_remove(h, key, NULL);
                return 0;
        }
        r = ep_hashmap_put(h, key, &v);
        if (r < 0)
                return r;
        memcpy(v, &n, sizeof n);
        return 0;
}

void ep_hashmap_clear(EpHashmap *h) {
        if (h->slots)
                memset(h->slots, 0, h->capacity * h->slot_size);
        h->size = 0;
}

bool ep_hashmap_iterate(const EpHashmap *h, size_t *state, const void **ret_key, void **ret_value) {
        for (size_t i = *state; i < h->capacity; i++) {
                if (slot_hash(h, i) == 0)
                        continue;
                *state = i + 1;
                if (ret_key)
                        *ret_key = slot_key(h, i);
                if (ret_value)
                        *ret_value = slot_value(h, i);
                return true;
        }
        *state = h->capacity;
        return false;
}
