/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "cache-db.h"
#include "log.h"
#include "unwind-cache.h"
#include "unwind-table.h"

#define FORMAT ((int64_t) EP_UNWIND_TABLE_VERSION << 16 | EP_UNWIND_EXTRACTOR_VERSION)
#define MAX_RAW_SIZE (1ull << 30) /* larger than any table the extractor makes */
#define EVICT_BATCH 16
#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

enum {
        STMT_GET,
        STMT_TOUCH,
        STMT_PUT,
        STMT_OLD_BYTES,
        STMT_DELETE,
        STMT_OLDEST,
        _STMT_MAX,
};

static const char *const stmt_sql[_STMT_MAX] = {
        [STMT_GET] = "SELECT format, raw_size, data FROM unwind_tables WHERE file_id = ?1",
        [STMT_TOUCH] = "UPDATE unwind_tables SET last_used = ?2 WHERE file_id = ?1",
        [STMT_PUT] = "INSERT OR REPLACE INTO unwind_tables(file_id, gnu_build_id, format, raw_size, data, bytes, "
                     "last_used) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        [STMT_OLD_BYTES] = "SELECT bytes FROM unwind_tables WHERE file_id = ?1",
        [STMT_DELETE] = "DELETE FROM unwind_tables WHERE file_id = ?1",
        [STMT_OLDEST] = "SELECT file_id, bytes FROM unwind_tables ORDER BY last_used LIMIT " STRINGIFY(EVICT_BATCH),
};

struct EpUnwindCache {
        EpCacheDb d;
        uint64_t max_bytes;
        int64_t next_use; /* LRU stamp: a counter, immune to clock changes */
        EpUnwindCacheInfo info;
};

EpUnwindCache *ep_unwind_cache_free(EpUnwindCache *c) {
        if (!c)
                return NULL;
        ep_cache_db_done(&c->d);
        free(c);
        return NULL;
}

/* The in-memory counters, from the index alone (unwind-cache.h): the blobs stay on disk. */
static int load(EpCacheDb *d, const char **ret_why) {
        EpUnwindCache *c = d->userdata;
        int64_t v = 0;
        int rc;

        rc = ep_sqlite_query_int(d->db, "SELECT coalesce(sum(bytes), 0) FROM unwind_tables", &v);
        if (rc == SQLITE_OK) {
                c->info.bytes = (uint64_t) MAX(v, (int64_t) 0);
                rc = ep_sqlite_query_int(d->db, "SELECT count(*) FROM unwind_tables", &v);
        }
        if (rc == SQLITE_OK) {
                c->info.entries = (uint64_t) MAX(v, (int64_t) 0);
                rc = ep_sqlite_query_int(d->db, "SELECT coalesce(max(last_used), 0) FROM unwind_tables", &v);
        }
        if (rc == SQLITE_OK)
                c->next_use = v + 1;
        return rc;
}

static const EpCacheDbSpec cache_spec = {
        .what = "Unwind table cache",
        .file = EP_UNWIND_CACHE_FILE,
        .schema = EP_UNWIND_CACHE_SCHEMA,
        .create_sql = "CREATE TABLE unwind_tables(file_id BLOB PRIMARY KEY, gnu_build_id BLOB,"
                      " format INTEGER NOT NULL, raw_size INTEGER NOT NULL, data BLOB NOT NULL,"
                      " bytes INTEGER NOT NULL, last_used INTEGER NOT NULL);"
                      "CREATE INDEX unwind_tables_lru ON unwind_tables(last_used, bytes)",
        .stmt_sql = stmt_sql,
        .n_stmts = _STMT_MAX,
        .load = load,
};

static int failed(EpUnwindCache *c, int rc) {
        return ep_cache_db_failed(&c->d, rc);
}

int ep_unwind_cache_open(const char *dir, uint64_t max_bytes, EpUnwindCache **ret) {
        _cleanup_(ep_unwind_cache_freep) EpUnwindCache *c = NULL;
        int r;

        c = calloc(1, sizeof(EpUnwindCache));
        if (!c)
                return -ENOMEM;
        c->max_bytes = max_bytes;
        r = ep_cache_db_open(&c->d, dir, &cache_spec, c);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(c);
        return 0;
}

