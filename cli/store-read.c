/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frame-kind.h"
#include "grow-array.h"
#include "hashmap.h"
#include "log.h"
#include "stop-reason.h"
#include "store-read.h"
#include "wire.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(sqlite3_stmt *, sqlite3_finalize);
#define _cleanup_stmt_ _cleanup_(sqlite3_finalizep)

static int sql_error(sqlite3 *db, const char *what) {
        log_error("Store: %s failed: %s", what, sqlite3_errmsg(db));
        return -EIO;
}

static int prepare(sqlite3 *db, const char *sql, sqlite3_stmt **ret) {
        if (sqlite3_prepare_v2(db, sql, -1, ret, NULL) != SQLITE_OK)
                return sql_error(db, "preparing a query");
        return 0;
}

/* A store is a file anyone may hand to --store: read it as SQLite advises for a database from
 * an untrusted source ("Defense Against the Dark Arts"). Nothing in its schema runs (no
 * triggers, no views, no functions with side effects), a corrupt page is noticed rather than
 * followed, nothing is memory-mapped, and no value or statement is bigger than a store of ours
 * ever holds. */
static int store_defend(sqlite3 *db) {
        static const struct {
                int op, value;
        } configs[] = {
                { SQLITE_DBCONFIG_DEFENSIVE, 1 },
                { SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0 },
                { SQLITE_DBCONFIG_ENABLE_TRIGGER, 0 },
                { SQLITE_DBCONFIG_ENABLE_VIEW, 0 },
        };

        for (size_t i = 0; i < ELEMENTSOF(configs); i++) {
                int now = -1;
                if (sqlite3_db_config(db, configs[i].op, configs[i].value, &now) != SQLITE_OK || now != configs[i].value)
                        return -EPERM;
        }
        (void) sqlite3_limit(db, SQLITE_LIMIT_LENGTH, 64 << 20); /* a stack blob, a long name */
        (void) sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
        if (sqlite3_exec(db, "PRAGMA cell_size_check = ON; PRAGMA mmap_size = 0;", NULL, NULL, NULL) != SQLITE_OK)
                return -EIO;
        return 0;
}

int ep_store_open(const char *path, sqlite3 **ret) {
        _cleanup_sqlite_ sqlite3 *db = NULL;
        int r;

        if (access(path, F_OK) < 0)
                return -errno;
        if (access(path, R_OK) < 0)
                return -errno;

        r = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
        if (r != SQLITE_OK) {
                log_error("Cannot open store %s: %s", path,
                          db ? sqlite3_errmsg(db) : sqlite3_errstr(r));
                return r == SQLITE_CANTOPEN ? -EACCES : -EIO;
        }
        r = store_defend(db);
        if (r < 0)
                return log_error_errno(r, "Cannot open store %s safely: %s", path, sqlite3_errmsg(db));
        /* The collector writes in short transactions; a reader waits briefly instead of
         * failing when it meets a checkpoint or a WAL restart. */
        sqlite3_busy_timeout(db, 5000);

        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK) {
                /* "file is not a database" shows up here. */
                log_debug("Store %s: %s", path, sqlite3_errmsg(db));
                return sqlite3_errcode(db) == SQLITE_NOTADB ? -EPROTO : -EIO;
        }
        if (sqlite3_step(st) != SQLITE_ROW)
                return sqlite3_errcode(db) == SQLITE_NOTADB ? -EPROTO : sql_error(db, "reading the schema version");
        int version = sqlite3_column_int(st, 0);
        /* Every version up to ours reads the same way (later versions only add to the
         * schema); 0 is not a store. */
        if (version < 1 || version > EP_STORE_SCHEMA_VERSION) {
                log_debug("Store %s has schema version %d, expected 1 to %d", path, version,
                          EP_STORE_SCHEMA_VERSION);
                return -EPROTO;
        }

        *ret = TAKE_PTR(db);
        return 0;
}

static const char *basename_or(const char *path, const char *fallback) {
        if (!path || !*path)
                return fallback;
        const char *s = strrchr(path, '/');
        return s && s[1] ? s + 1 : path;
}

