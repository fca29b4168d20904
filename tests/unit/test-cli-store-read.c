/* SPDX-License-Identifier: MIT */
/* The store reader behind `top` and `flamegraph`: a store written by raw SQL with the schema of
 * docs/ARCHITECTURE.md, then self/total figures, filters, frame naming, and the SVG writer. */

#include <stdlib.h>
#include <sqlite3.h>
#include <time.h>
#include <unistd.h>

#include "calltree.h"
#include "daemon.h"
#include "flamegraph-svg.h"
#include "store-read.h"
#include "top.h"
#include "view-options.h"
#include "wire.h"

#include "test-cli-util.h"

static const char schema[] =
        "CREATE TABLE files(id INTEGER PRIMARY KEY, file_id BLOB NOT NULL UNIQUE, path TEXT,"
        "                   gnu_build_id BLOB, go_build_id TEXT);"
        "CREATE TABLE frames(id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, file INTEGER NOT NULL,"
        "                    addr INTEGER NOT NULL, elf_addr INTEGER, module TEXT, status INTEGER,"
        "                    UNIQUE(kind, file, addr));"
        "CREATE TABLE frame_lines(frame INTEGER NOT NULL, depth INTEGER NOT NULL,"
        "                         function TEXT, source_file TEXT, line INTEGER,"
        "                         PRIMARY KEY(frame, depth)) WITHOUT ROWID;"
        "CREATE TABLE stacks(id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, frames BLOB NOT NULL);"
        "CREATE TABLE processes(id INTEGER PRIMARY KEY, pid INTEGER NOT NULL, start_time_ns INTEGER,"
        "                       comm TEXT, exe TEXT, container_id TEXT, UNIQUE(pid, start_time_ns));"
        "CREATE TABLE intervals(id INTEGER PRIMARY KEY, start_ns INTEGER NOT NULL,"
        "                       end_ns INTEGER NOT NULL, period_ns INTEGER NOT NULL);"
        "CREATE INDEX intervals_by_start ON intervals(start_ns);"
        "CREATE TABLE samples(interval INTEGER NOT NULL, process INTEGER NOT NULL, tid INTEGER NOT NULL,"
        "                     thread_name TEXT, stack INTEGER NOT NULL, count INTEGER NOT NULL,"
        "                     PRIMARY KEY(interval, process, tid, stack)) WITHOUT ROWID;";

static void exec_sql(sqlite3 *db, const char *sql) {
        char *err = NULL;
        if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
                fprintf(stderr, "SQL failed: %s\n%s\n", err, sql);
                exit(EXIT_FAILURE);
        }
}

static void add_stack(sqlite3 *db, int id, const int64_t *frames, size_t n) {
        uint8_t blob[64];
        sqlite3_stmt *st;
        for (size_t i = 0; i < n; i++)
                for (unsigned b = 0; b < 8; b++)
                        blob[i * 8 + b] = (uint8_t) ((uint64_t) frames[i] >> (8 * b));
        CHECK(sqlite3_prepare_v2(db, "INSERT INTO stacks VALUES(?1, ?2, ?3)", -1, &st, NULL) == SQLITE_OK);
        sqlite3_bind_int(st, 1, id);
        sqlite3_bind_blob(st, 2, &id, sizeof(id), SQLITE_TRANSIENT);
        sqlite3_bind_blob(st, 3, blob, (int) (n * 8), SQLITE_TRANSIENT);
        CHECK(sqlite3_step(st) == SQLITE_DONE);
        sqlite3_finalize(st);
}

/* Frames (leaf first in stacks):
 *   1 native app+0x1000: compute_inner (inlined) in compute
 *   2 native app+0x2000: main          3 native libc.so.6+0x3000: __libc_start_main
 *   4 native libc.so.6+0x4444: not symbolized
 *   5 kernel: do_syscall_64            6 kernel 0xffffffff81001234: not symbolized
 *   7 native app+0x5000: helper
 * Stacks: S1 [1,2,3]  S2 [7,2,3]  S3 [6,5,4,2,3]  S4 [7,7,2,3] (recursion)
 * Intervals (t0 = an hour ago): I1 [t0, t0+10s)  I2 [t0+10s, t0+20s)  I3 [t0+3000s, t0+3010s)
 * Samples:  I1: app S1 10, app S2 5, worker S3 4   I2: app S1 6, worker S4 3
 *           I3: worker S1 2, app S3 1                                     total 31 */
