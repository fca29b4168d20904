/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache-db.h"
#include "log.h"
#include "macro.h"

bool ep_sqlite_is_corruption(int rc) {
        rc &= 0xff;
        return rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB;
}

int ep_sqlite_errno(int rc) {
        switch (rc & 0xff) {
        case SQLITE_OK:
                return 0;
        case SQLITE_NOMEM:
                return -ENOMEM;
        case SQLITE_READONLY:
        case SQLITE_PERM:
        case SQLITE_AUTH:
                return -EACCES;
        case SQLITE_CANTOPEN:
                return -ENOENT;
        case SQLITE_FULL:
                return -ENOSPC;
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
                return -EBUSY;
        case SQLITE_TOOBIG:
                return -EFBIG;
        default:
                return -EIO;
        }
}

int ep_sqlite_query_int(sqlite3 *db, const char *sql, int64_t *ret) {
        sqlite3_stmt *s = NULL;
        int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);

        if (rc == SQLITE_OK) {
                rc = sqlite3_step(s);
                if (rc == SQLITE_ROW) {
                        *ret = sqlite3_column_int64(s, 0);
                        rc = SQLITE_OK;
                } else if (rc == SQLITE_DONE) {
                        *ret = 0;
                        rc = SQLITE_OK;
                }
        }
        sqlite3_finalize(s);
        return rc;
}

int ep_cache_db_exec(EpCacheDb *d, const char *sql) {
        return d->db ? sqlite3_exec(d->db, sql, NULL, NULL, NULL) : SQLITE_CANTOPEN;
}

static void db_close(EpCacheDb *d) {
        if (d->stmt)
                for (size_t i = 0; i < d->spec->n_stmts; i++) {
                        sqlite3_finalize(d->stmt[i]);
                        d->stmt[i] = NULL;
                }
        if (d->db)
                sqlite3_close(d->db);
        d->db = NULL;
}

void ep_cache_db_done(EpCacheDb *d) {
        db_close(d);
        free(d->stmt);
        free(d->path);
        d->stmt = NULL;
        d->path = NULL;
}

static int create_schema(EpCacheDb *d) {
        _cleanup_free_ char *sql = NULL;

        if (asprintf(&sql, "BEGIN; %s; PRAGMA user_version = %" PRId64 "; COMMIT;", d->spec->create_sql,
                     d->spec->schema) < 0)
                return SQLITE_NOMEM;
        return sqlite3_exec(d->db, sql, NULL, NULL, NULL);
}

/* Opens the file as it is. Returns an SQLite code; *ret_why explains content we do not
 * accept (the caller deletes the file), NULL when it is fine. */
static int db_open(EpCacheDb *d, const char **ret_why) {
        int64_t version = 0, tables = 0;
        int rc;

        *ret_why = NULL;
        rc = sqlite3_open_v2(d->path, &d->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
        if (rc != SQLITE_OK)
                return rc;
        sqlite3_busy_timeout(d->db, 1000);

        rc = ep_sqlite_query_int(d->db, "PRAGMA user_version", &version);
        if (rc == SQLITE_OK)
                rc = ep_sqlite_query_int(d->db, "SELECT count(*) FROM sqlite_master", &tables);
        if (rc != SQLITE_OK) {
                if (ep_sqlite_is_corruption(rc))
                        *ret_why = "not a database or corrupt";
                return rc;
        }

        if (version == 0 && tables == 0) {
                rc = create_schema(d);
                if (rc != SQLITE_OK)
                        return rc;
        } else if (version != d->spec->schema) {
                *ret_why = version < d->spec->schema ? "older schema" : "unknown schema";
                return SQLITE_OK;
        }

        /* WAL with synchronous=NORMAL: a commit does not wait for fsync (only checkpoints do),
         * and losing the last commits in a power cut only costs recomputing them. A 512 KiB
         * page cache instead of SQLite's 2 MB: lookups are by key, blobs are read once per
         * file, and the OS page cache holds the file anyway. */
        (void) sqlite3_exec(d->db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA cache_size = -512",
                            NULL, NULL, NULL);

        for (size_t i = 0; i < d->spec->n_stmts; i++) {
                rc = sqlite3_prepare_v3(d->db, d->spec->stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &d->stmt[i],
                                        NULL);
                if (rc != SQLITE_OK) {
                        *ret_why = ep_sqlite_is_corruption(rc) ? "not a database or corrupt" : "unexpected schema";
                        return rc;
                }
        }
        if (d->spec->load) {
                rc = d->spec->load(d, ret_why);
                if (rc != SQLITE_OK && !*ret_why && (ep_sqlite_is_corruption(rc) || (rc & 0xff) == SQLITE_ERROR))
                        *ret_why = "unreadable table";
        }
        return rc;
}

static void unlink_db(const char *path) {
        static const char *const suffixes[] = { "", "-wal", "-shm", "-journal" };
        char p[4096];

        for (size_t i = 0; i < ELEMENTSOF(suffixes); i++) {
                snprintf(p, sizeof p, "%s%s", path, suffixes[i]);
                (void) unlink(p);
        }
}

int ep_cache_db_rebuild(EpCacheDb *d, const char *why) {
        const char *again;
        int rc;

        log_warning("%s %s: %s, rebuilding it.", d->spec->what, d->path, why);
        db_close(d);
        unlink_db(d->path);
        d->rebuilds++;
        rc = db_open(d, &again);
        if (rc == SQLITE_OK && !again)
                return 0;
        db_close(d);
        return log_error_errno(ep_sqlite_errno(rc) ?: -EIO, "Cannot create the %s %s: %s", d->spec->what, d->path,
                               again ?: sqlite3_errstr(rc));
}

int ep_cache_db_failed(EpCacheDb *d, int rc) {
        if (ep_sqlite_is_corruption(rc))
                (void) ep_cache_db_rebuild(d, "corrupt");
        return ep_sqlite_errno(rc) ?: -EIO;
}

sqlite3_stmt *ep_cache_db_stmt(EpCacheDb *d, size_t which) {
        sqlite3_stmt *s = d->stmt[which];

        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        return s;
}

int ep_cache_db_open(EpCacheDb *d, const char *dir, const EpCacheDbSpec *spec, void *userdata) {
        const char *why;
        int rc;

        *d = (EpCacheDb) { .spec = spec, .userdata = userdata };
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        if (access(dir, W_OK) < 0)
                return -errno;

        d->stmt = calloc(MAX(spec->n_stmts, (size_t) 1), sizeof(sqlite3_stmt *));
        if (!d->stmt || asprintf(&d->path, "%s/%s", dir, spec->file) < 0) {
                d->path = NULL;
                ep_cache_db_done(d);
                return -ENOMEM;
        }

        rc = db_open(d, &why);
        if (rc == SQLITE_OK && !why)
                return 0;
        if (!why && !ep_sqlite_is_corruption(rc)) {
                /* Cannot open or write at all (permissions, disk): no cache. */
                ep_cache_db_done(d);
                return ep_sqlite_errno(rc) ?: -EIO;
        }
        rc = ep_cache_db_rebuild(d, why ?: "corrupt");
        if (rc < 0)
                ep_cache_db_done(d);
        return rc;
}