int ep_store_frame_name(const EpStoredFrame *f, const char *function, char **ret_name,
                        const char **ret_module, EpViewKind *ret_kind) {
        const char *module = "";
        EpViewKind kind = EP_VIEW_UNKNOWN;
        char *name = NULL;
        int r;

        if (function && !*function)
                function = NULL;

        const EpFrameKind *fk = ep_frame_kind(f->kind);
        switch (fk ? fk->identity : EP_FRAME_ID_NONE) {
        case EP_FRAME_ID_FILE_OFFSET:
                module = basename_or(f->path, "");
                if (function) {
                        kind = ep_view_kind_from_string(fk->view);
                        r = asprintf(&name, "%s", function);
                } else
                        /* Views are for people: unnamed code groups per file. The store keeps
                         * every address (and the file ID) for a backend to symbolize. */
                        r = asprintf(&name, "[unknown] %s", basename_or(f->path, "?"));
                break;
        case EP_FRAME_ID_KERNEL_ADDR:
                kind = ep_view_kind_from_string(fk->view);
                module = f->module && *f->module ? f->module : "vmlinux";
                if (function)
                        r = asprintf(&name, "%s [k]", function);
                else
                        r = asprintf(&name, "[k] 0x%" PRIx64, f->addr);
                break;
        case EP_FRAME_ID_PROCESS_ADDR:
                /* JIT code as the JIT named it in its perf map, a runtime's function. */
                module = fk->module ?: "";
                if (function) {
                        kind = ep_view_kind_from_string(fk->view);
                        r = asprintf(&name, "%s", function);
                } else if (fk->addr_mask)
                        r = asprintf(&name, "[%s 0x%" PRIx64 "]", fk->unnamed, f->addr & fk->addr_mask);
                else
                        r = asprintf(&name, "[%s]", fk->unnamed);
                break;
        case EP_FRAME_ID_NONE:
        default:
                r = asprintf(&name, "[unwinding stopped: %s]", ep_stop_reason_name(f->addr) ?: "unknown reason");
                break;
        }
        if (r < 0)
                return -ENOMEM;

        *ret_name = name;
        *ret_module = module;
        *ret_kind = kind;
        return 0;
}

typedef struct Span {
        uint32_t first, n;
} Span;

typedef struct Reader {
        sqlite3 *db;
        const EpStoreFilter *filter;
        EpStoreReadFlags flags;
        EpCallTree *tree;

        sqlite3_stmt *frame_stmt, *lines_stmt, *stack_stmt;

        EpHashmap *frames; /* frames.id → Span in views: the frame's lines, innermost first */
        EpHashmap *stacks; /* stacks.id → Span in views: the whole stack, leaf first */
        EpViewFrame *views;
        size_t n_views, n_allocated_views;
} Reader;

static int views_push(Reader *rd, const EpViewFrame *v) {
        if (rd->n_views >= UINT32_MAX)
                return -E2BIG;
        if (rd->n_views >= rd->n_allocated_views) {
                size_t n = MAX(rd->n_allocated_views * 2, (size_t) 1024);
                EpViewFrame *p = reallocarray(rd->views, n, sizeof(EpViewFrame));
                if (!p)
                        return -ENOMEM;
                rd->views = p;
                rd->n_allocated_views = n;
        }
        rd->views[rd->n_views++] = *v;
        return 0;
}

static int push_named(Reader *rd, const char *name, const char *module, EpViewKind kind) {
        EpViewFrame v = { .kind = kind };
        int r = ep_calltree_intern(rd->tree, name, &v.name);
        if (r < 0)
                return r;
        r = ep_calltree_intern(rd->tree, module, &v.module);
        if (r < 0)
                return r;
        return views_push(rd, &v);
}

static int push_frame_line(Reader *rd, const EpStoredFrame *f, const char *function, const char *source,
                           int64_t line) {
        _cleanup_free_ char *name = NULL, *located = NULL;
        const char *module;
        EpViewKind kind;
        int r = ep_store_frame_name(f, function, &name, &module, &kind);
        if (r < 0)
                return r;
        if ((rd->flags & EP_STORE_READ_LINES) && function && source && *source && line > 0) {
                const char *base = strrchr(source, '/');
                if (asprintf(&located, "%s (%s:%" PRIi64 ")", name, base ? base + 1 : source, line) < 0)
                        return -ENOMEM;
        }
        return push_named(rd, located ?: name, module, kind);
}

