/* SPDX-License-Identifier: MIT */
#pragma once

/* Processes by (pid, start time). The pid map points at the live process with that pid; an
 * entry outlives its exit until the last interval that used it has been written
 * (process_table_gc), then its slot is reused -- unless frames refer to it (pinned: JIT frames
 * are per process and, like all frames, live as long as the collector). */

#include <stdbool.h>
#include <stdint.h>

#include "hashmap.h"

typedef struct Process {
        uint32_t pid;
        bool used;         /* slot holds a process */
        bool exited;
        bool store_dirty;  /* comm/exe changed after the row was written (exec, PR_SET_NAME) */
        bool pinned;       /* EP_FRAME_UNMAPPED frames refer to it: never freed */
        uint64_t start_time_ns; /* 0 = not announced by the loader (placeholder) */
        char *comm, *exe, *container_id;
        int64_t store_id;  /* processes.id, 0 while not in the store */
        uint64_t mark;     /* interval seq that last collected it */
        uint64_t last_seq; /* last interval with a sample of it */
} Process;

typedef struct ProcessTable {
        Process *items;
        size_t n, cap;
        uint32_t *free_slots;
        size_t n_free, cap_free;
        size_t live; /* used slots */
        EpHashmap *by_pid; /* pid → u32 index of the live process */
} ProcessTable;

int process_table_init(ProcessTable *t);
void process_table_done(ProcessTable *t);

/* EP_MSG_PROCESS. Takes ownership of the strings (also on failure). Sets *ret_changed when an
 * existing entry's names changed (exec). */
int process_table_announce(ProcessTable *t, uint32_t pid, uint64_t start_time_ns, char *comm,
                           char *exe, char *container_id, uint32_t *ret_idx);
/* The live process for a trace; makes a placeholder named after the thread when the loader
 * has not announced the pid. */
int process_table_for_trace(ProcessTable *t, uint32_t pid, const char *thread_comm,
                            uint32_t *ret_idx);
/* A sample of the process's main thread, named thread_comm: its name is the process's (as ps
 * shows it), which the program may change after the loader announced it (PR_SET_NAME). */
int process_table_main_thread_named(ProcessTable *t, uint32_t idx, const char *thread_comm);
void process_table_exit(ProcessTable *t, uint32_t pid);
/* Frees exited processes whose last sample belongs to an interval <= written_seq. */
void process_table_gc(ProcessTable *t, uint64_t written_seq);

static inline Process *process_table_get(ProcessTable *t, uint32_t idx) {
        return idx < t->n && t->items[idx].used ? &t->items[idx] : NULL;
}
