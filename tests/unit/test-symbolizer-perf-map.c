/* SPDX-License-Identifier: MIT */
/* Perf maps (/tmp/perf-PID.map): the parser (symbolizer/perf-map.c) and the JIT resolver
 * (symbolizer/resolve-jit.c) over a fake file source that hands out memfds. */

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon.h"
#include "perf-map.h"
#include "resolve-jit.h"
#include "resolver.h"
#include "test-util.h"
#include "tests.h"

static EpPerfMap *map_of(const char *text) {
        EpPerfMap *m = NULL;

        CHECK_INT(ep_perf_map_new(NULL, &m), 0);
        CHECK_INT(ep_perf_map_add_text(m, text, strlen(text)), 0);
        return m;
}

static const char *name_at(const EpPerfMap *m, uint64_t addr) {
        return ep_perf_map_lookup(m, addr, NULL);
}

static void test_valid_lines(void) {
        _cleanup_(ep_perf_map_freep) EpPerfMap *m = map_of(
                "1000 10 plain\n"
                "0x2000 0x20 with 0x prefixes\n"
                "0X3000 0X8 upper X\n"
                "7f00aa 0a LazyCompile:*hotLoop /tmp/x.js:3\n"
                "4000 10 py::fib:/path/file.py\n"
                "5000\t10\ttabs between\tand inside\n"
                "6000 10    leading blanks dropped, trailing too   \n");
        uint64_t start = 0;

        CHECK_INT(ep_perf_map_stats(m)->malformed, 0);
        CHECK_INT(ep_perf_map_stats(m)->added, 7);
        CHECK_INT(ep_perf_map_entries(m), 7);

        CHECK(name_at(m, 0xfff) == NULL);
        CHECK_STR(ep_perf_map_lookup(m, 0x1000, &start), "plain");
        CHECK_U64(start, 0x1000);
        CHECK_STR(ep_perf_map_lookup(m, 0x100f, &start), "plain");
        CHECK(name_at(m, 0x1010) == NULL); /* end is exclusive */
        CHECK_STR(name_at(m, 0x201f), "with 0x prefixes");
        CHECK(name_at(m, 0x2020) == NULL);
        CHECK_STR(name_at(m, 0x3007), "upper X");
        CHECK_STR(name_at(m, 0x7f00b3), "LazyCompile:*hotLoop /tmp/x.js:3");
        CHECK(name_at(m, 0x7f00b4) == NULL);
        CHECK_STR(name_at(m, 0x4000), "py::fib:/path/file.py"); /* as written, not parsed */
        CHECK_STR(name_at(m, 0x5005), "tabs between\tand inside");
        CHECK_STR(name_at(m, 0x6000), "leading blanks dropped, trailing too");
        CHECK(name_at(m, UINT64_MAX) == NULL);
        CHECK(name_at(m, 0) == NULL);
}

static void test_overlaps(void) {
        /* Later lines win where they overlap; what they do not cover keeps the older name. */
        _cleanup_(ep_perf_map_freep) EpPerfMap *m = map_of(
                "1000 100 old\n"
                "1040 10 middle\n"   /* splits old in two */
                "10f0 20 tail\n"     /* overlaps old's end */
                "2000 10 first\n"
                "2000 10 second\n"   /* exact re-use */
                "3000 10 small\n"
                "2ff0 100 covers small\n");

        CHECK_STR(name_at(m, 0x1000), "old");
        CHECK_STR(name_at(m, 0x103f), "old");
        CHECK_STR(name_at(m, 0x1040), "middle");
        CHECK_STR(name_at(m, 0x104f), "middle");
        CHECK_STR(name_at(m, 0x1050), "old");
        CHECK_STR(name_at(m, 0x10ef), "old");
        CHECK_STR(name_at(m, 0x10f0), "tail");
        CHECK_STR(name_at(m, 0x110f), "tail");
        CHECK(name_at(m, 0x1110) == NULL);
        CHECK_STR(name_at(m, 0x2008), "second");
        CHECK_STR(name_at(m, 0x3005), "covers small");
        CHECK_STR(name_at(m, 0x2ff0), "covers small");

        /* Overlaps across separate additions (the table is rebuilt with older ranges). */
        CHECK_INT(ep_perf_map_add_text(m, "1048 4 newest\n", 14), 0);
        CHECK_STR(name_at(m, 0x1047), "middle");
        CHECK_STR(name_at(m, 0x1048), "newest");
        CHECK_STR(name_at(m, 0x104c), "middle");
        CHECK_STR(name_at(m, 0x1000), "old");
}

