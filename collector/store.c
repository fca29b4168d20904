/* SPDX-License-Identifier: MIT */
#include <endian.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "log.h"
#include "macro.h"
#include "sha256.h"
#include "store.h"

/* The schema is built by migrations: a new store is version 0 migrated to the newest. Each
 * step must stay exactly as it shipped (stores of that version exist); docs/ARCHITECTURE.md
 * shows the result. The CLI reads it. */
static const char migrate_0_to_1_sql[] =
        "CREATE TABLE files(id INTEGER PRIMARY KEY, file_id BLOB NOT NULL UNIQUE, path TEXT,\n"
        "                   gnu_build_id BLOB, go_build_id TEXT);\n"
        "CREATE TABLE frames(id INTEGER PRIMARY KEY,\n"
        "                    kind INTEGER NOT NULL,\n"
        "                    file INTEGER NOT NULL,\n"
        "                    addr INTEGER NOT NULL,\n"
        "                    elf_addr INTEGER,\n"
        "                    module TEXT,\n"
        "                    status INTEGER,\n"
        "                    UNIQUE(kind, file, addr));\n"
        "CREATE TABLE frame_lines(frame INTEGER NOT NULL, depth INTEGER NOT NULL,\n"
        "                         function TEXT, source_file TEXT, line INTEGER,\n"
        "                         PRIMARY KEY(frame, depth)) WITHOUT ROWID;\n"
        "CREATE TABLE stacks(id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE,\n"
        "                    frames BLOB NOT NULL);\n"
        "CREATE TABLE processes(id INTEGER PRIMARY KEY, pid INTEGER NOT NULL, start_time_ns INTEGER,\n"
        "                       comm TEXT, exe TEXT, container_id TEXT, UNIQUE(pid, start_time_ns));\n"
        "CREATE TABLE intervals(id INTEGER PRIMARY KEY, start_ns INTEGER NOT NULL,\n"
        "                       end_ns INTEGER NOT NULL, period_ns INTEGER NOT NULL);\n"
        "CREATE INDEX intervals_by_start ON intervals(start_ns);\n"
        "CREATE TABLE samples(interval INTEGER NOT NULL, process INTEGER NOT NULL, tid INTEGER NOT NULL,\n"
        "                     thread_name TEXT, stack INTEGER NOT NULL, count INTEGER NOT NULL,\n"
        "                     PRIMARY KEY(interval, process, tid, stack)) WITHOUT ROWID;\n";

/* Version 2: what retention needs, without an index on samples (the table that is nearly all
 * of the file; two indexes on it would cost half as much again).
 *  - last_interval of stacks and processes: the newest interval that used the row. A row is
 *    unused once every interval up to its last_interval is gone, which garbage collection can
 *    see without looking at samples.
 *  - intervals ids from AUTOINCREMENT, so they only grow (a deleted newest id is not handed out
 *    again, which would make last_interval lie); intervals.samples, the sum of its counts,
 *    keeps the store's totals cheap. The table is small: rebuilding it is cheap.
 *  - dead_intervals: intervals retention removed whose samples are still being deleted in
 *    batches (readers join intervals, so those samples are invisible already). */
static const char migrate_1_to_2_sql[] =
        "CREATE TABLE intervals_v2(id INTEGER PRIMARY KEY AUTOINCREMENT, start_ns INTEGER NOT NULL,\n"
        "                          end_ns INTEGER NOT NULL, period_ns INTEGER NOT NULL,\n"
        "                          samples INTEGER NOT NULL DEFAULT 0);\n"
        "INSERT INTO intervals_v2(id, start_ns, end_ns, period_ns, samples)\n"
        "        SELECT i.id, i.start_ns, i.end_ns, i.period_ns,\n"
        "               coalesce((SELECT sum(count) FROM samples WHERE interval = i.id), 0)\n"
        "        FROM intervals i;\n"
        "DROP TABLE intervals;\n"
        "ALTER TABLE intervals_v2 RENAME TO intervals;\n"
        "CREATE INDEX intervals_by_start ON intervals(start_ns);\n"
        "ALTER TABLE stacks ADD COLUMN last_interval INTEGER NOT NULL DEFAULT 0;\n"
        "ALTER TABLE processes ADD COLUMN last_interval INTEGER NOT NULL DEFAULT 0;\n"
        "UPDATE stacks SET last_interval = m.iv\n"
        "        FROM (SELECT stack, max(interval) AS iv FROM samples GROUP BY stack) AS m\n"
        "        WHERE m.stack = stacks.id;\n"
        "UPDATE processes SET last_interval = m.iv\n"
        "        FROM (SELECT process, max(interval) AS iv FROM samples GROUP BY process) AS m\n"
        "        WHERE m.process = processes.id;\n"
        "CREATE TABLE dead_intervals(id INTEGER PRIMARY KEY);\n";

