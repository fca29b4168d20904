/* SPDX-License-Identifier: MIT */
#pragma once

/* Unique stacks: lists of frame indices (leaf first), de-duplicated by exact content. The
 * lists live in one pool; the index maps a 64-bit hash to a chain of stacks with that hash. */

#include <stdint.h>

#include "hashmap.h"

#define STACK_NONE UINT32_MAX

typedef struct Stack {
        uint64_t off;     /* into StackTable.pool */
        int64_t store_id; /* stacks.id, 0 while not in the store */
        uint64_t mark;    /* interval seq that last collected it */
        uint32_t n;
        uint32_t next;    /* next stack with the same hash, or STACK_NONE */
        uint32_t ref;     /* stack_ref inside the export group being built */
} Stack;

typedef struct StackTable {
        Stack *items;
        size_t n, cap;
        uint32_t *pool;
        size_t pool_n, pool_cap;
        EpHashmap *index; /* u64 hash → u32 first stack */
} StackTable;

int stack_table_init(StackTable *t);
void stack_table_done(StackTable *t);

/* Returns 1 when the stack is new, 0 when known; *ret_idx either way. */
int stack_table_intern(StackTable *t, const uint32_t *frames, uint32_t n, uint32_t *ret_idx);

static inline const uint32_t *stack_table_frames(const StackTable *t, uint32_t idx) {
        return t->pool + t->items[idx].off;
}