/* Remembers the span of a frame or stack (cache: id → Span) so it is loaded once; returns it. */
static int cache_span(EpHashmap *cache, int64_t id, Span span, Span *ret) {
        void *v;
        int r = ep_hashmap_put(cache, &id, &v);
        if (r < 0)
                return r;
        *(Span *) v = span;
        *ret = span;
        return 0;
}

/* Materializes one stored frame (all its inline lines) into views; returns its span. */
static int load_frame(Reader *rd, int64_t id, Span *ret) {
        Span *cached = ep_hashmap_get(rd->frames, &id);
        if (cached) {
                *ret = *cached;
                return 0;
        }

        Span span = { .first = (uint32_t) rd->n_views };
        int r;

        sqlite3_reset(rd->frame_stmt);
        sqlite3_bind_int64(rd->frame_stmt, 1, id);
        r = sqlite3_step(rd->frame_stmt);
        if (r == SQLITE_DONE) {
                char name[64];
                snprintf(name, sizeof(name), "[missing frame #%" PRIi64 "]", id);
                r = push_named(rd, name, "", EP_VIEW_UNKNOWN);
                if (r < 0)
                        return r;
        } else if (r != SQLITE_ROW)
                return sql_error(rd->db, "reading a frame");
        else {
                EpStoredFrame f = {
                        .kind = sqlite3_column_int(rd->frame_stmt, 0),
                        .addr = (uint64_t) sqlite3_column_int64(rd->frame_stmt, 1),
                        .module = (const char *) sqlite3_column_text(rd->frame_stmt, 2),
                        .path = (const char *) sqlite3_column_text(rd->frame_stmt, 3),
                };

                sqlite3_reset(rd->lines_stmt);
                sqlite3_bind_int64(rd->lines_stmt, 1, id);
                while ((r = sqlite3_step(rd->lines_stmt)) == SQLITE_ROW) {
                        r = push_frame_line(rd, &f, (const char *) sqlite3_column_text(rd->lines_stmt, 0),
                                            (const char *) sqlite3_column_text(rd->lines_stmt, 1),
                                            sqlite3_column_int64(rd->lines_stmt, 2));
                        if (r < 0)
                                return r;
                }
                if (r != SQLITE_DONE)
                        return sql_error(rd->db, "reading frame lines");
                if (rd->n_views == span.first) {
                        r = push_frame_line(rd, &f, NULL, NULL, 0);
                        if (r < 0)
                                return r;
                }
        }
        span.n = (uint32_t) (rd->n_views - span.first);
        return cache_span(rd->frames, id, span, ret);
}

