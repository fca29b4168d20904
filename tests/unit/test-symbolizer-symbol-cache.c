/* SPDX-License-Identifier: MIT */
/* The persisted symbol cache (symbolizer/symbol-cache.c) alone and under the resolver:
 *   - results with several inline lines come back exactly, also after reopening;
 *   - a second resolver over the same database answers without opening the file;
 *   - the size bound holds while many entries are inserted, the newest survive;
 *   - garbage, a newer schema and answers of another symbolizer version are thrown away;
 *   - kernel and JIT frames are never persisted;
 *   - with an event loop, queued writes are flushed from it;
 *   - answers depend on the separate debug file too (the files table): rows computed without
 *     one are dropped once one appears under the debug root, rows computed with one once it
 *     is gone or the roots change, rows of a file that needs none survive that, a file is
 *     checked once per session, a debug file found later in a session replaces the rows
 *     computed before, and a file of the previous schema version is recreated. */

#include <fcntl.h>
#include <gelf.h>
#include <sqlite3.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache-db.h"
#include "debug-file.h"
#include "resolver.h"
#include "symbol-cache.h"
#include "test-util.h"

static char dir[] = "/tmp/test-symbol-cache-XXXXXX";
static char db_path[256];

static const uint8_t FILE_A[EP_FILE_ID_SIZE] = { 0xa1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };

static void reset_dir(void) {
        static const char *const suffixes[] = { "", "-wal", "-shm", "-journal" };
        char p[300];

        for (size_t i = 0; i < ELEMENTSOF(suffixes); i++) {
                snprintf(p, sizeof p, "%s%s", db_path, suffixes[i]);
                (void) unlink(p);
        }
}

static EpSymbolCache *open_cache(uint64_t max) {
        EpSymbolCache *c = NULL;
        CHECK_INT(ep_symbol_cache_open(dir, max, NULL, &c), 0);
        CHECK(c);
        return c;
}

static EpSymbolCacheInfo info_of(const EpSymbolCache *c) {
        EpSymbolCacheInfo i;
        ep_symbol_cache_info(c, &i);
        return i;
}

static void set_line(EpSymLine *l, const char *fn, const char *file, uint32_t line) {
        l->function = strdup(fn);
        l->file = strdup(file);
        l->line = line;
        CHECK(l->function && l->file);
}

/* An inlined leaf, its inline caller and the real function, as DWARF would give them. */
static void make_inline_result(EpSymResult *res, uint64_t elf_addr) {
        *res = (EpSymResult) { .status = EP_SYM_OK, .elf_addr = elf_addr, .module = strdup("") };
        res->lines = calloc(3, sizeof(EpSymLine));
        CHECK(res->module && res->lines);
        set_line(&res->lines[0], "inlined_leaf", "/src/leaf.h", 12);
        set_line(&res->lines[1], "std::vector<int>::push_back(int const&)", "/usr/include/c++/12/bits/stl_vector.h", 1287);
        set_line(&res->lines[2], "outer", "", 0);
        res->n_lines = 3;
}

