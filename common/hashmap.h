/* SPDX-License-Identifier: MIT */
#pragma once

/* Open-addressing hash map with fixed-size keys and values stored inline (no per-entry
 * allocation). Pointers returned into the map are valid until the next put or remove. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

typedef struct EpHashmap EpHashmap;

EpHashmap *ep_hashmap_new(size_t key_size, size_t value_size);
EpHashmap *ep_hashmap_free(EpHashmap *h);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpHashmap *, ep_hashmap_free);
#define _cleanup_hashmap_ _cleanup_(ep_hashmap_freep)

size_t ep_hashmap_size(const EpHashmap *h);
/* Pointer to the value stored under key, or NULL. */
void *ep_hashmap_get(const EpHashmap *h, const void *key);
/* Finds or inserts key. On insert the value is zeroed. Returns 1 when inserted, 0 when it was
 * there, -ENOMEM. *ret_value points at the value either way. */
int ep_hashmap_put(EpHashmap *h, const void *key, void **ret_value);
/* Returns 1 when removed, 0 when absent. If ret_value is given, the value is copied there. */
int ep_hashmap_remove(EpHashmap *h, const void *key, void *ret_value);
void ep_hashmap_clear(EpHashmap *h);
/* Counters: maps whose values are uint32_t counts, a missing key counting 0. The count under
 * key (0 when absent). */
uint32_t ep_hashmap_count(const EpHashmap *h, const void *key);
/* Adds delta to the count under key; a count that reaches 0 is removed. -ENOMEM, else 0. */
int ep_hashmap_count_add(EpHashmap *h, const void *key, int delta);
/* Iteration: start with *state = 0; returns false at the end. Any put or remove during the
 * walk invalidates it (collect keys first, then remove). */
bool ep_hashmap_iterate(const EpHashmap *h, size_t *state, const void **ret_key, void **ret_value);

uint64_t ep_hash_bytes(const void *p, size_t n);
/* Another seed, another hash of the same bytes (two of them: a 128-bit hash). */
uint64_t ep_hash_bytes_seeded(const void *p, size_t n, uint64_t seed);