static void create_store(const char *path, uint64_t t0) {
        sqlite3 *db;
        char sql[4096];

        CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) == SQLITE_OK);
        exec_sql(db, "PRAGMA journal_mode=WAL; PRAGMA user_version=1;");
        exec_sql(db, schema);
        snprintf(sql, sizeof(sql),
                 "INSERT INTO files VALUES(1, x'01', '/usr/bin/app', NULL, NULL);"
                 "INSERT INTO files VALUES(2, x'02', '/lib/x86_64-linux-gnu/libc.so.6', NULL, NULL);"
                 "INSERT INTO frames VALUES(1, %d, 1, 4096, 4096, NULL, 0);"
                 "INSERT INTO frames VALUES(2, %d, 1, 8192, 8192, NULL, 0);"
                 "INSERT INTO frames VALUES(3, %d, 2, 12288, 12288, NULL, 0);"
                 "INSERT INTO frames VALUES(4, %d, 2, 17476, NULL, NULL, 1);"
                 "INSERT INTO frames VALUES(5, %d, 0, -2130706432, -2130706432, '', 0);"
                 "INSERT INTO frames VALUES(6, %d, 0, -2130701772, NULL, '', 1);"
                 "INSERT INTO frames VALUES(7, %d, 1, 20480, 20480, NULL, 0);"
                 "INSERT INTO frame_lines VALUES(1, 0, 'compute_inner', 'app.c', 10);"
                 "INSERT INTO frame_lines VALUES(1, 1, 'compute', 'app.c', 20);"
                 "INSERT INTO frame_lines VALUES(2, 0, 'main', 'app.c', 30);"
                 "INSERT INTO frame_lines VALUES(3, 0, '__libc_start_main', NULL, NULL);"
                 "INSERT INTO frame_lines VALUES(5, 0, 'do_syscall_64', NULL, NULL);"
                 "INSERT INTO frame_lines VALUES(7, 0, 'helper', 'app.c', 40);"
                 "INSERT INTO processes VALUES(1, 100, 1, 'app', '/usr/bin/app', '');"
                 "INSERT INTO processes VALUES(2, 200, 2, 'worker', '/usr/bin/app', '');",
                 EP_FRAME_NATIVE, EP_FRAME_NATIVE, EP_FRAME_NATIVE, EP_FRAME_NATIVE, EP_FRAME_KERNEL,
                 EP_FRAME_KERNEL, EP_FRAME_NATIVE);
        exec_sql(db, sql);

        /* Kernel addresses above are 0xffffffff81000000 and 0xffffffff81001234 as signed. */
        add_stack(db, 1, (const int64_t[]) { 1, 2, 3 }, 3);
        add_stack(db, 2, (const int64_t[]) { 7, 2, 3 }, 3);
        add_stack(db, 3, (const int64_t[]) { 6, 5, 4, 2, 3 }, 5);
        add_stack(db, 4, (const int64_t[]) { 7, 7, 2, 3 }, 4);

        const uint64_t s = NSEC_PER_SEC;
        snprintf(sql, sizeof(sql),
                 "INSERT INTO intervals VALUES(1, %" PRIu64 ", %" PRIu64 ", 50000000);"
                 "INSERT INTO intervals VALUES(2, %" PRIu64 ", %" PRIu64 ", 50000000);"
                 "INSERT INTO intervals VALUES(3, %" PRIu64 ", %" PRIu64 ", 50000000);"
                 "INSERT INTO samples VALUES(1, 1, 100, 'app', 1, 10);"
                 "INSERT INTO samples VALUES(1, 1, 101, 'app-t', 2, 5);"
                 "INSERT INTO samples VALUES(1, 2, 200, 'worker', 3, 4);"
                 "INSERT INTO samples VALUES(2, 1, 100, 'app', 1, 6);"
                 "INSERT INTO samples VALUES(2, 2, 200, 'worker', 4, 3);"
                 "INSERT INTO samples VALUES(3, 2, 200, 'worker', 1, 2);"
                 "INSERT INTO samples VALUES(3, 1, 100, 'app', 3, 1);",
                 t0, t0 + 10 * s, t0 + 10 * s, t0 + 20 * s, t0 + 3000 * s, t0 + 3010 * s);
        exec_sql(db, sql);
        sqlite3_close(db);
}

