/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export-model.h"
#include "hashmap.h"
#include "log.h"
#include "wire.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(sqlite3_stmt *, sqlite3_finalize);
#define _cleanup_stmt_ _cleanup_(sqlite3_finalizep)

typedef struct Loader {
        sqlite3 *db;
        const EpStoreFilter *filter;
        EpExportModel *m;
        EpProgress *progress;
        sqlite3_stmt *process_stmt, *stack_stmt, *frame_stmt, *lines_stmt;
        EpHashmap *processes, *stacks, *frames; /* store id (int64) → model index (uint32) */
        size_t cap_per_sample;
} Loader;

static int sql_error(sqlite3 *db, const char *what) {
        log_error("Store: %s failed: %s", what, sqlite3_errmsg(db));
        return -EIO;
}

static int prepare(sqlite3 *db, const char *sql, sqlite3_stmt **ret) {
        if (sqlite3_prepare_v2(db, sql, -1, ret, NULL) != SQLITE_OK)
                return sql_error(db, "preparing a query");
        return 0;
}

/* A copy of a text column, NULL for NULL. */
static int column_strdup(sqlite3_stmt *st, int col, char **ret) {
        const char *s = (const char *) sqlite3_column_text(st, col);
        *ret = NULL;
        if (!s)
                return 0;
        *ret = strdup(s);
        return *ret ? 0 : -ENOMEM;
}

/* Looks id up in map; returns 1 with *ret_index when it was loaded before. */
static int cached(EpHashmap *map, int64_t id, uint32_t *ret_index) {
        uint32_t *v = ep_hashmap_get(map, &id);
        if (!v)
                return 0;
        *ret_index = *v;
        return 1;
}

static int remember(EpHashmap *map, int64_t id, size_t index, uint32_t *ret_index) {
        void *v;
        int r = ep_hashmap_put(map, &id, &v);
        if (r < 0)
                return r;
        *(uint32_t *) v = (uint32_t) index;
        *ret_index = (uint32_t) index;
        return 0;
}

static int load_process(Loader *l, int64_t id, uint32_t *ret) {
        if (cached(l->processes, id, ret))
                return 0;

        ExpProcess *p = exp_interval_add_process(l->m->iv);
        if (!p)
                return -ENOMEM;
        sqlite3_stmt *st = l->process_stmt;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, id);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW) {
                p->pid = (uint32_t) sqlite3_column_int64(st, 0);
                if ((r = column_strdup(st, 1, &p->comm)) < 0 || (r = column_strdup(st, 2, &p->exe_path)) < 0 ||
                    (r = column_strdup(st, 3, &p->container_id)) < 0)
                        return r;
        } else if (r != SQLITE_DONE)
                return sql_error(l->db, "reading a process");
        return remember(l->processes, id, l->m->iv->n_processes - 1, ret);
}

static int add_line(ExpFrame *f, const char *function, const char *file, int64_t line) {
        ExpLine *lines = reallocarray(f->lines, f->n_lines + 1, sizeof(ExpLine));
        if (!lines)
                return -ENOMEM;
        f->lines = lines;
        ExpLine *ln = &lines[f->n_lines];
        *ln = (ExpLine) { .line = line > 0 && line <= UINT32_MAX ? (uint32_t) line : 0 };
        f->n_lines++; /* freed with the model from here on, even half filled */
        if (function && !(ln->function = strdup(function)))
                return -ENOMEM;
        if (file && !(ln->file = strdup(file)))
                return -ENOMEM;
        return 0;
}

static int fill_frame(Loader *l, ExpFrame *f, int64_t id) {
        sqlite3_stmt *st = l->frame_stmt;
        int r;

        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, id);
        r = sqlite3_step(st);
        if (r == SQLITE_DONE) {
                /* The views show it the same way: the samples still count. */
                char name[64];
                snprintf(name, sizeof(name), "[missing frame #%" PRIi64 "]", id);
                f->kind = EP_FRAME_UNKNOWN;
                return add_line(f, name, NULL, 0);
        }
        if (r != SQLITE_ROW)
                return sql_error(l->db, "reading a frame");

        f->kind = (uint8_t) sqlite3_column_int(st, 0);
        f->addr = (uint64_t) sqlite3_column_int64(st, 1);
        f->elf_addr = (uint64_t) sqlite3_column_int64(st, 2); /* NULL reads as 0: unknown */
        const void *file_id = sqlite3_column_blob(st, 3), *htlhash = sqlite3_column_blob(st, 7);
        if (file_id)
                memcpy(f->file_id, file_id, MIN((size_t) sqlite3_column_bytes(st, 3), sizeof(f->file_id)));
        if (htlhash)
                memcpy(f->htlhash, htlhash, MIN((size_t) sqlite3_column_bytes(st, 7), sizeof(f->htlhash)));
        const void *build_id = sqlite3_column_blob(st, 5);
        if (build_id) {
                f->build_id_len = (uint8_t) MIN((size_t) sqlite3_column_bytes(st, 5), sizeof(f->build_id));
                memcpy(f->build_id, build_id, f->build_id_len);
        }
        if ((r = column_strdup(st, 4, &f->mapping_path)) < 0 || (r = column_strdup(st, 6, &f->go_build_id)) < 0)
                return r;

        st = l->lines_stmt;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, id);
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
                r = add_line(f, (const char *) sqlite3_column_text(st, 0), (const char *) sqlite3_column_text(st, 1),
                             sqlite3_column_int64(st, 2));
                if (r < 0)
                        return r;
        }
        return r == SQLITE_DONE ? 0 : sql_error(l->db, "reading frame lines");
}