static void test_malformed(void) {
        char long_line[EP_PERF_MAP_LINE_MAX + 64];
        _cleanup_free_ char *text = NULL;

        memset(long_line, 'a', sizeof long_line);
        memcpy(long_line, "9000 10 ", 8);
        long_line[sizeof long_line - 1] = 0;
        CHECK(asprintf(&text,
                       "zz 10 not hex\n"
                       "1000 10\n"             /* no name */
                       "1000 10 \n"            /* blank name */
                       "1000 0 size zero\n"
                       "1000\n"
                       "1000 xyz name\n"
                       "10001000 10name\n"     /* SIZE runs into NAME: not hex */
                       "0x 10 no digits\n"
                       "11112222333344445 10 more than 64 bits\n"
                       "ffffffffffffffff 10 starts at the very end\n"
                       "1000 10 control\001char\n"
                       "1000 10 bad utf8 \xc3\x28\n"
                       "1000 10 overlong \xc0\xaf\n"
                       "%s\n"
                       "\n"                    /* blank: not counted */
                       "   \n"
                       "2000 10 good \xc3\xa9t\xc3\xa9\n"
                       "3000 10 after long",
                       long_line) > 0);
        _cleanup_(ep_perf_map_freep) EpPerfMap *m = map_of(text);

        CHECK_INT(ep_perf_map_stats(m)->malformed, 14);
        CHECK_INT(ep_perf_map_stats(m)->lines, 16);
        CHECK_INT(ep_perf_map_entries(m), 2);
        CHECK(name_at(m, 0x1000) == NULL);
        CHECK(name_at(m, 0x9000) == NULL);
        CHECK_STR(name_at(m, 0x2000), "good \xc3\xa9t\xc3\xa9");
        CHECK_STR(name_at(m, 0x3000), "after long"); /* no trailing newline */
}

static void test_huge_sizes(void) {
        _cleanup_(ep_perf_map_freep) EpPerfMap *m = map_of(
                "ffffffffffff0000 ffffffffffffffff to the end\r\n" /* CRLF too */
                "0 ffffffffffffffff everything\n"
                "10 10 small\n");

        CHECK_INT(ep_perf_map_stats(m)->malformed, 0);
        /* "everything" is newer than "to the end" and covers it. */
        CHECK_STR(name_at(m, 0), "everything");
        CHECK_STR(name_at(m, 0x10), "small");
        CHECK_STR(name_at(m, 0x20), "everything");
        CHECK_STR(name_at(m, UINT64_MAX - 1), "everything");
        CHECK(name_at(m, UINT64_MAX) == NULL);

        _cleanup_(ep_perf_map_freep) EpPerfMap *m2 = map_of("ffffffffffff0000 ffffffffffffffff to the end");
        CHECK_STR(name_at(m2, UINT64_MAX - 1), "to the end");
        CHECK(name_at(m2, 0xfffffffffffeffff) == NULL);
}

/* Compares lookups with the plain rule (the last line covering the address wins) over many
 * random, heavily overlapping lines added in several batches. */