static sqlite3_stmt *stmt(EpUnwindCache *c, int which) {
        return ep_cache_db_stmt(&c->d, (size_t) which);
}

static int delete_row(EpUnwindCache *c, const uint8_t file_id[EP_FILE_ID_SIZE]) {
        sqlite3_stmt *s;
        int64_t bytes = 0;
        int rc;

        s = stmt(c, STMT_OLD_BYTES);
        sqlite3_bind_blob(s, 1, file_id, EP_FILE_ID_SIZE, SQLITE_STATIC);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW)
                bytes = sqlite3_column_int64(s, 0);
        else if (rc != SQLITE_DONE)
                return failed(c, rc);
        sqlite3_reset(s);

        s = stmt(c, STMT_DELETE);
        sqlite3_bind_blob(s, 1, file_id, EP_FILE_ID_SIZE, SQLITE_STATIC);
        rc = sqlite3_step(s);
        sqlite3_reset(s);
        if (rc != SQLITE_DONE)
                return failed(c, rc);
        if (sqlite3_changes(c->d.db) > 0) {
                c->info.bytes -= MIN(c->info.bytes, (uint64_t) MAX(bytes, (int64_t) 0));
                c->info.entries -= MIN(c->info.entries, (uint64_t) 1);
        }
        return 0;
}

static int drop_unusable(EpUnwindCache *c, const uint8_t file_id[EP_FILE_ID_SIZE], const char *why) {
        char hex[2 * EP_FILE_ID_SIZE + 1];

        for (size_t i = 0; i < EP_FILE_ID_SIZE; i++)
                snprintf(hex + 2 * i, 3, "%02x", file_id[i]);
        log_warning("Unwind table cache: entry %s %s, dropping it.", hex, why);
        c->info.dropped++;
        (void) delete_row(c, file_id);
        return -ENOENT;
}

int ep_unwind_cache_get(EpUnwindCache *c, const uint8_t file_id[EP_FILE_ID_SIZE], void **ret_blob,
                        size_t *ret_size) {
        _cleanup_free_ void *blob = NULL;
        sqlite3_stmt *s;
        int64_t format, raw;
        int rc;

        if (!c->d.db)
                return -ENOENT;

        s = stmt(c, STMT_GET);
        sqlite3_bind_blob(s, 1, file_id, EP_FILE_ID_SIZE, SQLITE_STATIC);
        rc = sqlite3_step(s);
        if (rc == SQLITE_DONE) {
                sqlite3_reset(s);
                return -ENOENT;
        }
        if (rc != SQLITE_ROW)
                return failed(c, rc);

        format = sqlite3_column_int64(s, 0);
        raw = sqlite3_column_int64(s, 1);
        const void *data = sqlite3_column_blob(s, 2);
        int n = sqlite3_column_bytes(s, 2);

        if (format != FORMAT) {
                sqlite3_reset(s);
                return drop_unusable(c, file_id, "was made by another extractor version");
        }
        if (raw <= 0 || (uint64_t) raw > MAX_RAW_SIZE || !data || n <= 0) {
                sqlite3_reset(s);
                return drop_unusable(c, file_id, "has impossible sizes");
        }

        blob = malloc((size_t) raw);
        if (!blob) {
                sqlite3_reset(s);
                return -ENOMEM;
        }
        uLongf out = (uLongf) raw;
        int zr = uncompress(blob, &out, data, (uLong) n);
        sqlite3_reset(s);
        if (zr != Z_OK || out != (uLongf) raw)
                return drop_unusable(c, file_id, "does not decompress");
        if (ep_unwind_table_validate(blob, (size_t) raw) < 0 ||
            memcmp(ep_unwind_table_header(blob)->file_id, file_id, EP_FILE_ID_SIZE) != 0)
                return drop_unusable(c, file_id, "is not a valid table");

        s = stmt(c, STMT_TOUCH);
        sqlite3_bind_blob(s, 1, file_id, EP_FILE_ID_SIZE, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, c->next_use++);
        rc = sqlite3_step(s);
        sqlite3_reset(s);
        if (rc != SQLITE_DONE)
                (void) failed(c, rc); /* the answer is still good */

        *ret_blob = TAKE_PTR(blob);
        *ret_size = (size_t) raw;
        return 0;
}

