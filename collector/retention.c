/* SPDX-License-Identifier: MIT */
/* Retention of the local store, in short steps; see retention.h. */

#include <endian.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "grow-array.h"
#include "log.h"
#include "macro.h"
#include "retention.h"

/* Frame ids above this are not marked in a bitmap (512 MiB of it); such a store is not
 * garbage-collected for frames. Ids are assigned densely, so this is never reached in practice. */
#define FRAME_ID_MAX (INT64_C(1) << 32)

void retention_init(Retention *rt, const RetentionPolicy *policy) {
        /* A previous collector may have stopped between deleting samples and collecting what
         * they used: collect once at start. */
        *rt = (Retention) { .policy = *policy, .gc_wanted = true };
}

void retention_deleted_clear(RetentionDeleted *d) {
        d->n_stacks = d->n_frames = d->n_processes = d->n_files = 0;
}

void retention_deleted_done(RetentionDeleted *d) {
        free(d->stacks);
        free(d->frames);
        free(d->processes);
        free(d->files);
        *d = (RetentionDeleted) {};
}

static int cmp_id(const void *a, const void *b) {
        int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;
        return (x > y) - (x < y);
}

static void sort_ids(int64_t *ids, size_t n) {
        if (n > 1) /* ids is NULL while nothing was deleted */
                qsort(ids, n, sizeof(int64_t), cmp_id);
}

static void deleted_sort(RetentionDeleted *d) {
        sort_ids(d->stacks, d->n_stacks);
        sort_ids(d->frames, d->n_frames);
        sort_ids(d->processes, d->n_processes);
        sort_ids(d->files, d->n_files);
}

bool retention_deleted_contains(const int64_t *ids, size_t n, int64_t id) {
        return n > 0 && bsearch(&id, ids, n, sizeof(int64_t), cmp_id);
}

static void finalize(sqlite3_stmt **st) {
        sqlite3_finalize(*st);
}
#define _cleanup_stmt_ _cleanup_(finalize)

static int prepare(Store *s, const char *sql, sqlite3_stmt **ret) {
        int rc = sqlite3_prepare_v2(store_db(s), sql, -1, ret, NULL);
        return rc == SQLITE_OK ? 0 : store_fail(s, rc, "preparing a retention query");
}

/* Runs st to completion; rows are ignored. */
static int run(Store *s, sqlite3_stmt *st, const char *what) {
        int rc;

        while ((rc = sqlite3_step(st)) == SQLITE_ROW)
                ;
        sqlite3_reset(st);
        return rc == SQLITE_DONE ? 0 : store_fail(s, rc, what);
}

/* Runs a DELETE ... RETURNING id and appends the ids to *ids. */
static int run_returning(Store *s, sqlite3_stmt *st, int64_t **ids, size_t *n, size_t *cap,
                         const char *what) {
        int rc, r;

        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                r = ARRAY_PUSH(*ids, *n, *cap, sqlite3_column_int64(st, 0));
                if (r < 0) {
                        sqlite3_reset(st);
                        return r;
                }
        }
        sqlite3_reset(st);
        return rc == SQLITE_DONE ? 0 : store_fail(s, rc, what);
}

static int query_int(Store *s, const char *sql, int64_t *ret) {
        int rc = store_exec_first(s, sql, ret, NULL, 0);

        if (rc == SQLITE_EMPTY) {
                *ret = 0;
                return 0;
        }
        return rc == SQLITE_OK ? 0 : store_fail(s, rc, "reading retention state");
}

/* ---- removing intervals ---- */

/* Deletes up to RETENTION_BATCH_SAMPLES sample rows of intervals in dead_intervals, and the
 * dead_intervals rows of those that have none left. Returns 1 when it deleted anything. */
