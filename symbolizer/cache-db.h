/* SPDX-License-Identifier: MIT */
#pragma once

/* The part every SQLite cache of the symbolizer shares (unwind-cache.c: unwind-tables.db,
 * symbol-cache.c: symbols.db): a cache is only ever a copy of what can be computed again, so
 * a file that is not ours — not a database, corrupt, another schema version, a schema that
 * does not match — is deleted and created again with one log line instead of being an error.
 * Also SQLite result codes as negative errno values. One thread at a time per EpCacheDb. */

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct EpCacheDb EpCacheDb;

typedef struct EpCacheDbSpec {
        const char *what;         /* for log lines: "Unwind table cache" */
        const char *file;         /* file name inside the cache directory */
        int64_t schema;           /* PRAGMA user_version */
        const char *create_sql;   /* tables and indices of an empty database */
        const char *const *stmt_sql; /* statements prepared once per open (EpCacheDb.stmt) */
        size_t n_stmts;
        /* Optional: called once the database is open with our schema version and its
         * statements are prepared, to read what the owner keeps in memory (counters). Returns
         * an SQLite code; setting *ret_why rejects the content (the file is then rebuilt). */
        int (*load)(EpCacheDb *d, const char **ret_why);
} EpCacheDbSpec;

struct EpCacheDb {
        const EpCacheDbSpec *spec;
        void *userdata;      /* the owner, for load() */
        char *path;
        sqlite3 *db;         /* NULL after a rebuild failed: the cache answers nothing */
        sqlite3_stmt **stmt; /* spec->n_stmts */
        uint64_t rebuilds;   /* times the file was thrown away and created again */
};

/* Creates dir if needed and opens (or creates, or rebuilds) <dir>/<spec->file>. -errno when
 * the directory or database cannot be created or written: the owner works without a cache. */
int ep_cache_db_open(EpCacheDb *d, const char *dir, const EpCacheDbSpec *spec, void *userdata);
void ep_cache_db_done(EpCacheDb *d);

/* Throws the database away and starts an empty one (logged with why). */
int ep_cache_db_rebuild(EpCacheDb *d, const char *why);
/* After a statement failed with rc: corruption rebuilds the file; returns rc as -errno. */
int ep_cache_db_failed(EpCacheDb *d, int rc);

/* Prepared statement `which`, reset and without bindings. */
sqlite3_stmt *ep_cache_db_stmt(EpCacheDb *d, size_t which);

/* Runs sql (several statements allowed) and returns an SQLite code. */
int ep_cache_db_exec(EpCacheDb *d, const char *sql);

bool ep_sqlite_is_corruption(int rc);
int ep_sqlite_errno(int rc); /* 0 for SQLITE_OK, else a negative errno (-EIO by default) */
/* The first column of the first row of sql as an integer (0 without rows); an SQLite code. */
int ep_sqlite_query_int(sqlite3 *db, const char *sql, int64_t *ret);
