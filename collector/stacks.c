/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "array.h"
#include "macro.h"
#include "stacks.h"

int stack_table_init(StackTable *t) {
        *t = (StackTable) {};
        t->index = ep_hashmap_new(sizeof(uint64_t), sizeof(uint32_t));
        t->traces = ep_hashmap_new(sizeof(TraceHash), sizeof(uint32_t));
        if (!t->index || !t->traces) {
                stack_table_done(t);
                return -ENOMEM;
        }
        return 0;
}

void stack_table_done(StackTable *t) {
        free(t->items);
        free(t->pool);
        ep_hashmap_free(t->index);
        ep_hashmap_free(t->traces);
        *t = (StackTable) {};
}

int stack_table_intern(StackTable *t, const uint32_t *frames, uint32_t n, uint32_t *ret_idx) {
        uint64_t h = ep_hash_bytes(frames, (size_t) n * sizeof(uint32_t)) ^ n;
        uint32_t *head, idx;
        int r;

        head = ep_hashmap_get(t->index, &h);
        for (idx = head ? *head : STACK_NONE; idx != STACK_NONE; idx = t->items[idx].next) {
                const Stack *s = &t->items[idx];
                if (s->n == n && memcmp(t->pool + s->off, frames, (size_t) n * sizeof(uint32_t)) == 0) {
                        *ret_idx = idx;
                        return 0;
                }
        }
        if (t->n >= STACK_NONE)
                return -E2BIG;

        r = ARRAY_RESERVE(t->items, t->cap, t->n + 1);
        if (r < 0)
                return r;
        r = ARRAY_RESERVE(t->pool, t->pool_cap, t->pool_n + n);
        if (r < 0)
                return r;

        if (!head) {
                r = ep_hashmap_put(t->index, &h, (void **) &head);
                if (r < 0)
                        return r;
                *head = STACK_NONE;
        }

        if (n > 0)
                memcpy(t->pool + t->pool_n, frames, (size_t) n * sizeof(uint32_t));
        t->items[t->n] = (Stack) {
                .off = t->pool_n,
                .n = n,
                .next = *head,
        };
        t->pool_n += n;
        *head = (uint32_t) t->n;
        *ret_idx = (uint32_t) t->n++;
        return 1;
}

TraceHash stack_trace_hash(const void *raw_frames, size_t len) {
        return (TraceHash) { { ep_hash_bytes_seeded(raw_frames, len, 0),
                               ep_hash_bytes_seeded(raw_frames, len, 0x9e3779b97f4a7c15ULL) } };
}

uint32_t stack_table_by_trace(const StackTable *t, const TraceHash *h) {
        const uint32_t *v = ep_hashmap_get(t->traces, h);
        return v ? *v : STACK_NONE;
}

int stack_table_remember_trace(StackTable *t, const TraceHash *h, uint32_t idx) {
        uint32_t *v;
        int r;

        if (ep_hashmap_size(t->traces) >= STACK_TRACES_MAX)
                ep_hashmap_clear(t->traces);
        r = ep_hashmap_put(t->traces, h, (void **) &v);
        if (r < 0)
                return r;
        *v = idx;
        return 0;
}

void stack_table_forget_traces(StackTable *t) {
        ep_hashmap_clear(t->traces);
}
