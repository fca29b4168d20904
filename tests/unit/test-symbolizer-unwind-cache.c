/* SPDX-License-Identifier: MIT */
/* The unwind-table cache (SQLite) and the lookup in front of it:
 *   - a table extracted once is answered from the cache after a reopen (counters, not time);
 *   - a file that is not a database, an older schema, a damaged row: rebuilt / dropped, never
 *     fatal;
 *   - the size bound evicts the least recently used tables;
 *   - a descriptor whose file ID is not the one given is refused;
 *   - a directory we cannot write means no cache (an error to log once), not a failure. */

#include <sqlite3.h>
#include <sys/stat.h>

#include "test-symbolizer-unwind-util.h"
#include "unwind-builder.h"
#include "unwind-cache.h"
#include "unwind-lookup.h"

static char dir[] = "/tmp/test-unwind-cache-XXXXXX";
static char db_path[256];

static void cleanup(void) {
        char p[300];
        const char *suffix[] = { "", "-wal", "-shm", "-journal" };
        for (size_t i = 0; i < ELEMENTSOF(suffix); i++) {
                snprintf(p, sizeof p, "%s%s", db_path, suffix[i]);
                unlink(p);
        }
        rmdir(dir);
}

/* A synthetic table of n pseudo-random rules (compresses poorly, so sizes are predictable). */
static void *make_table(uint8_t tag, unsigned n, size_t *ret_size) {
        _cleanup_(ep_unwind_builder_freep) EpUnwindBuilder *b = NULL;
        uint8_t id[EP_FILE_ID_SIZE] = { tag };
        unsigned seed = tag;
        void *blob;

        CHECK_INT(ep_unwind_builder_new(n + 1, &b), 0);
        for (unsigned i = 0; i < n; i++) {
                struct ep_unwind_rule r = { .cfa_kind = EP_CFA_SP, .cfa_offset = 8 * (1 + rand_r(&seed) % 200) };
                CHECK_INT(ep_unwind_builder_add(b, (uint64_t) i * 4, (uint64_t) i * 4 + 1 + rand_r(&seed) % 3, &r), 0);
        }
        CHECK_INT(ep_unwind_builder_finish(b, id, EP_UNWIND_FROM_EH_FRAME, &blob, ret_size), 0);
        return blob;
}

static void id_of(uint8_t tag, uint8_t ret[EP_FILE_ID_SIZE]) {
        memset(ret, 0, EP_FILE_ID_SIZE);
        ret[0] = tag;
}

static bool has(EpUnwindCache *c, uint8_t tag) {
        uint8_t id[EP_FILE_ID_SIZE];
        void *blob = NULL;
        size_t size;

        id_of(tag, id);
        int r = ep_unwind_cache_get(c, id, &blob, &size);
        if (r >= 0) {
                CHECK_INT(ep_unwind_table_validate(blob, size), 0);
                free(blob);
        }
        return r >= 0;
}

static void put(EpUnwindCache *c, uint8_t tag, unsigned n) {
        uint8_t id[EP_FILE_ID_SIZE];
        size_t size;
        void *blob = make_table(tag, n, &size);

        id_of(tag, id);
        CHECK_INT(ep_unwind_cache_put(c, id, (const uint8_t *) "\x01\x02", 2, blob, size), 0);
        free(blob);
}