static int load_stack(Reader *rd, int64_t id, Span *ret) {
        Span *cached = ep_hashmap_get(rd->stacks, &id);
        if (cached) {
                *ret = *cached;
                return 0;
        }

        sqlite3_reset(rd->stack_stmt);
        sqlite3_bind_int64(rd->stack_stmt, 1, id);
        int r = sqlite3_step(rd->stack_stmt);
        const uint8_t *blob = NULL;
        size_t len = 0;
        if (r == SQLITE_ROW) {
                blob = sqlite3_column_blob(rd->stack_stmt, 0);
                len = (size_t) sqlite3_column_bytes(rd->stack_stmt, 0);
        } else if (r != SQLITE_DONE)
                return sql_error(rd->db, "reading a stack");
        if (len % 8 != 0)
                log_once(LOG_WARNING, "Store: stack %" PRIi64 " has a frame list of %zu bytes, not a multiple of 8",
                         id, len);

        /* Copy the frame ids: stepping the frame statements below may not invalidate the blob,
         * but keeping our own copy costs little and is obviously safe. */
        size_t n = len / 8;
        _cleanup_free_ int64_t *ids = malloc(MAX(n, (size_t) 1) * sizeof(int64_t));
        if (!ids)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                uint64_t x = 0;
                for (unsigned b = 0; b < 8; b++)
                        x |= (uint64_t) blob[i * 8 + b] << (8 * b);
                ids[i] = (int64_t) x;
        }

        /* Expand each frame, then copy its lines to the end of views: the stack's span is
         * contiguous. Frames first, so the copy does not interleave with frame loading. */
        for (size_t i = 0; i < n; i++) {
                Span fs;
                r = load_frame(rd, ids[i], &fs);
                if (r < 0)
                        return r;
        }

        Span span = { .first = (uint32_t) rd->n_views };
        bool had_kernel = false;
        for (size_t i = 0; i < n; i++) {
                Span fs = *(Span *) ep_hashmap_get(rd->frames, &ids[i]);
                for (uint32_t j = 0; j < fs.n; j++) {
                        EpViewFrame v = rd->views[fs.first + j];
                        if (!rd->filter->kernel && v.kind == EP_VIEW_KERNEL) {
                                had_kernel = true;
                                continue;
                        }
                        r = views_push(rd, &v);
                        if (r < 0)
                                return r;
                }
        }
        if (rd->n_views == span.first) {
                /* Keep the samples visible: they still count in every percentage. */
                r = push_named(rd, had_kernel ? "[kernel]" : "[no frames]", "",
                               had_kernel ? EP_VIEW_KERNEL : EP_VIEW_UNKNOWN);
                if (r < 0)
                        return r;
        }
        span.n = (uint32_t) (rd->n_views - span.first);
        return cache_span(rd->stacks, id, span, ret);
}

int ep_store_filter_add_pid(EpStoreFilter *f, int64_t pid) {
        if (f->n_pids >= EP_STORE_FILTER_MAX_VALUES)
                return -E2BIG;
        f->pids[f->n_pids++] = pid;
        return 0;
}

int ep_store_filter_add_comm(EpStoreFilter *f, const char *comm) {
        if (f->n_comms >= EP_STORE_FILTER_MAX_VALUES)
                return -E2BIG;
        f->comms[f->n_comms++] = comm;
        return 0;
}

bool ep_store_filter_selects_all(const EpStoreFilter *f) {
        return f->n_pids == 0 && f->n_comms == 0 && !f->container && f->tid < 0 && !f->thread_name &&
               f->since_ns == 0 && f->until_ns == UINT64_MAX;
}

int ep_store_find_containers(sqlite3 *db, const char *prefix, char ***ret_ids, size_t *ret_n) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        _cleanup_strv_free_ char **ids = NULL;
        size_t n = 0, allocated = 0;
        int r;

        /* substr() rather than LIKE: '_' and '%' in the prefix are not wildcards, and the
         * comparison is case-sensitive like the IDs. */
        r = prepare(db,
                    "SELECT DISTINCT container_id FROM processes"
                    " WHERE container_id <> '' AND substr(container_id, 1, length(?1)) = ?1 ORDER BY 1",
                    &st);
        if (r < 0)
                return r;
        sqlite3_bind_text(st, 1, prefix, -1, SQLITE_STATIC);
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
                r = ARRAY_RESERVE(ids, allocated, n + 2);
                if (r < 0)
                        return r;
                ids[n] = strdup((const char *) sqlite3_column_text(st, 0));
                if (!ids[n])
                        return -ENOMEM;
                ids[++n] = NULL;
        }
        if (r != SQLITE_DONE)
                return sql_error(db, "looking up containers");
        if (!ids) {
                ids = calloc(1, sizeof(char *));
                if (!ids)
                        return -ENOMEM;
        }
        *ret_ids = TAKE_PTR(ids);
        *ret_n = n;
        return 0;
}

/* The one container ID a --container value names: itself when it is an ID of the store, else
 * the one ID it starts. No match gives the value itself, which selects nothing (the container
 * may not have run yet); several give -ENOTUNIQ. */
