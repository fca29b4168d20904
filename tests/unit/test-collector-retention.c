/* SPDX-License-Identifier: MIT */
/* Store schema migration and retention: a version-1 store (built here with the version-1 SQL)
 * is migrated with its rows; a newer version is refused with a message naming both versions;
 * retention by age deletes exactly the old intervals and what only they used; retention by size
 * keeps a tiny store under its limit while thousands of intervals go in through the collector;
 * the collector's cached row ids stay valid after garbage collection. */

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store-schema-v1.h"
#include "collector.h"
#include "daemon.h"
#include "grow-array.h"
#include "retention.h"
#include "test-collector-util.h"
#include "wire-buf.h"
#include "wire.h"

#define DAY_NS (24ULL * 3600 * NSEC_PER_SEC)

static char dir[] = "/tmp/test-collector-retention.XXXXXX";

/* What a version-1 collector wrote: one file, two symbolized frames, one stack, one process,
 * two intervals. */
static const char rows_v1_sql[] =
        "PRAGMA journal_mode = WAL;"
        "INSERT INTO files VALUES(1, x'0102030405060708090a0b0c0d0e0f10', '/usr/bin/app', NULL, NULL);"
        "INSERT INTO frames VALUES(1, 1, 1, 4096, 4198400, NULL, 0);"
        "INSERT INTO frames VALUES(2, 1, 1, 8192, 4202496, NULL, 0);"
        "INSERT INTO frame_lines VALUES(1, 0, 'leaf_function', '/src/app.c', 10);"
        "INSERT INTO frame_lines VALUES(2, 0, 'main', '/src/app.c', 20);"
        "INSERT INTO stacks VALUES(1, x'00000000000000000000000000000001',"
        "                          x'01000000000000000200000000000000');"
        "INSERT INTO processes VALUES(1, 4242, 1, 'app', '/usr/bin/app', '');"
        "INSERT INTO intervals VALUES(1, 1000000000, 6000000000, 10000000);"
        "INSERT INTO intervals VALUES(2, 6000000000, 11000000000, 10000000);"
        "INSERT INTO samples VALUES(1, 1, 4242, 'app', 1, 30);"
        "INSERT INTO samples VALUES(2, 1, 4242, 'app', 1, 12);"
        "INSERT INTO samples VALUES(2, 1, 4243, 'worker', 1, 5);"
        "PRAGMA user_version = 1;";

static void make_db(const char *path, const char *sql) {
        sqlite3 *db;
        char *err = NULL;

        unlink(path);
        ASSERT_TRUE(sqlite3_open(path, &db) == SQLITE_OK);
        if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
                fprintf(stderr, "%s\n", err);
                ASSERT_TRUE(false);
        }
        sqlite3_close(db);
}

/* Runs f(arg) with stderr going to a file; returns what it wrote (static buffer). */
static const char *capture_stderr(int (*f)(const char *), const char *arg, int *ret) {
        static char buf[4096];
        char path[300];
        int fd, saved;
        ssize_t n;

        snprintf(path, sizeof(path), "%s/stderr.txt", dir);
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ASSERT_TRUE(fd >= 0);
        fflush(stderr);
        saved = dup(STDERR_FILENO);
        ASSERT_TRUE(dup2(fd, STDERR_FILENO) >= 0);
        *ret = f(arg);
        fflush(stderr);
        ASSERT_TRUE(dup2(saved, STDERR_FILENO) >= 0);
        close(saved);
        n = pread(fd, buf, sizeof(buf) - 1, 0);
        buf[MAX(n, (ssize_t) 0)] = 0;
        close(fd);
        unlink(path);
        return buf;
}

static int open_and_free(const char *path) {
        Store *s = NULL;
        int r = store_open(path, &s);

        store_free(s);
        return r;
}