static int load_frame(Loader *l, int64_t id, uint32_t *ret) {
        if (cached(l->frames, id, ret))
                return 0;
        ExpFrame *f = exp_interval_add_frame(l->m->iv);
        if (!f)
                return -ENOMEM;
        int r = fill_frame(l, f, id);
        if (r < 0)
                return r;
        return remember(l->frames, id, l->m->iv->n_frames - 1, ret);
}

static int load_stack(Loader *l, int64_t id, uint32_t *ret) {
        _cleanup_free_ uint8_t *blob = NULL;
        size_t len = 0;
        int r;

        if (cached(l->stacks, id, ret))
                return 0;

        /* Copied: loading the frames steps other statements. */
        sqlite3_reset(l->stack_stmt);
        sqlite3_bind_int64(l->stack_stmt, 1, id);
        r = sqlite3_step(l->stack_stmt);
        if (r == SQLITE_ROW) {
                len = (size_t) sqlite3_column_bytes(l->stack_stmt, 0) / 8 * 8;
                blob = malloc(MAX(len, (size_t) 1));
                if (!blob)
                        return -ENOMEM;
                if (len > 0)
                        memcpy(blob, sqlite3_column_blob(l->stack_stmt, 0), len);
        } else if (r != SQLITE_DONE)
                return sql_error(l->db, "reading a stack");

        _cleanup_free_ uint32_t *frames = malloc(MAX(len / 8, (size_t) 1) * sizeof(uint32_t));
        if (!frames)
                return -ENOMEM;
        size_t n = 0;
        for (size_t i = 0; i < len / 8; i++) {
                uint64_t fid = 0;
                for (unsigned b = 0; b < 8; b++)
                        fid |= (uint64_t) blob[i * 8 + b] << (8 * b);
                r = load_frame(l, (int64_t) fid, &frames[n]);
                if (r < 0)
                        return r;
                if (!l->filter->kernel && l->m->iv->frames[frames[n]].kind == EP_FRAME_KERNEL)
                        continue;
                n++;
        }

        ExpStack *s = exp_interval_add_stack(l->m->iv);
        if (!s)
                return -ENOMEM;
        s->frames = TAKE_PTR(frames);
        s->n_frames = n;
        return remember(l->stacks, id, l->m->iv->n_stacks - 1, ret);
}

static int add_sample(Loader *l, sqlite3_stmt *st) {
        ExpInterval *iv = l->m->iv;
        uint32_t process, stack;
        int64_t count = sqlite3_column_int64(st, 4);
        int r;

        if (count <= 0)
                return 0;
        if ((r = load_process(l, sqlite3_column_int64(st, 0), &process)) < 0 ||
            (r = load_stack(l, sqlite3_column_int64(st, 3), &stack)) < 0)
                return r;

        /* The per-sample arrays grow with the samples. */
        if (iv->n_samples + 1 > l->cap_per_sample) {
                size_t cap = MAX(l->cap_per_sample * 2, (size_t) 256);
                uint64_t *cpu = reallocarray(l->m->cpu_ns, cap, sizeof(uint64_t));
                if (!cpu)
                        return -ENOMEM;
                l->m->cpu_ns = cpu;
                uint32_t *sp = reallocarray(l->m->sample_process, cap, sizeof(uint32_t));
                if (!sp)
                        return -ENOMEM;
                l->m->sample_process = sp;
                l->cap_per_sample = cap;
        }
        ExpSample *s = exp_interval_add_sample(iv);
        if (!s)
                return -ENOMEM;
        *s = (ExpSample) {
                .pid = iv->processes[process].pid,
                .tid = (uint32_t) sqlite3_column_int64(st, 1),
                .stack = stack,
                .count = (uint64_t) count,
        };
        r = column_strdup(st, 2, &s->thread_name);
        if (r < 0)
                return r;
        l->m->cpu_ns[iv->n_samples - 1] = (uint64_t) sqlite3_column_int64(st, 5);
        l->m->sample_process[iv->n_samples - 1] = process;
        l->m->events += (uint64_t) count;
        return 0;
}