static int resolve_container(sqlite3 *db, const char *prefix, char **ret_id) {
        _cleanup_strv_free_ char **ids = NULL;
        size_t n;
        int r;

        if (strlen(prefix) < EP_STORE_CONTAINER_PREFIX_MIN)
                return -EINVAL;
        r = ep_store_find_containers(db, prefix, &ids, &n);
        if (r < 0)
                return r;
        const char *id = prefix;
        for (size_t i = 0; i < n; i++)
                if (streq(ids[i], prefix))
                        n = 0;
        if (n > 1)
                return -ENOTUNIQ;
        if (n == 1)
                id = ids[0];
        *ret_id = strdup(id);
        return *ret_id ? 0 : -ENOMEM;
}

static void bind_named_int64(sqlite3_stmt *st, const char *name, int64_t v) {
        sqlite3_bind_int64(st, sqlite3_bind_parameter_index(st, name), v);
}

static void bind_named_text(sqlite3_stmt *st, const char *name, const char *v) {
        sqlite3_bind_text(st, sqlite3_bind_parameter_index(st, name), v, -1, SQLITE_TRANSIENT);
}

int ep_store_prepare_samples(sqlite3 *db, const EpStoreFilter *f, const char *select, const char *tail,
                             sqlite3_stmt **ret) {
        _cleanup_free_ char *sql = NULL, *container_id = NULL;
        size_t size = 0;
        int r;

        if (f->container) {
                r = resolve_container(db, f->container, &container_id);
                if (r < 0)
                        return r;
        }

        /* The conditions name their parameters, so the binding below cannot get out of step
         * with the text, whichever conditions are present. */
        FILE *m = open_memstream(&sql, &size);
        if (!m)
                return -ENOMEM;
        fputs(select, m);
        fputs(" FROM samples s"
              " JOIN intervals i ON i.id = s.interval"
              " JOIN processes p ON p.id = s.process"
              " WHERE i.end_ns > :since AND i.start_ns < :until", m);
        if (f->n_pids > 0) {
                fputs(" AND p.pid IN (", m);
                for (size_t i = 0; i < f->n_pids; i++)
                        fprintf(m, "%s:pid%zu", i ? ", " : "", i);
                fputc(')', m);
        }
        if (f->n_comms > 0) {
                fputs(" AND p.comm IN (", m);
                for (size_t i = 0; i < f->n_comms; i++)
                        fprintf(m, "%s:comm%zu", i ? ", " : "", i);
                fputc(')', m);
        }
        if (container_id)
                fputs(" AND p.container_id = :container", m);
        if (f->tid >= 0)
                fputs(" AND s.tid = :tid", m);
        if (f->thread_name)
                fputs(" AND s.thread_name = :thread", m);
        fputc(' ', m);
        fputs(tail, m);
        if (fclose(m) != 0)
                return -ENOMEM;

        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        r = prepare(db, sql, &st);
        if (r < 0)
                return r;

        char name[32];
        bind_named_int64(st, ":since", (int64_t) MIN(f->since_ns, (uint64_t) INT64_MAX));
        bind_named_int64(st, ":until", (int64_t) MIN(f->until_ns, (uint64_t) INT64_MAX));
        for (size_t i = 0; i < f->n_pids; i++) {
                snprintf(name, sizeof(name), ":pid%zu", i);
                bind_named_int64(st, name, f->pids[i]);
        }
        for (size_t i = 0; i < f->n_comms; i++) {
                snprintf(name, sizeof(name), ":comm%zu", i);
                bind_named_text(st, name, f->comms[i]);
        }
        if (container_id)
                bind_named_text(st, ":container", container_id);
        if (f->tid >= 0)
                bind_named_int64(st, ":tid", f->tid);
        if (f->thread_name)
                bind_named_text(st, ":thread", f->thread_name);

        *ret = TAKE_PTR(st);
        return 0;
}

