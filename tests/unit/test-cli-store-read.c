/* SPDX-License-Identifier: MIT */
/* The store reader behind `top` and `flamegraph`: a store written by raw SQL with the schema of
 * docs/ARCHITECTURE.md, then self/total figures, filters, frame naming, and the SVG writer. */

#include <stdlib.h>
#include <sqlite3.h>
#include <time.h>
#include <unistd.h>

#include "calltree.h"
#include "daemon.h"
#include "flamegraph-html.h"
#include "flamegraph-svg.h"
#include "store-read.h"
#include "top.h"
#include "view-options.h"
#include "wire.h"

#include "test-cli-store.h"
#include "test-cli-util.h"

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
        ep_top_print_summary(out, &res.summary);
        CHECK_INT(ep_top_print_functions(out, res.tree, EP_FUNCTIONS_BY_SELF, 3), 0);
        fclose(out);
        CHECK(startswith(text, "31 samples, 2 processes, "));
        CHECK(strstr(text, "\n\n SELF%  TOTAL%      SELF     TOTAL  MODULE   FUNCTION\n") != NULL);
        CHECK(strstr(text, " 58.1%   58.1%        18        18  app      compute_inner\n") != NULL);
        CHECK(strstr(text, "(5 more functions; --limit 0 shows all)") != NULL);
        fputs(text, stderr);
        free(text);

        /* --sort total: the whole-stack functions first; ties by self, then by name. */
        ep_calltree_sort_functions(res.tree, res.stats, res.n, EP_FUNCTIONS_BY_TOTAL);
        static const char *const by_total[] = { "__libc_start_main", "main", "compute_inner", "compute", "helper" };
        for (size_t i = 0; i < ELEMENTSOF(by_total) && i < res.n; i++)
                CHECK_STR(ep_calltree_string(res.tree, res.stats[i].frame.name), by_total[i]);
        text = NULL;
        out = open_memstream(&text, &size);
        CHECK_INT(ep_top_print_functions(out, res.tree, EP_FUNCTIONS_BY_TOTAL, 2), 0);
        fclose(out);
        CHECK(strstr(text, "  0.0%  100.0%         0        31  libc.so.6  __libc_start_main\n") != NULL);
        CHECK(strstr(text, "  0.0%  100.0%         0        31  app        main\n") != NULL);
        CHECK(strstr(text, "compute_inner") == NULL);
        free(text);

        result_done(&res);
}