static void test_migrate_v1(void) {
        char path[256], cmd[600], out[4096];
        const char *log;
        sqlite3 *db;
        FILE *p;
        size_t n;
        int r;

        snprintf(path, sizeof(path), "%s/v1.db", dir);
        make_db(path, schema_v1_sql);
        ASSERT_TRUE(sqlite3_open(path, &db) == SQLITE_OK);
        ASSERT_TRUE(sqlite3_exec(db, rows_v1_sql, NULL, NULL, NULL) == SQLITE_OK);
        sqlite3_close(db);

        log = capture_stderr(open_and_free, path, &r);
        ASSERT_OK(r);
        ASSERT_TRUE(strstr(log, "Migrated profile store") && strstr(log, "from schema 1 to 4"));

        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "PRAGMA user_version") == STORE_SCHEMA_VERSION);
        ASSERT_TRUE(q_int(db, "PRAGMA auto_vacuum") == 2); /* rewritten once: incremental */
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM files") == 1);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames") == 2);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frame_lines") == 2);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM stacks") == 1);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM processes") == 1);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM intervals") == 2);
        ASSERT_TRUE(q_int(db, "SELECT sum(count) FROM samples") == 47);
        /* the new bookkeeping was filled in */
        ASSERT_TRUE(q_int(db, "SELECT samples FROM intervals WHERE id = 1") == 30);
        ASSERT_TRUE(q_int(db, "SELECT samples FROM intervals WHERE id = 2") == 17);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'dead_intervals'") == 1);
        ASSERT_TRUE(q_int(db, "SELECT last_interval FROM stacks WHERE id = 1") == 2);
        ASSERT_TRUE(q_int(db, "SELECT last_interval FROM processes WHERE id = 1") == 2);
        /* ids keep growing after the newest interval is deleted */
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM sqlite_master WHERE sql LIKE '%AUTOINCREMENT%'") == 1);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'intervals_by_start'") == 1);
        /* v3: the frames keep their ids and names, with the return-address flag in their identity */
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames f JOIN frame_lines l ON l.frame = f.id") == 2);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames WHERE flags = 0") == 2);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'frames' AND "
                              "sql LIKE '%UNIQUE(kind, file, addr, flags)%'") == 1);
        sqlite3_close(db);

        /* once only */
        log = capture_stderr(open_and_free, path, &r);
        ASSERT_OK(r);
        ASSERT_TRUE(!strstr(log, "Migrated"));

        /* the views read it */
        const char *cli = getenv("EP_CLI");
        ASSERT_TRUE(cli && access(cli, X_OK) == 0);
        snprintf(cmd, sizeof(cmd), "'%s' top --store '%s' --since 0 2>&1", cli, path);
        p = popen(cmd, "r");
        ASSERT_TRUE(p);
        n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = 0;
        r = pclose(p);
        if (r != 0 || !strstr(out, "leaf_function") || !strstr(out, "main"))
                fprintf(stderr, "ebpf-profiler top said (%d):\n%s\n", r, out);
        ASSERT_TRUE(r == 0);
        ASSERT_TRUE(strstr(out, "leaf_function") && strstr(out, "main"));
}

static void test_newer_refused(void) {
        char path[256], expect[64];
        const char *log;
        int r;

        char sql[96], version[64];

        snprintf(path, sizeof(path), "%s/newer.db", dir);
        snprintf(sql, sizeof(sql), "CREATE TABLE samples(a); PRAGMA user_version = %d", STORE_SCHEMA_VERSION + 1);
        make_db(path, sql);
        log = capture_stderr(open_and_free, path, &r);
        ASSERT_TRUE(r == -EPROTONOSUPPORT);
        snprintf(expect, sizeof(expect), "newer than version %d", STORE_SCHEMA_VERSION);
        snprintf(version, sizeof(version), "schema version %d", STORE_SCHEMA_VERSION + 1);
        ASSERT_TRUE(strstr(log, version) && strstr(log, expect));
}

/* Every sample's stack, process and interval exists; every stack's frames exist; every native
 * frame's file and JIT frame's process exists. */