static int evict(EpUnwindCache *c) {
        while (c->info.bytes > c->max_bytes && c->info.entries > 0) {
                uint8_t ids[EVICT_BATCH][EP_FILE_ID_SIZE];
                size_t n = 0;
                sqlite3_stmt *s = stmt(c, STMT_OLDEST);
                uint64_t over = c->info.bytes - c->max_bytes, freed = 0;
                int rc;

                while (n < EVICT_BATCH && freed < over && (rc = sqlite3_step(s)) == SQLITE_ROW) {
                        if (sqlite3_column_bytes(s, 0) != EP_FILE_ID_SIZE)
                                continue;
                        memcpy(ids[n++], sqlite3_column_blob(s, 0), EP_FILE_ID_SIZE);
                        freed += (uint64_t) MAX(sqlite3_column_int64(s, 1), (int64_t) 0);
                }
                sqlite3_reset(s);
                if (n == 0)
                        break;
                for (size_t i = 0; i < n; i++) {
                        rc = delete_row(c, ids[i]);
                        if (rc < 0)
                                return rc;
                        c->info.evictions++;
                }
        }
        return 0;
}

int ep_unwind_cache_put(EpUnwindCache *c, const uint8_t file_id[EP_FILE_ID_SIZE], const uint8_t *build_id,
                        size_t build_id_len, const void *blob, size_t size) {
        _cleanup_free_ void *z = NULL;
        uLongf zsize;
        sqlite3_stmt *s;
        int rc;

        if (!c->d.db)
                return -ENOENT;
        if (size == 0 || size > MAX_RAW_SIZE)
                return -EFBIG;

        zsize = compressBound((uLong) size);
        z = malloc(zsize);
        if (!z)
                return -ENOMEM;
        if (compress2(z, &zsize, blob, (uLong) size, Z_BEST_SPEED) != Z_OK)
                return -ENOMEM;
        if (zsize > c->max_bytes)
                return -EFBIG;

        rc = sqlite3_exec(c->d.db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if (rc != SQLITE_OK)
                return failed(c, rc);

        rc = delete_row(c, file_id); /* keeps the byte count right on replace */
        if (rc < 0)
                goto rollback;

        s = stmt(c, STMT_PUT);
        sqlite3_bind_blob(s, 1, file_id, EP_FILE_ID_SIZE, SQLITE_STATIC);
        if (build_id && build_id_len > 0)
                sqlite3_bind_blob(s, 2, build_id, (int) build_id_len, SQLITE_STATIC);
        else
                sqlite3_bind_null(s, 2);
        sqlite3_bind_int64(s, 3, FORMAT);
        sqlite3_bind_int64(s, 4, (int64_t) size);
        sqlite3_bind_blob64(s, 5, z, zsize, SQLITE_STATIC);
        sqlite3_bind_int64(s, 6, (int64_t) zsize);
        sqlite3_bind_int64(s, 7, c->next_use++);
        rc = sqlite3_step(s);
        sqlite3_reset(s);
        if (rc != SQLITE_DONE) {
                rc = ep_sqlite_errno(rc) ?: -EIO;
                goto rollback;
        }
        c->info.bytes += zsize;
        c->info.entries++;

        rc = evict(c);
        if (rc < 0)
                goto rollback;

        rc = sqlite3_exec(c->d.db, "COMMIT", NULL, NULL, NULL);
        if (rc != SQLITE_OK)
                return failed(c, rc);
        return 0;

rollback:
        if (c->d.db) {
                (void) sqlite3_exec(c->d.db, "ROLLBACK", NULL, NULL, NULL);
                /* The counters may have moved inside the transaction: read them back. */
                const char *why;
                (void) load(&c->d, &why);
        }
        return rc;
}

void ep_unwind_cache_info(const EpUnwindCache *c, EpUnwindCacheInfo *ret) {
        *ret = c->info;
        ret->rebuilds = c->d.rebuilds;
}

const char *ep_unwind_cache_path(const EpUnwindCache *c) {
        return c->d.path;
}