static void test_round_trip(void) {
        _cleanup_(ep_sym_result_done) EpSymResult in = {}, none = {}, out = {};
        EpSymbolCache *c;

        reset_dir();
        c = open_cache(EP_SYMBOL_CACHE_DEFAULT_MAX);
        make_inline_result(&in, 0xffff800000401234ULL); /* high bit: stored as a negative integer */
        none = (EpSymResult) { .status = EP_SYM_NOT_FOUND, .elf_addr = 0x5000, .module = strdup("") };
        CHECK(none.module);

        CHECK_INT(ep_symbol_cache_put(c, FILE_A, 0x1234, EP_FRAME_FLAG_RETURN_ADDRESS, &in), 0);
        CHECK_INT(ep_symbol_cache_put(c, FILE_A, 0x5000, 0, &none), 0);
        CHECK_INT(info_of(c).pending, 2);
        CHECK_INT(ep_symbol_cache_get(c, FILE_A, 0x1234, EP_FRAME_FLAG_RETURN_ADDRESS, &out), -ENOENT); /* queued */
        CHECK_INT(ep_symbol_cache_flush(c), 0);
        CHECK_INT(info_of(c).pending, 0);
        CHECK_INT(info_of(c).entries, 2);

        CHECK_INT(ep_symbol_cache_get(c, FILE_A, 0x1234, EP_FRAME_FLAG_RETURN_ADDRESS, &out), 0);
        test_check_same_result(&out, &in);
        ep_sym_result_done(&out);
        /* The return-address flag is part of the key; other flags are not. */
        CHECK_INT(ep_symbol_cache_get(c, FILE_A, 0x1234, 0, &out), -ENOENT);
        CHECK_INT(ep_symbol_cache_get(c, FILE_A, 0x1234, EP_FRAME_FLAG_RETURN_ADDRESS | EP_FRAME_FLAG_FP_STEP, &out), 0);
        ep_sym_result_done(&out);

        /* Only final answers. */
        EpSymResult bad = { .status = EP_SYM_NO_FILE, .module = (char *) "" };
        CHECK_INT(ep_symbol_cache_put(c, FILE_A, 0x9999, 0, &bad), -EINVAL);
        ep_symbol_cache_free(c);

        c = open_cache(EP_SYMBOL_CACHE_DEFAULT_MAX);
        CHECK_INT(info_of(c).entries, 2);
        CHECK_INT(info_of(c).rebuilds, 0);
        CHECK_INT(ep_symbol_cache_get(c, FILE_A, 0x1234, EP_FRAME_FLAG_RETURN_ADDRESS, &out), 0);
        test_check_same_result(&out, &in);
        ep_sym_result_done(&out);
        CHECK_INT(ep_symbol_cache_get(c, FILE_A, 0x5000, 0, &out), 0);
        test_check_same_result(&out, &none);
        ep_symbol_cache_free(c);
}

/* ---- under the resolver ---- */

static const char *paths[8];
static unsigned open_file_calls;

