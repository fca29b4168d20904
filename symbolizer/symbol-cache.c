/* SPDX-License-Identifier: MIT */
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache-db.h"
#include "file-id.h"
#include "log.h"
#include "symbol-cache.h"
#include "wire-buf.h"

#define FORMAT_FORMAT "%s+%d/%s"
#define MAX_LINES 4096         /* more inline levels than any real frame has */
#define MAX_STR (64u << 10)    /* longer than any name we produce */
#define EVICT_MIN_BATCH 64     /* rows deleted per eviction step, at least ... */
#define EVICT_BATCH_SHIFT 4    /* ... and 1/16 of the rows */
/* Queued writes beyond this are written at once, on the request path: only when the event
 * loop does not get to flush (or there is none), so memory stays bounded. */
#define MAX_PENDING (2 * EP_SYMBOL_CACHE_FLUSH_ENTRIES)
#define ALIGN4(x) (((x) + 3) & ~(size_t) 3)

enum {
        STMT_GET,
        STMT_PUT,
        STMT_REPLACE,
        STMT_TOUCH,
        STMT_DELETE,
        STMT_EVICT,
        STMT_FILE_GET,
        STMT_FILE_PUT,
        STMT_FILE_DROP_ROWS,
        STMT_FILE_DELETE,
        STMT_FILE_ORPHANS,
        _STMT_MAX,
};

static const char *const stmt_sql[_STMT_MAX] = {
        [STMT_GET] = "SELECT status, elf_addr, module, lines FROM symbols WHERE file_id = ?1 AND addr = ?2 AND flags = ?3",
        /* Insert, else replace: two statements so the row count stays known without counting. */
        [STMT_PUT] = "INSERT OR IGNORE INTO symbols(file_id, addr, flags, status, elf_addr, module, lines, last_used) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        [STMT_REPLACE] = "UPDATE symbols SET status = ?4, elf_addr = ?5, module = ?6, lines = ?7, last_used = ?8 "
                         "WHERE file_id = ?1 AND addr = ?2 AND flags = ?3",
        [STMT_TOUCH] = "UPDATE symbols SET last_used = ?4 WHERE file_id = ?1 AND addr = ?2 AND flags = ?3",
        [STMT_DELETE] = "DELETE FROM symbols WHERE file_id = ?1 AND addr = ?2 AND flags = ?3",
        /* Stamps are unique, so "up to the Nth oldest stamp" is exactly the N oldest rows. */
        [STMT_EVICT] = "DELETE FROM symbols WHERE last_used <= "
                       "(SELECT last_used FROM symbols ORDER BY last_used LIMIT 1 OFFSET ?1)",
        [STMT_FILE_GET] = "SELECT build_id, debuglink, path, debug FROM files WHERE file_id = ?1",
        [STMT_FILE_PUT] = "INSERT OR REPLACE INTO files(file_id, build_id, debuglink, path, debug) "
                          "VALUES (?1, ?2, ?3, ?4, ?5)",
        [STMT_FILE_DROP_ROWS] = "DELETE FROM symbols WHERE file_id = ?1",
        [STMT_FILE_DELETE] = "DELETE FROM files WHERE file_id = ?1",
        /* After evictions: records of files none of whose rows are left. */
        [STMT_FILE_ORPHANS] = "DELETE FROM files WHERE NOT EXISTS "
                              "(SELECT 1 FROM symbols WHERE symbols.file_id = files.file_id)",
};

/* A queued write: a new row (module set), a new last_used for a row that was read, or a
 * file's record (file set). */
typedef struct Pending {
        uint8_t file_id[EP_FILE_ID_SIZE];
        uint64_t addr;
        uint8_t flags;
        uint8_t status;
        bool touch;
        EpSymbolFileRecord *file;
        int64_t stamp;
        uint64_t elf_addr;
        char *module;
        uint8_t *lines; /* serialized, NULL without lines */
        size_t lines_size;
} Pending;