static void test_hit_after_reopen(const char *prog) {
        EpUnwindStats stats = {};
        uint8_t id[EP_FILE_ID_SIZE], wrong[EP_FILE_ID_SIZE] = { 0xee };
        void *blob;
        size_t size;
        int fd = open(prog, O_RDONLY | O_CLOEXEC);

        CHECK(fd >= 0);
        CHECK_INT(ep_file_id_from_fd(fd, id, NULL), 0);

        EpUnwindCache *c = NULL;
        CHECK_INT(ep_unwind_cache_open(dir, EP_UNWIND_CACHE_DEFAULT_MAX, &c), 0);
        CHECK_INT(ep_unwind_lookup(c, fd, id, NULL, &stats, &blob, &size), 0);
        CHECK_INT(ep_unwind_table_validate(blob, size), 0);
        free(blob);
        CHECK_INT(stats.cache_misses, 1);
        CHECK_INT(stats.cache_hits, 0);
        CHECK_INT(stats.tables, 1);
        CHECK(stats.extract_nsec > 0);
        CHECK(stats.cache_bytes > 0);

        /* The wrong file ID for this descriptor. */
        CHECK_INT(ep_unwind_lookup(c, fd, wrong, NULL, &stats, &blob, &size), -ESTALE);
        CHECK_INT(stats.extract_errors, 1);
        ep_unwind_cache_free(c);

        /* A restart: the table comes from the cache, nothing is parsed. */
        stats = (EpUnwindStats) {};
        CHECK_INT(ep_unwind_cache_open(dir, EP_UNWIND_CACHE_DEFAULT_MAX, &c), 0);
        EpUnwindCacheInfo info;
        ep_unwind_cache_info(c, &info);
        CHECK_INT(info.entries, 1);
        CHECK(info.bytes > 0);
        CHECK_INT(ep_unwind_lookup(c, fd, id, NULL, &stats, &blob, &size), 0);
        CHECK_INT(ep_unwind_table_validate(blob, size), 0);
        free(blob);
        CHECK_INT(stats.cache_hits, 1);
        CHECK_INT(stats.cache_misses, 0);
        CHECK_INT(stats.extract_nsec, 0);

        /* The build ID is stored alongside. */
        sqlite3 *db;
        sqlite3_stmt *s;
        CHECK(sqlite3_open(db_path, &db) == SQLITE_OK);
        CHECK(sqlite3_prepare_v2(db, "SELECT length(gnu_build_id) FROM unwind_tables", -1, &s, NULL) == SQLITE_OK);
        CHECK(sqlite3_step(s) == SQLITE_ROW);
        CHECK_INT(sqlite3_column_int(s, 0), 20);
        sqlite3_finalize(s);
        sqlite3_close(db);

        ep_unwind_cache_free(c);
        close(fd);
}

static void test_damaged_row(void) {
        EpUnwindCache *c = NULL;
        sqlite3 *db;
        EpUnwindCacheInfo info;

        CHECK_INT(ep_unwind_cache_open(dir, EP_UNWIND_CACHE_DEFAULT_MAX, &c), 0);
        put(c, 10, 100);
        put(c, 11, 100);
        CHECK(has(c, 10) && has(c, 11));

        /* Someone scribbles over a blob, and another row claims a future extractor. */
        CHECK(sqlite3_open(db_path, &db) == SQLITE_OK);
        CHECK(sqlite3_exec(db, "UPDATE unwind_tables SET data = x'0102030405' WHERE hex(file_id) LIKE '0A%'", NULL,
                           NULL, NULL) == SQLITE_OK);
        CHECK(sqlite3_exec(db, "UPDATE unwind_tables SET format = format + 1 WHERE hex(file_id) LIKE '0B%'", NULL,
                           NULL, NULL) == SQLITE_OK);
        sqlite3_close(db);

        CHECK(!has(c, 10));
        CHECK(!has(c, 11));
        ep_unwind_cache_info(c, &info);
        CHECK_INT(info.dropped, 2);
        CHECK_INT(info.entries, 1); /* the table from test_hit_after_reopen */
        ep_unwind_cache_free(c);
}

