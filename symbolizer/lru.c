/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"
#include "lru.h"

#define NIL UINT32_MAX

typedef struct LruNode {
        uint32_t prev, next; /* towards most / least recently used; NIL at the ends */
        bool used;
} LruNode;

struct EpLru {
        size_t key_size;
        uint32_t capacity, size;
        uint32_t head, tail; /* most and least recently used */
        uint32_t free_next;  /* next never-used slot */
        uint32_t free_list;  /* slots released by ep_lru_remove(), chained through .next */
        EpHashmap *index;    /* key -> uint32_t slot */
        LruNode *nodes;
        uint8_t *keys;       /* capacity × key_size */
};

int ep_lru_new(size_t key_size, uint32_t capacity, EpLru **ret) {
        if (key_size == 0 || capacity == 0 || capacity == NIL)
                return -EINVAL;

        _cleanup_(ep_lru_freep) EpLru *l = calloc(1, sizeof(EpLru));
        if (!l)
                return -ENOMEM;
        l->key_size = key_size;
        l->capacity = capacity;
        l->head = l->tail = l->free_list = NIL;
        l->index = ep_hashmap_new(key_size, sizeof(uint32_t));
        l->nodes = calloc(capacity, sizeof(LruNode));
        l->keys = calloc(capacity, key_size);
        if (!l->index || !l->nodes || !l->keys)
                return -ENOMEM;

        *ret = TAKE_PTR(l);
        return 0;
}

EpLru *ep_lru_free(EpLru *l) {
        if (!l)
                return NULL;
        ep_hashmap_free(l->index);
        free(l->nodes);
        free(l->keys);
        free(l);
        return NULL;
}

uint32_t ep_lru_size(const EpLru *l) {
        return l->size;
}

uint32_t ep_lru_capacity(const EpLru *l) {
        return l->capacity;
}

static void unlink_node(EpLru *l, uint32_t s) {
        LruNode *n = &l->nodes[s];

        if (n->prev != NIL)
                l->nodes[n->prev].next = n->next;
        else
                l->head = n->next;
        if (n->next != NIL)
                l->nodes[n->next].prev = n->prev;
        else
                l->tail = n->prev;
        n->prev = n->next = NIL;
}

static void push_front(EpLru *l, uint32_t s) {
        LruNode *n = &l->nodes[s];

        n->prev = NIL;
        n->next = l->head;
        if (l->head != NIL)
                l->nodes[l->head].prev = s;
        l->head = s;
        if (l->tail == NIL)
                l->tail = s;
}

int ep_lru_get(EpLru *l, const void *key) {
        uint32_t *v = ep_hashmap_get(l->index, key);
        if (!v)
                return -ENOENT;

        uint32_t s = *v;
        if (l->head != s) {
                unlink_node(l, s);
                push_front(l, s);
        }
        return (int) s;
}

int ep_lru_insert(EpLru *l, const void *key, bool *ret_evicted) {
        bool evicted = false;
        uint32_t s;
        void *v;
        int r;

        /* The only fallible step comes first, so a failure changes nothing. */
        r = ep_hashmap_put(l->index, key, &v);
        if (r < 0)
                return r;
        if (r == 0)
                return -EEXIST;

        if (l->free_list != NIL) {
                s = l->free_list;
                l->free_list = l->nodes[s].next;
        } else if (l->free_next < l->capacity)
                s = l->free_next++;
        else {
                s = l->tail;
                unlink_node(l, s);
                (void) ep_hashmap_remove(l->index, l->keys + (size_t) s * l->key_size, NULL);
                l->nodes[s].used = false;
                l->size--;
                evicted = true;
                v = ep_hashmap_get(l->index, key); /* the remove may have moved it */
        }

        *(uint32_t *) v = s;
        memcpy(l->keys + (size_t) s * l->key_size, key, l->key_size);
        l->nodes[s].used = true;
        l->size++;
        push_front(l, s);

        if (ret_evicted)
                *ret_evicted = evicted;
        return (int) s;
}

int ep_lru_remove(EpLru *l, const void *key) {
        uint32_t s;

        if (ep_hashmap_remove(l->index, key, &s) <= 0)
                return -ENOENT;
        unlink_node(l, s);
        l->nodes[s].used = false;
        l->nodes[s].next = l->free_list;
        l->free_list = s;
        l->size--;
        return (int) s;
}

int ep_lru_oldest(const EpLru *l) {
        return l->tail == NIL ? -ENOENT : (int) l->tail;
}

int ep_lru_newer(const EpLru *l, uint32_t slot) {
        if (slot >= l->capacity || !l->nodes[slot].used || l->nodes[slot].prev == NIL)
                return -ENOENT;
        return (int) l->nodes[slot].prev;
}

const void *ep_lru_slot_key(const EpLru *l, uint32_t slot) {
        if (slot >= l->capacity || !l->nodes[slot].used)
                return NULL;
        return l->keys + (size_t) slot * l->key_size;
}