/* Version 3: a frame's identity includes its return-address flag (EP_FRAME_FLAG_*), so the two
 * variants of one offset, named at offset - 1 and at the offset, are two rows (before, the
 * first one written named both). SQLite cannot change a UNIQUE constraint in place: the table
 * is copied with its ids (stacks and frame_lines refer to them). Older rows get flags 0; which
 * variant they were is not recorded, so a return address seen again gets a row of its own. */
static const char migrate_2_to_3_sql[] =
        "CREATE TABLE frames_v3(id INTEGER PRIMARY KEY,\n"
        "                       kind INTEGER NOT NULL,\n"
        "                       file INTEGER NOT NULL,\n"
        "                       addr INTEGER NOT NULL,\n"
        "                       elf_addr INTEGER,\n"
        "                       module TEXT,\n"
        "                       status INTEGER,\n"
        "                       flags INTEGER NOT NULL DEFAULT 0,\n"
        "                       UNIQUE(kind, file, addr, flags));\n"
        "INSERT INTO frames_v3(id, kind, file, addr, elf_addr, module, status)\n"
        "        SELECT id, kind, file, addr, elf_addr, module, status FROM frames;\n"
        "DROP TABLE frames;\n"
        "ALTER TABLE frames_v3 RENAME TO frames;\n";

/* Version 4: a file's ID is its htlhash only for a system file (common/file-id.h); the htlhash,
 * what an OTLP export names the file by, has a column of its own. Older rows have NULL there:
 * their ID was the htlhash. */
static const char migrate_3_to_4_sql[] =
        "ALTER TABLE files ADD COLUMN htlhash BLOB;\n";

/* migrations[v] takes a store from version v to v + 1. */
static const char *const migrations[] = {
        migrate_0_to_1_sql,
        migrate_1_to_2_sql,
        migrate_2_to_3_sql,
        migrate_3_to_4_sql,
};
_Static_assert(ELEMENTSOF(migrations) == STORE_SCHEMA_VERSION, "one migration per version");

enum {
        ST_BEGIN,
        ST_COMMIT,
        ST_ROLLBACK,
        ST_FILE_INSERT,
        ST_FILE_LOOKUP,
        ST_FILE_UPDATE,
        ST_FRAME_INSERT,
        ST_FRAME_LOOKUP,
        ST_FRAME_UPDATE,
        ST_LINES_DELETE,
        ST_LINES_INSERT,
        ST_STACK_INSERT,
        ST_STACK_LOOKUP,
        ST_PROCESS_INSERT,
        ST_PROCESS_LOOKUP,
        ST_PROCESS_UPDATE,
        ST_INTERVAL_INSERT,
        ST_SAMPLE_UPSERT,
        ST_INTERVAL_SAMPLES,
        ST_STACKS_TOUCH,
        ST_PROCESSES_TOUCH,
        _ST_MAX,
};

static const char *const statement_sql[_ST_MAX] = {
        [ST_BEGIN] = "BEGIN IMMEDIATE",
        [ST_COMMIT] = "COMMIT",
        [ST_ROLLBACK] = "ROLLBACK",
        [ST_FILE_INSERT] = "INSERT OR IGNORE INTO files(file_id, path, gnu_build_id, go_build_id, htlhash) "
                           "VALUES(?1, ?2, ?3, ?4, ?5)",
        [ST_FILE_LOOKUP] = "SELECT id FROM files WHERE file_id = ?1",
        [ST_FILE_UPDATE] = "UPDATE files SET gnu_build_id = coalesce(?2, gnu_build_id), "
                           "go_build_id = coalesce(?3, go_build_id) WHERE id = ?1",
        [ST_FRAME_INSERT] = "INSERT OR IGNORE INTO frames(kind, file, addr, elf_addr, module, status, flags) "
                            "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        [ST_FRAME_LOOKUP] = "SELECT id FROM frames WHERE kind = ?1 AND file = ?2 AND addr = ?3 AND flags = ?4",
        /* A named row (status 0, EP_SYM_OK) is only ever named again: a later failure (a
         * file gone after a restart of the collector, say) must not unname it. */
        [ST_FRAME_UPDATE] = "UPDATE frames SET elf_addr = ?2, module = ?3, status = ?4 "
                            "WHERE id = ?1 AND (?4 = 0 OR status IS NULL OR status != 0)",
        [ST_LINES_DELETE] = "DELETE FROM frame_lines WHERE frame = ?1",
        [ST_LINES_INSERT] = "INSERT INTO frame_lines(frame, depth, function, source_file, line) "
                            "VALUES(?1, ?2, ?3, ?4, ?5)",
        [ST_STACK_INSERT] = "INSERT OR IGNORE INTO stacks(hash, frames) VALUES(?1, ?2)",
        [ST_STACK_LOOKUP] = "SELECT id, frames FROM stacks WHERE hash = ?1",
        [ST_PROCESS_INSERT] = "INSERT OR IGNORE INTO processes(pid, start_time_ns, comm, exe, container_id) "
                              "VALUES(?1, ?2, ?3, ?4, ?5)",
        [ST_PROCESS_LOOKUP] = "SELECT id FROM processes WHERE pid = ?1 AND start_time_ns = ?2",
        [ST_PROCESS_UPDATE] = "UPDATE processes SET comm = ?2, exe = ?3, container_id = ?4 WHERE id = ?1",
        [ST_INTERVAL_INSERT] = "INSERT INTO intervals(start_ns, end_ns, period_ns) VALUES(?1, ?2, ?3)",
        [ST_SAMPLE_UPSERT] = "INSERT INTO samples(interval, process, tid, thread_name, stack, count) "
                             "VALUES(?1, ?2, ?3, ?4, ?5, ?6) "
                             "ON CONFLICT(interval, process, tid, stack) DO UPDATE SET count = count + excluded.count",
        [ST_INTERVAL_SAMPLES] = "UPDATE intervals SET samples = samples + ?2 WHERE id = ?1",
        [ST_STACKS_TOUCH] = "UPDATE stacks SET last_interval = ?1 "
                            "WHERE id IN (SELECT stack FROM samples WHERE interval = ?1)",
        [ST_PROCESSES_TOUCH] = "UPDATE processes SET last_interval = ?1 "
                               "WHERE id IN (SELECT process FROM samples WHERE interval = ?1)",
};