static int delete_dead_samples(Retention *rt, Store *s) {
        _cleanup_stmt_ sqlite3_stmt *next = NULL, *del = NULL, *done = NULL;
        int64_t budget = RETENTION_BATCH_SAMPLES;
        bool any = false;
        int rc, r;

        r = prepare(s, "SELECT id FROM dead_intervals ORDER BY id LIMIT 1", &next);
        if (r >= 0)
                r = prepare(s, "DELETE FROM samples WHERE (interval, process, tid, stack) IN "
                            "(SELECT interval, process, tid, stack FROM samples WHERE interval = ?1 LIMIT ?2)",
                            &del);
        if (r >= 0)
                r = prepare(s, "DELETE FROM dead_intervals WHERE id = ?1", &done);
        if (r < 0)
                return r;

        while (budget > 0) {
                int64_t id, n;

                rc = sqlite3_step(next);
                if (rc == SQLITE_DONE)
                        break;
                if (rc != SQLITE_ROW)
                        return store_fail(s, rc, "listing removed intervals");
                id = sqlite3_column_int64(next, 0);
                sqlite3_reset(next);

                sqlite3_bind_int64(del, 1, id);
                sqlite3_bind_int64(del, 2, budget);
                r = run(s, del, "deleting samples");
                if (r < 0)
                        return r;
                n = sqlite3_changes(store_db(s));
                budget -= n;
                rt->counters.samples += (uint64_t) n;
                any = true;
                if (budget <= 0)
                        break; /* there may be more rows of this interval */
                sqlite3_bind_int64(done, 1, id);
                r = run(s, done, "forgetting a removed interval");
                if (r < 0)
                        return r;
        }
        if (any)
                rt->gc_wanted = true;
        return any;
}

static int remove_interval(Retention *rt, Store *s, sqlite3_stmt *dead, sqlite3_stmt *del, int64_t id) {
        int r;

        sqlite3_bind_int64(dead, 1, id);
        r = run(s, dead, "removing an interval");
        if (r < 0)
                return r;
        sqlite3_bind_int64(del, 1, id);
        r = run(s, del, "removing an interval");
        if (r < 0)
                return r;
        rt->counters.intervals++;
        return 0;
}

/* Removes intervals: those that ended before cutoff_ns (by_age), or else the oldest ones but
 * the newest, up to about RETENTION_BATCH_SAMPLES sample rows. Returns how many. */
static int remove_intervals(Retention *rt, Store *s, bool by_age, uint64_t cutoff_ns) {
        _cleanup_stmt_ sqlite3_stmt *list = NULL, *rows = NULL, *dead = NULL, *del = NULL;
        int64_t n_rows = 0;
        int n = 0, rc, r;

        r = prepare(s, by_age ? "SELECT id FROM intervals WHERE start_ns < ?1 AND end_ns < ?1 "
                                "ORDER BY start_ns LIMIT ?2"
                              : "SELECT id FROM intervals WHERE id != (SELECT id FROM intervals "
                                "ORDER BY start_ns DESC, id DESC LIMIT 1) ORDER BY start_ns, id LIMIT ?2",
                    &list);
        if (r >= 0)
                r = prepare(s, "SELECT count(*) FROM samples WHERE interval = ?1", &rows);
        if (r >= 0)
                r = prepare(s, "INSERT OR IGNORE INTO dead_intervals(id) VALUES(?1)", &dead);
        if (r >= 0)
                r = prepare(s, "DELETE FROM intervals WHERE id = ?1", &del);
        if (r < 0)
                return r;

        if (by_age)
                sqlite3_bind_int64(list, 1, (int64_t) MIN(cutoff_ns, (uint64_t) INT64_MAX));
        sqlite3_bind_int(list, 2, RETENTION_BATCH_INTERVALS);
        /* Collect first: deleting from intervals while stepping over it is not allowed to
         * change what the SELECT sees. */
        _cleanup_free_ int64_t *ids = NULL;
        size_t n_ids = 0, cap_ids = 0;
        while ((rc = sqlite3_step(list)) == SQLITE_ROW) {
                int64_t id = sqlite3_column_int64(list, 0);

                if (!by_age) {
                        /* The oldest intervals, until they hold a batch of sample rows. */
                        if (n_rows >= RETENTION_BATCH_SAMPLES)
                                break;
                        sqlite3_bind_int64(rows, 1, id);
                        if (sqlite3_step(rows) == SQLITE_ROW)
                                n_rows += sqlite3_column_int64(rows, 0);
                        sqlite3_reset(rows);
                }
                r = ARRAY_PUSH(ids, n_ids, cap_ids, id);
                if (r < 0)
                        return r;
        }
        if (rc != SQLITE_ROW && rc != SQLITE_DONE)
                return store_fail(s, rc, "listing intervals to remove");
        sqlite3_reset(list);

        for (size_t i = 0; i < n_ids; i++, n++) {
                r = remove_interval(rt, s, dead, del, ids[i]);
                if (r < 0)
                        return r;
        }
        return n;
}

/* ---- garbage collection ---- */

/* The oldest interval whose samples may still be there (live or still being deleted); rows
 * whose last_interval is older are used by no sample. Interval ids only grow, so the answer
 * only grows while garbage collection runs: what it decided stays true. */