static const EpFunctionStat *find_function(const EpCallTree *t, const EpFunctionStat *stats, size_t n,
                                           const char *name) {
        for (size_t i = 0; i < n; i++)
                if (streq(ep_calltree_string(t, stats[i].frame.name), name))
                        return &stats[i];
        return NULL;
}

typedef struct Result {
        EpCallTree *tree;
        EpStoreSummary summary;
        EpFunctionStat *stats;
        size_t n;
} Result;

static void result_done(Result *r) {
        ep_calltree_free(r->tree);
        free(r->stats);
}

static int read_flags(const char *path, const EpStoreFilter *f, EpStoreReadFlags flags, Result *ret) {
        _cleanup_sqlite_ sqlite3 *db = NULL;
        int r = ep_store_open(path, &db);
        if (r < 0)
                return r;
        *ret = (Result) {};
        CHECK_INT(ep_calltree_new(&ret->tree), 0);
        r = ep_store_read(db, f, flags, ret->tree, &ret->summary);
        if (r < 0)
                return r;
        return ep_calltree_functions(ret->tree, &ret->stats, &ret->n);
}

static int read_with(const char *path, const EpStoreFilter *f, Result *ret) {
        return read_flags(path, f, EP_STORE_READ_BY_PROCESS, ret);
}

#define CHECK_FN(res, name, self_, total_)                                                   \
        do {                                                                                 \
                const EpFunctionStat *_f_ = find_function((res).tree, (res).stats, (res).n, (name)); \
                CHECK(_f_ != NULL);                                                          \
                if (_f_) {                                                                   \
                        CHECK_U64(_f_->self, self_);                                         \
                        CHECK_U64(_f_->total, total_);                                       \
                }                                                                            \
        } while (0)

