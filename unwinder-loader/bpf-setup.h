/* SPDX-License-Identifier: MIT */
#pragma once

/* The BPF side of the loader: opens and loads the skeleton (bpf/profiler.bpf.c), attaches the
 * process exit/exec tracepoints and one software CPU-clock perf event per online CPU, and
 * reads the per-CPU counters. */

#include <stdbool.h>
#include <stdint.h>

#include "macro.h"
#include "profiler.h"

typedef struct EpBpf EpBpf;

/* Capacities of the native-unwinding maps, chosen from the machine (ep_bpf_limits_for). */
typedef struct EpBpfLimits {
        uint32_t max_processes; /* proc_mappings entries (allocated on use) */
        uint32_t max_files;     /* unwind_tables/file_state slots, file_num 0 unused */
        uint32_t max_pages;     /* unwind_pages entries (allocated on use) */
        uint32_t ringbuf_bytes; /* the events ring buffer (ring-size.h) */
} EpBpfLimits;

/* Limits for a machine with this much memory, this pid_max and n_cpus sampled at hz. */
EpBpfLimits ep_bpf_limits_for(uint64_t mem_bytes, uint32_t pid_max, uint32_t hz, unsigned n_cpus);
/* Kernel memory the maps take when full (per-process mappings, pages, slots, rules), and what
 * is allocated up front (the arrays). */
uint64_t ep_bpf_limits_max_bytes(const EpBpfLimits *lim);

/* Descriptors of the native-unwinding maps. */
typedef struct EpUnwindMaps {
        int proc_mappings;
        int unwind_rules;
        int unwind_pages;
        int unwind_tables;
        int file_state;
        int py_procs; /* CPython processes (runtime-cpython.c) */
        /* BPF's tables_gen (its per-CPU rule cache is good while it is unchanged): incremented
         * after a table is removed, before its file number is given to another file. NULL in
         * tests without BPF. */
        volatile uint32_t *tables_gen;
} EpUnwindMaps;

/* Loads and attaches everything but the perf events. Errors are logged with cause and fix. */
int ep_bpf_load(bool include_idle, const EpBpfLimits *limits, EpBpf **ret);
EpUnwindMaps ep_bpf_unwind_maps(const EpBpf *b);
EpBpf *ep_bpf_free(EpBpf *b);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpBpf *, ep_bpf_free);

/* Opens the perf events on every online CPU at hz samples per second and attaches the sampling
 * program; when they are open already, changes their period in place (re-opening them only if
 * that fails). On failure the previous events stay in place. */
int ep_bpf_start_sampling(EpBpf *b, uint32_t hz);
unsigned ep_bpf_n_cpus(const EpBpf *b);

/* Descriptor of the BPF ring buffer map (records of bpf/profiler.h). */
int ep_bpf_events_fd(const EpBpf *b);

/* Sums the per-CPU counters (EP_BPF_CNT_*). */
int ep_bpf_read_counters(const EpBpf *b, uint64_t ret[EP_BPF_CNT_MAX]);