struct EpSymbolCache {
        EpCacheDb d;
        uint64_t max_bytes;
        int64_t next_use; /* LRU stamp: a counter, immune to clock changes */
        char *format;
        int64_t rows;          /* in the table */
        uint64_t pending_puts; /* new rows among the queued writes */
        Pending *pending;      /* MAX_PENDING */
        size_t n_pending;
        sd_event_source *timer, *defer;
        EpSymbolCacheInfo info;
};

static void pending_clear(EpSymbolCache *c) {
        for (size_t i = 0; i < c->n_pending; i++) {
                free(c->pending[i].module);
                free(c->pending[i].lines);
                ep_symbol_file_record_done(c->pending[i].file);
                free(c->pending[i].file);
        }
        c->n_pending = 0;
        c->pending_puts = 0;
}

EpSymbolCache *ep_symbol_cache_free(EpSymbolCache *c) {
        if (!c)
                return NULL;
        (void) ep_symbol_cache_flush(c);
        if (c->pending)
                pending_clear(c);
        free(c->pending);
        sd_event_source_disable_unref(c->timer);
        sd_event_source_disable_unref(c->defer);
        ep_cache_db_done(&c->d);
        free(c->format);
        free(c);
        return NULL;
}

/* The GNU build ID of the running program, from its notes in memory. */
static int find_build_id(struct dl_phdr_info *info, size_t size, void *userdata) {
        char *hex = userdata;

        if (info->dlpi_name && info->dlpi_name[0])
                return 0; /* a shared object; the program comes first, named "" */
        for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
                const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
                const uint8_t *p = (const uint8_t *) (info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;

                if (ph->p_type != PT_NOTE)
                        continue;
                while (p + sizeof(ElfW(Nhdr)) <= end) {
                        const ElfW(Nhdr) *n = (const ElfW(Nhdr) *) p;
                        const uint8_t *desc = p + sizeof *n + ALIGN4(n->n_namesz);

                        if (desc + n->n_descsz > end)
                                break;
                        if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(p + sizeof *n, "GNU", 4) == 0 &&
                            n->n_descsz > 0 && n->n_descsz <= EP_BUILD_ID_MAX) {
                                for (size_t j = 0; j < n->n_descsz; j++)
                                        snprintf(hex + 2 * j, 3, "%02x", desc[j]);
                                return 1;
                        }
                        p = desc + ALIGN4(n->n_descsz);
                }
        }
        return 1;
}

/* Which code produced the answers. The version and EP_RESOLVER_ANSWERS_VERSION name a
 * release; the program's build ID also tells apart two builds of one version (a developer's
 * trees sharing the default cache directory, a rebuilt package), which may answer
 * differently too. Costs one cold start per new build. */
static int make_format(char **ret) {
        char build_id[2 * EP_BUILD_ID_MAX + 1] = "";

        (void) dl_iterate_phdr(find_build_id, build_id);
        return asprintf(ret, FORMAT_FORMAT, EP_VERSION, EP_RESOLVER_ANSWERS_VERSION, build_id[0] ? build_id : "-");
}

/* Drops every answer another symbolizer version wrote; records ours. */
static int check_format(EpSymbolCache *c, sqlite3 *db) {
        sqlite3_stmt *s = NULL;
        bool same = false, any = false;
        char *sql;
        int rc;

        rc = sqlite3_prepare_v2(db, "SELECT format FROM meta", -1, &s, NULL);
        if (rc != SQLITE_OK)
                return rc;
        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
                const char *f = (const char *) sqlite3_column_text(s, 0);
                any = true;
                same = f && streq(f, c->format);
        }
        sqlite3_finalize(s);
        if (rc != SQLITE_DONE)
                return rc;
        if (same)
                return SQLITE_OK;

        if (any)
                log_info("Symbol cache %s holds answers of another symbolizer version, dropping them.", c->d.path);
        sql = sqlite3_mprintf("BEGIN; DELETE FROM symbols; DELETE FROM files; DELETE FROM meta; "
                              "INSERT INTO meta(format) VALUES (%Q); COMMIT;", c->format);
        if (!sql)
                return SQLITE_NOMEM;
        rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
        sqlite3_free(sql);
        if (rc != SQLITE_OK)
                (void) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return rc;
}