struct Store {
        char *path;
        sqlite3 *db;
        sqlite3_stmt *st[_ST_MAX];
        char error[512];
        bool failing; /* the last write failed: log repeats quietly until one succeeds */
        int version;
};

static int sqlite_to_errno(int rc) {
        switch (rc & 0xff) {
        case SQLITE_NOMEM:
                return -ENOMEM;
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
                return -EBUSY;
        case SQLITE_FULL:
                return -ENOSPC;
        case SQLITE_READONLY:
                return -EROFS;
        case SQLITE_PERM:
        case SQLITE_AUTH:
                return -EACCES;
        case SQLITE_CANTOPEN:
                return -ENOENT;
        case SQLITE_NOTADB:
        case SQLITE_CORRUPT:
                return -EBADMSG;
        case SQLITE_CONSTRAINT:
                return -EEXIST;
        case SQLITE_TOOBIG:
                return -E2BIG;
        default:
                return -EIO;
        }
}

/* Records and logs an SQLite failure; returns a negative errno. */
int store_fail(Store *s, int rc, const char *what) {
        int level = s->failing ? LOG_DEBUG : LOG_ERR;

        snprintf(s->error, sizeof(s->error), "%s: %s", what,
                 s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        s->failing = true;
        return log_full_errno(level, sqlite_to_errno(rc), "Store %s: %s", s->path, s->error);
}

const char *store_path(const Store *s) {
        return s->path;
}

const char *store_last_error(const Store *s) {
        return s->error;
}

sqlite3 *store_db(Store *s) {
        return s->db;
}

int store_schema_version(const Store *s) {
        return s->version;
}

Store *store_free(Store *s) {
        if (!s)
                return NULL;
        for (size_t i = 0; i < _ST_MAX; i++)
                sqlite3_finalize(s->st[i]);
        if (s->db)
                sqlite3_close_v2(s->db);
        free(s->path);
        free(s);
        return NULL;
}

static int mkdir_parents(const char *path) {
        _cleanup_free_ char *p = strdup(path);
        char *slash;

        if (!p)
                return -ENOMEM;
        slash = strrchr(p, '/');
        if (!slash || slash == p)
                return 0;
        *slash = 0;
        for (char *c = p + 1; *c; c++) {
                if (*c != '/')
                        continue;
                *c = 0;
                if (mkdir(p, 0755) < 0 && errno != EEXIST)
                        return -errno;
                *c = '/';
        }
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

/* The CLI runs as other users: the database and its WAL companions are readable by the
 * collector's group (administrators join it), and by nobody else: they hold every process's
 * stacks, and the other daemons' users have no business with them. */
static void make_readable(const char *path) {
        static const char *const suffixes[] = { "", "-wal", "-shm" };

        for (size_t i = 0; i < ELEMENTSOF(suffixes); i++) {
                char p[PATH_MAX];
                struct stat st;

                if ((size_t) snprintf(p, sizeof(p), "%s%s", path, suffixes[i]) >= sizeof(p))
                        continue;
                if (stat(p, &st) < 0 || (st.st_mode & 0777) == 0640)
                        continue;
                if (chmod(p, 0640) < 0)
                        log_warning_errno(-errno, "Cannot make %s readable for the CLI: %m", p);
        }
}

/* Runs sql and reads the first column of its first row, as an integer (ret_int) or as text
 * (ret_text, of text_size); SQLITE_EMPTY when there is no row. Returns an SQLite result code. */
int store_exec_first(Store *s, const char *sql, int64_t *ret_int, char *ret_text, size_t text_size) {
        sqlite3_stmt *st = NULL;
        int rc;

        rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
        if (rc != SQLITE_OK)
                return rc;
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
                if (ret_int)
                        *ret_int = sqlite3_column_int64(st, 0);
                if (ret_text)
                        snprintf(ret_text, text_size, "%s", (const char *) sqlite3_column_text(st, 0) ?: "");
                rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE)
                rc = SQLITE_EMPTY;
        sqlite3_finalize(st);
        return rc;
}

/* Runs migrations[from..] and sets the version, all in one transaction: a store is at one
 * version or the next, never half-way. */
static int store_migrate(Store *s, int64_t from) {
        char *err = NULL, sql[64];
        int rc;

        rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if (rc != SQLITE_OK)
                return store_fail(s, rc, "starting the schema migration");
        for (int64_t v = from; rc == SQLITE_OK && v < STORE_SCHEMA_VERSION; v++)
                rc = sqlite3_exec(s->db, migrations[v], NULL, NULL, &err);
        if (rc == SQLITE_OK) {
                snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", STORE_SCHEMA_VERSION);
                rc = sqlite3_exec(s->db, sql, NULL, NULL, &err);
        }
        if (rc == SQLITE_OK)
                rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, &err);
        sqlite3_free(err);
        if (rc != SQLITE_OK) {
                int r = store_fail(s, rc, "migrating the schema");
                sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
                return r;
        }
        if (from == 0)
                log_info("Created profile store %s (schema version %d).", s->path, STORE_SCHEMA_VERSION);
        else
                log_info("Migrated profile store %s from schema %" PRIi64 " to %d.", s->path, from,
                         STORE_SCHEMA_VERSION);
        return 0;
}