static void check_consistent(const char *path) {
        sqlite3_stmt *st;
        sqlite3 *db;

        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM samples s WHERE NOT EXISTS "
                              "(SELECT 1 FROM stacks WHERE id = s.stack)") == 0);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM samples s WHERE NOT EXISTS "
                              "(SELECT 1 FROM processes WHERE id = s.process)") == 0);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM samples s WHERE NOT EXISTS "
                              "(SELECT 1 FROM intervals WHERE id = s.interval) AND NOT EXISTS "
                              "(SELECT 1 FROM dead_intervals WHERE id = s.interval)") == 0);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames f WHERE kind = 1 AND NOT EXISTS "
                              "(SELECT 1 FROM files WHERE id = f.file)") == 0);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames f WHERE kind = 3 AND NOT EXISTS "
                              "(SELECT 1 FROM processes WHERE id = f.file)") == 0);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frame_lines l WHERE NOT EXISTS "
                              "(SELECT 1 FROM frames WHERE id = l.frame)") == 0);
        ASSERT_TRUE(q_int(db, "SELECT sum(samples) FROM intervals") ==
                    q_int(db, "SELECT coalesce(sum(count), 0) FROM samples WHERE interval IN (SELECT id FROM intervals)"));

        ASSERT_TRUE(sqlite3_prepare_v2(db, "SELECT frames FROM stacks", -1, &st, NULL) == SQLITE_OK);
        while (sqlite3_step(st) == SQLITE_ROW) {
                const uint8_t *b = sqlite3_column_blob(st, 0);
                int n = sqlite3_column_bytes(st, 0) / 8;

                for (int i = 0; i < n; i++) {
                        sqlite3_stmt *f;
                        uint64_t v;

                        memcpy(&v, b + 8 * i, 8);
                        ASSERT_TRUE(sqlite3_prepare_v2(db, "SELECT 1 FROM frames WHERE id = ?", -1, &f, NULL) == SQLITE_OK);
                        sqlite3_bind_int64(f, 1, (int64_t) le64toh(v));
                        ASSERT_TRUE(sqlite3_step(f) == SQLITE_ROW);
                        sqlite3_finalize(f);
                }
        }
        sqlite3_finalize(st);
        sqlite3_close(db);
}

static int run_retention(Retention *rt, Store *s, uint64_t now_ns, RetentionDeleted *d,
                         RetentionDeleted *all) {
        int r;

        while ((r = retention_step(rt, s, now_ns, 1, d)) > 0) {
                for (size_t i = 0; i < d->n_stacks; i++)
                        ASSERT_OK(ARRAY_PUSH(all->stacks, all->n_stacks, all->cap_stacks, d->stacks[i]));
                for (size_t i = 0; i < d->n_frames; i++)
                        ASSERT_OK(ARRAY_PUSH(all->frames, all->n_frames, all->cap_frames, d->frames[i]));
                for (size_t i = 0; i < d->n_processes; i++)
                        ASSERT_OK(ARRAY_PUSH(all->processes, all->n_processes, all->cap_processes, d->processes[i]));
                for (size_t i = 0; i < d->n_files; i++)
                        ASSERT_OK(ARRAY_PUSH(all->files, all->n_files, all->cap_files, d->files[i]));
        }
        return r;
}

/* Old intervals use stack A (frames a, shared; file 1; process 1, which also owns a JIT
 * frame in A); new ones use stack B (frames shared, b; file 2; process 2). One interval
 * straddles the cutoff and stays. */