static void test_unfiltered(const char *path) {
        EpStoreFilter f = EP_STORE_FILTER_INIT;
        Result res;

        CHECK_INT(read_with(path, &f, &res), 0);
        CHECK_U64(res.summary.samples, 31);
        CHECK_U64(res.summary.intervals, 3);
        CHECK_U64(res.summary.processes, 2);
        CHECK_U64(res.summary.stacks, 4);
        CHECK_U64(ep_calltree_node(res.tree, 0)->total, 31);

        CHECK_FN(res, "compute_inner", 18, 18);
        CHECK_FN(res, "compute", 0, 18);            /* the inlined line is a frame of its own */
        CHECK_FN(res, "main", 0, 31);
        CHECK_FN(res, "__libc_start_main", 0, 31);
        CHECK_FN(res, "helper", 8, 8);               /* S4 recurses: counted once per stack */
        CHECK_FN(res, "[k] 0xffffffff81001234", 5, 5);
        CHECK_FN(res, "do_syscall_64 [k]", 0, 5);
        CHECK_FN(res, "[unknown] libc.so.6", 0, 5);
        CHECK_INT(res.n, 8);

        /* Sorted by self: compute_inner first, then helper, then the kernel leaf. */
        CHECK_STR(ep_calltree_string(res.tree, res.stats[0].frame.name), "compute_inner");
        CHECK_STR(ep_calltree_string(res.tree, res.stats[1].frame.name), "helper");
        CHECK_STR(ep_calltree_string(res.tree, res.stats[0].frame.module), "app");

        const EpFunctionStat *k = find_function(res.tree, res.stats, res.n, "do_syscall_64 [k]");
        if (k) {
                CHECK_STR(ep_calltree_string(res.tree, k->frame.module), "vmlinux");
                CHECK_INT(k->frame.kind, EP_VIEW_KERNEL);
        }
        const EpFunctionStat *u = find_function(res.tree, res.stats, res.n, "[unknown] libc.so.6");
        if (u) {
                CHECK_STR(ep_calltree_string(res.tree, u->frame.module), "libc.so.6");
                CHECK_INT(u->frame.kind, EP_VIEW_UNKNOWN);
        }

        /* The tree: root → app (100), worker (200) → __libc_start_main → main → ... */
        uint32_t *children;
        size_t n;
        CHECK_INT(ep_calltree_children_sorted(res.tree, 0, &children, &n), 0);
        CHECK_INT(n, 2);
        if (n == 2) {
                const EpCallNode *app = ep_calltree_node(res.tree, children[0]);
                const EpCallNode *worker = ep_calltree_node(res.tree, children[1]);
                CHECK_STR(ep_calltree_string(res.tree, app->frame.name), "app (100)");
                CHECK_STR(ep_calltree_string(res.tree, worker->frame.name), "worker (200)");
                CHECK_U64(app->total, 22);
                CHECK_U64(worker->total, 9);
                CHECK_INT(app->frame.kind, EP_VIEW_PROCESS);
        }
        free(children);
        /* Deepest: root, process, start, main, unknown, do_syscall_64, [k] = depth 6. */
        CHECK_INT(ep_calltree_max_depth(res.tree), 6);

        /* Merged across processes (what top reads): the same figures, a smaller tree. */
        Result merged;
        CHECK_INT(read_flags(path, &f, 0, &merged), 0);
        CHECK_INT(merged.n, res.n);
        for (size_t i = 0; i < merged.n && i < res.n; i++) {
                CHECK_STR(ep_calltree_string(merged.tree, merged.stats[i].frame.name),
                          ep_calltree_string(res.tree, res.stats[i].frame.name));
                CHECK_U64(merged.stats[i].self, res.stats[i].self);
                CHECK_U64(merged.stats[i].total, res.stats[i].total);
        }
        CHECK(ep_calltree_size(merged.tree) < ep_calltree_size(res.tree));
        CHECK_U64(ep_calltree_node(merged.tree, 0)->total, 31);
        result_done(&merged);

        /* With source positions: a function with a line becomes "name (file:line)", one
         * without (libc, kernel) keeps its name; the figures stay the same. */
        Result located;
        CHECK_INT(read_flags(path, &f, EP_STORE_READ_LINES, &located), 0);
        CHECK_INT(located.n, res.n);
        CHECK_FN(located, "compute_inner (app.c:10)", 18, 18);
        CHECK_FN(located, "compute (app.c:20)", 0, 18);
        CHECK_FN(located, "main (app.c:30)", 0, 31);
        CHECK_FN(located, "__libc_start_main", 0, 31);
        CHECK_FN(located, "do_syscall_64 [k]", 0, 5);
        result_done(&located);

        /* top's text */
        char *text = NULL;
        size_t size = 0;
        FILE *out = open_memstream(&text, &size);
        CHECK_INT(ep_top_print(out, res.tree, &res.summary, 3), 0);
        fclose(out);
        CHECK(startswith(text, "31 samples, 2 processes, "));
        CHECK(strstr(text, " 58.1%   58.1%        18        18  app      compute_inner\n") != NULL);
        CHECK(strstr(text, "(5 more functions; --limit 0 shows all)") != NULL);
        fputs(text, stderr);
        free(text);

        result_done(&res);
}