/* Retention shrinks the file with incremental vacuum, which needs auto_vacuum set before the
 * first table exists, or a full VACUUM (stores created before version 2). The VACUUM rewrites
 * the file once; when it fails (no room for the copy) the store still works: freed pages are
 * reused, the file only does not shrink. */
static void store_enable_incremental_vacuum(Store *s) {
        int64_t mode = 0;
        int rc;

        if (store_exec_first(s, "PRAGMA auto_vacuum", &mode, NULL, 0) != SQLITE_OK || mode == 2)
                return;
        log_info("Rewriting profile store %s once so that retention can shrink it (VACUUM).", s->path);
        rc = sqlite3_exec(s->db, "PRAGMA auto_vacuum = INCREMENTAL; VACUUM", NULL, NULL, NULL);
        if (rc != SQLITE_OK)
                log_warning("Cannot VACUUM profile store %s (%s); retention will reuse freed space "
                            "but the file will not shrink.", s->path, sqlite3_errmsg(s->db));
}

static int store_check_schema(Store *s) {
        int64_t version = 0, tables = 0;
        int rc, r;

        rc = store_exec_first(s, "PRAGMA user_version", &version, NULL, 0);
        if ((rc & 0xff) == SQLITE_NOTADB)
                return log_error_errno(-EBADMSG, "%s is not an SQLite database; move it away or "
                                       "point --store elsewhere.", s->path);
        if (rc != SQLITE_OK)
                return store_fail(s, rc, "reading the schema version");

        if (version > STORE_SCHEMA_VERSION || version < 0)
                return log_error_errno(-EPROTONOSUPPORT,
                                       "%s has store schema version %" PRIi64 ", newer than version "
                                       "%d that this collector knows; use a newer ebpf-profiler or "
                                       "point --store elsewhere.",
                                       s->path, version, STORE_SCHEMA_VERSION);
        if (version == 0) {
                rc = store_exec_first(s, "SELECT count(*) FROM sqlite_master", &tables, NULL, 0);
                if (rc != SQLITE_OK)
                        return store_fail(s, rc, "listing tables");
                if (tables > 0)
                        return log_error_errno(-EPROTONOSUPPORT,
                                               "%s is an SQLite database but not an ebpf-profiler store "
                                               "(schema version 0 with %" PRIi64 " objects).",
                                               s->path, tables);
                /* A new store. WAL and auto_vacuum must be set before the first table. */
                rc = sqlite3_exec(s->db, "PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL",
                                  NULL, NULL, NULL);
                if (rc != SQLITE_OK)
                        return store_fail(s, rc, "setting up a new store");
        }

        if (version < STORE_SCHEMA_VERSION) {
                r = store_migrate(s, version);
                if (r < 0)
                        return r;
        }
        s->version = STORE_SCHEMA_VERSION;
        store_enable_incremental_vacuum(s);
        return 0;
}