static void test_age(void) {
        static const uint8_t fid1[EP_FILE_ID_SIZE] = { 1 }, fid2[EP_FILE_ID_SIZE] = { 2 };
        SymLine line = { .function = (char *) "f", .file = (char *) "/src/f.c", .line = 1 };
        StoreSymbol sym = { .status = EP_SYM_OK, .lines = &line, .n_lines = 1 };
        const uint64_t now = 100 * DAY_NS;
        int64_t file1, file2, fa, fshared, fb, fjit, p1, p2, sa, sb, iv;
        RetentionDeleted d = {}, all = {};
        Retention rt;
        Store *s = NULL;
        sqlite3 *db;
        char path[256];

        snprintf(path, sizeof(path), "%s/age.db", dir);
        ASSERT_OK(store_open(path, &s));
        ASSERT_OK(store_begin(s));
        ASSERT_OK(store_put_file(s, fid1, fid1, "/one", NULL, 0, NULL, &file1));
        ASSERT_OK(store_put_file(s, fid2, fid2, "/two", NULL, 0, NULL, &file2));
        ASSERT_OK(store_put_process(s, 1, 1, "old", "/one", "", &p1));
        ASSERT_OK(store_put_process(s, 2, 2, "new", "/two", "", &p2));
        ASSERT_OK(store_put_frame(s, EP_FRAME_NATIVE, 0, file1, 0x10, &sym, &fa));
        ASSERT_OK(store_put_frame(s, EP_FRAME_NATIVE, 0, file2, 0x20, &sym, &fshared));
        ASSERT_OK(store_put_frame(s, EP_FRAME_NATIVE, 0, file2, 0x30, &sym, &fb));
        ASSERT_OK(store_put_frame(s, EP_FRAME_UNMAPPED, 0, p1, 0x7f00, &sym, &fjit));
        ASSERT_OK(store_put_stack(s, (int64_t[]) { fa, fjit, fshared }, 3, &sa));
        ASSERT_OK(store_put_stack(s, (int64_t[]) { fb, fshared }, 2, &sb));
        for (int i = 0; i < 10; i++) { /* 10 and 9 days ago ... */
                uint64_t start = now - (10 - i / 2) * DAY_NS + i * NSEC_PER_SEC;
                ASSERT_OK(store_add_interval(s, start, start + 5 * NSEC_PER_SEC, 1, &iv));
                ASSERT_OK(store_add_sample(s, iv, p1, 1, "old", sa, 3));
                ASSERT_OK(store_finish_interval(s, iv, 3));
        }
        /* straddles now - 3d: stays */
        ASSERT_OK(store_add_interval(s, now - 3 * DAY_NS - NSEC_PER_SEC, now - 3 * DAY_NS + NSEC_PER_SEC, 1, &iv));
        ASSERT_OK(store_add_sample(s, iv, p2, 2, "new", sb, 1));
        ASSERT_OK(store_finish_interval(s, iv, 1));
        for (int i = 0; i < 5; i++) {
                ASSERT_OK(store_add_interval(s, now - 60 * NSEC_PER_SEC + i, now - 55 * NSEC_PER_SEC, 1, &iv));
                ASSERT_OK(store_add_sample(s, iv, p2, 2, "new", sb, 7));
                ASSERT_OK(store_finish_interval(s, iv, 7));
        }
        ASSERT_OK(store_commit(s));

        retention_init(&rt, &(RetentionPolicy) { .max_age_ns = 3 * DAY_NS });
        ASSERT_OK(run_retention(&rt, s, now, &d, &all));
        ASSERT_TRUE(rt.counters.intervals == 10);
        ASSERT_TRUE(rt.counters.samples == 10);
        ASSERT_TRUE(rt.counters.stacks == 1 && all.n_stacks == 1 && all.stacks[0] == sa);
        ASSERT_TRUE(rt.counters.frames == 2 && all.n_frames == 2);
        ASSERT_TRUE(retention_deleted_contains(all.frames, all.n_frames, fa));
        ASSERT_TRUE(retention_deleted_contains(all.frames, all.n_frames, fjit));
        ASSERT_TRUE(all.n_processes == 1 && all.processes[0] == p1);
        ASSERT_TRUE(all.n_files == 1 && all.files[0] == file1);
        ASSERT_TRUE(rt.counters.last_run_ns == now);

        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM intervals") == 6);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM dead_intervals") == 0);
        ASSERT_TRUE(q_int(db, "SELECT sum(count) FROM samples") == 1 + 5 * 7);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM stacks") == 1);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames") == 2);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frame_lines") == 2);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM processes") == 1);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM files") == 1);
        ASSERT_TRUE(q_int(db, "SELECT path = '/two' FROM files") == 1);
        sqlite3_close(db);
        check_consistent(path);

        /* nothing more to do */
        rt.counters = (RetentionCounters) {};
        ASSERT_OK(run_retention(&rt, s, now, &d, &all));
        ASSERT_TRUE(rt.counters.intervals == 0 && rt.counters.stacks == 0);

        StoreStats stats;
        ASSERT_OK(store_read_stats(s, &stats));
        ASSERT_TRUE(stats.intervals == 6 && stats.samples == 36);
        ASSERT_TRUE(stats.first_ns == now - 3 * DAY_NS - NSEC_PER_SEC && stats.last_ns == now - 55 * NSEC_PER_SEC);
        store_free(s);
        retention_deleted_done(&d);
        retention_deleted_done(&all);
}

/* ---- through the collector ---- */

static uint64_t rec[(sizeof(EpTraceMsg) + EP_MAX_FRAMES * sizeof(EpFrame)) / 8 + 8];

static void announce_file(Collector *c, uint32_t key, const char *path) {
        uint8_t id[EP_FILE_ID_SIZE] = {};
        EpWriter w;

        memcpy(id, &key, sizeof(key));
        ep_writer_init_dynamic(&w);
        ep_put_u32(&w, key);
        ep_put_bytes(&w, id, sizeof(id));
        ep_put_bytes(&w, id, sizeof(id)); /* its htlhash: a system file */
        ep_put_u64(&w, 12345);
        ep_put_str(&w, path);
        ASSERT_TRUE(!w.overflow);
        ASSERT_OK(collector_intake(c, EP_MSG_FILE, w.data, w.size));
        ep_writer_done(&w);
}

