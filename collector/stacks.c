/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "array.h"
#include "macro.h"
#include "stacks.h"

int stack_table_init(StackTable *t) {
        *t = (StackTable) {};
        t->index = ep_hashmap_new(sizeof(uint64_t), sizeof(uint32_t));
        return t->index ? 0 : -ENOMEM;
}

void stack_table_done(StackTable *t) {
        free(t->items);
        free(t->pool);
        ep_hashmap_free(t->index);
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