static int fake_open_file(void *userdata, const uint8_t id[EP_FILE_ID_SIZE]) {
        open_file_calls++;
        if (id[0] >= ELEMENTSOF(paths) || !paths[id[0]])
                return -ENOENT;
        int fd = open(paths[id[0]], O_RDONLY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static const char kallsyms_text[] = "ffffffff81000000 T _stext\n"
                                    "ffffffff81000100 T do_one_thing\n";

static int fake_open_kallsyms(void *userdata) {
        return test_memfd_with("kallsyms", kallsyms_text);
}

static const EpFileSource source = { .open_file = fake_open_file, .open_kallsyms = fake_open_kallsyms };

static const char *const functions[] = { "sym_test_alpha", "sym_test_beta", "sym_test_gamma", "sym_test_caller" };

static void symbolize_all(EpResolver *r, const char *target, char names[][64], uint64_t *elf_addrs) {
        for (size_t i = 0; i < ELEMENTSOF(functions); i++) {
                EpSymRequest req = { .kind = EP_FRAME_NATIVE, .file_id = { 1 },
                                     .addr = test_target_offset(target, functions[i]) + 1 };
                const EpSymResult *res = NULL;

                CHECK_INT(ep_resolver_symbolize(r, &req, &res), 0);
                CHECK_INT(res->status, EP_SYM_OK);
                CHECK(res->n_lines >= 1);
                snprintf(names[i], 64, "%s", res->lines[0].function);
                elf_addrs[i] = res->elf_addr;
        }
}

static void test_second_resolver(void) {
        const char *target = test_env("SYM_TEST_TARGET");
        EpResolverConfig cfg = EP_RESOLVER_CONFIG_DEFAULT;
        char first[ELEMENTSOF(functions)][64], second[ELEMENTSOF(functions)][64];
        uint64_t first_addr[ELEMENTSOF(functions)], second_addr[ELEMENTSOF(functions)];
        EpSymStats stats = {};
        EpResolver *r = NULL;
        EpSymbolCache *c;

        reset_dir();
        paths[1] = target;
        open_file_calls = 0;

        c = open_cache(EP_SYMBOL_CACHE_DEFAULT_MAX);
        CHECK_INT(ep_resolver_new(&source, &cfg, &stats, &r), 0);
        ep_resolver_set_symbol_cache(r, c);
        symbolize_all(r, target, first, first_addr);
        CHECK_INT(open_file_calls, 1);
        CHECK_INT(stats.persisted_hits, 0);
        CHECK_INT(info_of(c).pending, ELEMENTSOF(functions) + 1); /* and the file's record */
        ep_resolver_free(r);
        ep_symbol_cache_free(c); /* writes the queue */

        /* A restart: new cache handle, new resolver, same directory. */
        stats = (EpSymStats) {};
        open_file_calls = 0;
        c = open_cache(EP_SYMBOL_CACHE_DEFAULT_MAX);
        CHECK_INT(info_of(c).entries, ELEMENTSOF(functions));
        CHECK_INT(ep_resolver_new(&source, &cfg, &stats, &r), 0);
        ep_resolver_set_symbol_cache(r, c);
        symbolize_all(r, target, second, second_addr);
        CHECK_INT(open_file_calls, 0);
        CHECK_INT(stats.persisted_hits, ELEMENTSOF(functions));
        CHECK_INT(stats.resolved, ELEMENTSOF(functions));
        for (size_t i = 0; i < ELEMENTSOF(functions); i++) {
                CHECK_STR(second[i], first[i]);
                CHECK_STR(second[i], functions[i]);
                CHECK_U64(second_addr[i], first_addr[i]);
        }
        /* Now in the memory LRU: no second database read. */
        symbolize_all(r, target, second, second_addr);
        CHECK_INT(stats.persisted_hits, ELEMENTSOF(functions));
        CHECK_INT(stats.cache_hits, ELEMENTSOF(functions));

        /* Detached: the resolver works alone again (and opens the file). */
        ep_resolver_free(r);
        CHECK_INT(ep_resolver_new(&source, &cfg, &stats, &r), 0);
        symbolize_all(r, target, second, second_addr);
        CHECK_INT(open_file_calls, 1);
        ep_resolver_free(r);
        ep_symbol_cache_free(c);
}

static void test_kernel_and_jit_not_persisted(void) {
        const char *target = test_env("SYM_TEST_TARGET");
        EpResolverConfig cfg = EP_RESOLVER_CONFIG_DEFAULT;
        EpSymStats stats = {};
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;
        const EpSymResult *res;
        EpSymbolCache *c;

        reset_dir();
        paths[1] = target;
        c = open_cache(EP_SYMBOL_CACHE_DEFAULT_MAX);
        CHECK_INT(ep_resolver_new(&source, &cfg, &stats, &r), 0);
        ep_resolver_set_symbol_cache(r, c);

        EpSymRequest kernel = { .kind = EP_FRAME_KERNEL, .addr = 0xffffffff81000104ULL };
        CHECK_INT(ep_resolver_symbolize(r, &kernel, &res), 0);
        CHECK_INT(res->status, EP_SYM_OK);
        CHECK_STR(res->lines[0].function, "do_one_thing");
        EpSymRequest jit = { .kind = EP_FRAME_UNMAPPED, .addr = 0x7f0000001000ULL, .pid = 42, .start_time_ns = 1 };
        CHECK_INT(ep_resolver_symbolize(r, &jit, &res), 0);
        /* A native frame whose file cannot be opened: not a final answer. */
        EpSymRequest gone = { .kind = EP_FRAME_NATIVE, .file_id = { 3 }, .addr = 0x1000 };
        CHECK_INT(ep_resolver_symbolize(r, &gone, &res), 0);
        CHECK_INT(res->status, EP_SYM_NO_FILE);
        CHECK_INT(ep_symbol_cache_flush(c), 0);
        CHECK_INT(info_of(c).entries, 0);

        EpSymRequest native = { .kind = EP_FRAME_NATIVE, .file_id = { 1 },
                                .addr = test_target_offset(target, "sym_test_beta") };
        CHECK_INT(ep_resolver_symbolize(r, &native, &res), 0);
        CHECK_INT(ep_symbol_cache_flush(c), 0);
        CHECK_INT(info_of(c).entries, 1);

        r = ep_resolver_free(r);
        ep_symbol_cache_free(c);
}

static void test_size_bound(void) {
        const uint64_t max = 512 << 10;
        const unsigned n = 20000;
        _cleanup_(ep_sym_result_done) EpSymResult res = {}, out = {};
        EpSymbolCache *c;
        struct stat st;

        reset_dir();
        c = open_cache(max);
        make_inline_result(&res, 0x401000);
        for (unsigned i = 0; i < n; i++) {
                res.lines[2].line = i;
                CHECK_INT(ep_symbol_cache_put(c, FILE_A, 0x1000 + i, 0, &res), 0);
                CHECK(info_of(c).pending <= 2 * EP_SYMBOL_CACHE_FLUSH_ENTRIES); /* bounded without a loop */
                if (i % 997 == 0)
                        CHECK_INT(ep_symbol_cache_flush(c), 0);
        }
        CHECK_INT(ep_symbol_cache_flush(c), 0);
        EpSymbolCacheInfo info = info_of(c);
        CHECK(info.bytes <= max);
        CHECK(info.evictions > 0);
        CHECK(info.entries + info.evictions == n);
        CHECK(info.entries > 500); /* the bound is used, not emptied */
        printf("size bound: %" PRIu64 " entries in %" PRIu64 " bytes (%.0f B/entry), %" PRIu64 " evicted\n",
               info.entries, info.bytes, (double) info.bytes / (double) info.entries, info.evictions);

        /* Least recently used go first: the oldest are gone, the newest are there. */
        CHECK_INT(ep_symbol_cache_get(c, FILE_A, 0x1000, 0, &out), -ENOENT);
        CHECK_INT(ep_symbol_cache_get(c, FILE_A, 0x1000 + n - 1, 0, &out), 0);
        CHECK_INT(out.lines[2].line, n - 1);
        ep_sym_result_done(&out);
        ep_symbol_cache_free(c);

        /* Free pages are reused: the file stays near the bound (one flush batch above it). */
        CHECK_INT(stat(db_path, &st), 0);
        CHECK((uint64_t) st.st_size <= 2 * max);
}

static void write_file(const char *path, const void *data, size_t size) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        CHECK(fd >= 0);
        CHECK(write(fd, data, size) == (ssize_t) size);
        close(fd);
}

static void sql(const char *statement) {
        sqlite3 *db = NULL;
        CHECK_INT(sqlite3_open(db_path, &db), SQLITE_OK);
        CHECK_INT(sqlite3_exec(db, statement, NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(db);
}

static void put_one(void) {
        _cleanup_(ep_sym_result_done) EpSymResult res = {};
        EpSymbolCache *c = open_cache(EP_SYMBOL_CACHE_DEFAULT_MAX);

        make_inline_result(&res, 0x401000);
        CHECK_INT(ep_symbol_cache_put(c, FILE_A, 0x10, 0, &res), 0);
        ep_symbol_cache_free(c);
}

static void test_rebuilds(void) {
        char garbage[8192];
        EpSymbolCache *c;
        EpSymResult out = {};

        /* Garbage bytes. */
        reset_dir();
        for (size_t i = 0; i < sizeof garbage; i++)
                garbage[i] = (char) (i * 7 + 3);
        write_file(db_path, garbage, sizeof garbage);
        c = open_cache(EP_SYMBOL_CACHE_DEFAULT_MAX);
        CHECK_INT(info_of(c).rebuilds, 1);
        CHECK_INT(info_of(c).entries, 0);
        ep_symbol_cache_free(c);
        put_one();
        c = open_cache(EP_SYMBOL_CACHE_DEFAULT_MAX);
        CHECK_INT(info_of(c).rebuilds, 0);
        CHECK_INT(ep_symbol_cache_get(c, FILE_A, 0x10, 0, &out), 0);
        ep_sym_result_done(&out);
        ep_symbol_cache_free(c);

        /* A newer schema: not ours to read. */
        sql("PRAGMA user_version = 99");
        c = open_cache(EP_SYMBOL_CACHE_DEFAULT_MAX);
        CHECK_INT(info_of(c).rebuilds, 1);
        CHECK_INT(info_of(c).entries, 0);
        ep_symbol_cache_free(c);

        /* Answers of another symbolizer version: dropped, the file kept. */
        put_one();
        char format[256] = "";
        sqlite3 *db = NULL;
        sqlite3_stmt *st = NULL;
        CHECK_INT(sqlite3_open(db_path, &db), SQLITE_OK);
        CHECK_INT(sqlite3_prepare_v2(db, "SELECT format FROM meta", -1, &st, NULL), SQLITE_OK);
        CHECK_INT(sqlite3_step(st), SQLITE_ROW);
        snprintf(format, sizeof format, "%s", (const char *) sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        sqlite3_close(db);
        /* version, answers version, this program's build ID (the linker adds one by default) */
        CHECK(strncmp(format, EP_VERSION "+", strlen(EP_VERSION "+")) == 0);
        CHECK(strchr(format, '/') && strspn(strchr(format, '/') + 1, "0123456789abcdef") >= 16);
        printf("format: %s\n", format);
        sql("UPDATE meta SET format = '0.0.1+0'");
        c = open_cache(EP_SYMBOL_CACHE_DEFAULT_MAX);
        CHECK_INT(info_of(c).rebuilds, 0);
        CHECK_INT(info_of(c).entries, 0);
        CHECK_INT(ep_symbol_cache_get(c, FILE_A, 0x10, 0, &out), -ENOENT);
        ep_symbol_cache_free(c);

        /* A row that does not decode is dropped and is a miss. */
        put_one();
        sql("UPDATE symbols SET lines = x'0300ffffffff'");
        c = open_cache(EP_SYMBOL_CACHE_DEFAULT_MAX);
        CHECK_INT(ep_symbol_cache_get(c, FILE_A, 0x10, 0, &out), -ENOENT);
        CHECK_INT(info_of(c).dropped, 1);
        CHECK_INT(info_of(c).entries, 0);
        ep_symbol_cache_free(c);
}

static void test_event_loop_flush(void) {
        _cleanup_(ep_sym_result_done) EpSymResult res = {};
        sd_event *e = NULL;
        EpSymbolCache *c = NULL;

        reset_dir();
        CHECK_INT(sd_event_new(&e), 0);
        CHECK_INT(ep_symbol_cache_open(dir, EP_SYMBOL_CACHE_DEFAULT_MAX, e, &c), 0);
        make_inline_result(&res, 0x401000);
        CHECK_INT(ep_symbol_cache_put(c, FILE_A, 0x10, 0, &res), 0);
        CHECK_INT(info_of(c).flushes, 0);
        for (int i = 0; i < 20 && info_of(c).pending > 0; i++)
                CHECK(sd_event_run(e, 100 * 1000) >= 0);
        CHECK_INT(info_of(c).pending, 0);
        CHECK_INT(info_of(c).flushes, 1);

        /* A full batch is written without waiting for the timer. */
        for (unsigned i = 0; i < EP_SYMBOL_CACHE_FLUSH_ENTRIES; i++)
                CHECK_INT(ep_symbol_cache_put(c, FILE_A, 0x100 + i, 0, &res), 0);
        CHECK(sd_event_run(e, 0) >= 0);
        CHECK_INT(info_of(c).pending, 0);
        CHECK_INT(info_of(c).flushes, 2);
        ep_symbol_cache_free(c);
        sd_event_unref(e);
}

/* ---- answers and debug files ---- */

enum {
        SLOT_STRIPPED = 4, /* the inline-chain program stripped: named only through its debug file */
        SLOT_FULL = 5,     /* the same with .symtab and DWARF: needs no debug file */
        SLOT_LINK = 6,     /* stripped, with a .gnu_debuglink to the debug file next to it */
};

static char debug_root[] = "/tmp/test-symbol-cache-debug-XXXXXX";
static char debug_file[512]; /* where the stripped program's debug file goes, by build ID */
static uint64_t mark_vaddr;  /* ic_inner_mark */

static void place_debug_file(bool present) {
        char cmd[2048];

        if (!present) {
                CHECK(unlink(debug_file) == 0 || errno == ENOENT);
                return;
        }
        /* The fixed build ID of the inline-chain program (symbolizer/meson.build). */
        snprintf(cmd, sizeof cmd, "mkdir -p '%s/.build-id/d3' && cp '%s' '%s'", debug_root,
                 test_env("DW_PROG_DEBUG"), debug_file);
        CHECK_INT(system(cmd), 0);
}

static uint64_t nm_vaddr(const char *path, const char *symbol) {
        char cmd[4096];
        unsigned long long a = 0;

        snprintf(cmd, sizeof cmd, "nm --defined-only '%s' | awk '$3 == \"%s\" { print $1 }'", path, symbol);
        FILE *p = popen(cmd, "r");
        CHECK(p);
        CHECK(fscanf(p, "%llx", &a) == 1);
        pclose(p);
        return a;
}

/* One run of the symbolizer: a cache handle and a resolver over it. */
typedef struct Session {
        EpSymbolCache *cache;
        EpResolver *resolver;
        EpSymStats stats;
} Session;

static void session_start(Session *s) {
        *s = (Session) { .cache = open_cache(EP_SYMBOL_CACHE_DEFAULT_MAX) };
        open_file_calls = 0;
        CHECK_INT(ep_resolver_new(&source, NULL, &s->stats, &s->resolver), 0);
        ep_resolver_set_symbol_cache(s->resolver, s->cache);
}

static void session_end(Session *s) {
        ep_resolver_free(s->resolver);
        ep_symbol_cache_free(s->cache); /* writes the queue */
}

/* ic_inner_mark of a file: as a return address one past it, or the address itself (two keys
 * with one answer). */
static const EpSymResult *sym_mark(Session *s, uint8_t slot, bool return_address, const char *path_hint) {
        EpSymRequest req = {
                .kind = EP_FRAME_NATIVE,
                .flags = return_address ? EP_FRAME_FLAG_RETURN_ADDRESS : 0,
                .file_id = { slot, 0x5c },
                .addr = test_file_offset(paths[slot], mark_vaddr) + return_address,
                .path = path_hint,
        };
        const EpSymResult *res = NULL;

        CHECK_INT(ep_resolver_symbolize(s->resolver, &req, &res), 0);
        CHECK(res);
        return res;
}

static void check_named(const EpSymResult *res) {
        CHECK_INT(res->status, EP_SYM_OK);
        CHECK(res->n_lines >= 1);
        CHECK_STR(res->lines[0].function, "ic_inner");
}

/* The file's `debug` in the table, after writing the queue. */
static const char *recorded_debug(Session *s, uint8_t slot) {
        static char buf[4096];
        _cleanup_(ep_symbol_file_record_done) EpSymbolFileRecord rec = {};
        const uint8_t id[EP_FILE_ID_SIZE] = { slot, 0x5c };

        CHECK_INT(ep_symbol_cache_flush(s->cache), 0);
        CHECK_INT(ep_symbol_cache_get_file(s->cache, id, &rec), 0);
        snprintf(buf, sizeof buf, "%s", rec.debug);
        return buf;
}

static void set_roots(const char *list) {
        CHECK_INT(ep_debug_roots_set(list), 0);
}

/* (a) Rows computed when no debug file was found are dropped once one appears. */
static void test_debug_file_appears(void) {
        Session s;

        reset_dir();
        place_debug_file(false);
        set_roots(debug_root);
        session_start(&s);
        CHECK_INT(sym_mark(&s, SLOT_STRIPPED, false, NULL)->status, EP_SYM_NOT_FOUND);
        CHECK_INT(sym_mark(&s, SLOT_STRIPPED, true, NULL)->status, EP_SYM_NOT_FOUND);
        CHECK_STR(recorded_debug(&s, SLOT_STRIPPED), EP_SYMBOL_CACHE_DEBUG_NONE);
        CHECK_INT(info_of(s.cache).entries, 2);
        session_end(&s);

        place_debug_file(true);
        session_start(&s);
        check_named(sym_mark(&s, SLOT_STRIPPED, false, NULL));
        CHECK_INT(s.stats.persisted_hits, 0);
        CHECK_INT(open_file_calls, 1);
        CHECK_INT(info_of(s.cache).invalidated_files, 1);
        CHECK_STR(recorded_debug(&s, SLOT_STRIPPED), debug_file);
        CHECK_INT(info_of(s.cache).entries, 1); /* the other row went with the file's record */
        session_end(&s);

        /* Nothing changed since: from the cache, without opening the file. */
        session_start(&s);
        check_named(sym_mark(&s, SLOT_STRIPPED, false, NULL));
        CHECK_INT(s.stats.persisted_hits, 1);
        CHECK_INT(open_file_calls, 0);
        CHECK_INT(info_of(s.cache).invalidated_files, 0);
        session_end(&s);
        printf("debug file installed: rows computed without it dropped and computed again\n");
}

/* (b) Rows computed with a debug file are dropped once it is gone; rows without a record too.
 * Runs after (a): the table holds an answer computed with the debug file. */
static void test_debug_file_vanishes(void) {
        Session s;

        place_debug_file(false);
        session_start(&s);
        CHECK_INT(sym_mark(&s, SLOT_STRIPPED, false, NULL)->status, EP_SYM_NOT_FOUND);
        CHECK_INT(s.stats.persisted_hits, 0);
        CHECK_INT(info_of(s.cache).invalidated_files, 1);
        CHECK_STR(recorded_debug(&s, SLOT_STRIPPED), EP_SYMBOL_CACHE_DEBUG_NONE);
        session_end(&s);

        /* A record missing for rows that exist: the rows cannot be trusted. */
        sql("DELETE FROM files");
        session_start(&s);
        CHECK_INT(sym_mark(&s, SLOT_STRIPPED, false, NULL)->status, EP_SYM_NOT_FOUND);
        CHECK_INT(s.stats.persisted_hits, 0);
        CHECK_INT(info_of(s.cache).invalidated_files, 1);
        session_end(&s);
        printf("debug file removed: rows computed with it dropped\n");
}

/* (c) Other roots: a file that needs no debug file keeps its rows, one that used one does not. */
static void test_roots_change(void) {
        Session s;

        reset_dir();
        place_debug_file(true);
        set_roots(debug_root);
        session_start(&s);
        check_named(sym_mark(&s, SLOT_STRIPPED, false, NULL));
        check_named(sym_mark(&s, SLOT_FULL, false, NULL));
        CHECK_STR(recorded_debug(&s, SLOT_FULL), EP_SYMBOL_CACHE_DEBUG_NOT_NEEDED);
        session_end(&s);

        set_roots("/nonexistent/debug-root");
        session_start(&s);
        check_named(sym_mark(&s, SLOT_FULL, false, NULL));
        CHECK_INT(s.stats.persisted_hits, 1);
        CHECK_INT(sym_mark(&s, SLOT_STRIPPED, false, NULL)->status, EP_SYM_NOT_FOUND);
        CHECK_INT(s.stats.persisted_hits, 1);
        CHECK_INT(open_file_calls, 1); /* the stripped one only */
        CHECK_INT(info_of(s.cache).invalidated_files, 1);
        session_end(&s);
        printf("other debug roots: rows of a file needing none kept, rows made with one dropped\n");
}

/* (d) A file is checked at its first hit in a session, not at every hit: a debug file that
 * appears later in the session counts from the next one. */
static void test_checked_once(void) {
        Session s;

        reset_dir();
        place_debug_file(false);
        set_roots(debug_root);
        session_start(&s);
        CHECK_INT(sym_mark(&s, SLOT_STRIPPED, false, NULL)->status, EP_SYM_NOT_FOUND);
        CHECK_INT(sym_mark(&s, SLOT_STRIPPED, true, NULL)->status, EP_SYM_NOT_FOUND);
        session_end(&s);

        session_start(&s);
        CHECK_INT(sym_mark(&s, SLOT_STRIPPED, false, NULL)->status, EP_SYM_NOT_FOUND);
        CHECK_INT(s.stats.persisted_hits, 1);
        place_debug_file(true);
        CHECK_INT(sym_mark(&s, SLOT_STRIPPED, true, NULL)->status, EP_SYM_NOT_FOUND);
        CHECK_INT(s.stats.persisted_hits, 2);
        CHECK_INT(info_of(s.cache).invalidated_files, 0);
        CHECK_INT(open_file_calls, 0);
        session_end(&s);

        session_start(&s);
        check_named(sym_mark(&s, SLOT_STRIPPED, true, NULL));
        CHECK_INT(s.stats.persisted_hits, 0);
        CHECK_INT(info_of(s.cache).invalidated_files, 1);
        session_end(&s);
        printf("a file is checked once per session\n");
}

/* A debug file found later in a session (through .gnu_debuglink, once a request carries the
 * path): the rows computed before it are replaced, the record says what was used. */
static void test_found_later_in_session(void) {
        Session s;
        char want[4096];

        reset_dir();
        set_roots("/nonexistent/debug-root");
        session_start(&s);
        CHECK_INT(sym_mark(&s, SLOT_LINK, false, NULL)->status, EP_SYM_NOT_FOUND);
        check_named(sym_mark(&s, SLOT_LINK, true, paths[SLOT_LINK]));
        snprintf(want, sizeof want, "%s", paths[SLOT_LINK]);
        snprintf(strrchr(want, '/') + 1, sizeof want - (size_t) (strrchr(want, '/') + 1 - want), "%s",
                 strrchr(test_env("DW_PROG_DEBUG"), '/') + 1);
        CHECK_STR(recorded_debug(&s, SLOT_LINK), want);
        CHECK_INT(info_of(s.cache).entries, 1);
        session_end(&s);

        /* The debuglink lookup is redone from the recorded path: still there. */
        session_start(&s);
        check_named(sym_mark(&s, SLOT_LINK, true, paths[SLOT_LINK]));
        CHECK_INT(s.stats.persisted_hits, 1);
        CHECK_INT(info_of(s.cache).invalidated_files, 0);
        session_end(&s);
        printf("debug file found later in a session: earlier rows replaced\n");
}

/* (e) A file of the previous schema (without `files`) is recreated, with `files`. */
static void test_old_schema(void) {
        _cleanup_(ep_symbol_file_record_done) EpSymbolFileRecord rec = {}, back = {};
        EpSymbolCache *c;
        int64_t version = 0;
        sqlite3 *db = NULL;

        reset_dir();
        sql("CREATE TABLE meta(format TEXT NOT NULL);"
            "CREATE TABLE symbols(file_id BLOB NOT NULL, addr INTEGER NOT NULL, flags INTEGER NOT NULL,"
            " status INTEGER NOT NULL, elf_addr INTEGER NOT NULL, module TEXT NOT NULL, lines BLOB,"
            " last_used INTEGER NOT NULL, PRIMARY KEY(file_id, addr, flags)) WITHOUT ROWID;"
            "CREATE INDEX symbols_lru ON symbols(last_used);"
            "INSERT INTO symbols VALUES (x'a1', 16, 0, 0, 4096, '', NULL, 1);"
            "PRAGMA user_version = 1");
        c = open_cache(EP_SYMBOL_CACHE_DEFAULT_MAX);
        CHECK_INT(info_of(c).rebuilds, 1);
        CHECK_INT(info_of(c).entries, 0);

        rec = (EpSymbolFileRecord) { .build_id = { 0xd3, 0xa4 }, .build_id_len = 2, .debug = strdup("none"),
                                     .path = strdup("/usr/bin/x") };
        CHECK(rec.debug && rec.path);
        CHECK_INT(ep_symbol_cache_put_file(c, FILE_A, &rec), 0);
        CHECK_INT(ep_symbol_cache_flush(c), 0);
        CHECK_INT(ep_symbol_cache_get_file(c, FILE_A, &back), 0);
        CHECK_STR(back.debug, "none");
        CHECK_STR(back.path, "/usr/bin/x");
        CHECK(!back.debuglink);
        CHECK_INT(back.build_id_len, 2);
        CHECK_INT(back.build_id[1], 0xa4);
        ep_symbol_cache_free(c);

        CHECK_INT(sqlite3_open(db_path, &db), SQLITE_OK);
        CHECK_INT(ep_sqlite_query_int(db, "PRAGMA user_version", &version), SQLITE_OK);
        sqlite3_close(db);
        CHECK_INT(version, EP_SYMBOL_CACHE_SCHEMA);
        CHECK(EP_SYMBOL_CACHE_SCHEMA > 1);
        printf("a file of schema 1 recreated as schema %d\n", EP_SYMBOL_CACHE_SCHEMA);
}

static void test_debug_files(void) {
        CHECK(mkdtemp(debug_root));
        snprintf(debug_file, sizeof debug_file, "%s/.build-id/d3/a4f1e0000000000000000000000000000dd001.debug",
                 debug_root);
        paths[SLOT_STRIPPED] = test_env("DW_PROG_STRIPPED");
        paths[SLOT_FULL] = test_env("DW_PROG");
        paths[SLOT_LINK] = test_env("DW_PROG_LINK");
        mark_vaddr = nm_vaddr(paths[SLOT_FULL], "ic_inner_mark");

        test_debug_file_appears();
        test_debug_file_vanishes();
        test_roots_change();
        test_checked_once();
        test_found_later_in_session();
        test_old_schema();

        ep_debug_roots_reset();
        place_debug_file(false);
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", debug_root);
        CHECK_INT(system(cmd), 0);
}

int main(void) {
        (void) test_env("SYM_TEST_TARGET"); /* before anything is created: a skip leaves nothing */
        (void) test_env("DW_PROG_STRIPPED");
        CHECK(mkdtemp(dir));
        snprintf(db_path, sizeof db_path, "%s/%s", dir, EP_SYMBOL_CACHE_FILE);

        test_round_trip();
        test_second_resolver();
        test_kernel_and_jit_not_persisted();
        test_size_bound();
        test_rebuilds();
        test_event_loop_flush();
        test_debug_files();

        reset_dir();
        CHECK_INT(rmdir(dir), 0);
        TEST_DONE("symbolizer-symbol-cache");
}