static void announce_process(Collector *c, uint32_t pid) {
        char comm[32];
        EpWriter w;

        snprintf(comm, sizeof(comm), "proc%u", pid);
        ep_writer_init_dynamic(&w);
        ep_put_u32(&w, pid);
        ep_put_u64(&w, 1000 + pid);
        ep_put_str(&w, comm);
        ep_put_str(&w, "/usr/bin/proc");
        ep_put_str(&w, "");
        ASSERT_OK(collector_intake(c, EP_MSG_PROCESS, w.data, w.size));
        ep_writer_done(&w);
}

/* A trace of stack number k (of many): 20-30 native frames in 8 files, deterministic. */
static void feed_trace(Collector *c, uint32_t k, uint32_t pid) {
        EpTraceMsg *m = (EpTraceMsg *) rec;
        uint16_t n = 20 + k % 11;

        memset(rec, 0, sizeof(rec));
        m->time_ns = 1;
        m->pid = pid;
        m->tid = pid;
        m->n_frames = n;
        snprintf(m->comm, EP_COMM_LEN, "proc%u", pid);
        for (uint16_t i = 0; i < n; i++)
                m->frames[i] = (EpFrame) {
                        .kind = EP_FRAME_NATIVE,
                        .file_key = 1 + (k + i) % 8,
                        /* the leaf differs per stack, callers are shared */
                        .addr = i == 0 ? 0x100000 + (uint64_t) k * 16 : 0x1000 + (uint64_t) i * 64 + (k % 7) * 4096,
                };
        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, sizeof(EpTraceMsg) + n * sizeof(EpFrame)));
}

static uint64_t file_size(const char *path) {
        struct stat st;
        return stat(path, &st) == 0 ? (uint64_t) st.st_size : 0;
}

static void setup_collector(Collector *c, const char *path, const RetentionPolicy *policy) {
        ASSERT_OK(collector_init(c));
        c->retention.policy = *policy;
        ASSERT_OK(store_open(path, &c->store));
        ASSERT_OK(collector_store_opened(c));
        for (uint32_t key = 1; key <= 8; key++) {
                char p[32];
                snprintf(p, sizeof(p), "/usr/lib/lib%u.so", key);
                announce_file(c, key, p);
        }
        for (uint32_t pid = 100; pid < 400; pid++)
                announce_process(c, pid);
}

/* Thousands of intervals into a 2 MiB store: it stays under the limit after every retention
 * run, and the newest interval is always complete. Stacks come from a pool that grows slowly,
 * so old stacks are used again after garbage collection deleted their rows. */
static void test_size(void) {
        const uint64_t limit = 2ULL << 20;
        char path[256], wal[300];
        uint64_t max_main = 0, max_wal = 0;
        Collector c;
        sqlite3 *db;

        snprintf(path, sizeof(path), "%s/size.db", dir);
        snprintf(wal, sizeof(wal), "%s-wal", path);
        setup_collector(&c, path, &(RetentionPolicy) { .max_bytes = limit });

        for (uint32_t i = 0; i < 3000; i++) {
                uint64_t before = c.samples_written;
                uint32_t pool = 200 + i * 2; /* new stacks keep coming, old ones come back */

                for (uint32_t t = 0; t < 60; t++) {
                        uint32_t k = (i * 7919u + t * 104729u) % pool;
                        feed_trace(&c, t % 3 == 0 ? k % 150 : k, 100 + (k + t) % 300);
                }
                ASSERT_OK(collector_close_interval(&c, NULL));
                ASSERT_TRUE(c.samples_written == before + 60); /* the write worked */
                ASSERT_OK(collector_retention_run(&c));

                uint64_t used = 0;
                ASSERT_OK(store_page_bytes(c.store, NULL, &used));
                ASSERT_TRUE(used <= limit);
                max_main = MAX(max_main, file_size(path));
                max_wal = MAX(max_wal, file_size(wal));
                ASSERT_TRUE(file_size(path) <= limit); /* checkpoints wait until it fits */

                if (i % 500 == 499)
                        check_consistent(path);
        }
        ASSERT_TRUE(c.retention.counters.intervals > 1000);
        ASSERT_TRUE(c.retention.counters.stacks > 0 && c.retention.counters.frames > 0);
        ASSERT_TRUE(c.retention.counters.bytes_reclaimed > 0);
        printf("size: %" PRIu64 " intervals and %" PRIu64 " stacks deleted, file at most %" PRIu64
               " bytes, WAL at most %" PRIu64 " bytes, %" PRIu64 " intervals kept\n",
               c.retention.counters.intervals, c.retention.counters.stacks, max_main, max_wal,
               c.store_stats.intervals);
        /* the WAL is copied into the file when it outgrows its bound (1 MiB here), so it holds at
         * most that and one more transaction */
        ASSERT_TRUE(c.retention.policy.max_wal_bytes == 1ULL << 20);
        ASSERT_TRUE(max_wal <= c.retention.policy.max_wal_bytes + (1ULL << 20));

        /* the newest interval is there, complete, and the totals match the file */
        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT sum(count) FROM samples WHERE interval = (SELECT max(id) FROM intervals)") == 60);
        ASSERT_TRUE((uint64_t) q_int(db, "SELECT count(*) FROM intervals") == c.store_stats.intervals);
        ASSERT_TRUE((uint64_t) q_int(db, "SELECT sum(samples) FROM intervals") == c.store_stats.samples);
        ASSERT_TRUE(c.store_stats.intervals > 10 && c.store_stats.intervals < 3000);
        sqlite3_close(db);
        check_consistent(path);
        collector_done(&c);
}