static int oldest_interval(Store *s, int64_t *ret) {
        return query_int(s, "SELECT coalesce(min(id), 9223372036854775807) FROM "
                            "(SELECT min(id) AS id FROM intervals UNION ALL SELECT min(id) FROM dead_intervals)",
                         ret);
}

/* One batch of stacks by id: those no sample uses go. */
static int gc_stacks(Retention *rt, Store *s, RetentionDeleted *d) {
        _cleanup_stmt_ sqlite3_stmt *last = NULL, *del = NULL;
        int64_t end, oldest;
        int rc, r;

        r = oldest_interval(s, &oldest);
        if (r >= 0)
                r = prepare(s, "SELECT max(id) FROM (SELECT id FROM stacks WHERE id > ?1 ORDER BY id LIMIT ?2)", &last);
        if (r >= 0)
                r = prepare(s, "DELETE FROM stacks WHERE id > ?1 AND id <= ?2 AND last_interval < ?3 RETURNING id",
                            &del);
        if (r < 0)
                return r;

        sqlite3_bind_int64(last, 1, rt->gc_cursor);
        sqlite3_bind_int(last, 2, RETENTION_BATCH_STACKS);
        rc = sqlite3_step(last);
        if (rc != SQLITE_ROW)
                return store_fail(s, rc, "listing stacks");
        if (sqlite3_column_type(last, 0) == SQLITE_NULL) {
                rt->gc_phase = GC_FRAMES; /* all stacks looked at */
                return 0;
        }
        end = sqlite3_column_int64(last, 0);

        size_t before = d->n_stacks;
        sqlite3_bind_int64(del, 1, rt->gc_cursor);
        sqlite3_bind_int64(del, 2, end);
        sqlite3_bind_int64(del, 3, oldest);
        r = run_returning(s, del, &d->stacks, &d->n_stacks, &d->cap_stacks, "deleting stacks");
        if (r < 0)
                return r;
        rt->counters.stacks += d->n_stacks - before;
        rt->gc_cursor = end;
        return 0;
}

static void bitmap_set(uint64_t *bits, int64_t id) {
        bits[(uint64_t) id / 64] |= UINT64_C(1) << ((uint64_t) id % 64);
}

static bool bitmap_test(const uint64_t *bits, int64_t id) {
        return bits[(uint64_t) id / 64] & (UINT64_C(1) << ((uint64_t) id % 64));
}

/* Frames no stack names go, with their lines. Stacks keep frame ids in a blob, so there is no
 * index to ask: mark the frames of every stack in a bitmap, then sweep. One transaction (it
 * must not see a stack written half-way through), reading every stack once. */
static int gc_frames(Retention *rt, Store *s, RetentionDeleted *d) {
        _cleanup_stmt_ sqlite3_stmt *stacks = NULL, *frames = NULL, *del_lines = NULL, *del = NULL;
        _cleanup_free_ uint64_t *live = NULL;
        int64_t max_id;
        size_t before = d->n_frames;
        int rc, r;

        rt->gc_phase = GC_PROCESSES;
        r = query_int(s, "SELECT coalesce(max(id), 0) FROM frames", &max_id);
        if (r < 0)
                return r;
        if (max_id >= FRAME_ID_MAX) {
                log_once(LOG_WARNING, "Store %s has frame ids up to %" PRIi64 "; not collecting "
                         "unused frames.", store_path(s), max_id);
                return 0;
        }
        live = calloc((size_t) max_id / 64 + 1, sizeof(uint64_t));
        if (!live)
                return -ENOMEM;

        r = prepare(s, "SELECT frames FROM stacks", &stacks);
        if (r >= 0)
                r = prepare(s, "SELECT id FROM frames", &frames);
        if (r >= 0)
                r = prepare(s, "DELETE FROM frame_lines WHERE frame = ?1", &del_lines);
        if (r >= 0)
                r = prepare(s, "DELETE FROM frames WHERE id = ?1", &del);
        if (r < 0)
                return r;

        while ((rc = sqlite3_step(stacks)) == SQLITE_ROW) {
                const uint8_t *b = sqlite3_column_blob(stacks, 0);
                size_t n = (size_t) sqlite3_column_bytes(stacks, 0) / 8;

                for (size_t i = 0; i < n; i++) {
                        uint64_t v;

                        memcpy(&v, b + 8 * i, 8);
                        v = le64toh(v);
                        if (v <= (uint64_t) max_id)
                                bitmap_set(live, (int64_t) v);
                }
        }
        if (rc != SQLITE_DONE)
                return store_fail(s, rc, "reading stacks");

        while ((rc = sqlite3_step(frames)) == SQLITE_ROW) {
                int64_t id = sqlite3_column_int64(frames, 0);

                if (id >= 0 && id <= max_id && bitmap_test(live, id))
                        continue;
                r = ARRAY_PUSH(d->frames, d->n_frames, d->cap_frames, id);
                if (r < 0)
                        return r;
        }
        if (rc != SQLITE_DONE)
                return store_fail(s, rc, "listing frames");

        for (size_t i = before; i < d->n_frames; i++) {
                sqlite3_bind_int64(del_lines, 1, d->frames[i]);
                r = run(s, del_lines, "deleting frame lines");
                if (r < 0)
                        return r;
                sqlite3_bind_int64(del, 1, d->frames[i]);
                r = run(s, del, "deleting a frame");
                if (r < 0)
                        return r;
        }
        rt->counters.frames += d->n_frames - before;
        return 0;
}