static int read_summary(sqlite3 *db, const EpStoreFilter *f, EpStoreSummary *ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = ep_store_prepare_samples(db, f,
                                         "SELECT MIN(i.start_ns), MAX(i.end_ns), COUNT(DISTINCT i.id),"
                                         " COUNT(DISTINCT s.process), COUNT(DISTINCT s.stack), TOTAL(s.count)",
                                         "", &st);
        if (r < 0)
                return r;
        if (sqlite3_step(st) != SQLITE_ROW)
                return sql_error(db, "summarizing samples");
        /* TOTAL() is a double; over a damaged store (negative counts) it may be below zero,
         * which no unsigned count holds. */
        double samples = sqlite3_column_double(st, 5);
        *ret = (EpStoreSummary) {
                .first_ns = (uint64_t) sqlite3_column_int64(st, 0),
                .last_ns = (uint64_t) sqlite3_column_int64(st, 1),
                .intervals = (uint64_t) sqlite3_column_int64(st, 2),
                .processes = (uint64_t) sqlite3_column_int64(st, 3),
                .stacks = (uint64_t) sqlite3_column_int64(st, 4),
                .samples = samples > 0 && samples < 0x1p64 ? (uint64_t) samples : 0,
        };
        return 0;
}

/* One read transaction: every query of a view sees the same snapshot of the WAL, and the
 * collector keeps writing meanwhile. */
static int read_begin(sqlite3 *db, sqlite3 **ret) {
        if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
                return sql_error(db, "starting a read transaction");
        *ret = db;
        return 0;
}

static void read_endp(sqlite3 **db) {
        if (*db)
                (void) sqlite3_exec(*db, "COMMIT", NULL, NULL, NULL);
}
#define _cleanup_read_ _cleanup_(read_endp)

static int read_samples(Reader *rd) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        bool by_process = rd->flags & EP_STORE_READ_BY_PROCESS;
        int r = by_process ? ep_store_prepare_samples(rd->db, rd->filter, "SELECT p.pid, p.comm, s.stack, SUM(s.count)",
                                                      "GROUP BY p.pid, p.comm, s.stack", &st)
                           : ep_store_prepare_samples(rd->db, rd->filter, "SELECT 0, NULL, s.stack, SUM(s.count)",
                                                      "GROUP BY s.stack", &st);
        if (r < 0)
                return r;

        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
                int64_t pid = sqlite3_column_int64(st, 0);
                const char *comm = (const char *) sqlite3_column_text(st, 1);
                int64_t stack = sqlite3_column_int64(st, 2);
                int64_t count = sqlite3_column_int64(st, 3);
                if (count <= 0)
                        continue;

                uint32_t pnode = 0;
                if (by_process) {
                        char pname[64];
                        snprintf(pname, sizeof(pname), "%s (%" PRIi64 ")", comm && *comm ? comm : "?", pid);
                        EpViewFrame pf = { .kind = EP_VIEW_PROCESS };
                        if ((r = ep_calltree_intern(rd->tree, pname, &pf.name)) < 0 ||
                            (r = ep_calltree_intern(rd->tree, "", &pf.module)) < 0 ||
                            (r = ep_calltree_child(rd->tree, 0, &pf, &pnode)) < 0)
                                return r;
                }

                Span span;
                r = load_stack(rd, stack, &span);
                if (r < 0)
                        return r;
                r = ep_calltree_add(rd->tree, pnode, rd->views + span.first, span.n, (uint64_t) count);
                if (r < 0)
                        return r;
        }
        if (r != SQLITE_DONE)
                return sql_error(rd->db, "reading samples");
        return 0;
}

_Static_assert(EP_FRAME_NATIVE == 1, "the frame query joins files for kind 1");