int store_open(const char *path, Store **ret) {
        _cleanup_(store_freep) Store *s = NULL;
        char mode[16];
        int rc, r, one = 1;

        s = calloc(1, sizeof(Store));
        if (!s)
                return -ENOMEM;
        s->path = strdup(path);
        if (!s->path)
                return -ENOMEM;

        r = mkdir_parents(path);
        if (r < 0)
                return log_error_errno(r, "Cannot create the directory of %s: %m", path);

        rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
        if (rc != SQLITE_OK)
                return store_fail(s, rc, "opening");
        sqlite3_extended_result_codes(s->db, 1);
        /* CLI readers may briefly hold locks (checkpoints); wait instead of failing. */
        store_set_busy_timeout(s, 5000);
        make_readable(path);

        r = store_check_schema(s);
        if (r < 0)
                return r;

        rc = store_exec_first(s, "PRAGMA journal_mode = WAL", NULL, mode, sizeof(mode));
        if (rc != SQLITE_OK)
                return store_fail(s, rc, "enabling WAL");
        if (!streq(mode, "wal"))
                return log_error_errno(-EIO, "Store %s: cannot switch to WAL mode (journal mode "
                                       "is \"%s\").", path, mode);
        /* A 512 KiB page cache instead of SQLite's 2 MB: an interval's writes touch the
         * indexes' rightmost pages, and the OS page cache holds the rest anyway. */
        rc = sqlite3_exec(s->db, "PRAGMA synchronous = NORMAL; PRAGMA journal_size_limit = 8388608; "
                          "PRAGMA cache_size = -512", NULL, NULL, NULL);
        if (rc != SQLITE_OK)
                return store_fail(s, rc, "setting pragmas");
        /* Keep -wal and -shm when we close so unprivileged readers (who cannot create files in
         * the state directory) can still open the store while the collector is stopped. */
        sqlite3_file_control(s->db, "main", SQLITE_FCNTL_PERSIST_WAL, &one);

        for (size_t i = 0; i < _ST_MAX; i++) {
                rc = sqlite3_prepare_v3(s->db, statement_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                        &s->st[i], NULL);
                if (rc != SQLITE_OK)
                        return log_error_errno(sqlite_to_errno(rc),
                                               "%s does not match store schema version %d (%s); "
                                               "move it away or point --store elsewhere.",
                                               path, STORE_SCHEMA_VERSION, sqlite3_errmsg(s->db));
        }
        make_readable(path);

        *ret = TAKE_PTR(s);
        return 0;
}

/* Runs a statement that returns no rows; resets it. */
static int step_done(Store *s, sqlite3_stmt *st, const char *what) {
        int rc = sqlite3_step(st), r = 0;

        if (rc != SQLITE_DONE)
                r = store_fail(s, rc, what);
        sqlite3_reset(st);
        return r;
}

/* Looks up the id of a row an INSERT OR IGNORE found there already; that there is no such row
 * is an error too. */
static int step_existing_id(Store *s, sqlite3_stmt *st, const char *what, int64_t *ret) {
        int rc = sqlite3_step(st), r = 0;

        if (rc == SQLITE_ROW)
                *ret = sqlite3_column_int64(st, 0);
        else
                r = store_fail(s, rc == SQLITE_DONE ? SQLITE_INTERNAL : rc, what);
        sqlite3_reset(st);
        return r;
}

/* After an INSERT OR IGNORE: the new rowid, or 0 when the row was there already. */
static int64_t inserted_id(Store *s) {
        return sqlite3_changes(s->db) > 0 ? sqlite3_last_insert_rowid(s->db) : 0;
}

static int bind_failed(Store *s, int rc, const char *what) {
        return store_fail(s, rc, what);
}

#define BIND(expr)                                              \
        do {                                                    \
                int _rc_ = (expr);                              \
                if (_rc_ != SQLITE_OK)                          \
                        return bind_failed(s, _rc_, "binding"); \
        } while (0)

