/* SPDX-License-Identifier: MIT */
/* ELF symbolization against a program built with known functions (test-symbolizer-target.c),
 * not stripped and stripped (.dynsym only). File offsets come from the running target itself
 * (its /proc/self/maps), exactly as the loader computes them, so the test does not share the
 * code under test for the expected values. */

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "dwarf-lines.h"
#include "elf-symbols.h"
#include "native-file.h"
#include "resolver.h"
#include "test-util.h"
#include "tests.h"

#define MAX_NAMES 16

static TestOffset offsets[MAX_NAMES];
static size_t n_offsets;

static uint64_t offset_of(const char *name) {
        for (size_t i = 0; i < n_offsets; i++)
                if (streq(offsets[i].name, name))
                        return offsets[i].offset;
        TEST_FAIL("the target did not print %s", name);
}

static void read_offsets(const char *target) {
        n_offsets = test_target_offsets(target, offsets, MAX_NAMES);
        CHECK_INT(n_offsets, 8);
}

static EpElfFile *open_elf(const char *path) {
        EpElfFile *f = NULL;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        CHECK(fd >= 0);
        CHECK_INT(ep_elf_open(fd, &f), 0);
        return f;
}

static uint64_t vaddr_of(EpElfFile *f, const char *name) {
        uint64_t v = 0;
        CHECK_INT(ep_elf_offset_to_vaddr(f, offset_of(name), &v), 0);
        return v;
}

static void check_lookup(EpElfFile *f, uint64_t vaddr, const char *expect, uint64_t expect_start) {
        _cleanup_free_ char *name = NULL;
        uint64_t start = 0;
        int r = ep_elf_lookup(f, vaddr, &name, &start);

        if (!expect) {
                if (r == 0)
                        TEST_FAIL("0x%" PRIx64 " resolved to %s, expected nothing", vaddr, name);
                CHECK_INT(r, -ENOENT);
                return;
        }
        if (r < 0)
                TEST_FAIL("0x%" PRIx64 ": %s, expected %s", vaddr, strerror(-r), expect);
        CHECK_STR(name, expect);
        if (expect_start)
                CHECK_U64(start, expect_start);
}

static void check_functions(EpElfFile *f, bool stripped) {
        static const char *const names[] = {
                "sym_test_alpha", "sym_test_beta", "sym_test_local", "sym_test_gamma", "sym_test_caller", "sym_test_after",
        };

        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                uint64_t v = vaddr_of(f, names[i]);

                if (stripped && streq(names[i], "sym_test_local")) {
                        /* Static: not in .dynsym; the sized symbol before it does not cover it. */
                        _cleanup_free_ char *name = NULL;
                        if (ep_elf_lookup(f, v, &name, NULL) == 0)
                                CHECK(!streq(name, "sym_test_local"));
                        continue;
                }
                check_lookup(f, v, names[i], v);
                check_lookup(f, v + 1, names[i], v);
                check_lookup(f, v + 5, names[i], v);
        }

        /* Neighbours: the functions are packed back to back. */
        check_lookup(f, vaddr_of(f, "sym_test_beta") - 1, "sym_test_alpha", vaddr_of(f, "sym_test_alpha"));
        if (!stripped)
                check_lookup(f, vaddr_of(f, "sym_test_gamma") - 1, "sym_test_local", vaddr_of(f, "sym_test_local"));
        check_lookup(f, vaddr_of(f, "sym_test_after") - 1, "sym_test_caller", vaddr_of(f, "sym_test_caller"));
        check_lookup(f, vaddr_of(f, "ret_in_beta"), "sym_test_beta", vaddr_of(f, "sym_test_beta"));
        check_lookup(f, vaddr_of(f, "ret_after_noreturn"), "sym_test_after", vaddr_of(f, "sym_test_after"));

        /* Nothing below the first function, nothing far above the last. */
        check_lookup(f, 1, NULL, 0);
        check_lookup(f, UINT64_MAX - 16, NULL, 0);

        /* An offset no segment maps. */
        uint64_t v;
        CHECK_INT(ep_elf_offset_to_vaddr(f, UINT64_MAX / 2, &v), -ENOENT);

        size_t count = 0;
        const char *table = NULL;
        CHECK_INT(ep_elf_symbol_count(f, &count, &table), 0);
        CHECK_STR(table, stripped ? ".dynsym" : ".symtab");
        CHECK(count >= 7);
        printf("%s: %zu function symbols from %s\n", stripped ? "stripped" : "unstripped", count, table);

        EpBuildIds ids;
        static const uint8_t expect_gnu[] = { 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23,
                                              0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67 };
        CHECK_INT(ep_elf_build_ids(f, &ids), 0);
        CHECK_INT(ids.gnu_len, sizeof expect_gnu);
        CHECK(memcmp(ids.gnu, expect_gnu, sizeof expect_gnu) == 0);
        CHECK_STR(ids.go, "test-go-build-id");
}