static void test_random_against_naive(void) {
        enum { LINES = 3000, SPACE = 4096 };
        static uint64_t starts[LINES], ends[LINES];
        _cleanup_(ep_perf_map_freep) EpPerfMap *m = NULL;
        unsigned seed = 12345;
        size_t added = 0;

        CHECK_INT(ep_perf_map_new(NULL, &m), 0);
        while (added < LINES) {
                char buf[64 * 48];
                size_t len = 0, batch = 1 + rand_r(&seed) % 64;

                for (size_t i = 0; i < batch && added < LINES; i++, added++) {
                        starts[added] = (uint64_t) (rand_r(&seed) % SPACE);
                        ends[added] = starts[added] + 1 + (uint64_t) (rand_r(&seed) % (rand_r(&seed) % 3 ? 16 : 600));
                        len += (size_t) snprintf(buf + len, sizeof buf - len, "%" PRIx64 " %" PRIx64 " n%zu\n",
                                                 starts[added], ends[added] - starts[added], added);
                }
                CHECK_INT(ep_perf_map_add_text(m, buf, len), 0);

                for (uint64_t a = 0; a < SPACE + 700; a++) {
                        const char *got = name_at(m, a);
                        ssize_t want = -1;
                        char expect[32];

                        for (size_t i = 0; i < added; i++)
                                if (a >= starts[i] && a < ends[i])
                                        want = (ssize_t) i;
                        if (want < 0) {
                                if (got)
                                        TEST_FAIL("0x%" PRIx64 ": got %s, expected nothing", a, got);
                                continue;
                        }
                        snprintf(expect, sizeof expect, "n%zd", want);
                        if (!got || strcmp(got, expect) != 0)
                                TEST_FAIL("0x%" PRIx64 ": got %s, expected %s", a, got ?: "(null)", expect);
                }
        }
        test_checks++;
        /* Disjoint ranges never outnumber twice the lines. */
        CHECK(ep_perf_map_entries(m) <= 2 * LINES);
}

static void test_limits(void) {
        _cleanup_(ep_perf_map_freep) EpPerfMap *m = NULL;
        char line[64];

        CHECK_INT(ep_perf_map_new(&(EpPerfMapLimits) { .max_entries = 10, .max_name_bytes = 1 << 20 }, &m), 0);
        for (unsigned i = 0; i < 20; i++) {
                snprintf(line, sizeof line, "%x 10 f%u\n", 0x1000 + 0x100 * i, i);
                CHECK_INT(ep_perf_map_add_text(m, line, strlen(line)), 0);
        }
        CHECK_INT(ep_perf_map_entries(m), 10);
        CHECK_INT(ep_perf_map_stats(m)->dropped, 10);
        CHECK_STR(name_at(m, 0x1900), "f9");
        CHECK(name_at(m, 0x1a00) == NULL);

        /* A JIT re-using one address forever: overridden names are reclaimed, the newest
         * name keeps coming through although all of them together exceed the budget. */
        _cleanup_(ep_perf_map_freep) EpPerfMap *n = NULL;
        CHECK_INT(ep_perf_map_new(&(EpPerfMapLimits) { .max_entries = 100, .max_name_bytes = 256 }, &n), 0);
        for (unsigned i = 0; i < 1000; i++) {
                char expect[32];

                snprintf(expect, sizeof expect, "generation %u", i);
                snprintf(line, sizeof line, "5000 10 %s\n", expect);
                CHECK_INT(ep_perf_map_add_text(n, line, strlen(line)), 0);
                CHECK_STR(name_at(n, 0x5000), expect);
        }
        CHECK_INT(ep_perf_map_stats(n)->dropped, 0);
        CHECK(ep_perf_map_memory(n) < 4096);
}

static int memfd_with(const char *text) {
        int fd = memfd_create("perf-map", MFD_CLOEXEC);
        CHECK(fd >= 0);
        CHECK_INT(write(fd, text, strlen(text)), (long long) strlen(text));
        return fd;
}

static void append(int fd, const char *text) {
        CHECK(lseek(fd, 0, SEEK_END) >= 0);
        CHECK_INT(write(fd, text, strlen(text)), (long long) strlen(text));
}