/* Pages in use: what the bound applies to (free pages are reused before the file grows). */
static int used_bytes(sqlite3 *db, uint64_t *ret) {
        int64_t pages = 0, free_pages = 0, page_size = 0;
        int rc;

        rc = ep_sqlite_query_int(db, "PRAGMA page_count", &pages);
        if (rc == SQLITE_OK)
                rc = ep_sqlite_query_int(db, "PRAGMA freelist_count", &free_pages);
        if (rc == SQLITE_OK)
                rc = ep_sqlite_query_int(db, "PRAGMA page_size", &page_size);
        if (rc == SQLITE_OK)
                *ret = (uint64_t) MAX(pages - free_pages, (int64_t) 0) * (uint64_t) MAX(page_size, (int64_t) 0);
        return rc;
}

static int load(EpCacheDb *d, const char **ret_why) {
        EpSymbolCache *c = d->userdata;
        int64_t v = 0;
        int rc;

        rc = check_format(c, d->db);
        if (rc == SQLITE_OK)
                rc = ep_sqlite_query_int(d->db, "SELECT count(*) FROM symbols", &v);
        if (rc == SQLITE_OK) {
                c->rows = MAX(v, (int64_t) 0);
                rc = ep_sqlite_query_int(d->db, "SELECT coalesce(max(last_used), 0) FROM symbols", &v);
        }
        if (rc == SQLITE_OK) {
                c->next_use = v + 1;
                rc = used_bytes(d->db, &c->info.bytes);
        }
        return rc;
}

static const EpCacheDbSpec cache_spec = {
        .what = "Symbol cache",
        .file = EP_SYMBOL_CACHE_FILE,
        .schema = EP_SYMBOL_CACHE_SCHEMA,
        .create_sql = "CREATE TABLE meta(format TEXT NOT NULL);"
                      "CREATE TABLE symbols(file_id BLOB NOT NULL, addr INTEGER NOT NULL, flags INTEGER NOT NULL,"
                      " status INTEGER NOT NULL, elf_addr INTEGER NOT NULL, module TEXT NOT NULL, lines BLOB,"
                      " last_used INTEGER NOT NULL, PRIMARY KEY(file_id, addr, flags)) WITHOUT ROWID;"
                      "CREATE INDEX symbols_lru ON symbols(last_used);"
                      "CREATE TABLE files(file_id BLOB PRIMARY KEY, build_id BLOB, debuglink TEXT, path TEXT,"
                      " debug TEXT NOT NULL) WITHOUT ROWID",
        .stmt_sql = stmt_sql,
        .n_stmts = _STMT_MAX,
        .load = load,
};

static int on_flush_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        (void) ep_symbol_cache_flush(userdata);
        return 0;
}

static int on_flush_defer(sd_event_source *s, void *userdata) {
        (void) ep_symbol_cache_flush(userdata);
        return 0;
}

static int attach_event(EpSymbolCache *c, sd_event *event) {
        int r;

        r = sd_event_add_time_relative(event, &c->timer, CLOCK_MONOTONIC, EP_SYMBOL_CACHE_FLUSH_USEC, 0,
                                       on_flush_timer, c);
        if (r >= 0)
                r = sd_event_source_set_enabled(c->timer, SD_EVENT_OFF);
        if (r >= 0)
                r = sd_event_add_defer(event, &c->defer, on_flush_defer, c);
        if (r >= 0)
                r = sd_event_source_set_enabled(c->defer, SD_EVENT_OFF);
        /* Below the request path: answering comes first, writing the cache after. */
        if (r >= 0)
                r = sd_event_source_set_priority(c->defer, SD_EVENT_PRIORITY_IDLE);
        return r;
}

