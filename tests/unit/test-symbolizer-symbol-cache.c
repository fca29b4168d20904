/* SPDX-License-Identifier: MIT */
/* The persisted symbol cache (symbolizer/symbol-cache.c) alone and under the resolver:
 *   - results with several inline lines come back exactly, also after reopening;
 *   - a second resolver over the same database answers without opening the file;
 *   - the size bound holds while many entries are inserted, the newest survive;
 *   - garbage, a newer schema and answers of another symbolizer version are thrown away;
 *   - kernel and JIT frames are never persisted;
 *   - with an event loop, queued writes are flushed from it. */

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

static void check_same(const EpSymResult *a, const EpSymResult *b) {
        CHECK_INT(a->status, b->status);
        CHECK_U64(a->elf_addr, b->elf_addr);
        CHECK_STR(a->module, b->module);
        CHECK_INT(a->n_lines, b->n_lines);
        for (uint16_t i = 0; i < a->n_lines; i++) {
                CHECK_STR(a->lines[i].function, b->lines[i].function);
                CHECK_STR(a->lines[i].file, b->lines[i].file);
                CHECK_INT(a->lines[i].line, b->lines[i].line);
        }
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
        check_same(&out, &in);
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
        check_same(&out, &in);
        ep_sym_result_done(&out);
        CHECK_INT(ep_symbol_cache_get(c, FILE_A, 0x5000, 0, &out), 0);
        check_same(&out, &none);
        ep_symbol_cache_free(c);
}

/* ---- under the resolver ---- */

static const char *paths[4];
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
        CHECK_INT(info_of(c).pending, ELEMENTSOF(functions));
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

int main(void) {
        (void) test_env("SYM_TEST_TARGET"); /* before anything is created: a skip leaves nothing */
        CHECK(mkdtemp(dir));
        snprintf(db_path, sizeof db_path, "%s/%s", dir, EP_SYMBOL_CACHE_FILE);

        test_round_trip();
        test_second_resolver();
        test_kernel_and_jit_not_persisted();
        test_size_bound();
        test_rebuilds();
        test_event_loop_flush();

        reset_dir();
        CHECK_INT(rmdir(dir), 0);
        TEST_DONE("symbolizer-symbol-cache");
}
