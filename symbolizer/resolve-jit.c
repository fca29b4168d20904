/* SPDX-License-Identifier: MIT */
/* Frames in memory no file backs (JIT code): named from the process's perf map
 * (/tmp/perf-PID.map, opened by the loader inside the process's root; parsed by perf-map.c).
 *
 * One entry per process, keyed by (pid, start time) so a reused pid is another process, in an
 * LRU of EP_JIT_MAX_PROCESSES. The map's descriptor stays open so a miss can read what the JIT
 * appended since (at most every EP_JIT_REREAD_NS). A process without a map, or whose map was
 * refused, is remembered for EP_JIT_MISSING_RETRY_NS: JITs create their maps lazily, so it is
 * asked again after that. Hits are cacheable (the result cache keys them by pid, start time
 * and address); misses are not, the map may gain the address later. A JIT that re-uses an
 * address for other code after it was named keeps the first name in the caches: the
 * collector asks once per (process, address) anyway. */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "perf-map.h"
#include "resolve-jit.h"
#include "resolver-internal.h"

typedef struct JitKey {
        uint64_t start_time_ns;
        uint32_t pid;
        uint32_t zero; /* no padding in a hashed key */
} JitKey;

typedef enum JitState {
        JIT_MAP,     /* fd and map are valid */
        JIT_MISSING, /* no map (or no process); error says why */
        JIT_REFUSED, /* a map we must not or cannot read */
} JitState;

typedef struct JitProcess {
        JitState state;
        int error;   /* JIT_MISSING/JIT_REFUSED: the source's answer */
        int fd;
        EpPerfMap *map;
        uint64_t since_ns;   /* JIT_MAP: last read; else when the answer came */
        uint64_t used_ns;    /* last lookup: the entry budget evicts the oldest */
        uint64_t malformed;  /* map's malformed/dropped counts already added to the stats */
        uint64_t dropped;
        size_t entries, memory; /* as counted in ResolverJit */
        bool logged;         /* one warning per process */
} JitProcess;

struct ResolverJit {
        EpLru *procs;
        JitProcess *slots;
        EpJitStats stats;
};

static void process_done(ResolverJit *j, JitProcess *p) {
        j->stats.entries -= p->entries;
        j->stats.memory -= p->memory;
        ep_perf_map_free(p->map);
        if (p->fd >= 0)
                close(p->fd);
        *p = (JitProcess) { .fd = -EBADF };
}

static ResolverJit *jit_state(EpResolver *r) {
        ResolverJit *j;

        if (r->jit)
                return r->jit;
        j = calloc(1, sizeof(ResolverJit));
        if (!j)
                return NULL;
        j->slots = calloc(EP_JIT_MAX_PROCESSES, sizeof(JitProcess));
        if (!j->slots || ep_lru_new(sizeof(JitKey), EP_JIT_MAX_PROCESSES, &j->procs) < 0) {
                free(j->slots);
                free(j);
                return NULL;
        }
        for (uint32_t i = 0; i < EP_JIT_MAX_PROCESSES; i++)
                j->slots[i].fd = -EBADF;
        r->jit = j;
        return j;
}

void ep_resolve_jit_free(EpResolver *r) {
        ResolverJit *j = r->jit;

        if (!j)
                return;
        for (uint32_t i = 0; i < EP_JIT_MAX_PROCESSES; i++)
                process_done(j, &j->slots[i]);
        ep_lru_free(j->procs);
        free(j->slots);
        free(j);
        r->jit = NULL;
}

void ep_resolve_jit_source_changed(EpResolver *r) {
        ResolverJit *j = r->jit;

        if (!j)
                return;
        /* The loader came back: processes it could not answer for are asked again. */
        for (uint32_t i = 0; i < EP_JIT_MAX_PROCESSES; i++)
                if (ep_lru_slot_key(j->procs, i) && j->slots[i].state != JIT_MAP)
                        j->slots[i].since_ns = 0;
}

void ep_resolver_jit_stats(EpResolver *r, EpJitStats *ret) {
        *ret = r->jit ? r->jit->stats : (EpJitStats) {};
        if (r->jit)
                ret->processes = ep_lru_size(r->jit->procs);
}