int ep_store_read(sqlite3 *db, const EpStoreFilter *f, EpStoreReadFlags flags, EpCallTree *tree,
                  EpStoreSummary *ret) {
        Reader rd = { .db = db, .filter = f, .flags = flags, .tree = tree };
        _cleanup_read_ sqlite3 *txn = NULL;
        EpStoreSummary summary;
        int r;

        r = read_begin(db, &txn);
        if (r < 0)
                return r;

        rd.frames = ep_hashmap_new(sizeof(int64_t), sizeof(Span));
        rd.stacks = ep_hashmap_new(sizeof(int64_t), sizeof(Span));
        if (!rd.frames || !rd.stacks) {
                r = -ENOMEM;
                goto finish;
        }
        if ((r = prepare(db,
                         /* frames.file is a files.id for native frames (kind 1) only,
                          * a processes.id for unmapped ones */
                         "SELECT f.kind, f.addr, f.module, fi.path FROM frames f"
                         " LEFT JOIN files fi ON fi.id = f.file AND f.kind = 1 WHERE f.id = ?1",
                         &rd.frame_stmt)) < 0 ||
            (r = prepare(db, "SELECT function, source_file, line FROM frame_lines WHERE frame = ?1 ORDER BY depth",
                         &rd.lines_stmt)) < 0 ||
            (r = prepare(db, "SELECT frames FROM stacks WHERE id = ?1", &rd.stack_stmt)) < 0)
                goto finish;

        r = read_summary(db, f, &summary);
        if (r < 0)
                goto finish;
        if (summary.samples > 0) {
                r = read_samples(&rd);
                if (r < 0)
                        goto finish;
        }
        if (ret)
                *ret = summary;
        r = 0;

finish:
        sqlite3_finalize(rd.frame_stmt);
        sqlite3_finalize(rd.lines_stmt);
        sqlite3_finalize(rd.stack_stmt);
        ep_hashmap_free(rd.frames);
        ep_hashmap_free(rd.stacks);
        free(rd.views);
        return r;
}

static char *column_strdup(sqlite3_stmt *st, int column) {
        const char *s = (const char *) sqlite3_column_text(st, column);
        return strdup(s ?: "");
}

void ep_store_groups_free(EpStoreGroup *g, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(g[i].comm);
                free(g[i].container_id);
                free(g[i].thread_name);
        }
        free(g);
}

static int read_groups(sqlite3 *db, const EpStoreFilter *f, EpStoreGroupBy by, EpStoreGroup **ret, size_t *ret_n) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        EpStoreGroup *g = NULL;
        size_t n = 0, allocated = 0;
        int r;

        /* A thread may rename itself: with exactly one max() in the query, SQLite takes the bare
         * s.thread_name from the row of the latest interval. A process's pid may be reused, so
         * groups are processes rows, not pids. */
        if (by == EP_STORE_GROUP_THREAD)
                r = ep_store_prepare_samples(db, f,
                                             "SELECT p.pid, s.tid, p.comm, p.container_id, s.thread_name,"
                                             " SUM(s.count), MAX(s.interval)",
                                             "GROUP BY p.id, s.tid ORDER BY 6 DESC, p.pid, s.tid", &st);
        else
                r = ep_store_prepare_samples(db, f, "SELECT p.pid, -1, p.comm, p.container_id, NULL, SUM(s.count)",
                                             "GROUP BY p.id ORDER BY 6 DESC, p.pid, p.id", &st);
        if (r < 0)
                return r;

        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
                r = ARRAY_RESERVE(g, allocated, n + 1);
                if (r < 0)
                        goto fail;
                EpStoreGroup *e = &g[n++];
                *e = (EpStoreGroup) {
                        .pid = sqlite3_column_int64(st, 0),
                        .tid = sqlite3_column_int64(st, 1),
                        .comm = column_strdup(st, 2),
                        .container_id = column_strdup(st, 3),
                        .thread_name = column_strdup(st, 4),
                        .samples = (uint64_t) MAX(sqlite3_column_int64(st, 5), 0),
                };
                if (!e->comm || !e->container_id || !e->thread_name) {
                        r = -ENOMEM;
                        goto fail;
                }
        }
        if (r != SQLITE_DONE) {
                r = sql_error(db, "reading samples per group");
                goto fail;
        }
        *ret = g;
        *ret_n = n;
        return 0;
fail:
        ep_store_groups_free(g, n);
        return r;
}

int ep_store_read_groups(sqlite3 *db, const EpStoreFilter *f, EpStoreGroupBy by, EpStoreGroup **ret,
                         size_t *ret_n, EpStoreSummary *ret_summary) {
        _cleanup_read_ sqlite3 *txn = NULL;
        int r;

        if (by < 0 || by >= _EP_STORE_GROUP_MAX)
                return -EINVAL;
        r = read_begin(db, &txn);
        if (r < 0)
                return r;
        r = read_summary(db, f, ret_summary);
        if (r < 0)
                return r;
        return read_groups(db, f, by, ret, ret_n);
}
