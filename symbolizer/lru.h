/* SPDX-License-Identifier: MIT */
#pragma once

/* A bounded least-recently-used index: maps fixed-size keys to slot numbers in [0, capacity).
 * The caller keeps the values in its own array indexed by slot, so values may be of any shape
 * (strings, handles). When the index is full, inserting recycles the least recently used slot
 * and says so, and the caller releases what it kept there before reusing it. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

typedef struct EpLru EpLru;

int ep_lru_new(size_t key_size, uint32_t capacity, EpLru **ret);
EpLru *ep_lru_free(EpLru *l);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpLru *, ep_lru_free);

uint32_t ep_lru_size(const EpLru *l);
uint32_t ep_lru_capacity(const EpLru *l);

/* Returns the slot of key and marks it most recently used, or -ENOENT. */
int ep_lru_get(EpLru *l, const void *key);
/* Adds key, which must not be present. Returns its slot; *ret_evicted tells whether the slot
 * held another key (now dropped) whose value the caller must release first. */
int ep_lru_insert(EpLru *l, const void *key, bool *ret_evicted);
/* Removes key; returns its former slot, or -ENOENT. */
int ep_lru_remove(EpLru *l, const void *key);
/* Walks from the least recently used slot to the most recently used one, without marking
 * anything used: the oldest slot / the next newer one, or -ENOENT at the end (or when the
 * slot is not in use). */
int ep_lru_oldest(const EpLru *l);
int ep_lru_newer(const EpLru *l, uint32_t slot);
/* The key stored in a used slot (for walks over all slots), or NULL if the slot is free. */
const void *ep_lru_slot_key(const EpLru *l, uint32_t slot);
