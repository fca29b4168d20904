/* SPDX-License-Identifier: MIT */
#pragma once

/* Reading the collector's SQLite store (schema in docs/ARCHITECTURE.md, "Local store"):
 * samples matching a filter, their stacks materialized into the shared call tree. The store
 * is opened read-only; everything is read in one transaction (a consistent WAL snapshot that
 * never blocks the collector). */

#include <stdbool.h>
#include <stdint.h>
#include <sqlite3.h>

#include "calltree.h"
#include "config.h"
#include "macro.h"

#define EP_STORE_SCHEMA_VERSION 1
#define EP_STORE_DEFAULT_PATH EP_STATE_DIR "/profiles.db"

typedef struct EpStoreFilter {
        int64_t pid;       /* < 0: any */
        const char *comm;  /* NULL: any; else the process's comm, exactly */
        uint64_t since_ns; /* CLOCK_REALTIME; intervals that end after it */
        uint64_t until_ns; /* intervals that start before it; UINT64_MAX: no limit */
        bool kernel;       /* show kernel frames */
} EpStoreFilter;

#define EP_STORE_FILTER_INIT \
        ((EpStoreFilter) { .pid = -1, .until_ns = UINT64_MAX, .kernel = true })

typedef struct EpStoreSummary {
        uint64_t samples;
        uint64_t first_ns, last_ns; /* time span of the matching intervals */
        uint64_t intervals;
        uint64_t processes;
        uint64_t stacks;
} EpStoreSummary;

/* Opens path read-only. -ENOENT: no such file; -EACCES: not readable; -EPROTO: not a
 * profile store (or an unknown schema version); -EIO: SQLite error (logged). */
int ep_store_open(const char *path, sqlite3 **ret);
DEFINE_TRIVIAL_CLEANUP_FUNC(sqlite3 *, sqlite3_close_v2);
#define _cleanup_sqlite_ _cleanup_(sqlite3_close_v2p)

typedef enum EpStoreReadFlags {
        /* Put a "comm (pid)" node between the root and the frames (the flame graph). Without
         * it the stacks of all processes merge, which is all top needs and much smaller. */
        EP_STORE_READ_BY_PROCESS = 1 << 0,
        /* Name functions with their source position, "f (file.c:12)", where DWARF, Go's
         * table or a perf map gave one: the same function at two call sites becomes two. */
        EP_STORE_READ_LINES = 1 << 1,
} EpStoreReadFlags;

/* Adds the samples that match f to tree. */
int ep_store_read(sqlite3 *db, const EpStoreFilter *f, EpStoreReadFlags flags, EpCallTree *tree,
                  EpStoreSummary *ret);

/* How a stored frame is named (exposed for the tests). lines are innermost first; n_lines 0
 * means unsymbolized. */
typedef struct EpStoredFrame {
        int kind;         /* EP_FRAME_* */
        uint64_t addr;
        const char *path; /* files.path, native frames */
        const char *module; /* frames.module, kernel frames */
} EpStoredFrame;
int ep_store_frame_name(const EpStoredFrame *f, const char *function, char **ret_name,
                        const char **ret_module, EpViewKind *ret_kind);