static void test_corrupt_file(void) {
        EpUnwindCache *c = NULL;
        EpUnwindCacheInfo info;
        char junk[8192];

        /* Not a database at all. */
        cleanup();
        CHECK(mkdir(dir, 0755) == 0);
        memset(junk, 'x', sizeof junk);
        int fd = open(db_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        CHECK(fd >= 0 && write(fd, junk, sizeof junk) == (ssize_t) sizeof junk);
        close(fd);

        CHECK_INT(ep_unwind_cache_open(dir, EP_UNWIND_CACHE_DEFAULT_MAX, &c), 0);
        ep_unwind_cache_info(c, &info);
        CHECK_INT(info.rebuilds, 1);
        CHECK_INT(info.entries, 0);
        put(c, 20, 50);
        CHECK(has(c, 20));
        ep_unwind_cache_free(c);

        /* An older schema. */
        sqlite3 *db;
        CHECK(sqlite3_open(db_path, &db) == SQLITE_OK);
        CHECK(sqlite3_exec(db, "DROP TABLE unwind_tables; CREATE TABLE tables_v0(x); PRAGMA user_version = 0", NULL,
                           NULL, NULL) == SQLITE_OK);
        sqlite3_close(db);
        CHECK_INT(ep_unwind_cache_open(dir, EP_UNWIND_CACHE_DEFAULT_MAX, &c), 0);
        ep_unwind_cache_info(c, &info);
        CHECK_INT(info.rebuilds, 1);
        put(c, 21, 50);
        CHECK(has(c, 21));
        ep_unwind_cache_free(c);

        /* A valid database whose pages were damaged after the header. */
        fd = open(db_path, O_WRONLY | O_CLOEXEC);
        CHECK(fd >= 0);
        struct stat st;
        CHECK(fstat(fd, &st) == 0);
        for (off_t off = 100; off < st.st_size; off += 512)
                CHECK(pwrite(fd, junk, 64, off) == 64);
        close(fd);
        CHECK_INT(ep_unwind_cache_open(dir, EP_UNWIND_CACHE_DEFAULT_MAX, &c), 0);
        /* Either noticed at open (rebuilt) or on first use (a miss, then rebuilt). */
        (void) has(c, 21);
        put(c, 22, 50);
        CHECK(has(c, 22));
        ep_unwind_cache_free(c);
}

static void test_eviction(void) {
        EpUnwindCache *c = NULL;
        EpUnwindCacheInfo info;

        cleanup();
        CHECK(mkdir(dir, 0755) == 0);

        /* Measure one table's stored size, then allow a bit more than three of them. */
        CHECK_INT(ep_unwind_cache_open(dir, 1ull << 30, &c), 0);
        put(c, 30, 4000);
        ep_unwind_cache_info(c, &info);
        uint64_t one = info.bytes;
        CHECK(one > 1000);
        ep_unwind_cache_free(c);

        cleanup();
        CHECK(mkdir(dir, 0755) == 0);
        CHECK_INT(ep_unwind_cache_open(dir, one * 3 + one / 2, &c), 0);
        put(c, 30, 4000);
        put(c, 31, 4000);
        put(c, 32, 4000);
        ep_unwind_cache_info(c, &info);
        CHECK_INT(info.entries, 3);
        CHECK_INT(info.evictions, 0);

        /* Use the oldest: the second oldest becomes the least recently used. */
        CHECK(has(c, 30));
        put(c, 33, 4000);
        ep_unwind_cache_info(c, &info);
        CHECK_INT(info.evictions, 1);
        CHECK_INT(info.entries, 3);
        CHECK(info.bytes <= one * 3 + one / 2);
        CHECK(has(c, 30));
        CHECK(!has(c, 31));
        CHECK(has(c, 32));
        CHECK(has(c, 33));

        /* A table larger than the whole bound is not stored. */
        uint8_t id[EP_FILE_ID_SIZE];
        size_t size;
        void *big = make_table(34, 20000, &size);
        id_of(34, id);
        CHECK_INT(ep_unwind_cache_put(c, id, NULL, 0, big, size), -EFBIG);
        free(big);
        CHECK(!has(c, 34));

        /* The LRU order and the byte count survive a reopen. */
        ep_unwind_cache_free(c);
        CHECK_INT(ep_unwind_cache_open(dir, one * 3 + one / 2, &c), 0);
        ep_unwind_cache_info(c, &info);
        CHECK_INT(info.entries, 3);
        CHECK(has(c, 32)); /* order now: 30 33 32 */
        CHECK(has(c, 30)); /* 33 32 30 */
        put(c, 35, 4000);
        CHECK(!has(c, 33));
        CHECK(has(c, 32) && has(c, 30) && has(c, 35));
        ep_unwind_cache_free(c);
}

static void test_unwritable(void) {
        EpUnwindCache *c = NULL;

        CHECK(ep_unwind_cache_open("/proc/self/no-such-dir/unwind", EP_UNWIND_CACHE_DEFAULT_MAX, &c) < 0);
        CHECK(!c);
}

int main(void) {
        const char *prog = test_env("UNW_PROG_OMIT");

        CHECK(mkdtemp(dir));
        snprintf(db_path, sizeof db_path, "%s/%s", dir, EP_UNWIND_CACHE_FILE);
        atexit(cleanup);

        test_hit_after_reopen(prog);
        test_damaged_row();
        test_corrupt_file();
        test_eviction();
        test_unwritable();
        TEST_DONE("symbolizer-unwind-cache");
}