/* Everything is deleted (an age limit of 1 ns), then the same stacks are sampled again: the
 * collector must write their rows again instead of naming the deleted ones. */
static void test_cached_ids(void) {
        char path[256];
        Collector c;
        sqlite3 *db;

        /* On the test's clock: the interval is exactly as old as the test makes it. */
        ep_clock_set(tests_clock);
        snprintf(path, sizeof(path), "%s/ids.db", dir);
        setup_collector(&c, path, &(RetentionPolicy) { .max_age_ns = 1 });
        for (uint32_t k = 0; k < 50; k++)
                feed_trace(&c, k, 100 + k);
        ASSERT_OK(collector_close_interval(&c, NULL));
        tests_clock_advance(1);
        ASSERT_OK(collector_retention_run(&c)); /* 1 ns old is not older than 1 ns: kept */
        ASSERT_TRUE(c.retention.counters.intervals == 0 && c.store_stats.intervals == 1);
        tests_clock_advance(1);
        ASSERT_OK(collector_retention_run(&c));
        ASSERT_TRUE(c.retention.counters.intervals == 1);
        ASSERT_TRUE(c.retention.counters.stacks == 50);
        ASSERT_TRUE(c.retention.counters.processes == 50);
        ASSERT_TRUE(c.retention.counters.files == 8);
        for (size_t i = 0; i < c.stacks.n; i++)
                ASSERT_TRUE(c.stacks.items[i].store_id == 0);
        for (size_t i = 0; i < c.frames.n; i++)
                ASSERT_TRUE(c.frames.items[i].store_id == 0);

        /* the same stacks again, now without an age limit */
        c.retention.policy.max_age_ns = 0;
        for (uint32_t k = 0; k < 50; k++)
                feed_trace(&c, k, 100 + k);
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_OK(collector_retention_run(&c));
        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM stacks") == 50);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM files") == 8);
        ASSERT_TRUE(q_int(db, "SELECT sum(count) FROM samples") == 50);
        sqlite3_close(db);
        check_consistent(path);
        ASSERT_TRUE(c.store_stats.intervals == 1 && c.store_stats.samples == 50);
        collector_done(&c);
        ep_clock_set(NULL);
}

/* An interval written into a store far from its limit stays in the WAL until the checkpoint
 * period is over (a copy costs three fsyncs), readers see it all along; a WAL past its own
 * bound is copied within the period. */