/* ---- PLT stubs ---- */

static char *native_name(EpElfFile *f, uint64_t vaddr) {
        EpSymLine *lines = NULL;
        size_t n = 0;
        char *name;

        if (ep_native_symbolize(f, NULL, vaddr, &lines, &n) < 0)
                return NULL;
        name = strdup(lines[0].function);
        ep_sym_lines_free(lines, n);
        return name;
}

/* Every stub objdump names (its own reading of .plt, .plt.sec and .plt.got) has that name,
 * at its start and inside; an ifunc's stub, which objdump calls "*ABS*+0x…@plt", is named
 * after the ifunc. Returns how many stubs were checked. */
static size_t check_plt_as_objdump(const char *path) {
        _cleanup_(ep_elf_freep) EpElfFile *f = open_elf(path);
        char cmd[4096], line[1024];
        size_t checked = 0, ifuncs = 0;

        snprintf(cmd, sizeof cmd, "objdump -d -j .plt -j .plt.sec -j .plt.got '%s'", path);
        FILE *p = popen(cmd, "r");
        CHECK(p);
        while (fgets(line, sizeof line, p)) {
                unsigned long long addr;
                char name[512];

                if (sscanf(line, "%llx <%511[^>]>:", &addr, name) != 2 || !endswith(name, "@plt"))
                        continue;
                for (uint64_t inside = 0; inside < 8; inside += 5) {
                        _cleanup_free_ char *ours = native_name(f, addr + inside);
                        if (!ours)
                                TEST_FAIL("%s: stub %s at 0x%llx unnamed", path, name, addr + inside);
                        if (startswith(name, "*ABS*")) {
                                CHECK(endswith(ours, "@plt") && !startswith(ours, "*ABS*") && ours[0] != '@');
                                ifuncs++;
                        } else
                                CHECK_STR(ours, name);
                }
                checked++;
        }
        CHECK_INT(pclose(p), 0);
        printf("%s: %zu PLT stubs named as objdump names them (%zu ifunc stubs)\n", path, checked, ifuncs / 2);
        return checked;
}

static void check_plt(const char *target, const char *ibt_target) {
        CHECK(check_plt_as_objdump(target) >= 5);
        CHECK(check_plt_as_objdump(ibt_target) >= 5);
        CHECK(check_plt_as_objdump("/usr/lib/x86_64-linux-gnu/libc.so.6") >= 1);

        /* The resolver's entry, first in .plt; with IBT, .plt's lazy stubs (which objdump
         * leaves unnamed) are named after the function of the .rela.plt entry they push. */
        _cleanup_(ep_elf_freep) EpElfFile *f = open_elf(ibt_target);
        GElf_Shdr plt, sec;
        CHECK(ep_elf_section(f, ".plt", &plt));
        CHECK(ep_elf_section(f, ".plt.sec", &sec));
        _cleanup_free_ char *resolver = native_name(f, plt.sh_addr + 4);
        CHECK_STR(resolver, ".plt");
        _cleanup_free_ char *lazy = native_name(f, plt.sh_addr + 16);
        _cleanup_free_ char *first = native_name(f, sec.sh_addr);
        CHECK(lazy && first);
        CHECK_STR(lazy, first);
        /* An address past the stubs is not a stub. */
        _cleanup_free_ char *past = native_name(f, sec.sh_addr + sec.sh_size);
        CHECK(!past || !endswith(past, "@plt"));
}