/* Processes no sample and no per-process frame (frames.file of an EP_FRAME_UNMAPPED or
 * EP_FRAME_CPYTHON row) names, then
 * files no native frame names. Both tables are small; the frame checks use UNIQUE(kind, file,
 * addr). */
static int gc_owners(Retention *rt, Store *s, RetentionDeleted *d) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        bool processes = rt->gc_phase == GC_PROCESSES;
        size_t before = processes ? d->n_processes : d->n_files;
        int64_t oldest = 0;
        int r;

        r = processes ? oldest_interval(s, &oldest) : 0;
        if (r >= 0)
                r = prepare(s, processes
                            ? "DELETE FROM processes WHERE last_interval < ?1 AND "
                              "NOT EXISTS (SELECT 1 FROM frames WHERE kind IN (3, 5) AND file = processes.id) RETURNING id"
                            : "DELETE FROM files WHERE NOT EXISTS (SELECT 1 FROM frames WHERE kind = 1 AND file = files.id) "
                              "RETURNING id",
                            &st);
        if (r < 0)
                return r;
        if (processes)
                sqlite3_bind_int64(st, 1, oldest);
        if (processes) {
                r = run_returning(s, st, &d->processes, &d->n_processes, &d->cap_processes,
                                  "deleting processes");
                if (r < 0)
                        return r;
                rt->counters.processes += d->n_processes - before;
                rt->gc_phase = GC_FILES;
        } else {
                r = run_returning(s, st, &d->files, &d->n_files, &d->cap_files, "deleting files");
                if (r < 0)
                        return r;
                rt->counters.files += d->n_files - before;
                rt->gc_phase = GC_IDLE;
        }
        return 0;
}

static int gc_step(Retention *rt, Store *s, RetentionDeleted *d) {
        switch (rt->gc_phase) {
        case GC_STACKS:
                return gc_stacks(rt, s, d);
        case GC_FRAMES:
                return gc_frames(rt, s, d);
        case GC_PROCESSES:
        case GC_FILES:
                return gc_owners(rt, s, d);
        default:
                return 0;
        }
}

/* ---- shrinking the file ---- */

/* Gives up to RETENTION_VACUUM_PAGES free pages back. Returns 1 while free pages remain. */
static int vacuum_step(Retention *rt, Store *s) {
        int64_t free_before, free_after, page_size, mode;
        char sql[64];
        int rc, r;

        r = query_int(s, "PRAGMA auto_vacuum", &mode);
        if (r >= 0 && mode != 2)
                return 0; /* a store that could not be rewritten: free pages are only reused */
        if (r >= 0)
                r = query_int(s, "PRAGMA freelist_count", &free_before);
        if (r >= 0)
                r = query_int(s, "PRAGMA page_size", &page_size);
        if (r < 0 || free_before == 0)
                return r;

        snprintf(sql, sizeof(sql), "PRAGMA incremental_vacuum(%d)", RETENTION_VACUUM_PAGES);
        rc = sqlite3_exec(store_db(s), sql, NULL, NULL, NULL);
        if (rc != SQLITE_OK)
                return store_fail(s, rc, "vacuuming");
        r = query_int(s, "PRAGMA freelist_count", &free_after);
        if (r < 0)
                return r;
        rt->counters.bytes_reclaimed += (uint64_t) MAX(free_before - free_after, (int64_t) 0) * (uint64_t) page_size;
        return free_after > 0 && free_after < free_before;
}

/* ---- checkpoints ---- */