static void test_growth(void) {
        _cleanup_(ep_perf_map_freep) EpPerfMap *m = NULL;
        _cleanup_close_ int fd = memfd_with("1000 10 one\n2000 10 tw");
        bool changed;

        CHECK_INT(ep_perf_map_new(NULL, &m), 0);
        CHECK_INT(ep_perf_map_read(m, fd, &changed), 0);
        CHECK(changed);
        CHECK_STR(name_at(m, 0x1000), "one");
        CHECK_STR(name_at(m, 0x2000), "tw"); /* half-written last line: used for now */
        CHECK_INT(ep_perf_map_read(m, fd, &changed), 0);
        CHECK(!changed); /* nothing new: nothing read */
        uint64_t bytes = ep_perf_map_stats(m)->bytes;

        append(fd, "o\n3000 10 three\n");
        CHECK_INT(ep_perf_map_read(m, fd, &changed), 0);
        CHECK(changed);
        CHECK_STR(name_at(m, 0x2000), "two"); /* completed: the complete line wins */
        CHECK_STR(name_at(m, 0x3000), "three");
        CHECK_STR(name_at(m, 0x1000), "one");
        /* Only the appended part (and the unfinished line) was read again. */
        CHECK_INT(ep_perf_map_stats(m)->bytes - bytes, strlen("2000 10 two\n3000 10 three\n"));
        CHECK_INT(ep_perf_map_stats(m)->malformed, 0);

        /* Rewritten shorter: read again from the start, the old table is gone. */
        CHECK_INT(ftruncate(fd, 0), 0);
        append(fd, "4000 10 four\n");
        CHECK_INT(ep_perf_map_read(m, fd, &changed), 0);
        CHECK(changed);
        CHECK_INT(ep_perf_map_stats(m)->rereads, 1);
        CHECK(name_at(m, 0x1000) == NULL);
        CHECK_STR(name_at(m, 0x4000), "four");
}

/* Lines cross the parser's 64 KiB read chunks; an over-long line spans chunks and reads. */
static void test_big_file(void) {
        _cleanup_(ep_perf_map_freep) EpPerfMap *m = NULL;
        _cleanup_close_ int fd = memfd_with("");
        char line[128];
        enum { N = 20000 };

        for (unsigned i = 0; i < N; i++) {
                snprintf(line, sizeof line, "%x %x JS:*function_number_%u /some/path/file.js:%u\n",
                         0x100000 + 0x40 * i, 0x30, i, i);
                append(fd, line);
        }
        CHECK_INT(ep_perf_map_new(NULL, &m), 0);
        CHECK_INT(ep_perf_map_read(m, fd, NULL), 0);
        CHECK_INT(ep_perf_map_entries(m), N);
        for (unsigned i = 0; i < N; i++) {
                char expect[128];
                snprintf(expect, sizeof expect, "JS:*function_number_%u /some/path/file.js:%u", i, i);
                CHECK_STR(name_at(m, 0x100000 + 0x40 * i + 0x2f), expect);
                CHECK(name_at(m, 0x100000 + 0x40 * i + 0x30) == NULL);
        }

        /* A line of 200 KiB, split over two reads, then a good one. */
        _cleanup_free_ char *huge = malloc(200 << 10);
        CHECK(huge);
        memset(huge, 'x', 200 << 10);
        memcpy(huge, "a00000 10 ", 10);
        huge[(100 << 10)] = 0;
        append(fd, huge);
        CHECK_INT(ep_perf_map_read(m, fd, NULL), 0);
        memset(huge, 'x', 100 << 10);
        huge[(100 << 10) - 1] = '\n';
        huge[100 << 10] = 0;
        append(fd, huge);
        append(fd, "b00000 10 after the huge line\n");
        CHECK_INT(ep_perf_map_read(m, fd, NULL), 0);
        CHECK(name_at(m, 0xa00000) == NULL);
        CHECK_STR(name_at(m, 0xb00000), "after the huge line");
        CHECK_INT(ep_perf_map_stats(m)->malformed, 1);
        CHECK_INT(ep_perf_map_entries(m), N + 1);
}

/* ---- the resolver ---- */

static int map_fd = -EBADF;          /* pid 100's map, appended to by the test */
static unsigned opens[4];

static int fake_open_file(void *userdata, const uint8_t id[EP_FILE_ID_SIZE]) {
        return -ENOENT;
}