/* ---- the resolver over a fake file source ---- */

static const char *paths[8];

static int fake_open_file(void *userdata, const uint8_t id[EP_FILE_ID_SIZE]) {
        if (id[0] >= ELEMENTSOF(paths) || !paths[id[0]])
                return -ENOENT;
        int fd = open(paths[id[0]], O_RDONLY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static const char kallsyms_text[] = "ffffffff81000000 T _stext\n"
                                    "ffffffff81000100 T do_one_thing\n"
                                    "ffffffff81000200 t helper\n"
                                    "ffffffffc0001000 t mod_func\t[mymod]\n";

static int fake_open_kallsyms(void *userdata) {
        return test_memfd_with("kallsyms", kallsyms_text);
}

static const EpSymResult *sym(EpResolver *r, uint8_t kind, uint8_t file, uint64_t addr, uint8_t flags) {
        EpSymRequest req = { .kind = kind, .flags = flags, .file_id = { file }, .addr = addr };
        const EpSymResult *res = NULL;
        CHECK_INT(ep_resolver_symbolize(r, &req, &res), 0);
        CHECK(res);
        return res;
}

static uint64_t file_size(const char *path) {
        struct stat st;

        CHECK(stat(path, &st) == 0);
        return (uint64_t) st.st_size;
}

/* What the resolver charges an open file: what it keeps resident for its symbols. */
static uint64_t kept_bytes(const char *path) {
        _cleanup_(ep_elf_freep) EpElfFile *f = NULL;
        int fd = open(path, O_RDONLY | O_CLOEXEC);

        CHECK(fd >= 0);
        CHECK_INT(ep_elf_open(fd, &f), 0);
        return ep_elf_kept_bytes(f);
}

/* Open files are bounded by what they keep resident for their symbols together too
 * (max_file_bytes): a second file that does not fit closes the least recently used one, which
 * opens again, with the same answers, when a new address in it is asked for. The charge is
 * the symbol and string tables plus 16 bytes a function, never the file's size. */
static void check_file_budget(const char *target, const char *stripped) {
        EpFileSource src = { .open_file = fake_open_file, .open_kallsyms = fake_open_kallsyms };
        EpResolverConfig cfg = EP_RESOLVER_CONFIG_DEFAULT;
        EpSymStats stats = {};
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;
        uint64_t beta = offset_of("sym_test_beta"), gamma = offset_of("sym_test_gamma");

        paths[1] = target;
        paths[2] = stripped;
        uint64_t kept_target = kept_bytes(target), kept_stripped = kept_bytes(stripped);
        CHECK(kept_target > 0 && kept_stripped > 0);
        CHECK(kept_target < file_size(target) && kept_stripped < file_size(stripped));
        cfg.max_file_bytes = MAX(kept_target, kept_stripped);
        CHECK(kept_target + kept_stripped > cfg.max_file_bytes);
        CHECK_INT(ep_resolver_new(&src, &cfg, &stats, &r), 0);

        CHECK_STR(sym(r, EP_FRAME_NATIVE, 1, beta, 0)->lines[0].function, "sym_test_beta");
        CHECK_INT(ep_resolver_files_open(r), 1);
        CHECK_STR(sym(r, EP_FRAME_NATIVE, 2, beta, 0)->lines[0].function, "sym_test_beta");
        CHECK_INT(ep_resolver_files_open(r), 1); /* the target was closed */
        CHECK_STR(sym(r, EP_FRAME_NATIVE, 1, gamma, 0)->lines[0].function, "sym_test_gamma");
        CHECK_INT(ep_resolver_files_open(r), 1);
        CHECK_STR(sym(r, EP_FRAME_NATIVE, 1, beta, 0)->lines[0].function, "sym_test_beta"); /* cached */

        /* Room for both: both stay open. */
        r = ep_resolver_free(r);
        cfg.max_file_bytes = kept_target + kept_stripped;
        CHECK_INT(ep_resolver_new(&src, &cfg, &stats, &r), 0);
        CHECK_STR(sym(r, EP_FRAME_NATIVE, 1, beta, 0)->lines[0].function, "sym_test_beta");
        CHECK_STR(sym(r, EP_FRAME_NATIVE, 2, beta, 0)->lines[0].function, "sym_test_beta");
        CHECK_INT(ep_resolver_files_open(r), 2);
}

static void check_resolver(const char *target, const char *stripped, EpElfFile *elf) {
        EpFileSource src = { .open_file = fake_open_file, .open_kallsyms = fake_open_kallsyms };
        EpResolverConfig cfg = EP_RESOLVER_CONFIG_DEFAULT;
        EpSymStats stats = {};
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;
        const EpSymResult *res;
        char bad[] = "/tmp/test-symbolizer-bad-XXXXXX";

        int fd = mkstemp(bad);
        CHECK(fd >= 0);
        CHECK(write(fd, "this is not an ELF file at all, just some text\n", 47) == 47);
        close(fd);

        paths[1] = target;
        paths[2] = stripped;
        paths[4] = bad;
        cfg.max_files = 2; /* exercise eviction */
        CHECK_INT(ep_resolver_new(&src, &cfg, &stats, &r), 0);

        uint64_t off = offset_of("sym_test_beta");
        res = sym(r, EP_FRAME_NATIVE, 1, off + 3, 0);
        CHECK_INT(res->status, EP_SYM_OK);
        CHECK_INT(res->n_lines, 1);
        CHECK_STR(res->lines[0].function, "sym_test_beta");
        if (ep_dwarf_present(elf)) {
                /* Built with -g (the default debugoptimized build type): a line from DWARF. */
                const char *file = res->lines[0].file;
                CHECK(strlen(file) > 24 && streq(file + strlen(file) - 24, "test-symbolizer-target.c"));
                CHECK(res->lines[0].line > 0);
        } else {
                CHECK_STR(res->lines[0].file, "");
                CHECK_INT(res->lines[0].line, 0);
        }
        CHECK_STR(res->module, "");
        /* The stripped copy: a name from .dynsym, no line. */
        res = sym(r, EP_FRAME_NATIVE, 2, off + 3, 0);
        CHECK_INT(res->status, EP_SYM_OK);
        CHECK_INT(res->n_lines, 1);
        CHECK_STR(res->lines[0].function, "sym_test_beta");
        CHECK_STR(res->lines[0].file, "");
        CHECK_INT(res->lines[0].line, 0);
        CHECK_U64(res->elf_addr, vaddr_of(elf, "sym_test_beta") + 3);

        /* Same again: a cache hit. */
        res = sym(r, EP_FRAME_NATIVE, 1, off + 3, 0);
        CHECK_STR(res->lines[0].function, "sym_test_beta");
        CHECK_INT(stats.cache_hits, 1);

        /* A return address right after a noreturn call names the caller only with the flag. */
        off = offset_of("ret_after_noreturn");
        res = sym(r, EP_FRAME_NATIVE, 1, off, 0);
        CHECK_STR(res->lines[0].function, "sym_test_after");
        res = sym(r, EP_FRAME_NATIVE, 1, off, EP_FRAME_FLAG_RETURN_ADDRESS);
        CHECK_STR(res->lines[0].function, "sym_test_caller");
        CHECK_U64(res->elf_addr, vaddr_of(elf, "ret_after_noreturn")); /* the address as given */
        res = sym(r, EP_FRAME_NATIVE, 2, off, EP_FRAME_FLAG_RETURN_ADDRESS);
        CHECK_STR(res->lines[0].function, "sym_test_caller");
        res = sym(r, EP_FRAME_NATIVE, 1, offset_of("ret_in_beta"), EP_FRAME_FLAG_RETURN_ADDRESS);
        CHECK_STR(res->lines[0].function, "sym_test_beta");

        /* Statuses. */
        CHECK_INT(sym(r, EP_FRAME_NATIVE, 3, 0x1000, 0)->status, EP_SYM_NO_FILE);
        CHECK_INT(sym(r, EP_FRAME_NATIVE, 4, 0x10, 0)->status, EP_SYM_BAD_FILE);
        CHECK_INT(sym(r, EP_FRAME_NATIVE, 4, 0x20, 0)->status, EP_SYM_BAD_FILE); /* remembered */
        res = sym(r, EP_FRAME_NATIVE, 1, UINT64_MAX / 2, 0);
        CHECK_INT(res->status, EP_SYM_NOT_FOUND);
        CHECK_INT(res->n_lines, 0);
        /* No perf-map provider in this source (as with the loader away): resolve-jit.c
         * answers RETRY, a passing failure. */
        CHECK_INT(sym(r, EP_FRAME_UNMAPPED, 0, 0x1234, 0)->status, EP_SYM_RETRY);

        /* Eviction (2 files) and reopening give the same answers. */
        res = sym(r, EP_FRAME_NATIVE, 1, offset_of("sym_test_gamma") + 1, 0);
        CHECK_STR(res->lines[0].function, "sym_test_gamma");
        CHECK(ep_resolver_files_open(r) <= 2);

        /* Kernel frames. */
        res = sym(r, EP_FRAME_KERNEL, 0, 0xffffffff81000180, 0);
        CHECK_INT(res->status, EP_SYM_OK);
        CHECK_STR(res->lines[0].function, "do_one_thing");
        CHECK_STR(res->module, "");
        CHECK_U64(res->elf_addr, 0xffffffff81000180);
        res = sym(r, EP_FRAME_KERNEL, 0, 0xffffffff81000200, EP_FRAME_FLAG_RETURN_ADDRESS);
        CHECK_STR(res->lines[0].function, "do_one_thing");
        res = sym(r, EP_FRAME_KERNEL, 0, 0xffffffffc0001010, 0);
        CHECK_STR(res->lines[0].function, "mod_func");
        CHECK_STR(res->module, "mymod");
        CHECK_INT(sym(r, EP_FRAME_KERNEL, 0, 0x1000, 0)->status, EP_SYM_NOT_FOUND);

        /* File info. */
        EpFileInfo info;
        uint8_t id[EP_FILE_ID_SIZE] = { 2 };
        CHECK_INT(ep_resolver_file_info(r, id, &info), 0);
        CHECK_INT(info.status, EP_SYM_OK);
        CHECK_INT(info.ids.gnu_len, 20);
        CHECK_STR(info.ids.go, "test-go-build-id");
        id[0] = 4;
        CHECK_INT(ep_resolver_file_info(r, id, &info), 0);
        CHECK_INT(info.status, EP_SYM_BAD_FILE);
        id[0] = 5;
        CHECK_INT(ep_resolver_file_info(r, id, &info), 0);
        CHECK_INT(info.status, EP_SYM_NO_FILE);

        CHECK(stats.resolved >= 8);
        CHECK(stats.not_found >= 2); /* outside every PT_LOAD, no symbol covers it */
        CHECK(stats.file_errors >= 5);
        CHECK(ep_resolver_cache_entries(r) > 0);
        unlink(bad);
}

/* A source that fails with passing_error for the next `failures` opens, then opens file 1. */
static int passing_error, failures, flaky_opens;

static int flaky_open_file(void *userdata, const uint8_t id[EP_FILE_ID_SIZE]) {
        flaky_opens++;
        if (failures > 0) {
                failures--;
                return passing_error;
        }
        return fake_open_file(userdata, id);
}

/* A loader call that timed out (or any passing failure) is not an answer: RETRY, remembered
 * nowhere (not the result LRU, not the file LRU), so the next request opens the file and names
 * the frame. A definite failure (no such file) is NO_FILE. Fails on code that answered NO_FILE
 * and remembered the file as missing. */
static void check_passing_failures(const char *target) {
        static const int errors[] = { -ETIMEDOUT, -ENXIO, -EAGAIN, -EMFILE, -EBADMSG };
        EpFileSource src = { .open_file = flaky_open_file, .open_kallsyms = fake_open_kallsyms };
        uint64_t beta = offset_of("sym_test_beta");

        paths[1] = target;
        ep_clock_set(tests_clock);
        for (size_t i = 0; i < ELEMENTSOF(errors); i++) {
                _cleanup_(ep_resolver_freep) EpResolver *r = NULL;
                EpSymStats stats = {};
                EpFileInfo info;

                CHECK_INT(ep_resolver_new(&src, NULL, &stats, &r), 0);
                passing_error = errors[i];
                failures = 2;
                flaky_opens = 0;
                CHECK_INT(sym(r, EP_FRAME_NATIVE, 1, beta, 0)->status, EP_SYM_RETRY);
                CHECK_INT(ep_resolver_file_info(r, (uint8_t[EP_FILE_ID_SIZE]) { 1 }, &info), 0);
                CHECK_INT(info.status, EP_SYM_RETRY);
                CHECK_INT(ep_resolver_cache_entries(r), 0);
                CHECK_INT(stats.retry_answers, 2);
                CHECK_INT(stats.file_errors, 0);
                /* A source that timed out is not asked again for a second (a batch of requests
                 * must not cost a call timeout each); other failures are asked again at once. */
                bool timed_out = errors[i] == -ETIMEDOUT;
                CHECK_INT(flaky_opens, timed_out ? 1 : 2);
                if (timed_out) {
                        failures = 0;
                        CHECK_INT(sym(r, EP_FRAME_NATIVE, 1, beta, 0)->status, EP_SYM_RETRY);
                        CHECK_INT(flaky_opens, 1);
                        tests_clock_advance(EP_RESOLVER_CONFIG_DEFAULT.timeout_hold_ns);
                }
                /* asked again: the source answers, the frame is named */
                CHECK_STR(sym(r, EP_FRAME_NATIVE, 1, beta, 0)->lines[0].function, "sym_test_beta");
                CHECK_INT(flaky_opens, timed_out ? 2 : 3);
                CHECK_INT(ep_resolver_file_info(r, (uint8_t[EP_FILE_ID_SIZE]) { 1 }, &info), 0);
                CHECK_INT(info.status, EP_SYM_OK);
        }

        /* A file no process maps any more is a definite answer. */
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;
        CHECK_INT(ep_resolver_new(&src, NULL, NULL, &r), 0);
        passing_error = -ENOENT;
        failures = 1;
        CHECK_INT(sym(r, EP_FRAME_NATIVE, 1, beta, 0)->status, EP_SYM_NO_FILE);
        ep_clock_set(NULL);
}

int main(void) {
        const char *target = test_env("SYM_TEST_TARGET");
        const char *stripped = test_env("SYM_TEST_TARGET_STRIPPED");
        const char *ibt = test_env("SYM_TEST_TARGET_IBT");

        read_offsets(target);

        _cleanup_(ep_elf_freep) EpElfFile *f = open_elf(target);
        check_functions(f, false);
        _cleanup_(ep_elf_freep) EpElfFile *s = open_elf(stripped);
        check_functions(s, true);
        check_plt(target, ibt);

        check_resolver(target, stripped, f);
        check_file_budget(target, stripped);
        check_passing_failures(target);

        TEST_DONE("test-symbolizer-elf");
}