static int read_samples(Loader *l) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = ep_store_prepare_samples(l->db, l->filter,
                                 "SELECT s.process, s.tid, s.thread_name, s.stack, SUM(s.count),"
                                 " SUM(s.count * i.period_ns), COUNT(*)",
                                 " GROUP BY s.process, s.tid, s.thread_name, s.stack", &st);
        if (r < 0)
                return r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
                r = add_sample(l, st);
                if (r < 0)
                        return r;
                uint64_t rows = (uint64_t) sqlite3_column_int64(st, 6);
                l->m->rows += rows;
                ep_progress_add(l->progress, rows, 0);
        }
        return r == SQLITE_DONE ? 0 : sql_error(l->db, "reading samples");
}

/* The window of the matching intervals, and the latest one's period. */
static int read_window(Loader *l) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        ExpInterval *iv = l->m->iv;
        uint64_t latest_end = 0;
        int r;

        r = ep_store_prepare_samples(l->db, l->filter, "SELECT DISTINCT i.start_ns, i.end_ns, i.period_ns", "", &st);
        if (r < 0)
                return r;
        iv->start_ns = UINT64_MAX;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
                uint64_t start = (uint64_t) sqlite3_column_int64(st, 0), end = (uint64_t) sqlite3_column_int64(st, 1);
                iv->start_ns = MIN(iv->start_ns, start);
                iv->end_ns = MAX(iv->end_ns, end);
                if (end >= latest_end) {
                        latest_end = end;
                        iv->period_ns = (uint64_t) sqlite3_column_int64(st, 2);
                }
        }
        if (iv->start_ns == UINT64_MAX)
                iv->start_ns = 0;
        return r == SQLITE_DONE ? 0 : sql_error(l->db, "reading intervals");
}

_Static_assert(EP_FRAME_NATIVE == 1, "the frame query joins files for kind 1");

/* The frame query for a store of this schema: from version 4 a file's htlhash has a column
 * of its own (a file not root's has an ID of its own, common/file-id.h); before, the file ID
 * was the htlhash. */
static int prepare_frame_query(sqlite3 *db, sqlite3_stmt **ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        char sql[512];
        int r;

        r = prepare(db, "SELECT count(*) FROM pragma_table_info('files') WHERE name = 'htlhash'", &st);
        if (r < 0)
                return r;
        if (sqlite3_step(st) != SQLITE_ROW)
                return sql_error(db, "reading the store's schema");
        snprintf(sql, sizeof sql,
                 "SELECT f.kind, f.addr, f.elf_addr, fi.file_id, fi.path, fi.gnu_build_id, fi.go_build_id, %s"
                 " FROM frames f LEFT JOIN files fi ON fi.id = f.file AND f.kind = 1 WHERE f.id = ?1",
                 sqlite3_column_int(st, 0) > 0 ? "coalesce(fi.htlhash, fi.file_id)" : "fi.file_id");
        return prepare(db, sql, ret);
}

static int load(Loader *l) {
        int r;

        l->processes = ep_hashmap_new(sizeof(int64_t), sizeof(uint32_t));
        l->stacks = ep_hashmap_new(sizeof(int64_t), sizeof(uint32_t));
        l->frames = ep_hashmap_new(sizeof(int64_t), sizeof(uint32_t));
        if (!l->processes || !l->stacks || !l->frames)
                return -ENOMEM;
        if ((r = prepare(l->db, "SELECT pid, comm, exe, container_id FROM processes WHERE id = ?1",
                         &l->process_stmt)) < 0 ||
            (r = prepare(l->db, "SELECT frames FROM stacks WHERE id = ?1", &l->stack_stmt)) < 0 ||
            /* frames.file is a files.id for native frames only (a processes.id for unmapped) */
            (r = prepare_frame_query(l->db, &l->frame_stmt)) < 0 ||
            (r = prepare(l->db, "SELECT function, source_file, line FROM frame_lines WHERE frame = ?1 ORDER BY depth",
                         &l->lines_stmt)) < 0)
                return r;
        r = read_window(l);
        if (r < 0)
                return r;
        return read_samples(l);
}

int ep_export_model_load(sqlite3 *db, const EpStoreFilter *f, EpProgress *progress, EpExportModel **ret) {
        _cleanup_export_model_ EpExportModel *m = calloc(1, sizeof(EpExportModel));
        if (!m)
                return -ENOMEM;
        m->iv = exp_interval_new(0, 0, 0, 0);
        if (!m->iv)
                return -ENOMEM;

        Loader l = { .db = db, .filter = f, .m = m, .progress = progress };
        /* One read transaction: a consistent snapshot of the WAL that never blocks the
         * collector. */
        if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
                return sql_error(db, "starting a read transaction");
        int r = load(&l);
        (void) sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        sqlite3_finalize(l.process_stmt);
        sqlite3_finalize(l.stack_stmt);
        sqlite3_finalize(l.frame_stmt);
        sqlite3_finalize(l.lines_stmt);
        ep_hashmap_free(l.processes);
        ep_hashmap_free(l.stacks);
        ep_hashmap_free(l.frames);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(m);
        return 0;
}

EpExportModel *ep_export_model_free(EpExportModel *m) {
        if (!m)
                return NULL;
        exp_interval_free(m->iv);
        free(m->cpu_ns);
        free(m->sample_process);
        free(m);
        return NULL;
}