static int fake_open_perf_map(void *userdata, uint32_t pid) {
        switch (pid) {
        case 100:
                opens[0]++;
                return fcntl(map_fd, F_DUPFD_CLOEXEC, 3);
        case 200:
                opens[1]++;
                return -ENOENT;
        case 300:
                opens[2]++;
                return -EPERM;
        default:
                opens[3]++;
                return -ESRCH;
        }
}

static const EpSymResult *jit(EpResolver *r, uint32_t pid, uint64_t start_time, uint64_t addr, uint8_t flags) {
        EpSymRequest req = { .kind = EP_FRAME_UNMAPPED, .flags = flags, .addr = addr, .pid = pid,
                             .start_time_ns = start_time };
        const EpSymResult *res = NULL;

        CHECK_INT(ep_resolver_symbolize(r, &req, &res), 0);
        CHECK(res);
        return res;
}

static void check_named(const EpSymResult *res, uint64_t addr, const char *name) {
        CHECK_INT(res->status, EP_SYM_OK);
        CHECK_U64(res->elf_addr, addr);
        CHECK_STR(res->module, "");
        CHECK_INT(res->n_lines, 1);
        CHECK_STR(res->lines[0].function, name);
        CHECK_STR(res->lines[0].file, "");
        CHECK_INT(res->lines[0].line, 0);
}

static void test_resolver(void) {
        EpFileSource src = { .open_file = fake_open_file, .open_perf_map = fake_open_perf_map };
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;
        EpSymStats stats = {};
        EpJitStats js;

        map_fd = memfd_with("7f0000001000 100 LazyCompile:*hotLoop /tmp/x.js:3\n"
                            "7f0000002000 40 py::fib:/path/file.py\n"
                            "bad line\n");
        CHECK_INT(ep_resolver_new(&src, NULL, &stats, &r), 0);

        check_named(jit(r, 100, 5, 0x7f0000001010, 0), 0x7f0000001010, "LazyCompile:*hotLoop /tmp/x.js:3");
        check_named(jit(r, 100, 5, 0x7f0000002000, 0), 0x7f0000002000, "py::fib:/path/file.py");
        /* A return address just past the end of the code belongs to it. */
        check_named(jit(r, 100, 5, 0x7f0000002040, EP_FRAME_FLAG_RETURN_ADDRESS), 0x7f0000002040,
                    "py::fib:/path/file.py");
        CHECK_INT(jit(r, 100, 5, 0x7f0000002040, 0)->status, EP_SYM_NOT_FOUND);
        CHECK_INT(opens[0], 1);
        ep_resolver_jit_stats(r, &js);
        CHECK_INT(js.maps_opened, 1);
        CHECK_INT(js.lines_malformed, 1);
        CHECK_INT(js.entries, 2);
        CHECK_INT(js.processes, 1);

        /* The JIT writes more: a miss reads it, at most once a second (EP_JIT_REREAD_NS, on the
         * test's clock, which moves only when told), and misses are not cached. */
        append(map_fd, "7f0000003000 10 LazyCompile:*later /tmp/x.js:9\n");
        CHECK_INT(jit(r, 100, 5, 0x7f0000003000, 0)->status, EP_SYM_NOT_FOUND);
        tests_clock_advance(EP_JIT_REREAD_NS - 1);
        CHECK_INT(jit(r, 100, 5, 0x7f0000003000, 0)->status, EP_SYM_NOT_FOUND);
        ep_resolver_jit_stats(r, &js);
        CHECK_INT(js.reads, 1);
        tests_clock_advance(1);
        check_named(jit(r, 100, 5, 0x7f0000003000, 0), 0x7f0000003000, "LazyCompile:*later /tmp/x.js:9");
        CHECK_INT(opens[0], 1); /* the same descriptor, read incrementally */
        ep_resolver_jit_stats(r, &js);
        CHECK_INT(js.reads, 2);
        CHECK_INT(js.entries, 3);

        /* The same pid with another start time is another process: its own map. */
        check_named(jit(r, 100, 6, 0x7f0000001000, 0), 0x7f0000001000, "LazyCompile:*hotLoop /tmp/x.js:3");
        CHECK_INT(opens[0], 2);

        /* No map: NO_FILE, and the source is not asked again for a while. */
        CHECK_INT(jit(r, 200, 1, 0x1000, 0)->status, EP_SYM_NO_FILE);
        CHECK_INT(jit(r, 200, 1, 0x2000, 0)->status, EP_SYM_NO_FILE);
        CHECK_INT(opens[1], 1);
        tests_clock_advance(EP_JIT_MISSING_RETRY_NS - 1);
        CHECK_INT(jit(r, 200, 1, 0x3000, 0)->status, EP_SYM_NO_FILE);
        CHECK_INT(opens[1], 1);
        tests_clock_advance(1); /* the JIT may have created it since: asked again */
        CHECK_INT(jit(r, 200, 1, 0x3000, 0)->status, EP_SYM_NO_FILE);
        CHECK_INT(opens[1], 2);
        /* Refused (not owned by the process's user, a symlink, too big): BAD_FILE. */
        CHECK_INT(jit(r, 300, 1, 0x1000, 0)->status, EP_SYM_BAD_FILE);
        CHECK_INT(jit(r, 300, 1, 0x1000, 0)->status, EP_SYM_BAD_FILE);
        CHECK_INT(opens[2], 1);
        /* Gone: NO_FILE. */
        CHECK_INT(jit(r, 400, 1, 0x1000, 0)->status, EP_SYM_NO_FILE);
        ep_resolver_jit_stats(r, &js);
        CHECK_INT(js.maps_missing, 3); /* 200 twice, 400 */
        CHECK_INT(js.maps_refused, 1);

        /* The loader came back: processes without a map are asked again. */
        ep_resolver_source_changed(r);
        CHECK_INT(jit(r, 200, 1, 0x1000, 0)->status, EP_SYM_NO_FILE);
        CHECK_INT(opens[1], 3);

        /* Hits are cached by (pid, start time, address); the map is not read for them. */
        uint64_t hits = stats.cache_hits;
        check_named(jit(r, 100, 5, 0x7f0000001010, 0), 0x7f0000001010, "LazyCompile:*hotLoop /tmp/x.js:3");
        CHECK_INT(stats.cache_hits, hits + 1);

        close(map_fd);
        map_fd = -EBADF;
}