int ep_symbol_cache_open(const char *dir, uint64_t max_bytes, sd_event *event, EpSymbolCache **ret) {
        _cleanup_(ep_symbol_cache_freep) EpSymbolCache *c = NULL;
        int r;

        c = calloc(1, sizeof(EpSymbolCache));
        if (!c)
                return -ENOMEM;
        c->max_bytes = max_bytes;
        c->pending = calloc(MAX_PENDING, sizeof(Pending));
        if (!c->pending)
                return -ENOMEM;
        if (make_format(&c->format) < 0) {
                c->format = NULL;
                return -ENOMEM;
        }
        r = ep_cache_db_open(&c->d, dir, &cache_spec, c);
        if (r < 0)
                return r;
        if (event) {
                r = attach_event(c, event);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(c);
        return 0;
}

static void bind_key(sqlite3_stmt *s, const uint8_t file_id[EP_FILE_ID_SIZE], uint64_t addr, uint8_t flags) {
        sqlite3_bind_blob(s, 1, file_id, EP_FILE_ID_SIZE, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, (int64_t) addr);
        sqlite3_bind_int(s, 3, flags & EP_FRAME_FLAG_RETURN_ADDRESS);
}

static void bind_file_id(sqlite3_stmt *s, const uint8_t file_id[EP_FILE_ID_SIZE]) {
        sqlite3_bind_blob(s, 1, file_id, EP_FILE_ID_SIZE, SQLITE_STATIC);
}

static void bind_text_or_null(sqlite3_stmt *s, int i, const char *text) {
        if (text)
                sqlite3_bind_text(s, i, text, -1, SQLITE_STATIC);
        else
                sqlite3_bind_null(s, i);
}

/* Deletes every row of a file; *ret_changes how many went. An SQLite code. */
static int delete_rows(EpSymbolCache *c, const uint8_t file_id[EP_FILE_ID_SIZE], int *ret_changes) {
        sqlite3_stmt *s = ep_cache_db_stmt(&c->d, STMT_FILE_DROP_ROWS);
        int rc;

        bind_file_id(s, file_id);
        rc = sqlite3_step(s);
        sqlite3_reset(s);
        if (rc != SQLITE_DONE)
                return rc;
        *ret_changes = sqlite3_changes(c->d.db);
        c->rows -= MIN((int64_t) *ret_changes, c->rows);
        return SQLITE_OK;
}

/* The stored `debug` of a file: SQLITE_OK and *ret (NULL when there is no record), or an
 * SQLite code. */
static int stored_debug(EpSymbolCache *c, const uint8_t file_id[EP_FILE_ID_SIZE], char **ret) {
        sqlite3_stmt *s = ep_cache_db_stmt(&c->d, STMT_FILE_GET);
        char *debug = NULL;
        int rc;

        bind_file_id(s, file_id);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
                debug = strdup((const char *) sqlite3_column_text(s, 3) ?: "");
                rc = debug ? SQLITE_DONE : SQLITE_NOMEM;
        }
        sqlite3_reset(s);
        if (rc != SQLITE_DONE)
                return rc;
        *ret = debug;
        return SQLITE_OK;
}

/* ---- lines ⇄ blob ---- */

static int lines_encode(const EpSymResult *res, uint8_t **ret, size_t *ret_size) {
        EpWriter w;

        *ret = NULL;
        *ret_size = 0;
        if (res->n_lines == 0)
                return 0;
        ep_writer_init_dynamic(&w);
        ep_put_u16(&w, res->n_lines);
        for (uint16_t i = 0; i < res->n_lines; i++) {
                ep_put_str(&w, res->lines[i].function);
                ep_put_str(&w, res->lines[i].file);
                ep_put_u32(&w, res->lines[i].line);
        }
        if (w.overflow) {
                ep_writer_done(&w);
                return -ENOMEM;
        }
        *ret = w.data; /* the dynamic writer's buffer is ours now */
        *ret_size = w.size;
        return 0;
}

