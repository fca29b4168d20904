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
#include "spawn-util.h"

/* The newest store schema this reader understands; it reads every version from 1 up. */
#define EP_STORE_SCHEMA_VERSION 4
#define EP_STORE_DEFAULT_PATH EP_STATE_DIR "/profiles.db"

/* How many values one filter option takes (--pid, --comm given several times). */
#define EP_STORE_FILTER_MAX_VALUES 32
/* The shortest container ID prefix accepted, as docker's shortest unique prefixes go. */
#define EP_STORE_CONTAINER_PREFIX_MIN 4

/* Which samples to read. Fields combine with AND; the values of one list with OR. Everything
 * is selected in SQL. */
typedef struct EpStoreFilter {
        int64_t pids[EP_STORE_FILTER_MAX_VALUES]; /* processes.pid is any of these */
        size_t n_pids;                            /* 0: any process */
        const char *comms[EP_STORE_FILTER_MAX_VALUES]; /* processes.comm is one of these, exactly */
        size_t n_comms;                                /* 0: any comm */
        const char *container; /* NULL: any; else a full container ID or a unique prefix of at
                                * least EP_STORE_CONTAINER_PREFIX_MIN characters */
        int64_t tid;             /* samples.tid; < 0: any */
        const char *thread_name; /* samples.thread_name, exactly; NULL: any */
        uint64_t since_ns; /* CLOCK_REALTIME; intervals that end after it */
        uint64_t until_ns; /* intervals that start before it; UINT64_MAX: no limit */
        bool kernel;       /* show kernel frames */
} EpStoreFilter;

#define EP_STORE_FILTER_INIT \
        ((EpStoreFilter) { .tid = -1, .until_ns = UINT64_MAX, .kernel = true })

/* Adds one value to a list: -E2BIG when the list is full. */
int ep_store_filter_add_pid(EpStoreFilter *f, int64_t pid);
int ep_store_filter_add_comm(EpStoreFilter *f, const char *comm);
/* True when f selects every sample (it may still hide kernel frames). */
bool ep_store_filter_selects_all(const EpStoreFilter *f);

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

/* Adds the samples that match f to tree. -ENOTUNIQ: f->container is a prefix of several
 * container IDs; -EINVAL: it is too short. */
int ep_store_read(sqlite3 *db, const EpStoreFilter *f, EpStoreReadFlags flags, EpCallTree *tree,
                  EpStoreSummary *ret);

/* Prepares `select` + the samples f selects + tail (GROUP BY, ORDER BY...). The query's tables
 * are samples s, intervals i and processes p; select and tail must not use named parameters.
 * Every reader of samples goes through this, so every view and export selects the same samples.
 * Errors as ep_store_read(). */
int ep_store_prepare_samples(sqlite3 *db, const EpStoreFilter *f, const char *select, const char *tail,
                             sqlite3_stmt **ret);

/* The distinct container IDs of the store that start with prefix, sorted, in a new
 * NULL-terminated array (free with ep_strv_free). */
int ep_store_find_containers(sqlite3 *db, const char *prefix, char ***ret_ids, size_t *ret_n);
DEFINE_TRIVIAL_CLEANUP_FUNC(char **, ep_strv_free);
#define _cleanup_strv_free_ _cleanup_(ep_strv_freep)

/* Samples per process or per thread, as `top --by` ranks them. */
typedef enum EpStoreGroupBy {
        EP_STORE_GROUP_PROCESS,
        EP_STORE_GROUP_THREAD,
        _EP_STORE_GROUP_MAX,
} EpStoreGroupBy;

typedef struct EpStoreGroup {
        int64_t pid;
        int64_t tid;        /* EP_STORE_GROUP_THREAD; else -1 */
        char *comm;         /* never NULL */
        char *container_id; /* "" outside containers */
        char *thread_name;  /* EP_STORE_GROUP_THREAD: the name in the thread's latest sample */
        uint64_t samples;
} EpStoreGroup;

/* Reads the groups of the samples f selects, most samples first (then by pid and tid), and their
 * summary, from one snapshot. Two processes with the same pid (reused) are two groups. */
int ep_store_read_groups(sqlite3 *db, const EpStoreFilter *f, EpStoreGroupBy by, EpStoreGroup **ret,
                         size_t *ret_n, EpStoreSummary *ret_summary);
void ep_store_groups_free(EpStoreGroup *g, size_t n);

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