static int bind_text_or_null(sqlite3_stmt *st, int i, const char *v) {
        return v ? sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

static int bind_blob_or_null(sqlite3_stmt *st, int i, const void *v, size_t n) {
        return v && n > 0 ? sqlite3_bind_blob64(st, i, v, n, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

void store_set_busy_timeout(Store *s, unsigned ms) {
        sqlite3_busy_timeout(s->db, (int) MIN(ms, (unsigned) INT32_MAX));
}

int store_begin(Store *s) {
        return step_done(s, s->st[ST_BEGIN], "starting a transaction");
}

int store_commit(Store *s) {
        int r = step_done(s, s->st[ST_COMMIT], "committing");

        if (r >= 0 && s->failing) {
                s->failing = false;
                s->error[0] = 0;
                log_notice("Store %s is writable again.", s->path);
        }
        return r;
}

void store_rollback(Store *s) {
        if (!sqlite3_get_autocommit(s->db))
                (void) step_done(s, s->st[ST_ROLLBACK], "rolling back");
}

int store_put_file(Store *s, const uint8_t file_id[EP_FILE_ID_SIZE], const uint8_t htlhash[EP_FILE_ID_SIZE],
                   const char *path, const void *gnu_build_id, size_t gnu_build_id_len, const char *go_build_id,
                   int64_t *ret_id) {
        sqlite3_stmt *st = s->st[ST_FILE_INSERT];
        int64_t id;
        int r;

        BIND(sqlite3_bind_blob(st, 1, file_id, EP_FILE_ID_SIZE, SQLITE_STATIC));
        BIND(bind_text_or_null(st, 2, path));
        BIND(bind_blob_or_null(st, 3, gnu_build_id, gnu_build_id_len));
        BIND(bind_text_or_null(st, 4, go_build_id && *go_build_id ? go_build_id : NULL));
        BIND(sqlite3_bind_blob(st, 5, htlhash, EP_FILE_ID_SIZE, SQLITE_STATIC));
        r = step_done(s, st, "inserting a file");
        if (r < 0)
                return r;
        id = inserted_id(s);
        if (id == 0) {
                st = s->st[ST_FILE_LOOKUP];
                BIND(sqlite3_bind_blob(st, 1, file_id, EP_FILE_ID_SIZE, SQLITE_STATIC));
                r = step_existing_id(s, st, "looking up a file", &id);
                if (r < 0)
                        return r;
                /* Fill in build IDs a previous run did not know. */
                if (gnu_build_id_len > 0 || (go_build_id && *go_build_id)) {
                        r = store_update_file_build_ids(s, id, gnu_build_id, gnu_build_id_len,
                                                        go_build_id);
                        if (r < 0)
                                return r;
                }
        }
        *ret_id = id;
        return 0;
}

int store_update_file_build_ids(Store *s, int64_t id, const void *gnu_build_id,
                                size_t gnu_build_id_len, const char *go_build_id) {
        sqlite3_stmt *st = s->st[ST_FILE_UPDATE];

        BIND(sqlite3_bind_int64(st, 1, id));
        BIND(bind_blob_or_null(st, 2, gnu_build_id, gnu_build_id_len));
        BIND(bind_text_or_null(st, 3, go_build_id && *go_build_id ? go_build_id : NULL));
        return step_done(s, st, "updating a file");
}

static int store_put_lines(Store *s, int64_t id, const StoreSymbol *sym, bool replace) {
        sqlite3_stmt *st;
        int r;

        if (replace) {
                st = s->st[ST_LINES_DELETE];
                BIND(sqlite3_bind_int64(st, 1, id));
                r = step_done(s, st, "deleting frame lines");
                if (r < 0)
                        return r;
        }

        st = s->st[ST_LINES_INSERT];
        for (size_t i = 0; i < sym->n_lines; i++) {
                const SymLine *l = &sym->lines[i];

                BIND(sqlite3_bind_int64(st, 1, id));
                BIND(sqlite3_bind_int64(st, 2, (int64_t) i));
                BIND(bind_text_or_null(st, 3, l->function));
                BIND(bind_text_or_null(st, 4, l->file));
                BIND(l->line > 0 ? sqlite3_bind_int64(st, 5, l->line) : sqlite3_bind_null(st, 5));
                r = step_done(s, st, "inserting frame lines");
                if (r < 0)
                        return r;
        }
        return 0;
}

int store_put_frame(Store *s, uint8_t kind, uint8_t flags, int64_t file, uint64_t addr, const StoreSymbol *sym,
                    int64_t *ret_id) {
        sqlite3_stmt *st = s->st[ST_FRAME_INSERT];
        int64_t id;
        int r;

        BIND(sqlite3_bind_int(st, 1, kind));
        BIND(sqlite3_bind_int64(st, 2, file));
        BIND(sqlite3_bind_int64(st, 3, (int64_t) addr));
        BIND(sqlite3_bind_int(st, 7, flags));
        if (sym) {
                BIND(sym->elf_addr_known ? sqlite3_bind_int64(st, 4, (int64_t) sym->elf_addr)
                                         : sqlite3_bind_null(st, 4));
                BIND(bind_text_or_null(st, 5, sym->module));
                BIND(sqlite3_bind_int(st, 6, sym->status));
        } else {
                BIND(sqlite3_bind_null(st, 4));
                BIND(sqlite3_bind_null(st, 5));
                BIND(sqlite3_bind_null(st, 6));
        }
        r = step_done(s, st, "inserting a frame");
        if (r < 0)
                return r;

        id = inserted_id(s);
        if (id > 0) {
                if (sym) {
                        r = store_put_lines(s, id, sym, false);
                        if (r < 0)
                                return r;
                }
        } else {
                st = s->st[ST_FRAME_LOOKUP];
                BIND(sqlite3_bind_int(st, 1, kind));
                BIND(sqlite3_bind_int64(st, 2, file));
                BIND(sqlite3_bind_int64(st, 3, (int64_t) addr));
                BIND(sqlite3_bind_int(st, 4, flags));
                r = step_existing_id(s, st, "looking up a frame", &id);
                if (r < 0)
                        return r;
                if (sym) {
                        r = store_update_frame_symbol(s, id, sym);
                        if (r < 0)
                                return r;
                }
        }
        *ret_id = id;
        return 0;
}

int store_update_frame_symbol(Store *s, int64_t id, const StoreSymbol *sym) {
        sqlite3_stmt *st = s->st[ST_FRAME_UPDATE];
        int r;

        BIND(sqlite3_bind_int64(st, 1, id));
        BIND(sym->elf_addr_known ? sqlite3_bind_int64(st, 2, (int64_t) sym->elf_addr)
                                 : sqlite3_bind_null(st, 2));
        BIND(bind_text_or_null(st, 3, sym->module));
        BIND(sqlite3_bind_int(st, 4, sym->status));
        r = step_done(s, st, "updating a frame");
        if (r < 0)
                return r;
        if (sqlite3_changes(s->db) == 0)
                return 0; /* named already: kept */
        return store_put_lines(s, id, sym, true);
}

void store_stack_hash(const void *blob, size_t size, uint8_t ret[STORE_STACK_HASH_SIZE]) {
        uint8_t md[EP_SHA256_SIZE];

        ep_sha256(blob, size, md);
        memcpy(ret, md, STORE_STACK_HASH_SIZE);
}

int store_put_stack(Store *s, const int64_t *frame_ids, size_t n, int64_t *ret_id) {
        sqlite3_stmt *st = s->st[ST_STACK_INSERT];
        uint8_t hash[STORE_STACK_HASH_SIZE];
        _cleanup_free_ uint64_t *blob = NULL;
        size_t size = n * sizeof(uint64_t);
        int64_t id;
        int r;

        /* One spare element: a zero-length blob must still be a blob, not NULL. */
        blob = malloc(size + sizeof(uint64_t));
        if (!blob)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                blob[i] = htole64((uint64_t) frame_ids[i]);
        store_stack_hash(blob, size, hash);

        BIND(sqlite3_bind_blob(st, 1, hash, sizeof(hash), SQLITE_STATIC));
        BIND(sqlite3_bind_blob64(st, 2, blob, size, SQLITE_STATIC));
        r = step_done(s, st, "inserting a stack");
        if (r < 0)
                return r;
        id = inserted_id(s);
        if (id == 0) {
                st = s->st[ST_STACK_LOOKUP];
                BIND(sqlite3_bind_blob(st, 1, hash, sizeof(hash), SQLITE_STATIC));
                int rc = sqlite3_step(st);
                if (rc == SQLITE_ROW) {
                        const void *b = sqlite3_column_blob(st, 1);
                        size_t bn = (size_t) sqlite3_column_bytes(st, 1);

                        id = sqlite3_column_int64(st, 0);
                        if (bn != size || (size > 0 && (!b || memcmp(b, blob, size) != 0)))
                                id = -1; /* 128-bit collision: refuse rather than mix stacks */
                        r = 0;
                } else
                        r = store_fail(s, rc == SQLITE_DONE ? SQLITE_INTERNAL : rc,
                                       "looking up a stack");
                sqlite3_reset(st);
                if (r < 0)
                        return r;
                if (id < 0)
                        return log_error_errno(-EEXIST, "Store %s: two stacks share one hash; "
                                               "dropping the newer.", s->path);
        }
        *ret_id = id;
        return 0;
}

int store_put_process(Store *s, uint32_t pid, uint64_t start_time_ns, const char *comm,
                      const char *exe, const char *container_id, int64_t *ret_id) {
        sqlite3_stmt *st = s->st[ST_PROCESS_INSERT];
        int64_t id;
        int r;

        BIND(sqlite3_bind_int64(st, 1, pid));
        BIND(sqlite3_bind_int64(st, 2, (int64_t) start_time_ns));
        BIND(bind_text_or_null(st, 3, comm));
        BIND(bind_text_or_null(st, 4, exe));
        BIND(bind_text_or_null(st, 5, container_id));
        r = step_done(s, st, "inserting a process");
        if (r < 0)
                return r;
        id = inserted_id(s);
        if (id == 0) {
                st = s->st[ST_PROCESS_LOOKUP];
                BIND(sqlite3_bind_int64(st, 1, pid));
                BIND(sqlite3_bind_int64(st, 2, (int64_t) start_time_ns));
                r = step_existing_id(s, st, "looking up a process", &id);
                if (r < 0)
                        return r;
        }
        *ret_id = id;
        return 0;
}

int store_update_process(Store *s, int64_t id, const char *comm, const char *exe,
                         const char *container_id) {
        sqlite3_stmt *st = s->st[ST_PROCESS_UPDATE];

        BIND(sqlite3_bind_int64(st, 1, id));
        BIND(bind_text_or_null(st, 2, comm));
        BIND(bind_text_or_null(st, 3, exe));
        BIND(bind_text_or_null(st, 4, container_id));
        return step_done(s, st, "updating a process");
}

int store_add_interval(Store *s, uint64_t start_ns, uint64_t end_ns, uint64_t period_ns,
                       int64_t *ret_id) {
        sqlite3_stmt *st = s->st[ST_INTERVAL_INSERT];
        int r;

        BIND(sqlite3_bind_int64(st, 1, (int64_t) start_ns));
        BIND(sqlite3_bind_int64(st, 2, (int64_t) end_ns));
        BIND(sqlite3_bind_int64(st, 3, (int64_t) period_ns));
        r = step_done(s, st, "inserting an interval");
        if (r < 0)
                return r;
        *ret_id = sqlite3_last_insert_rowid(s->db);
        return 0;
}

int store_add_sample(Store *s, int64_t interval, int64_t process, uint32_t tid,
                     const char *thread_name, int64_t stack, uint64_t count) {
        sqlite3_stmt *st = s->st[ST_SAMPLE_UPSERT];

        BIND(sqlite3_bind_int64(st, 1, interval));
        BIND(sqlite3_bind_int64(st, 2, process));
        BIND(sqlite3_bind_int64(st, 3, tid));
        BIND(bind_text_or_null(st, 4, thread_name));
        BIND(sqlite3_bind_int64(st, 5, stack));
        BIND(sqlite3_bind_int64(st, 6, (int64_t) count));
        return step_done(s, st, "inserting a sample");
}

int store_finish_interval(Store *s, int64_t interval, uint64_t count) {
        static const int touch[] = { ST_STACKS_TOUCH, ST_PROCESSES_TOUCH };
        sqlite3_stmt *st = s->st[ST_INTERVAL_SAMPLES];
        int r;

        BIND(sqlite3_bind_int64(st, 1, interval));
        BIND(sqlite3_bind_int64(st, 2, (int64_t) count));
        r = step_done(s, st, "counting an interval's samples");
        for (size_t i = 0; r >= 0 && i < ELEMENTSOF(touch); i++) {
                st = s->st[touch[i]];
                BIND(sqlite3_bind_int64(st, 1, interval));
                r = step_done(s, st, "marking what an interval uses");
        }
        return r;
}

int store_page_bytes(Store *s, uint64_t *ret_total, uint64_t *ret_used) {
        int64_t pages, free_pages, page_size;
        int rc;

        rc = store_exec_first(s, "PRAGMA page_count", &pages, NULL, 0);
        if (rc == SQLITE_OK)
                rc = store_exec_first(s, "PRAGMA freelist_count", &free_pages, NULL, 0);
        if (rc == SQLITE_OK)
                rc = store_exec_first(s, "PRAGMA page_size", &page_size, NULL, 0);
        if (rc != SQLITE_OK)
                return store_fail(s, rc, "reading the page counts");
        if (ret_total)
                *ret_total = (uint64_t) MAX(pages, (int64_t) 0) * (uint64_t) page_size;
        if (ret_used)
                *ret_used = (uint64_t) MAX(pages - free_pages, (int64_t) 0) * (uint64_t) page_size;
        return 0;
}

uint64_t store_wal_bytes(const Store *s) {
        char p[PATH_MAX];
        struct stat st;

        if ((size_t) snprintf(p, sizeof(p), "%s-wal", s->path) >= sizeof(p) || stat(p, &st) < 0)
                return 0;
        return (uint64_t) st.st_size;
}

uint64_t store_db_file_bytes(const Store *s) {
        struct stat st;

        return stat(s->path, &st) == 0 ? (uint64_t) st.st_size : 0;
}

uint64_t store_file_bytes(const Store *s) {
        return store_db_file_bytes(s) + store_wal_bytes(s);
}

int store_read_stats(Store *s, StoreStats *ret) {
        sqlite3_stmt *st = NULL;
        int rc;

        rc = sqlite3_prepare_v2(s->db, "SELECT count(*), coalesce(min(start_ns), 0), "
                                "coalesce(max(end_ns), 0), coalesce(sum(samples), 0) FROM intervals",
                                -1, &st, NULL);
        if (rc != SQLITE_OK)
                return store_fail(s, rc, "reading the store's totals");
        rc = sqlite3_step(st);
        if (rc != SQLITE_ROW) {
                sqlite3_finalize(st);
                return store_fail(s, rc, "reading the store's totals");
        }
        *ret = (StoreStats) {
                .intervals = (uint64_t) sqlite3_column_int64(st, 0),
                .first_ns = (uint64_t) sqlite3_column_int64(st, 1),
                .last_ns = (uint64_t) sqlite3_column_int64(st, 2),
                .samples = (uint64_t) sqlite3_column_int64(st, 3),
                .bytes = store_file_bytes(s),
        };
        sqlite3_finalize(st);
        return 0;
}

void store_stats_add_interval(StoreStats *stats, uint64_t start_ns, uint64_t end_ns, uint64_t samples) {
        if (stats->intervals == 0 || start_ns < stats->first_ns)
                stats->first_ns = start_ns;
        stats->last_ns = MAX(stats->last_ns, end_ns);
        stats->intervals++;
        stats->samples += samples;
}

void store_set_manual_checkpoints(Store *s, uint64_t wal_bytes) {
        char sql[128];

        /* No checkpoint at commit: retention_step() does one at the end of each run, so pages
         * reach the database file only after retention made room for them. The WAL is
         * truncated back to wal_bytes after a checkpoint. */
        snprintf(sql, sizeof(sql), "PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = %" PRIu64,
                 wal_bytes);
        if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK)
                log_debug("Store %s: cannot set the checkpoint policy: %s", s->path, sqlite3_errmsg(s->db));
}