/* -EBADMSG when the blob is not what lines_encode() writes. */
static int lines_decode(const void *blob, size_t size, EpSymResult *res) {
        EpReader rd;
        uint16_t n;

        if (!blob || size == 0)
                return 0;
        ep_reader_init(&rd, blob, size);
        n = ep_get_u16(&rd);
        if (rd.error || n == 0 || n > MAX_LINES)
                return -EBADMSG;
        res->lines = calloc(n, sizeof(EpSymLine));
        if (!res->lines)
                return -ENOMEM;
        for (uint16_t i = 0; i < n && !rd.error; i++) {
                EpSymLine *l = &res->lines[res->n_lines];

                l->function = ep_get_str(&rd, MAX_STR);
                l->file = ep_get_str(&rd, MAX_STR);
                l->line = ep_get_u32(&rd);
                res->n_lines++; /* counted even when incomplete, so it is freed */
                if (!rd.error && (!l->function || !l->file))
                        return -ENOMEM;
        }
        return ep_reader_done(&rd) ? 0 : -EBADMSG;
}

/* ---- reads ---- */

/* Takes p's allocations. */
static void queue(EpSymbolCache *c, const Pending *p) {
        if (c->n_pending == MAX_PENDING)
                (void) ep_symbol_cache_flush(c); /* empties the queue, written or not */
        c->pending[c->n_pending++] = *p;
        if (!p->touch && !p->file)
                c->pending_puts++;
        if (c->n_pending >= EP_SYMBOL_CACHE_FLUSH_ENTRIES && c->defer)
                (void) sd_event_source_set_enabled(c->defer, SD_EVENT_ONESHOT);
        else if (c->n_pending == 1 && c->timer) {
                (void) sd_event_source_set_time_relative(c->timer, EP_SYMBOL_CACHE_FLUSH_USEC);
                (void) sd_event_source_set_enabled(c->timer, SD_EVENT_ONESHOT);
        }
}

static void drop_row(EpSymbolCache *c, const uint8_t file_id[EP_FILE_ID_SIZE], uint64_t addr, uint8_t flags) {
        sqlite3_stmt *s = ep_cache_db_stmt(&c->d, STMT_DELETE);
        int rc;

        log_once(LOG_WARNING, "Symbol cache %s: dropping a row that does not decode.", c->d.path);
        c->info.dropped++;
        bind_key(s, file_id, addr, flags);
        rc = sqlite3_step(s);
        sqlite3_reset(s);
        if (rc != SQLITE_DONE)
                (void) ep_cache_db_failed(&c->d, rc);
        else if (sqlite3_changes(c->d.db) > 0)
                c->rows -= MIN(c->rows, (int64_t) 1);
}

int ep_symbol_cache_get(EpSymbolCache *c, const uint8_t file_id[EP_FILE_ID_SIZE], uint64_t addr, uint8_t flags,
                        EpSymResult *ret) {
        sqlite3_stmt *s;
        int64_t status;
        int rc, k;

        if (!c->d.db)
                return -ENOENT;

        s = ep_cache_db_stmt(&c->d, STMT_GET);
        bind_key(s, file_id, addr, flags);
        rc = sqlite3_step(s);
        if (rc == SQLITE_DONE) {
                sqlite3_reset(s);
                return -ENOENT;
        }
        if (rc != SQLITE_ROW) {
                sqlite3_reset(s);
                return ep_cache_db_failed(&c->d, rc);
        }

        status = sqlite3_column_int64(s, 0);
        *ret = (EpSymResult) {
                .status = (uint8_t) status,
                .elf_addr = (uint64_t) sqlite3_column_int64(s, 1),
                .module = strdup((const char *) sqlite3_column_text(s, 2) ?: ""),
        };
        k = ret->module ? lines_decode(sqlite3_column_blob(s, 3), (size_t) sqlite3_column_bytes(s, 3), ret)
                        : -ENOMEM;
        if (k == 0 && status != EP_SYM_OK && status != EP_SYM_NOT_FOUND)
                k = -EBADMSG;
        sqlite3_reset(s);
        if (k < 0) {
                ep_sym_result_done(ret);
                if (k != -EBADMSG)
                        return k;
                drop_row(c, file_id, addr, flags);
                return -ENOENT;
        }

        /* Mark it used; a failure to queue only makes it older than it is. */
        Pending p = { .addr = addr, .flags = flags & EP_FRAME_FLAG_RETURN_ADDRESS, .touch = true,
                      .stamp = c->next_use++ };
        memcpy(p.file_id, file_id, EP_FILE_ID_SIZE);
        queue(c, &p);
        return 0;
}

