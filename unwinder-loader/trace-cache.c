/* SPDX-License-Identifier: MIT */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"
#include "macro.h"
#include "trace-cache.h"

typedef struct Conversion {
        uint64_t hash; /* of the raw slots, seeded with the pid */
        TraceCacheState state;
        unsigned n_raw, n, n_interp;
        uint64_t *raw;   /* n_raw slots, then the frames: one allocation */
        EpFrame *frames; /* n frames, inside the same allocation */
} Conversion;

struct TraceCache {
        Conversion *slots;
        size_t n_slots, max_bytes, hand;
        TraceCacheStats stats;
};

static size_t conversion_bytes(unsigned n_raw, unsigned n) {
        return (size_t) n_raw * sizeof(uint64_t) + (size_t) n * sizeof(EpFrame);
}

static void conversion_clear(TraceCache *c, Conversion *v) {
        if (!v->raw)
                return;
        c->stats.bytes -= conversion_bytes(v->n_raw, v->n);
        free(v->raw);
        *v = (Conversion) {};
}

int trace_cache_new(size_t slots, size_t max_bytes, TraceCache **ret) {
        TraceCache *c;

        if (slots == 0 || (slots & (slots - 1)) != 0)
                return -EINVAL;
        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->slots = calloc(slots, sizeof *c->slots);
        if (!c->slots) {
                free(c);
                return -ENOMEM;
        }
        c->n_slots = slots;
        c->max_bytes = max_bytes;
        *ret = c;
        return 0;
}

TraceCache *trace_cache_free(TraceCache *c) {
        if (!c)
                return NULL;
        for (size_t i = 0; i < c->n_slots; i++)
                conversion_clear(c, &c->slots[i]);
        free(c->slots);
        free(c);
        return NULL;
}

static bool same_state(const TraceCacheState *a, const TraceCacheState *b) {
        return a->pid == b->pid && a->start_time_ns == b->start_time_ns && a->maps_gen == b->maps_gen &&
               a->runtime == b->runtime && a->runtime_version == b->runtime_version && a->ring_gen == b->ring_gen;
}

static uint64_t raw_hash(const TraceCacheState *st, const uint64_t *raw, unsigned n_raw) {
        return ep_hash_bytes_seeded(raw, (size_t) n_raw * sizeof *raw, (uint64_t) st->pid);
}

const EpFrame *trace_cache_find(TraceCache *c, const TraceCacheState *st, const uint64_t *raw, unsigned n_raw,
                                unsigned *ret_n, unsigned *ret_n_interp) {
        uint64_t h = raw_hash(st, raw, n_raw);
        const Conversion *v = &c->slots[h & (c->n_slots - 1)];

        if (!v->raw || v->hash != h || v->n_raw != n_raw || !same_state(&v->state, st) ||
            memcmp(v->raw, raw, (size_t) n_raw * sizeof *raw) != 0)
                return NULL;
        c->stats.hits++;
        *ret_n = v->n;
        *ret_n_interp = v->n_interp;
        return v->frames;
}

void trace_cache_add(TraceCache *c, const TraceCacheState *st, const uint64_t *raw, unsigned n_raw,
                     const EpFrame *frames, unsigned n, unsigned n_interp) {
        uint64_t h = raw_hash(st, raw, n_raw);
        Conversion *v = &c->slots[h & (c->n_slots - 1)];
        size_t need = conversion_bytes(n_raw, n);
        uint64_t *mem;

        conversion_clear(c, v);
        if (need == 0 || need > c->max_bytes)
                return;
        /* Room in the budget: the other slots in turn, as a clock hand goes round. */
        for (size_t i = 0; c->stats.bytes + need > c->max_bytes && i < c->n_slots; i++) {
                Conversion *o = &c->slots[c->hand];

                c->hand = (c->hand + 1) & (c->n_slots - 1);
                if (o->raw) {
                        conversion_clear(c, o);
                        c->stats.evicted++;
                }
        }
        mem = malloc(need);
        if (!mem)
                return;
        memcpy(mem, raw, (size_t) n_raw * sizeof *raw);
        *v = (Conversion) {
                .hash = h,
                .state = *st,
                .n_raw = n_raw,
                .n = n,
                .n_interp = n_interp,
                .raw = mem,
                .frames = (EpFrame *) (mem + n_raw),
        };
        memcpy(v->frames, frames, (size_t) n * sizeof *frames);
        c->stats.bytes += need;
        c->stats.added++;
}

TraceCacheStats trace_cache_stats(const TraceCache *c) {
        return c->stats;
}