static void test_filters(const char *path, uint64_t t0) {
        EpStoreFilter f;
        Result res;

        f = EP_STORE_FILTER_INIT;
        f.pid = 100;
        CHECK_INT(read_with(path, &f, &res), 0);
        CHECK_U64(res.summary.samples, 22);
        CHECK_U64(res.summary.processes, 1);
        CHECK_FN(res, "compute_inner", 16, 16);
        CHECK_FN(res, "helper", 5, 5);
        result_done(&res);

        f = EP_STORE_FILTER_INIT;
        f.comm = "worker";
        CHECK_INT(read_with(path, &f, &res), 0);
        CHECK_U64(res.summary.samples, 9);
        CHECK_FN(res, "helper", 3, 3);
        CHECK_FN(res, "[k] 0xffffffff81001234", 4, 4);
        result_done(&res);

        /* Unix seconds: an interval counts when it overlaps [since, until). */
        uint64_t when;
        char arg[32];
        snprintf(arg, sizeof(arg), "%" PRIu64, (uint64_t) (t0 / NSEC_PER_SEC + 10));
        CHECK_INT(ep_parse_when(arg, ep_now_ns(CLOCK_REALTIME), &when), 0);
        CHECK_U64(when, t0 + 10 * NSEC_PER_SEC);

        f = EP_STORE_FILTER_INIT;
        f.since_ns = when;
        CHECK_INT(read_with(path, &f, &res), 0);
        CHECK_U64(res.summary.samples, 12);
        CHECK_U64(res.summary.intervals, 2);
        CHECK_U64(res.summary.first_ns, t0 + 10 * NSEC_PER_SEC);
        CHECK_U64(res.summary.last_ns, t0 + 3010 * NSEC_PER_SEC);
        result_done(&res);

        f = EP_STORE_FILTER_INIT;
        f.until_ns = when;
        CHECK_INT(read_with(path, &f, &res), 0);
        CHECK_U64(res.summary.samples, 19);
        CHECK_U64(res.summary.intervals, 1);
        result_done(&res);

        /* "30m" ago: only I3 (ten minutes ago). */
        CHECK_INT(ep_parse_when("30m", ep_now_ns(CLOCK_REALTIME), &when), 0);
        f = EP_STORE_FILTER_INIT;
        f.since_ns = when;
        CHECK_INT(read_with(path, &f, &res), 0);
        CHECK_U64(res.summary.samples, 3);
        CHECK_FN(res, "compute_inner", 2, 2);
        result_done(&res);

        /* Filters combine. */
        f = EP_STORE_FILTER_INIT;
        f.since_ns = when;
        f.pid = 100;
        CHECK_INT(read_with(path, &f, &res), 0);
        CHECK_U64(res.summary.samples, 1);
        result_done(&res);

        /* Nothing matches: not an error. */
        f = EP_STORE_FILTER_INIT;
        f.pid = 999;
        CHECK_INT(read_with(path, &f, &res), 0);
        CHECK_U64(res.summary.samples, 0);
        CHECK_INT(res.n, 0);
        result_done(&res);

        /* Without kernel frames the unsymbolized libc frame becomes the leaf of S3. */
        f = EP_STORE_FILTER_INIT;
        f.kernel = false;
        CHECK_INT(read_with(path, &f, &res), 0);
        CHECK_U64(res.summary.samples, 31);
        CHECK_FN(res, "[unknown] libc.so.6", 5, 5);
        CHECK(find_function(res.tree, res.stats, res.n, "do_syscall_64 [k]") == NULL);
        result_done(&res);
}

static void test_when(void) {
        uint64_t now = 1700000000ULL * NSEC_PER_SEC, w;

        CHECK_INT(ep_parse_when("10m", now, &w), 0);
        CHECK_U64(w, now - 600 * NSEC_PER_SEC);
        CHECK_INT(ep_parse_when("1h", now, &w), 0);
        CHECK_U64(w, now - 3600 * NSEC_PER_SEC);
        CHECK_INT(ep_parse_when("1690000000", now, &w), 0);
        CHECK_U64(w, 1690000000ULL * NSEC_PER_SEC);
        CHECK_INT(ep_parse_when("now", now, &w), 0);
        CHECK_U64(w, now);
        CHECK_INT(ep_parse_when("2023-11-14 22:13:20", now, &w), 0);
        CHECK(w > 0);
        CHECK(ep_parse_when("yesterday", now, &w) < 0);
        CHECK(ep_parse_when("", now, &w) < 0);
        CHECK(ep_parse_when("10 parsecs", now, &w) < 0);
}

static void test_open_errors(const char *dir) {
        sqlite3 *db = NULL;
        char path[512];

        snprintf(path, sizeof(path), "%s/missing.db", dir);
        CHECK_INT(ep_store_open(path, &db), -ENOENT);

        snprintf(path, sizeof(path), "%s/garbage.db", dir);
        FILE *f = fopen(path, "w");
        fputs("this is not an SQLite database, not even close; it is long enough to have a header\n", f);
        fclose(f);
        CHECK_INT(ep_store_open(path, &db), -EPROTO);

        /* A database with another schema version. */
        snprintf(path, sizeof(path), "%s/v7.db", dir);
        CHECK(sqlite3_open(path, &db) == SQLITE_OK);
        exec_sql(db, "PRAGMA user_version=7; CREATE TABLE x(y);");
        sqlite3_close(db);
        db = NULL;
        CHECK_INT(ep_store_open(path, &db), -EPROTO);
}