/* ---- writes ---- */

int ep_symbol_cache_put(EpSymbolCache *c, const uint8_t file_id[EP_FILE_ID_SIZE], uint64_t addr, uint8_t flags,
                        const EpSymResult *res) {
        Pending p = { .addr = addr, .flags = flags & EP_FRAME_FLAG_RETURN_ADDRESS, .status = res->status,
                      .elf_addr = res->elf_addr };
        int r;

        if (res->status != EP_SYM_OK && res->status != EP_SYM_NOT_FOUND)
                return -EINVAL;
        if (!c->d.db)
                return -ENOENT;
        memcpy(p.file_id, file_id, EP_FILE_ID_SIZE);
        p.module = strdup(res->module ?: "");
        if (!p.module)
                return -ENOMEM;
        r = lines_encode(res, &p.lines, &p.lines_size);
        if (r < 0) {
                free(p.module);
                return r;
        }
        p.stamp = c->next_use++;
        queue(c, &p);
        return 0;
}

static int record_copy(const EpSymbolFileRecord *from, EpSymbolFileRecord *to) {
        *to = (EpSymbolFileRecord) { .build_id_len = MIN(from->build_id_len, sizeof to->build_id) };
        memcpy(to->build_id, from->build_id, to->build_id_len);
        to->debug = strdup(from->debug);
        if (!to->debug || (from->debuglink && !(to->debuglink = strdup(from->debuglink))) ||
            (from->path && !(to->path = strdup(from->path)))) {
                ep_symbol_file_record_done(to);
                return -ENOMEM;
        }
        return 0;
}

int ep_symbol_cache_put_file(EpSymbolCache *c, const uint8_t file_id[EP_FILE_ID_SIZE],
                             const EpSymbolFileRecord *rec) {
        Pending p = {};
        int r;

        if (!rec->debug)
                return -EINVAL;
        if (!c->d.db)
                return -ENOENT;
        memcpy(p.file_id, file_id, EP_FILE_ID_SIZE);
        p.file = calloc(1, sizeof(EpSymbolFileRecord));
        if (!p.file)
                return -ENOMEM;
        r = record_copy(rec, p.file);
        if (r < 0) {
                free(p.file);
                return r;
        }
        queue(c, &p);
        return 0;
}

/* A new copy of a text column (NULL stays NULL); false when out of memory. */
static bool column_dup(sqlite3_stmt *s, int i, char **ret) {
        const char *t = (const char *) sqlite3_column_text(s, i);

        *ret = t ? strdup(t) : NULL;
        return !t || *ret;
}

int ep_symbol_cache_get_file(EpSymbolCache *c, const uint8_t file_id[EP_FILE_ID_SIZE], EpSymbolFileRecord *ret) {
        EpSymbolFileRecord rec = {};
        const void *blob;
        sqlite3_stmt *s;
        bool oom;
        int rc;

        if (!c->d.db)
                return -ENOENT;
        s = ep_cache_db_stmt(&c->d, STMT_FILE_GET);
        bind_file_id(s, file_id);
        rc = sqlite3_step(s);
        if (rc != SQLITE_ROW) {
                sqlite3_reset(s);
                return rc == SQLITE_DONE ? -ENOENT : ep_cache_db_failed(&c->d, rc);
        }

        blob = sqlite3_column_blob(s, 0);
        rec.build_id_len = MIN((size_t) sqlite3_column_bytes(s, 0), sizeof rec.build_id);
        if (blob)
                memcpy(rec.build_id, blob, rec.build_id_len);
        else
                rec.build_id_len = 0;
        oom = !column_dup(s, 1, &rec.debuglink) || !column_dup(s, 2, &rec.path) || !column_dup(s, 3, &rec.debug);
        if (!oom && !rec.debug)
                oom = !(rec.debug = strdup("")); /* NOT NULL: only in a file that is not ours */
        sqlite3_reset(s);
        if (oom) {
                ep_symbol_file_record_done(&rec);
                return -ENOMEM;
        }
        *ret = rec;
        return 0;
}