/* The collector turned the checkpoint at commit off (store_set_manual_checkpoints()): copying
 * the WAL into the file is done here, once the file it makes (page_count pages) fits the size
 * limit, so the file does not grow past the limit between a write and the retention that makes
 * room for it; and then at most every checkpoint_period_ns, since a copy costs three fsyncs
 * (the WAL, the file, the WAL's new header), which at a low rate is most of an interval's
 * write. A WAL grown past its own limit is copied anyway, and a file over the limit (such a
 * copy made it so) as soon as it fits, which is when it shrinks. PASSIVE: never waits for
 * readers; they only delay it. */
static void maybe_checkpoint(Retention *rt, Store *s, uint64_t mono_ns) {
        bool wal_full = store_wal_bytes(s) > rt->policy.max_wal_bytes;
        uint64_t total = 0;

        if (rt->policy.max_bytes > 0 && !wal_full &&
            (store_page_bytes(s, &total, NULL) < 0 || total > rt->policy.max_bytes))
                return;
        if (!wal_full && rt->policy.checkpoint_period_ns > 0 && rt->last_checkpoint_ns != 0 &&
            mono_ns - rt->last_checkpoint_ns < rt->policy.checkpoint_period_ns &&
            !(rt->policy.max_bytes > 0 && store_db_file_bytes(s) > rt->policy.max_bytes))
                return;
        (void) sqlite3_wal_checkpoint_v2(store_db(s), NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        rt->last_checkpoint_ns = mono_ns ?: 1;
}

/* ---- one step ---- */

static bool gc_due(const Retention *rt, uint64_t mono_ns, bool over_size) {
        return rt->gc_wanted &&
               (over_size || rt->last_gc_ns == 0 || mono_ns - rt->last_gc_ns >= rt->policy.gc_period_ns);
}

/* Decides what to do next and does it, inside the caller's transaction. 1: did something. */
static int step_work(Retention *rt, Store *s, uint64_t now_ns, uint64_t mono_ns, RetentionDeleted *d) {
        uint64_t used = 0;
        bool over;
        int r;

        r = delete_dead_samples(rt, s);
        if (r != 0)
                return r;

        if (rt->gc_phase != GC_IDLE) {
                r = gc_step(rt, s, d);
                if (r < 0)
                        return r;
                if (rt->gc_phase == GC_IDLE) {
                        rt->gc_wanted = false;
                        rt->last_gc_ns = mono_ns ?: 1;
                }
                return 1;
        }

        if (rt->policy.max_age_ns > 0 && now_ns > rt->policy.max_age_ns) {
                r = remove_intervals(rt, s, true, now_ns - rt->policy.max_age_ns);
                if (r != 0)
                        return r < 0 ? r : 1;
        }

        if (rt->policy.max_bytes > 0) {
                r = store_page_bytes(s, NULL, &used);
                if (r < 0)
                        return r;
        }
        over = rt->policy.max_bytes > 0 && used > rt->policy.max_bytes;

        /* Over the size: what garbage collection frees first, then older intervals. */
        if (gc_due(rt, mono_ns, over)) {
                rt->gc_phase = GC_STACKS;
                rt->gc_cursor = 0;
                return 1;
        }
        if (over) {
                r = remove_intervals(rt, s, false, 0);
                if (r != 0)
                        return r < 0 ? r : 1;
        }
        return 0;
}

int retention_step(Retention *rt, Store *s, uint64_t now_ns, uint64_t mono_ns, RetentionDeleted *deleted) {
        int r, work;

        retention_deleted_clear(deleted);
        r = store_begin(s);
        if (r < 0)
                return r;
        work = step_work(rt, s, now_ns, mono_ns, deleted);
        r = work < 0 ? work : store_commit(s);
        if (r < 0) {
                store_rollback(s);
                retention_deleted_clear(deleted);
                /* Start garbage collection over: the batch's rows may still be there. */
                if (rt->gc_phase != GC_IDLE)
                        rt->gc_phase = GC_STACKS, rt->gc_cursor = 0;
                return r;
        }
        deleted_sort(deleted);
        if (work > 0) {
                rt->did_work = true;
                maybe_checkpoint(rt, s, mono_ns);
                return 1;
        }

        /* Nothing left to delete: give the freed pages back, then let the file shrink. */
        r = vacuum_step(rt, s);
        maybe_checkpoint(rt, s, mono_ns);
        if (r != 0)
                return r;
        if (rt->did_work)
                rt->counters.last_run_ns = now_ns;
        return 0;
}