/* Light XML check: every tag closes in order, no stray '<' or '&' in text. */
static bool xml_well_formed(const char *s) {
        const char *stack[64];
        size_t depth = 0;

        if (!startswith(s, "<?xml "))
                return false;
        s = strstr(s, "?>");
        if (!s)
                return false;
        s += 2;
        while (*s) {
                if (*s == '&') {
                        if (!startswith(s, "&lt;") && !startswith(s, "&gt;") && !startswith(s, "&amp;") &&
                            !startswith(s, "&quot;") && !startswith(s, "&apos;"))
                                return false;
                        s++;
                        continue;
                }
                if (*s != '<') {
                        s++;
                        continue;
                }
                const char *end = strchr(s, '>');
                if (!end)
                        return false;
                for (const char *p = s + 1; p < end; p++)
                        if (*p == '<')
                                return false;
                if (s[1] == '/') {
                        if (depth == 0)
                                return false;
                        const char *name = stack[--depth];
                        size_t len = strcspn(name, " />");
                        if (strncmp(s + 2, name, len) != 0 || s[2 + len] != '>')
                                return false;
                } else if (end[-1] != '/') {
                        if (depth == ELEMENTSOF(stack))
                                return false;
                        stack[depth++] = s + 1;
                }
                s = end + 1;
        }
        return depth == 0;
}

static size_t count(const char *s, const char *needle) {
        size_t n = 0;
        for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
                n++;
        return n;
}

static void test_svg(const char *path) {
        EpStoreFilter f = EP_STORE_FILTER_INIT;
        Result res;
        CHECK_INT(read_with(path, &f, &res), 0);

        char *svg = NULL;
        size_t size = 0;
        FILE *out = open_memstream(&svg, &size);
        EpFlameOptions o = { .title = "Test <graph> & co", .subtitle = "31 samples" };
        int drawn = ep_flamegraph_write_svg(out, res.tree, &o);
        fclose(out);

        /* Every node is wide enough to be drawn at 1200 px. */
        CHECK_INT(drawn, (int) ep_calltree_size(res.tree));
        CHECK(xml_well_formed(svg));
        CHECK(startswith(svg, "<?xml version=\"1.0\""));
        CHECK(strstr(svg, "</svg>\n") != NULL);
        /* background + 4 legend swatches + one per frame */
        CHECK_INT(count(svg, "<rect"), 5 + drawn);
        CHECK_INT(count(svg, "<title>"), drawn);
        /* Per call path: compute_inner under app (100); 2 more samples are under worker. */
        CHECK(strstr(svg, "<title>compute_inner in app (16 samples, 51.61%)</title>") != NULL);
        CHECK(strstr(svg, "<title>all (31 samples, 100.00%)</title>") != NULL);
        CHECK(strstr(svg, "<title>worker (200) (9 samples, 29.03%)</title>") != NULL);
        CHECK(strstr(svg, "<title>do_syscall_64 [k] in vmlinux (4 samples, 12.90%)</title>") != NULL);
        CHECK(strstr(svg, "Test &lt;graph&gt; &amp; co") != NULL);
        /* The root spans the whole width between the paddings. */
        CHECK(strstr(svg, "x=\"10.00\" y=\"") != NULL && strstr(svg, "width=\"1180.00\"") != NULL);
        free(svg);
        result_done(&res);

        /* Text escaping and cutting. */
        char *text = NULL;
        out = open_memstream(&text, &size);
        ep_svg_write_text(out, "operator<<(std::ostream&)", -1);
        fputc('|', out);
        ep_svg_write_text(out, "abcdefghij", 6);
        fputc('|', out);
        ep_svg_write_text(out, "h\xc3\xa9llo\xff\x01", -1);
        fputc('|', out);
        ep_svg_write_text(out, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 4);
        fclose(out);
        CHECK_STR(text, "operator&lt;&lt;(std::ostream&amp;)|abc...|h\xc3\xa9llo??|\xc3\xa9...");
        free(text);
}

int main(void) {
        char dir[] = "/tmp/test-cli-store-read.XXXXXX";
        char path[512];

        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return EXIT_FAILURE;
        }
        snprintf(path, sizeof(path), "%s/profiles.db", dir);

        uint64_t t0 = (ep_now_ns(CLOCK_REALTIME) / NSEC_PER_SEC - 3600) * NSEC_PER_SEC;
        create_store(path, t0);

        test_unfiltered(path);
        test_filters(path, t0);
        test_when();
        test_open_errors(dir);
        test_svg(path);

        return test_finish(dir);
}
