/* SPDX-License-Identifier: MIT */
#pragma once

/* Unique stacks: lists of frame indices (leaf first), de-duplicated by exact content. The
 * lists live in one pool; the index maps a 64-bit hash to a chain of stacks with that hash.
 *
 * Traces seen before: a trace as the loader sent it (its raw frames) maps to its stack by a
 * 128-bit hash of those bytes, so a stack seen before costs one hash instead of interning
 * each of its frames. Only traces whose frames do not depend on the process (no UNMAPPED or
 * interpreter frame) are remembered; the index is forgotten when what a file key means
 * changes, and starts over past STACK_TRACES_MAX entries. */

#include <stdint.h>

#include "hashmap.h"

#define STACK_NONE UINT32_MAX
#define STACK_TRACES_MAX 16384 /* in at most 32768 slots of 32 bytes: 1 MiB */

typedef struct TraceHash {
        uint64_t h[2];
} TraceHash;

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
        EpHashmap *index;  /* u64 hash → u32 first stack */
        EpHashmap *traces; /* TraceHash of a trace's raw frames → u32 stack */
} StackTable;

int stack_table_init(StackTable *t);
void stack_table_done(StackTable *t);

/* Returns 1 when the stack is new, 0 when known; *ret_idx either way. */
int stack_table_intern(StackTable *t, const uint32_t *frames, uint32_t n, uint32_t *ret_idx);

TraceHash stack_trace_hash(const void *raw_frames, size_t len);
/* The stack of a trace remembered with that hash, or STACK_NONE. */
uint32_t stack_table_by_trace(const StackTable *t, const TraceHash *h);
int stack_table_remember_trace(StackTable *t, const TraceHash *h, uint32_t idx);
void stack_table_forget_traces(StackTable *t);

static inline const uint32_t *stack_table_frames(const StackTable *t, uint32_t idx) {
        return t->pool + t->items[idx].off;
}