int ep_symbol_cache_drop_file(EpSymbolCache *c, const uint8_t file_id[EP_FILE_ID_SIZE]) {
        sqlite3_stmt *s;
        int rc, changes = 0;

        if (!c->d.db)
                return -ENOENT;
        rc = delete_rows(c, file_id, &changes);
        if (rc == SQLITE_OK) {
                s = ep_cache_db_stmt(&c->d, STMT_FILE_DELETE);
                bind_file_id(s, file_id);
                rc = sqlite3_step(s);
                sqlite3_reset(s);
                rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
        }
        if (rc != SQLITE_OK)
                return ep_cache_db_failed(&c->d, rc);
        c->info.invalidated_files++;
        return changes;
}

static int write_stmt(EpSymbolCache *c, const Pending *p, size_t which) {
        sqlite3_stmt *s = ep_cache_db_stmt(&c->d, which);
        int rc;

        bind_key(s, p->file_id, p->addr, p->flags);
        if (p->touch)
                sqlite3_bind_int64(s, 4, p->stamp);
        else {
                sqlite3_bind_int(s, 4, p->status);
                sqlite3_bind_int64(s, 5, (int64_t) p->elf_addr);
                sqlite3_bind_text(s, 6, p->module, -1, SQLITE_STATIC);
                if (p->lines)
                        sqlite3_bind_blob64(s, 7, p->lines, p->lines_size, SQLITE_STATIC);
                else
                        sqlite3_bind_null(s, 7);
                sqlite3_bind_int64(s, 8, p->stamp);
        }
        rc = sqlite3_step(s);
        sqlite3_reset(s);
        return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* A file's record. The file's rows in the table stay only when the record there says they
 * were computed with the same debug file: those of another outcome (a debug file found since,
 * or gone), or without a record, are deleted. Rows queued after the record are written after
 * it, so the resolver queues a record before the first row computed with it. */
static int write_file(EpSymbolCache *c, const Pending *p) {
        const EpSymbolFileRecord *f = p->file;
        _cleanup_free_ char *was = NULL;
        sqlite3_stmt *s;
        int rc, changes = 0;

        rc = stored_debug(c, p->file_id, &was);
        if (rc != SQLITE_OK)
                return rc;
        if (!was || !streq(was, f->debug)) {
                rc = delete_rows(c, p->file_id, &changes);
                if (rc != SQLITE_OK)
                        return rc;
        }
        if (changes > 0) {
                char hex[2 * EP_FILE_ID_SIZE + 1];

                ep_file_id_to_hex(p->file_id, hex);
                log_info("Symbol cache %s: file %s (%s) is now symbolized with debug file %s, was %s: "
                         "dropped its %d answers.", c->d.path, hex, f->path ?: "path unknown", f->debug,
                         was ?: "not recorded", changes);
                c->info.invalidated_files++;
        }

        s = ep_cache_db_stmt(&c->d, STMT_FILE_PUT);
        bind_file_id(s, p->file_id);
        if (f->build_id_len > 0)
                sqlite3_bind_blob(s, 2, f->build_id, (int) f->build_id_len, SQLITE_STATIC);
        else
                sqlite3_bind_null(s, 2);
        bind_text_or_null(s, 3, f->debuglink);
        bind_text_or_null(s, 4, f->path);
        sqlite3_bind_text(s, 5, f->debug, -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
        sqlite3_reset(s);
        return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int write_one(EpSymbolCache *c, const Pending *p) {
        int rc;

        if (p->file)
                return write_file(c, p);
        if (p->touch)
                return write_stmt(c, p, STMT_TOUCH);
        rc = write_stmt(c, p, STMT_PUT);
        if (rc != SQLITE_OK)
                return rc;
        if (sqlite3_changes(c->d.db) > 0) {
                c->rows++;
                return SQLITE_OK;
        }
        /* Already there (queued twice, or written by an earlier run): this answer wins. */
        return write_stmt(c, p, STMT_REPLACE);
}

/* Deletes the least recently used rows until the pages in use fit the bound. */
static int evict(EpSymbolCache *c) {
        bool evicted = false;
        int rc;

        rc = used_bytes(c->d.db, &c->info.bytes);
        while (rc == SQLITE_OK && c->info.bytes > c->max_bytes && c->rows > 0) {
                int64_t batch = MAX(c->rows >> EVICT_BATCH_SHIFT, (int64_t) EVICT_MIN_BATCH);
                sqlite3_stmt *s = ep_cache_db_stmt(&c->d, STMT_EVICT);
                int changes;

                /* OFFSET past the last row selects nothing: then everything goes. */
                sqlite3_bind_int64(s, 1, MIN(batch, c->rows) - 1);
                rc = sqlite3_step(s);
                sqlite3_reset(s);
                if (rc != SQLITE_DONE)
                        break;
                changes = sqlite3_changes(c->d.db);
                if (changes <= 0) {
                        rc = SQLITE_OK;
                        break;
                }
                c->rows -= MIN((int64_t) changes, c->rows);
                c->info.evictions += (uint64_t) changes;
                evicted = true;
                rc = used_bytes(c->d.db, &c->info.bytes);
        }
        if (rc == SQLITE_DONE)
                rc = SQLITE_OK;
        if (rc == SQLITE_OK && evicted) {
                sqlite3_stmt *s = ep_cache_db_stmt(&c->d, STMT_FILE_ORPHANS);

                rc = sqlite3_step(s);
                sqlite3_reset(s);
                rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
        }
        return rc;
}

int ep_symbol_cache_flush(EpSymbolCache *c) {
        int64_t rows = 0;
        int rc, r;

        if (c->n_pending == 0)
                return 0;
        if (c->timer)
                (void) sd_event_source_set_enabled(c->timer, SD_EVENT_OFF);
        if (!c->d.db) {
                pending_clear(c);
                return -ENOENT;
        }

        rc = ep_cache_db_exec(&c->d, "BEGIN IMMEDIATE");
        for (size_t i = 0; i < c->n_pending && rc == SQLITE_OK; i++)
                rc = write_one(c, &c->pending[i]);
        if (rc == SQLITE_OK)
                rc = evict(c);
        if (rc == SQLITE_OK)
                rc = ep_cache_db_exec(&c->d, "COMMIT");
        /* Written or not, the queue is done with: what was lost is computed again if needed. */
        pending_clear(c);
        if (rc == SQLITE_OK) {
                c->info.flushes++;
                return 0;
        }

        (void) ep_cache_db_exec(&c->d, "ROLLBACK");
        log_once(LOG_WARNING, "Symbol cache %s: writing failed: %s", c->d.path, sqlite3_errstr(rc));
        r = ep_cache_db_failed(&c->d, rc);
        /* The counters moved inside the transaction: read them back. */
        if (c->d.db && ep_sqlite_query_int(c->d.db, "SELECT count(*) FROM symbols", &rows) == SQLITE_OK)
                c->rows = MAX(rows, (int64_t) 0);
        return r;
}

void ep_symbol_cache_info(const EpSymbolCache *c, EpSymbolCacheInfo *ret) {
        *ret = c->info;
        ret->entries = (uint64_t) c->rows + c->pending_puts;
        ret->pending = c->n_pending;
        ret->rebuilds = c->d.rebuilds;
}

const char *ep_symbol_cache_path(const EpSymbolCache *c) {
        return c->d.path;
}
