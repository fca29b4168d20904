/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "array.h"
#include "macro.h"
#include "processes.h"

int process_table_init(ProcessTable *t) {
        *t = (ProcessTable) {};
        t->by_pid = ep_hashmap_new(sizeof(uint32_t), sizeof(uint32_t));
        return t->by_pid ? 0 : -ENOMEM;
}

static void process_clear(Process *p) {
        free(p->comm);
        free(p->exe);
        free(p->container_id);
        *p = (Process) {};
}

void process_table_done(ProcessTable *t) {
        for (size_t i = 0; i < t->n; i++)
                process_clear(&t->items[i]);
        free(t->items);
        free(t->free_slots);
        ep_hashmap_free(t->by_pid);
        *t = (ProcessTable) {};
}

static bool str_eq(const char *a, const char *b) {
        return streq(a ?: "", b ?: "");
}

/* Takes the strings. */
static int process_new(ProcessTable *t, uint32_t pid, uint64_t start_time_ns, char *comm,
                       char *exe, char *container_id, uint32_t *ret_idx) {
        uint32_t idx, *v;
        int r;

        if (t->n_free > 0)
                idx = t->free_slots[t->n_free - 1];
        else {
                if (t->n >= UINT32_MAX)
                        r = -E2BIG;
                else
                        r = ARRAY_RESERVE(t->items, t->cap, t->n + 1);
                if (r < 0)
                        goto fail;
                idx = (uint32_t) t->n;
        }

        r = ep_hashmap_put(t->by_pid, &pid, (void **) &v);
        if (r < 0)
                goto fail;
        *v = idx;

        if (t->n_free > 0)
                t->n_free--;
        else
                t->n++;
        t->items[idx] = (Process) {
                .pid = pid,
                .used = true,
                .start_time_ns = start_time_ns,
                .comm = comm,
                .exe = exe,
                .container_id = container_id,
        };
        t->live++;
        *ret_idx = idx;
        return 0;

fail:
        free(comm);
        free(exe);
        free(container_id);
        return r;
}

int process_table_announce(ProcessTable *t, uint32_t pid, uint64_t start_time_ns, char *comm,
                           char *exe, char *container_id, uint32_t *ret_idx) {
        uint32_t *v = ep_hashmap_get(t->by_pid, &pid);

        if (v) {
                Process *p = &t->items[*v];

                /* Same process (exec), or a placeholder not written yet: update in place. */
                if (p->start_time_ns == start_time_ns || (p->start_time_ns == 0 && p->store_id == 0)) {
                        bool changed = !str_eq(p->comm, comm) || !str_eq(p->exe, exe) ||
                                       !str_eq(p->container_id, container_id);

                        free(p->comm);
                        free(p->exe);
                        free(p->container_id);
                        p->comm = comm;
                        p->exe = exe;
                        p->container_id = container_id;
                        p->start_time_ns = start_time_ns;
                        if (changed && p->store_id != 0)
                                p->store_dirty = true;
                        *ret_idx = *v;
                        return 0;
                }

                /* pid reused without an exit notice: the old one is gone. */
                p->exited = true;
                ep_hashmap_remove(t->by_pid, &pid, NULL);
        }

        return process_new(t, pid, start_time_ns, comm, exe, container_id, ret_idx);
}

int process_table_for_trace(ProcessTable *t, uint32_t pid, const char *thread_comm,
                            uint32_t *ret_idx) {
        uint32_t *v = ep_hashmap_get(t->by_pid, &pid);
        char *comm;

        if (v) {
                *ret_idx = *v;
                return 0;
        }
        comm = strdup(thread_comm ?: "");
        if (!comm)
                return -ENOMEM;
        return process_new(t, pid, 0, comm, NULL, NULL, ret_idx);
}

int process_table_main_thread_named(ProcessTable *t, uint32_t idx, const char *thread_comm) {
        Process *p = process_table_get(t, idx);
        char *comm;

        if (!p || !thread_comm || str_eq(p->comm, thread_comm))
                return 0;
        comm = strdup(thread_comm);
        if (!comm)
                return -ENOMEM;
        free(p->comm);
        p->comm = comm;
        if (p->store_id != 0)
                p->store_dirty = true;
        return 0;
}

void process_table_exit(ProcessTable *t, uint32_t pid) {
        uint32_t idx;

        if (ep_hashmap_remove(t->by_pid, &pid, &idx) > 0)
                t->items[idx].exited = true;
}

void process_table_gc(ProcessTable *t, uint64_t written_seq) {
        for (size_t i = 0; i < t->n; i++) {
                Process *p = &t->items[i];

                if (!p->used || !p->exited || p->pinned || p->last_seq > written_seq)
                        continue;
                if (ARRAY_PUSH(t->free_slots, t->n_free, t->cap_free, (uint32_t) i) < 0)
                        return; /* keep it; try again next time */
                process_clear(p);
                t->live--;
        }
}