static void test_no_source(void) {
        EpFileSource src = { .open_file = fake_open_file };
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;

        CHECK_INT(ep_resolver_new(&src, NULL, NULL, &r), 0);
        /* As with the loader away: a passing failure, not remembered. */
        CHECK_INT(jit(r, 100, 1, 0x1000, 0)->status, EP_SYM_RETRY);
}

/* More processes than the LRU keeps: the oldest maps are closed, the answers stay right. */
static void test_many_processes(void) {
        EpFileSource src = { .open_file = fake_open_file, .open_perf_map = fake_open_perf_map };
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;
        EpJitStats js;

        map_fd = memfd_with("1000 10 f\n");
        CHECK_INT(ep_resolver_new(&src, NULL, NULL, &r), 0);
        for (uint64_t t = 1; t <= 3 * EP_JIT_MAX_PROCESSES; t++)
                check_named(jit(r, 100, t, 0x1000, 0), 0x1000, "f");
        ep_resolver_jit_stats(r, &js);
        CHECK_INT(js.processes, EP_JIT_MAX_PROCESSES);
        CHECK_INT(js.entries, EP_JIT_MAX_PROCESSES);
        close(map_fd);
        map_fd = -EBADF;
}

int main(void) {
        ep_clock_set(tests_clock);
        test_valid_lines();
        test_overlaps();
        test_malformed();
        test_huge_sizes();
        test_random_against_naive();
        test_limits();
        test_growth();
        test_big_file();
        test_resolver();
        test_no_source();
        test_many_processes();
        TEST_DONE("test-symbolizer-perf-map");
}