/* Keeps the maps within the entry and memory budgets by dropping the least recently used
 * ones other than keep. */
static void enforce_budget(ResolverJit *j, const JitProcess *keep) {
        while (j->stats.entries > EP_JIT_ENTRY_BUDGET || j->stats.memory > EP_JIT_MEMORY_BUDGET) {
                uint32_t victim = UINT32_MAX;

                for (uint32_t i = 0; i < EP_JIT_MAX_PROCESSES; i++) {
                        const JitProcess *p = &j->slots[i];

                        if (p == keep || !p->map || !ep_lru_slot_key(j->procs, i))
                                continue;
                        if (victim == UINT32_MAX || p->used_ns < j->slots[victim].used_ns)
                                victim = i;
                }
                if (victim == UINT32_MAX)
                        return; /* one map alone; its own limits bound it */
                JitKey key;
                memcpy(&key, ep_lru_slot_key(j->procs, victim), sizeof(key));
                process_done(j, &j->slots[victim]);
                (void) ep_lru_remove(j->procs, &key);
                j->stats.evictions++;
        }
}

static void refuse(EpResolver *r, ResolverJit *j, JitProcess *p, const JitKey *key, int error) {
        LOG_CONTEXT_PID((pid_t) key->pid);

        if (!p->logged) {
                p->logged = true;
                log_warning_errno(error, "Perf map of process %" PRIu32 " (started %" PRIu64 ") is not usable, "
                                  "its JIT frames stay unnamed: %m", key->pid, key->start_time_ns);
        }
        ep_sym_stats_error(r->stats, "perf map of process %" PRIu32 ": %s", key->pid, strerror(-error));
        j->stats.entries -= p->entries;
        j->stats.memory -= p->memory;
        p->entries = p->memory = 0;
        ep_perf_map_free(p->map);
        p->map = NULL;
        if (p->fd >= 0)
                close(p->fd);
        p->fd = -EBADF;
        p->state = JIT_REFUSED;
        p->error = error;
        j->stats.maps_refused++;
}

/* Reads what the map gained and updates the counts. */
static int read_map(EpResolver *r, ResolverJit *j, JitProcess *p, const JitKey *key) {
        const EpPerfMapStats *s;
        int k;
        LOG_CONTEXT_PID((pid_t) key->pid);

        k = ep_perf_map_read(p->map, p->fd, NULL);
        p->since_ns = ep_resolver_now_ns();
        j->stats.reads++;

        j->stats.entries -= p->entries;
        j->stats.memory -= p->memory;
        p->entries = ep_perf_map_entries(p->map);
        p->memory = ep_perf_map_memory(p->map);
        j->stats.entries += p->entries;
        j->stats.memory += p->memory;

        s = ep_perf_map_stats(p->map);
        if (s->malformed > p->malformed || s->dropped > p->dropped) {
                j->stats.lines_malformed += s->malformed - MIN(p->malformed, s->malformed);
                j->stats.lines_dropped += s->dropped - MIN(p->dropped, s->dropped);
                if (!p->logged) {
                        p->logged = true;
                        log_warning("Perf map of process %" PRIu32 " (started %" PRIu64 "): %" PRIu64
                                    " malformed and %" PRIu64 " dropped of %" PRIu64 " lines; skipping them.",
                                    key->pid, key->start_time_ns, s->malformed, s->dropped, s->lines);
                }
        }
        p->malformed = s->malformed;
        p->dropped = s->dropped;

        if (k == -ENOMEM)
                return k;
        if (k < 0)
                refuse(r, j, p, key, k);
        enforce_budget(j, p);
        return 0;
}

/* Asks the source for the map of key's process and reads it into p. */
static int open_map(EpResolver *r, ResolverJit *j, JitProcess *p, const JitKey *key) {
        int fd, k;

        fd = r->source.open_perf_map ? r->source.open_perf_map(r->source.userdata, key->pid) : -ENXIO;
        p->since_ns = ep_resolver_now_ns();
        if (fd == -ENOENT || fd == -ESRCH || ep_error_passing(fd)) {
                p->state = JIT_MISSING;
                p->error = fd;
                j->stats.maps_missing++;
                return 0;
        }
        if (fd < 0) {
                refuse(r, j, p, key, fd);
                return 0;
        }

        p->fd = fd;
        k = ep_perf_map_new(NULL, &p->map);
        if (k < 0) {
                close(p->fd);
                p->fd = -EBADF;
                return k;
        }
        p->state = JIT_MAP;
        p->malformed = p->dropped = 0;
        j->stats.maps_opened++;
        return read_map(r, j, p, key);
}