static void test_filters(const char *path, uint64_t t0) {
        EpStoreFilter f;
        Result res;

        f = EP_STORE_FILTER_INIT;
        CHECK_INT(ep_store_filter_add_pid(&f, 100), 0);
        CHECK_INT(read_with(path, &f, &res), 0);
        CHECK_U64(res.summary.samples, 22);
        CHECK_U64(res.summary.processes, 1);
        CHECK_FN(res, "compute_inner", 16, 16);
        CHECK_FN(res, "helper", 5, 5);
        result_done(&res);

        f = EP_STORE_FILTER_INIT;
        CHECK_INT(ep_store_filter_add_comm(&f, "worker"), 0);
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
        CHECK_INT(ep_store_filter_add_pid(&f, 100), 0);
        CHECK_INT(read_with(path, &f, &res), 0);
        CHECK_U64(res.summary.samples, 1);
        result_done(&res);

        /* Nothing matches: not an error. */
        f = EP_STORE_FILTER_INIT;
        CHECK_INT(ep_store_filter_add_pid(&f, 999), 0);
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

/* Reads the extended store with f and returns the number of samples, or a negative errno. The
 * summary and the tree must agree: the figures come from two queries. */
static int64_t count_samples(const char *path, const EpStoreFilter *f) {
        Result res;
        int r = read_with(path, f, &res);
        if (r < 0) {
                result_done(&res);
                return r;
        }
        CHECK_U64(ep_calltree_node(res.tree, 0)->total, res.summary.samples);
        int64_t n = (int64_t) res.summary.samples;
        result_done(&res);
        return n;
}

static EpStoreFilter filter_pids(size_t n, const int64_t *pids) {
        EpStoreFilter f = EP_STORE_FILTER_INIT;
        for (size_t i = 0; i < n; i++)
                CHECK_INT(ep_store_filter_add_pid(&f, pids[i]), 0);
        return f;
}

/* Per process in the extended store: pid 100 (C1) 23 = tid 100 "app" 17 + tid 101 6 (5 "app-t",
 * then 1 "renamed"); pid 200 (no container) 9, tid 200 "worker"; pid 300 (C2) 9 = tid 300 "app"
 * 7 + tid 301 "io" 2; the second pid 100 (C3) 4, tid 100 "app". */
static void test_filter_fixture(const char *path, uint64_t t0) {
        EpStoreFilter f;

        f = EP_STORE_FILTER_INIT;
        CHECK_INT(count_samples(path, &f), 45);

        /* --pid, several times: OR. A reused pid selects both processes. */
        f = filter_pids(1, (const int64_t[]) { 100 });
        CHECK_INT(count_samples(path, &f), 27);
        f = filter_pids(2, (const int64_t[]) { 100, 200 });
        CHECK_INT(count_samples(path, &f), 36);
        f = filter_pids(1, (const int64_t[]) { 300 });
        CHECK_INT(count_samples(path, &f), 9);
        f = filter_pids(3, (const int64_t[]) { 100, 200, 300 });
        CHECK_INT(count_samples(path, &f), 45);

        /* --comm, several times: OR; two processes share "app". */
        f = EP_STORE_FILTER_INIT;
        CHECK_INT(ep_store_filter_add_comm(&f, "app"), 0);
        CHECK_INT(count_samples(path, &f), 36);
        CHECK_INT(ep_store_filter_add_comm(&f, "worker"), 0);
        CHECK_INT(count_samples(path, &f), 45);
        f = EP_STORE_FILTER_INIT;
        CHECK_INT(ep_store_filter_add_comm(&f, "ap"), 0); /* exactly, not a prefix */
        CHECK_INT(count_samples(path, &f), 0);

        /* Across options: AND. */
        f = filter_pids(1, (const int64_t[]) { 200 });
        CHECK_INT(ep_store_filter_add_comm(&f, "app"), 0);
        CHECK_INT(count_samples(path, &f), 0);
        f = filter_pids(2, (const int64_t[]) { 100, 200 });
        CHECK_INT(ep_store_filter_add_comm(&f, "worker"), 0);
        CHECK_INT(count_samples(path, &f), 9);
        f = filter_pids(2, (const int64_t[]) { 100, 300 });
        CHECK_INT(ep_store_filter_add_comm(&f, "app"), 0);
        CHECK_INT(ep_store_filter_add_comm(&f, "worker"), 0);
        CHECK_INT(count_samples(path, &f), 36);

        /* --container: a full ID, a unique prefix, an ambiguous one, one that matches nothing. */
        f = EP_STORE_FILTER_INIT;
        f.container = C1;
        CHECK_INT(count_samples(path, &f), 23);
        f.container = "abcd1";
        CHECK_INT(count_samples(path, &f), 23);
        f.container = "abcd2222";
        CHECK_INT(count_samples(path, &f), 9);
        f.container = "ef01";
        CHECK_INT(count_samples(path, &f), 4);
        f.container = "abcd";
        CHECK_INT(count_samples(path, &f), -ENOTUNIQ);
        f.container = "abc";
        CHECK_INT(count_samples(path, &f), -EINVAL);
        f.container = "ffff";
        CHECK_INT(count_samples(path, &f), 0);
        f.container = "abc%"; /* no wildcards */
        CHECK_INT(count_samples(path, &f), 0);
        f.container = "ABCD1"; /* IDs are lower case; no folding */
        CHECK_INT(count_samples(path, &f), 0);
        f = filter_pids(1, (const int64_t[]) { 100 });
        f.container = "abcd1";
        CHECK_INT(count_samples(path, &f), 23);
        f.container = "ef01";
        CHECK_INT(count_samples(path, &f), 4);
        f = filter_pids(1, (const int64_t[]) { 300 });
        f.container = "abcd1";
        CHECK_INT(count_samples(path, &f), 0);

        char **ids = NULL;
        size_t n = 0;
        sqlite3 *db = NULL;
        CHECK_INT(ep_store_open(path, &db), 0);
        CHECK_INT(ep_store_find_containers(db, "abcd", &ids, &n), 0);
        CHECK_INT(n, 2);
        if (n == 2) {
                CHECK_STR(ids[0], C1);
                CHECK_STR(ids[1], C2);
                CHECK(ids[2] == NULL);
        }
        ep_strv_free(ids);
        CHECK_INT(ep_store_find_containers(db, "0000", &ids, &n), 0);
        CHECK_INT(n, 0);
        CHECK(ids && !ids[0]);
        ep_strv_free(ids);
        sqlite3_close(db);

        /* --thread: a TID (in every process that has it), or a name, exactly. */
        f = EP_STORE_FILTER_INIT;
        f.tid = 100;
        CHECK_INT(count_samples(path, &f), 21);
        f.tid = 101;
        CHECK_INT(count_samples(path, &f), 6);
        f.tid = 999;
        CHECK_INT(count_samples(path, &f), 0);
        f = EP_STORE_FILTER_INIT;
        f.thread_name = "app";
        CHECK_INT(count_samples(path, &f), 28);
        f.thread_name = "io";
        CHECK_INT(count_samples(path, &f), 2);
        f.thread_name = "app-t";
        CHECK_INT(count_samples(path, &f), 5);
        f.thread_name = "renamed";
        CHECK_INT(count_samples(path, &f), 1);
        f.thread_name = "worker";
        CHECK_INT(count_samples(path, &f), 9);

        /* Everything together. */
        f = filter_pids(1, (const int64_t[]) { 100 });
        f.tid = 100;
        f.container = "abcd1";
        CHECK_INT(count_samples(path, &f), 17);
        f = EP_STORE_FILTER_INIT;
        f.since_ns = t0 + 10 * NSEC_PER_SEC; /* I2 and I3 */
        f.thread_name = "app";
        CHECK_INT(count_samples(path, &f), 11);
        CHECK_INT(ep_store_filter_add_comm(&f, "app"), 0);
        f.container = "ef01";
        CHECK_INT(count_samples(path, &f), 4);
        f.until_ns = t0 + 20 * NSEC_PER_SEC; /* I2 only */
        CHECK_INT(count_samples(path, &f), 0);

        /* The functions follow the filter: pid 300 ran S1 7 times and S2 twice. */
        Result res;
        f = filter_pids(1, (const int64_t[]) { 300 });
        CHECK_INT(read_with(path, &f, &res), 0);
        CHECK_FN(res, "compute_inner", 7, 7);
        CHECK_FN(res, "helper", 2, 2);
        CHECK_INT(res.n, 5);
        result_done(&res);

        /* A list is bounded. */
        f = EP_STORE_FILTER_INIT;
        for (int i = 0; i < EP_STORE_FILTER_MAX_VALUES; i++)
                CHECK_INT(ep_store_filter_add_pid(&f, i + 1), 0);
        CHECK_INT(ep_store_filter_add_pid(&f, 1000), -E2BIG);
        CHECK_INT(f.n_pids, EP_STORE_FILTER_MAX_VALUES);
}

static void check_group(const EpStoreGroup *g, int64_t pid, int64_t tid, const char *comm, const char *container,
                        const char *thread, uint64_t samples) {
        CHECK_INT(g->pid, pid);
        CHECK_INT(g->tid, tid);
        CHECK_STR(g->comm, comm);
        CHECK_STR(g->container_id, container);
        CHECK_STR(g->thread_name, thread);
        CHECK_U64(g->samples, samples);
}

static int read_groups(const char *path, const EpStoreFilter *f, EpStoreGroupBy by, EpStoreGroup **ret,
                       size_t *ret_n, EpStoreSummary *ret_summary) {
        _cleanup_sqlite_ sqlite3 *db = NULL;
        int r = ep_store_open(path, &db);
        if (r < 0)
                return r;
        return ep_store_read_groups(db, f, by, ret, ret_n, ret_summary);
}

static void test_groups(const char *path) {
        EpStoreFilter f = EP_STORE_FILTER_INIT;
        EpStoreSummary summary;
        EpStoreGroup *g = NULL;
        size_t n = 0;

        /* --by process: the reused pid is two processes; ties by pid. */
        CHECK_INT(read_groups(path, &f, EP_STORE_GROUP_PROCESS, &g, &n, &summary), 0);
        CHECK_U64(summary.samples, 45);
        CHECK_U64(summary.processes, 4);
        CHECK_INT(n, 4);
        if (n == 4) {
                check_group(&g[0], 100, -1, "app", C1, "", 23);
                check_group(&g[1], 200, -1, "worker", "", "", 9);
                check_group(&g[2], 300, -1, "app", C2, "", 9);
                check_group(&g[3], 100, -1, "app", C3, "", 4);
        }

        char *text = NULL;
        size_t size = 0;
        FILE *out = open_memstream(&text, &size);
        ep_top_print_groups(out, EP_STORE_GROUP_PROCESS, g, n, summary.samples, 3);
        fclose(out);
        fputs(text, stderr);
        CHECK(startswith(text, "\nSHARE%   SAMPLES      PID  COMM    CONTAINER\n"));
        CHECK(strstr(text, "\n 51.1%        23      100  app     abcd11110000\n") != NULL);
        CHECK(strstr(text, "\n 20.0%         9      200  worker  -\n") != NULL);
        CHECK(strstr(text, "\n 20.0%         9      300  app     abcd22220000\n") != NULL);
        CHECK(strstr(text, "\n(1 more process; --limit 0 shows all)\n") != NULL);
        free(text);
        ep_store_groups_free(g, n);

        /* --by thread: a renamed thread shows its latest name. */
        CHECK_INT(read_groups(path, &f, EP_STORE_GROUP_THREAD, &g, &n, &summary), 0);
        CHECK_U64(summary.samples, 45);
        CHECK_INT(n, 6);
        if (n == 6) {
                check_group(&g[0], 100, 100, "app", C1, "app", 17);
                check_group(&g[1], 200, 200, "worker", "", "worker", 9);
                check_group(&g[2], 300, 300, "app", C2, "app", 7);
                check_group(&g[3], 100, 101, "app", C1, "renamed", 6);
                check_group(&g[4], 100, 100, "app", C3, "app", 4);
                check_group(&g[5], 300, 301, "app", C2, "io", 2);
        }
        uint64_t sum = 0;
        for (size_t i = 0; i < n; i++)
                sum += g[i].samples;
        CHECK_U64(sum, 45);

        text = NULL;
        out = open_memstream(&text, &size);
        ep_top_print_groups(out, EP_STORE_GROUP_THREAD, g, n, summary.samples, 0);
        fclose(out);
        fputs(text, stderr);
        CHECK(startswith(text, "\nSHARE%   SAMPLES      PID      TID  COMM    THREAD\n"));
        CHECK(strstr(text, "\n 13.3%         6      100      101  app     renamed\n") != NULL);
        CHECK(strstr(text, "more") == NULL);
        free(text);
        ep_store_groups_free(g, n);

        /* Groups follow the filters. */
        f = EP_STORE_FILTER_INIT;
        CHECK_INT(ep_store_filter_add_comm(&f, "app"), 0);
        CHECK_INT(read_groups(path, &f, EP_STORE_GROUP_PROCESS, &g, &n, &summary), 0);
        CHECK_U64(summary.samples, 36);
        CHECK_INT(n, 3);
        if (n == 3) {
                CHECK_U64(g[0].samples, 23);
                CHECK_U64(g[1].samples, 9);
                CHECK_INT(g[1].pid, 300);
                CHECK_U64(g[2].samples, 4);
        }
        ep_store_groups_free(g, n);

        f = EP_STORE_FILTER_INIT;
        f.container = "abcd1";
        CHECK_INT(read_groups(path, &f, EP_STORE_GROUP_THREAD, &g, &n, &summary), 0);
        CHECK_U64(summary.samples, 23);
        CHECK_INT(n, 2);
        if (n == 2) {
                check_group(&g[0], 100, 100, "app", C1, "app", 17);
                check_group(&g[1], 100, 101, "app", C1, "renamed", 6);
        }
        ep_store_groups_free(g, n);

        f.container = "abcd";
        g = NULL;
        n = 0;
        CHECK_INT(read_groups(path, &f, EP_STORE_GROUP_PROCESS, &g, &n, &summary), -ENOTUNIQ);
        CHECK(g == NULL);

        f = EP_STORE_FILTER_INIT;
        f.tid = 12345;
        CHECK_INT(read_groups(path, &f, EP_STORE_GROUP_THREAD, &g, &n, &summary), 0);
        CHECK_U64(summary.samples, 0);
        CHECK_INT(n, 0);
        ep_store_groups_free(g, n);
}

/* The command-line side of the filters: repeated options, --thread's two forms, the checks. */
static void test_view_options(void) {
        EpViewOptions o = EP_VIEW_OPTIONS_INIT;

        CHECK_INT(ep_view_option(&o, "test", EP_VIEW_ARG_PID, "100"), 1);
        CHECK_INT(ep_view_option(&o, "test", EP_VIEW_ARG_PID, "300"), 1);
        CHECK_INT(ep_view_option(&o, "test", EP_VIEW_ARG_COMM, "app"), 1);
        CHECK_INT(ep_view_option(&o, "test", EP_VIEW_ARG_COMM, "worker"), 1);
        CHECK_INT(ep_view_option(&o, "test", EP_VIEW_ARG_CONTAINER, "abcd1"), 1);
        CHECK_INT(ep_view_option(&o, "test", EP_VIEW_ARG_THREAD, "101"), 1);
        CHECK_INT(o.filter.n_pids, 2);
        CHECK_INT(o.filter.pids[1], 300);
        CHECK_INT(o.filter.n_comms, 2);
        CHECK_STR(o.filter.comms[1], "worker");
        CHECK_STR(o.filter.container, "abcd1");
        CHECK_INT(o.filter.tid, 101);
        CHECK(o.filter.thread_name == NULL);
        CHECK(!ep_store_filter_selects_all(&o.filter));

        char *text = NULL;
        size_t size = 0;
        FILE *out = open_memstream(&text, &size);
        ep_view_describe_filter(&o, out);
        fclose(out);
        CHECK_STR(text, ", pid 100 or 300, comm app or worker, container abcd1, thread 101");
        free(text);

        /* The last --thread wins, as a name this time. */
        CHECK_INT(ep_view_option(&o, "test", EP_VIEW_ARG_THREAD, "io"), 1);
        CHECK_INT(o.filter.tid, -1);
        CHECK_STR(o.filter.thread_name, "io");

        CHECK_INT(ep_view_option(&o, "test", EP_VIEW_ARG_CONTAINER, "abc"), -EINVAL);
        CHECK_INT(ep_view_option(&o, "test", EP_VIEW_ARG_THREAD, ""), -EINVAL);
        CHECK_INT(ep_view_option(&o, "test", EP_VIEW_ARG_PID, "0"), -EINVAL);
        CHECK_INT(ep_view_option(&o, "test", EP_VIEW_ARG_PID, "x"), -EINVAL);

        o = EP_VIEW_OPTIONS_INIT;
        CHECK(ep_store_filter_selects_all(&o.filter));
        for (int i = 0; i < EP_STORE_FILTER_MAX_VALUES; i++)
                CHECK_INT(ep_view_option(&o, "test", EP_VIEW_ARG_COMM, "x"), 1);
        CHECK_INT(ep_view_option(&o, "test", EP_VIEW_ARG_COMM, "x"), -EINVAL);
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

/* A store made by someone else: a view where a table should be (its query could call any
 * function) is refused, not read through; a trigger never fires. */
static void test_hostile_store(const char *dir, const char *good) {
        EpStoreFilter f = EP_STORE_FILTER_INIT;
        char path[512], cmd[1200];
        sqlite3 *db = NULL;
        Result res = {};

        snprintf(path, sizeof(path), "%s/hostile.db", dir);
        snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", good, path);
        CHECK_INT(system(cmd), 0);
        CHECK(sqlite3_open(path, &db) == SQLITE_OK);
        exec_sql(db, "ALTER TABLE processes RENAME TO processes_real;"
                     "CREATE VIEW processes AS SELECT * FROM processes_real WHERE randomblob(16) IS NOT NULL;");
        sqlite3_close(db);
        CHECK(read_with(path, &f, &res) < 0);
        result_done(&res);
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
        /* background + 5 legend swatches (native, python, kernel, unknown, process) + one per frame */
        CHECK_INT(count(svg, "<rect"), 6 + drawn);
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

        /* The same tree as a page (tests/unit/test-cli-flamegraph.c has the details): every node
         * embedded, every function of the store among the strings, the counts on their nodes. */
        char *html = NULL;
        out = open_memstream(&html, &size);
        CHECK_INT(ep_flamegraph_write_html(out, res.tree, &o), (int) ep_calltree_size(res.tree));
        fclose(out);
        CHECK(strstr(html, "\"total\":31,") != NULL);
        for (size_t i = 0; i < res.n; i++) {
                char quoted[128];
                snprintf(quoted, sizeof(quoted), "\n\"%s\"", ep_calltree_string(res.tree, res.stats[i].frame.name));
                CHECK(strstr(html, quoted) != NULL);
        }
        /* compute_inner under app (100): depth 5 (all, app, __libc_start_main, main, compute),
         * 16 samples, all self; under worker (200): 2. */
        CHECK(strstr(html, ",5,16,16,\n") != NULL);
        CHECK(strstr(html, ",5,2,2,\n") != NULL);
        free(html);
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

        char extended[512];
        snprintf(extended, sizeof(extended), "%s/extended.db", dir);

        uint64_t t0 = (ep_now_ns(CLOCK_REALTIME) / NSEC_PER_SEC - 3600) * NSEC_PER_SEC;
        create_store(path, t0, false);
        create_store(extended, t0, true);

        test_unfiltered(path);
        test_filters(path, t0);
        test_filter_fixture(extended, t0);
        test_groups(extended);
        test_view_options();
        test_when();
        test_open_errors(dir);
        test_hostile_store(dir, path);
        test_svg(path);

        return test_finish(dir);
}