static void test_checkpoint_period(void) {
        const uint64_t period = 30ULL * NSEC_PER_SEC;
        char path[256], wal[300];
        uint64_t file;
        uint32_t next = 0;
        Collector c;
        sqlite3 *db;

        ep_clock_set(tests_clock);
        snprintf(path, sizeof(path), "%s/checkpoint.db", dir);
        snprintf(wal, sizeof(wal), "%s-wal", path);
        setup_collector(&c, path,
                        &(RetentionPolicy) { .max_bytes = 64ULL << 20, .checkpoint_period_ns = period });

        /* new stacks every interval: every interval adds pages */
        for (uint32_t k = 0; k < 50; k++, next++)
                feed_trace(&c, next, 100 + next % 300);
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_OK(collector_retention_run(&c)); /* the first one is copied at once */
        file = file_size(path);
        ASSERT_TRUE(file > 0);

        for (unsigned i = 0; i < 5; i++) {
                tests_clock_advance(5 * NSEC_PER_SEC);
                for (uint32_t k = 0; k < 50; k++, next++)
                        feed_trace(&c, next, 100 + next % 300);
                ASSERT_OK(collector_close_interval(&c, NULL));
                ASSERT_OK(collector_retention_run(&c));
                ASSERT_TRUE(file_size(path) == file); /* in the WAL */
        }
        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM intervals") == 6);
        sqlite3_close(db);

        tests_clock_advance(period);
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_OK(collector_retention_run(&c));
        ASSERT_TRUE(file_size(path) > file); /* the period is over: copied */

        /* Within the next period, only the WAL's bound makes a copy, and the WAL stays within
         * it and one interval. */
        file = file_size(path);
        for (unsigned i = 0; i < 2000 && file_size(path) == file; i++) {
                for (uint32_t k = 0; k < 200; k++, next++)
                        feed_trace(&c, next, 100 + next % 300);
                ASSERT_OK(collector_close_interval(&c, NULL));
                ASSERT_OK(collector_retention_run(&c));
                ASSERT_TRUE(file_size(wal) <= c.retention.policy.max_wal_bytes + (1ULL << 20));
        }
        ASSERT_TRUE(file_size(path) > file);
        check_consistent(path);
        collector_done(&c);
        ep_clock_set(NULL);
}

/* Adds what the writer reported on fd (a byte per interval written, non-blocking) to *n. */
static unsigned intervals_reported(int fd, unsigned *n) {
        char buf[64];
        ssize_t k;

        while ((k = read(fd, buf, sizeof(buf))) > 0)
                *n += (unsigned) k;
        return *n;
}

/* kill -9 in the middle of writing: the store opens, passes integrity_check, and holds whole
 * intervals only (each interval's samples add up to its count; readers never see half of
 * one). */
static void test_crash(void) {
        char path[256];
        Store *s = NULL;
        sqlite3 *db;
        unsigned written = 0;
        int status, report[2];
        pid_t pid;

        snprintf(path, sizeof(path), "%s/crash.db", dir);
        ASSERT_OK(pipe2(report, O_CLOEXEC | O_NONBLOCK));
        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                Collector c;

                /* Dies with the test: a failed check must not leave it writing (and holding the
                 * test's stderr open, which meson waits for). */
                if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
                        _exit(EXIT_FAILURE);
                setup_collector(&c, path, &(RetentionPolicy) { .max_bytes = 1ULL << 20 });
                for (uint32_t i = 0;; i++) {
                        for (uint32_t t = 0; t < 400; t++)
                                feed_trace(&c, (i * 31 + t) % (100 + i), 100 + t % 300);
                        if (collector_close_interval(&c, NULL) >= 0)
                                (void) write(report[1], "i", 1);
                        (void) collector_retention_run(&c);
                }
        }
        close(report[1]);
        /* Killed once it has written a few intervals, however long that takes here. */
        ASSERT_EVENTUALLY(intervals_reported(report[0], &written) >= 5, 60, "%u intervals written", written);
        close(report[0]);
        ASSERT_TRUE(kill(pid, SIGKILL) == 0);
        ASSERT_TRUE(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));

        ASSERT_OK(store_open(path, &s)); /* recovers the WAL */
        store_free(s);
        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        char ok[64];
        q_text(db, "PRAGMA integrity_check", ok, sizeof(ok));
        ASSERT_STREQ(ok, "ok");
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM intervals") > 0);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM intervals i WHERE samples != "
                              "(SELECT coalesce(sum(count), 0) FROM samples WHERE interval = i.id)") == 0);
        ASSERT_TRUE(q_int(db, "SELECT min(samples) FROM intervals") == 400);
        sqlite3_close(db);
        check_consistent(path);
}

int main(void) {
        char cmd[300];

        ASSERT_TRUE(mkdtemp(dir));
        test_newer_refused();
        test_age();
        test_cached_ids();
        test_size();
        test_checkpoint_period();
        test_crash();
        test_migrate_v1();

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ASSERT_TRUE(system(cmd) == 0);
        printf("OK\n");
        return 0;
}