/* The entry of the request's process, opening its map when it is new or its "no map" answer
 * is old enough: 0 with *ret; 1 with *ret NULL when the source is away or did not answer (a
 * passing failure: nothing is remembered then); -ENOMEM. */
static int get_process(EpResolver *r, ResolverJit *j, const EpSymRequest *req, JitProcess **ret) {
        JitKey key = { .start_time_ns = req->start_time_ns, .pid = req->pid };
        uint64_t now = ep_resolver_now_ns();
        JitProcess *p;
        bool evicted;
        int slot, k;

        slot = ep_lru_get(j->procs, &key);
        if (slot >= 0) {
                p = &j->slots[slot];
                if (p->state == JIT_MAP || now - p->since_ns < EP_JIT_MISSING_RETRY_NS) {
                        *ret = p;
                        return 0;
                }
                /* Asked long enough ago: JITs write their maps lazily. */
                k = open_map(r, j, p, &key);
        } else {
                slot = ep_lru_insert(j->procs, &key, &evicted);
                if (slot < 0)
                        return slot;
                p = &j->slots[slot];
                if (evicted)
                        process_done(j, p);
                *p = (JitProcess) { .fd = -EBADF };
                k = open_map(r, j, p, &key);
        }
        if (k < 0) {
                process_done(j, p);
                (void) ep_lru_remove(j->procs, &key);
                return k;
        }
        if (p->state == JIT_MISSING && ep_error_passing(p->error)) {
                /* Nobody to ask right now, or no answer: do not remember. */
                (void) ep_lru_remove(j->procs, &key);
                process_done(j, p);
                *ret = NULL;
                return 1;
        }
        *ret = p;
        return 0;
}

int ep_resolve_jit(EpResolver *r, const EpSymRequest *req, EpSymResult *out, bool *ret_cacheable) {
        const char *name = NULL;
        JitProcess *p = NULL;
        ResolverJit *j;
        int k;

        *ret_cacheable = false;
        j = jit_state(r);
        if (!j)
                return -ENOMEM;

        k = get_process(r, j, req, &p);
        if (k < 0)
                return k;
        if (k > 0)
                return ep_resolver_result_set(out, EP_SYM_RETRY, req->addr, "", NULL);
        if (!p || p->state == JIT_MISSING)
                return ep_resolver_result_set(out, EP_SYM_NO_FILE, req->addr, "", NULL);
        if (p->state == JIT_REFUSED)
                return ep_resolver_result_set(out, EP_SYM_BAD_FILE, req->addr, "", NULL);

        /* A return address may be just past the end of a call at the end of the code. */
        uint64_t lookup = (req->flags & EP_FRAME_FLAG_RETURN_ADDRESS) && req->addr > 0 ? req->addr - 1 : req->addr;

        p->used_ns = ep_resolver_now_ns();
        name = ep_perf_map_lookup(p->map, lookup, NULL);
        if (!name && p->used_ns - p->since_ns >= EP_JIT_REREAD_NS) {
                k = read_map(r, j, p, &(JitKey) { .start_time_ns = req->start_time_ns, .pid = req->pid });
                if (k < 0)
                        return k;
                if (p->state != JIT_MAP)
                        return ep_resolver_result_set(out, EP_SYM_BAD_FILE, req->addr, "", NULL);
                name = ep_perf_map_lookup(p->map, lookup, NULL);
        }
        if (!name)
                return ep_resolver_result_set(out, EP_SYM_NOT_FOUND, req->addr, "", NULL);

        char *copy = strdup(name);
        if (!copy)
                return -ENOMEM;
        *ret_cacheable = true;
        return ep_resolver_result_set(out, EP_SYM_OK, req->addr, "", copy);
}
