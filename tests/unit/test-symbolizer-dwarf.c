/* SPDX-License-Identifier: MIT */
/* Native symbolization beyond symbol tables: DWARF inline chains and lines, separate debug
 * files (by .gnu_debuglink and by build ID under a temporary debug root, wrong ones refused),
 * demangling (C++ templates, Rust, libLLVM's .dynsym), bounded Dwarf handles, and malformed
 * DWARF. Expected values come from the source's LINE: markers and from binutils (`nm` for
 * addresses, `addr2line -i -f -C` for whole chains), never from the code under test. */

#include <fcntl.h>
#include <gelf.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "debug-file.h"
#include "demangle.h"
#include "dwarf-lines.h"
#include "elf-symbols.h"
#include "log.h"
#include "resolver.h"
#include "test-util.h"

/* ---- helpers: the program's own facts ---- */

static const char *source;

/* Line of the "LINE:name" marker in the source. */
static uint32_t marker_line(const char *name) {
        char want[128], buf[512];
        uint32_t n = 0;

        snprintf(want, sizeof want, "LINE:%s ", name);
        FILE *f = fopen(source, "re");
        CHECK(f);
        while (fgets(buf, sizeof buf, f)) {
                n++;
                if (strstr(buf, want)) {
                        fclose(f);
                        return n;
                }
        }
        fclose(f);
        TEST_FAIL("no marker %s in %s", name, source);
}

/* Address of the first symbol whose name contains part, from `nm` (binutils). */
static uint64_t nm_address(const char *path, const char *part, bool dynamic, char *ret_name, size_t name_size) {
        char cmd[4096], line[4096];
        uint64_t found = 0;

        snprintf(cmd, sizeof cmd, "nm %s --defined-only '%s' 2>/dev/null", dynamic ? "-D" : "", path);
        FILE *p = popen(cmd, "r");
        CHECK(p);
        while (fgets(line, sizeof line, p)) {
                unsigned long long a;
                char type, name[2048];
                if (sscanf(line, "%llx %c %2047s", &a, &type, name) == 3 && (type == 'T' || type == 't' || type == 'W') &&
                    strstr(name, part) && !found) {
                        found = a;
                        if (ret_name)
                                snprintf(ret_name, name_size, "%s", name);
                }
        }
        pclose(p);
        if (!found)
                TEST_FAIL("nm found no %s in %s", part, path);
        return found;
}

/* Size of the symbol named name, from `nm -S` (binutils). */
static uint64_t nm_size(const char *path, const char *name) {
        char cmd[4096];
        unsigned long long size = 0;

        snprintf(cmd, sizeof cmd, "nm -S '%s' | awk '$4 == \"%s\" { print $2 }'", path, name);
        FILE *p = popen(cmd, "r");
        CHECK(p);
        CHECK(fscanf(p, "%llx", &size) == 1);
        pclose(p);
        CHECK(size > 0);
        return size;
}

/* ---- a resolver over named files ---- */

static const char *files[8];

static int open_by_id(void *userdata, const uint8_t id[EP_FILE_ID_SIZE]) {
        if (id[0] >= ELEMENTSOF(files) || !files[id[0]])
                return -ENOENT;
        int fd = open(files[id[0]], O_RDONLY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static EpResolver *new_resolver(void) {
        EpFileSource src = { .open_file = open_by_id };
        EpResolver *r = NULL;

        CHECK_INT(ep_resolver_new(&src, NULL, NULL, &r), 0);
        return r;
}

/* Symbolizes vaddr of file slot (whose path is files[slot]); path_hint is what the request
 * carries. */
static const EpSymResult *sym(EpResolver *r, uint8_t slot, uint64_t vaddr, bool return_address, const char *path_hint) {
        EpSymRequest req = {
                .kind = EP_FRAME_NATIVE,
                .flags = return_address ? EP_FRAME_FLAG_RETURN_ADDRESS : 0,
                .file_id = { slot, 0xd3 },
                .addr = test_file_offset(files[slot], vaddr),
                .path = path_hint,
        };
        const EpSymResult *res = NULL;

        CHECK_INT(ep_resolver_symbolize(r, &req, &res), 0);
        CHECK(res);
        return res;
}

static void print_result(const EpSymResult *res) {
        fprintf(stderr, "status %u, %u lines:\n", res->status, res->n_lines);
        for (unsigned i = 0; i < res->n_lines; i++)
                fprintf(stderr, "  %s at %s:%u\n", res->lines[i].function, res->lines[i].file, res->lines[i].line);
}

/* ---- the inline chain ---- */

/* ic_inner → ic_middle → ic_outer → ic_spin at the ic_inner_mark instruction. */
static void check_chain(const EpSymResult *res) {
        static const char *const names[] = { "ic_inner", "ic_middle", "ic_outer", "ic_spin" };
        const uint32_t lines[] = { marker_line("inner-mark"), marker_line("middle-call"), marker_line("outer-call"),
                                   marker_line("spin-call") };

        if (res->status != EP_SYM_OK || res->n_lines != 4)
                print_result(res);
        CHECK_INT(res->status, EP_SYM_OK);
        CHECK_INT(res->n_lines, 4);
        for (unsigned i = 0; i < 4; i++) {
                CHECK_STR(res->lines[i].function, names[i]);
                if (!endswith(res->lines[i].file, "tests/workloads/inlinechain.c"))
                        TEST_FAIL("line %u: file %s", i, res->lines[i].file);
                CHECK(res->lines[i].file[0] == '/');
                CHECK_INT(res->lines[i].line, lines[i]);
        }
}

typedef struct A2lFrame {
        char function[2048];
        char file[2048];
        uint32_t line;
} A2lFrame;

/* `addr2line -i -f -C -a` for many addresses at once: frames per address. */
static size_t addr2line(const char *path, const uint64_t *addrs, size_t n, A2lFrame (*out)[16], size_t *n_out) {
        size_t cmd_size = 4096 + n * 24, len;
        char *cmd = malloc(cmd_size), line[2048];
        long idx = -1;

        CHECK(cmd);
        len = (size_t) snprintf(cmd, cmd_size, "addr2line -i -f -C -a -e '%s'", path);
        for (size_t i = 0; i < n; i++)
                len += (size_t) snprintf(cmd + len, cmd_size - len, " 0x%" PRIx64, addrs[i]);
        FILE *p = popen(cmd, "r");
        CHECK(p);
        while (fgets(line, sizeof line, p)) {
                line[strcspn(line, "\n")] = 0;
                if (startswith(line, "0x")) {
                        idx++;
                        CHECK((size_t) idx < n);
                        n_out[idx] = 0;
                        continue;
                }
                CHECK(idx >= 0);
                A2lFrame *f = &out[idx][n_out[idx]];
                snprintf(f->function, sizeof f->function, "%s", line);
                CHECK(fgets(line, sizeof line, p));
                line[strcspn(line, "\n")] = 0;
                char *colon = strrchr(line, ':');
                CHECK(colon);
                *colon = 0;
                snprintf(f->file, sizeof f->file, "%s", line);
                f->line = (uint32_t) strtoul(colon + 1, NULL, 10); /* "?" → 0; " (discriminator N)" ignored */
                if (n_out[idx] < 15)
                        n_out[idx]++;
        }
        pclose(p);
        free(cmd);
        return (size_t) (idx + 1);
}

/* Every instruction byte of ic_spin: our chain must be addr2line's, frame by frame. */
static void check_against_addr2line(EpResolver *r, uint8_t slot, uint64_t start, uint64_t end) {
        size_t n = end - start, agree = 0, inlined = 0;
        uint64_t *addrs = calloc(n, sizeof(uint64_t));
        A2lFrame (*frames)[16] = calloc(n, sizeof *frames);
        size_t *n_frames = calloc(n, sizeof(size_t));

        CHECK(addrs && frames && n_frames);
        for (size_t i = 0; i < n; i++)
                addrs[i] = start + i;
        CHECK_INT(addr2line(files[slot], addrs, n, frames, n_frames), n);

        for (size_t i = 0; i < n; i++) {
                const EpSymResult *res = sym(r, slot, addrs[i], false, NULL);
                bool same = res->status == EP_SYM_OK && res->n_lines == n_frames[i];

                for (size_t k = 0; same && k < n_frames[i]; k++)
                        same = streq(res->lines[k].function, frames[i][k].function) &&
                               res->lines[k].line == frames[i][k].line &&
                               endswith(res->lines[k].file, strrchr(frames[i][k].file, '/') ?: frames[i][k].file);
                if (!same) {
                        fprintf(stderr, "0x%" PRIx64 ": addr2line says\n", addrs[i]);
                        for (size_t k = 0; k < n_frames[i]; k++)
                                fprintf(stderr, "  %s at %s:%u\n", frames[i][k].function, frames[i][k].file,
                                        frames[i][k].line);
                        print_result(res);
                        TEST_FAIL("chains differ");
                }
                agree++;
                inlined += res->n_lines > 1;
        }
        printf("ic_spin: %zu addresses, %zu with inline frames, all equal to addr2line -i\n", agree, inlined);
        CHECK(inlined > n / 2);
        free(addrs);
        free(frames);
        free(n_frames);
}

static void test_inline_chain(const char *prog) {
        _cleanup_(ep_resolver_freep) EpResolver *r = new_resolver();
        uint64_t mark = nm_address(prog, "ic_inner_mark", false, NULL, 0);
        uint64_t spin = nm_address(prog, "ic_spin", false, NULL, 0);

        files[1] = prog;
        const EpSymResult *res = sym(r, 1, mark, false, prog);
        check_chain(res);
        CHECK_U64(res->elf_addr, mark);

        /* The open handle's pages unmapped (as 1 s after a batch): read again, same answers,
         * here and through the whole function below. */
        CHECK(ep_dwarf_open_handles() >= 1);
        ep_dwarf_drop_pages();

        /* Handles used within the idle time stay open; with none, every one is closed, and the
         * next lookup opens its file's again. */
        unsigned open = ep_dwarf_open_handles();
        CHECK_INT(ep_dwarf_close_idle(ep_clock_ns(CLOCK_MONOTONIC), UINT64_MAX), open);
        uint64_t opens = ep_dwarf_opens();
        CHECK_INT(ep_dwarf_close_idle(ep_clock_ns(CLOCK_MONOTONIC), 0), 0);

        /* A return address one past the mark looks up the mark itself, reports its own. */
        res = sym(r, 1, mark + 1, true, prog);
        check_chain(res);
        CHECK_U64(res->elf_addr, mark + 1);
        CHECK_U64(ep_dwarf_opens(), opens + 1);

        /* The whole function against binutils. */
        check_against_addr2line(r, 1, spin, spin + nm_size(prog, "ic_spin"));
}

/* ---- separate debug files ---- */

static char tmp_root[] = "/tmp/test-symbolizer-dwarf-XXXXXX";

static void copy_file(const char *from, const char *to) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
        CHECK_INT(system(cmd), 0);
}

static void test_debuglink(const char *linked, uint64_t mark) {
        _cleanup_(ep_resolver_freep) EpResolver *r = new_resolver();

        /* Only the debuglink can find it: no debug root has it. */
        CHECK_INT(ep_debug_roots_set("/nonexistent/debug-root"), 0);
        files[2] = linked;

        /* Without the path the process maps it at, .gnu_debuglink has no directory. */
        const EpSymResult *res = sym(r, 2, mark, false, NULL);
        CHECK_INT(res->status, EP_SYM_NOT_FOUND);

        /* A later request with the path finds it (different address: not a cached result). */
        res = sym(r, 2, mark + 1, true, linked);
        check_chain(res);
        printf("stripped + .gnu_debuglink: chain resolved\n");
        ep_debug_roots_reset();
}

/* Roots: a missing one, then tmp_root with its .build-id/d3 directory, empty; *ret_path is where
 * the debug file of the test program (its fixed build ID: symbolizer/meson.build) goes. */
static void build_id_root(char ret_path[static 4096]) {
        char dir[1024], roots[8192];

        snprintf(dir, sizeof dir, "%s/.build-id", tmp_root);
        CHECK_INT(mkdir(dir, 0755), 0);
        snprintf(dir, sizeof dir, "%s/.build-id/d3", tmp_root);
        CHECK_INT(mkdir(dir, 0755), 0);
        snprintf(ret_path, 4096, "%s/a4f1e0000000000000000000000000000dd001.debug", dir);

        snprintf(roots, sizeof roots, "/nonexistent/debug-root:%s/", tmp_root);
        CHECK_INT(ep_debug_roots_set(roots), 0);
        CHECK_STR(ep_debug_roots()[1], tmp_root);
}

static void build_id_root_remove(const char *path) {
        char dir[1024];

        (void) unlink(path);
        snprintf(dir, sizeof dir, "%s/.build-id/d3", tmp_root);
        CHECK_INT(rmdir(dir), 0);
        snprintf(dir, sizeof dir, "%s/.build-id", tmp_root);
        CHECK_INT(rmdir(dir), 0);
        ep_debug_roots_reset();
}

static void test_build_id(const char *stripped, const char *debug, const char *wrong, uint64_t mark) {
        char path[4096];
        const EpSymResult *res;

        build_id_root(path);
        files[3] = stripped;

        /* A file with another build ID at the right place is refused. */
        copy_file(wrong, path);
        {
                _cleanup_(ep_resolver_freep) EpResolver *r = new_resolver();
                res = sym(r, 3, mark, false, NULL);
                CHECK_INT(res->status, EP_SYM_NOT_FOUND);
        }

        copy_file(debug, path);
        {
                _cleanup_(ep_resolver_freep) EpResolver *r = new_resolver();
                res = sym(r, 3, mark, false, NULL);
                check_chain(res);
        }
        printf("stripped, debug file by build ID under a temporary root: chain resolved\n");
        build_id_root_remove(path);
}

static unsigned changed_calls;
static uint8_t changed_id[EP_FILE_ID_SIZE];

static void on_changed(const uint8_t file_id[EP_FILE_ID_SIZE], void *userdata) {
        changed_calls++;
        memcpy(changed_id, file_id, EP_FILE_ID_SIZE);
}

/* Rechecks the watched files; returns how many changed, checking that each was reported. */
static int recheck(EpResolver *r) {
        unsigned before = changed_calls;
        int n = ep_resolver_recheck_debug_files(r, on_changed, NULL);

        CHECK_INT((int) (changed_calls - before), n);
        return n;
}

/* A debug file installed while the resolver runs: the file answered without one is watched;
 * nothing is reported while nothing changes under the roots; a wrong debug file showing up
 * is reported once (asked again, still refused, watched again); the right one, copied over
 * it, is reported, and the same request is then answered with the inline chain. */
static void test_debug_file_appears(const char *stripped, const char *debug, const char *wrong, uint64_t mark) {
        _cleanup_(ep_resolver_freep) EpResolver *r = new_resolver();
        const uint8_t id[EP_FILE_ID_SIZE] = { 3, 0xd3 };
        char path[4096];

        build_id_root(path);
        files[3] = stripped;
        CHECK_INT(sym(r, 3, mark, false, NULL)->status, EP_SYM_NOT_FOUND);
        CHECK_INT(ep_resolver_debug_watched(r), 1);
        CHECK_INT(recheck(r), 0);

        copy_file(wrong, path);
        CHECK_INT(recheck(r), 1);
        CHECK(memcmp(changed_id, id, sizeof id) == 0);
        CHECK_INT(ep_resolver_debug_watched(r), 0);
        CHECK_INT(sym(r, 3, mark, false, NULL)->status, EP_SYM_NOT_FOUND);
        CHECK_INT(ep_resolver_debug_watched(r), 1);
        CHECK_INT(recheck(r), 0);

        copy_file(debug, path); /* the same inode, written again */
        CHECK_INT(recheck(r), 1);
        check_chain(sym(r, 3, mark, false, NULL));
        CHECK_INT(ep_resolver_debug_watched(r), 0);
        CHECK_INT(recheck(r), 0);
        printf("debug file installed while running: reported once, then the chain resolved\n");
        build_id_root_remove(path);
}

/* ---- demangling ---- */

static void check_demangle(const char *in, const char *want, int want_r) {
        _cleanup_free_ char *out = NULL;
        CHECK_INT(ep_demangle(in, &out), want_r);
        CHECK_STR(out, want);
}

static void test_demangle(void) {
        check_demangle("_ZN2ns6SorterIiE3runEm", "ns::Sorter<int>::run(unsigned long)", 1);
        check_demangle("_ZN7mycrate6module4func17h91b3e6adb43111fbE", "mycrate::module::func", 1);
        check_demangle("_RNvNtCs1234_7mycrate6module4func", "mycrate::module::func", 1);
        check_demangle("_ZNSt6vectorIiSaIiEE9push_backERKi", "std::vector<int, std::allocator<int> >::push_back(int const&)", 1);
        check_demangle("_Z3food.cold", "foo(double) [clone .cold]", 1);
        check_demangle("main", "main", 0);
        check_demangle("_Zgarbage", "_Zgarbage", 0);
        check_demangle("_R", "_R", 0);
        check_demangle("", "", 0);

        /* Over the input cap: left alone. */
        char *big = malloc(EP_DEMANGLE_INPUT_MAX + 16);
        CHECK(big);
        memset(big, 'a', EP_DEMANGLE_INPUT_MAX + 15);
        memcpy(big, "_ZN", 3);
        big[EP_DEMANGLE_INPUT_MAX + 15] = 0;
        check_demangle(big, big, 0);
        free(big);
}

static void test_cxx(const char *cxx, const char *nodwarf) {
        _cleanup_(ep_resolver_freep) EpResolver *r = new_resolver();
        uint64_t run = nm_address(cxx, "SorterIiE3run", false, NULL, 0);

        files[4] = cxx;
        files[5] = nodwarf;
        /* From DWARF (the linkage name), a few bytes in. */
        const EpSymResult *res = sym(r, 4, run + 4, false, NULL);
        CHECK_INT(res->status, EP_SYM_OK);
        CHECK(res->n_lines >= 1);
        CHECK_STR(res->lines[res->n_lines - 1].function, "ns::Sorter<int>::run(unsigned long)");
        CHECK(res->lines[res->n_lines - 1].line > 0);
        CHECK(endswith(res->lines[res->n_lines - 1].file, "cxxtemplate.cpp"));

        /* From .symtab only. */
        res = sym(r, 5, run + 4, false, NULL);
        CHECK_INT(res->status, EP_SYM_OK);
        CHECK_INT(res->n_lines, 1);
        CHECK_STR(res->lines[0].function, "ns::Sorter<int>::run(unsigned long)");
        CHECK_STR(res->lines[0].file, "");
        printf("C++: ns::Sorter<int>::run(unsigned long) from DWARF and from .symtab\n");
}

static void test_rust(const char *rust) {
        _cleanup_(ep_resolver_freep) EpResolver *r = new_resolver();
        char mangled[2048];
        uint64_t func = nm_address(rust, "6module4func", false, mangled, sizeof mangled);

        files[6] = rust;
        const EpSymResult *res = sym(r, 6, func, false, NULL);
        if (res->status != EP_SYM_OK)
                print_result(res);
        CHECK_INT(res->status, EP_SYM_OK);
        CHECK(res->n_lines >= 1);
        CHECK_STR(res->lines[res->n_lines - 1].function, "mycrate::module::func");
        CHECK(endswith(res->lines[res->n_lines - 1].file, "rustspin.rs"));
        printf("Rust: %s -> mycrate::module::func\n", mangled);
}

static void test_llvm_dynsym(void) {
        glob_t g = {};
        char mangled[2048];

        if (glob("/usr/lib/x86_64-linux-gnu/libLLVM-*.so.1", 0, NULL, &g) != 0 || g.gl_pathc == 0) {
                TEST_SKIP_PART("no libLLVM: .dynsym demangling of a big library does not run");
                globfree(&g);
                return;
        }
        _cleanup_(ep_resolver_freep) EpResolver *r = new_resolver();
        files[7] = g.gl_pathv[0];
        uint64_t a = nm_address(files[7], "_ZN4llvm", true, mangled, sizeof mangled);
        const EpSymResult *res = sym(r, 7, a, false, NULL);
        CHECK_INT(res->status, EP_SYM_OK);
        CHECK_INT(res->n_lines, 1);
        if (!startswith(res->lines[0].function, "llvm::"))
                TEST_FAIL("%s -> %s", mangled, res->lines[0].function);
        printf("%s: %s -> %s\n", files[7], mangled, res->lines[0].function);
        globfree(&g);
}

/* ---- limits and bad input ---- */

static void test_handle_limit(const char *prog, const char *cxx, const char *rust, uint64_t mark) {
        EpDwarfLimits l = EP_DWARF_LIMITS_DEFAULT;
        _cleanup_(ep_resolver_freep) EpResolver *r = new_resolver();

        l.max_open = 1;
        ep_dwarf_set_limits(&l);
        files[1] = prog;
        files[4] = cxx;
        files[6] = rust;
        uint64_t opens = ep_dwarf_opens();
        for (int round = 0; round < 2; round++) {
                /* Round 1: a return address just past the mark (another cache key, same lookup). */
                check_chain(sym(r, 1, mark + (uint64_t) round, round > 0, NULL));
                CHECK(ep_dwarf_open_handles() <= 1);
                if (cxx)
                        CHECK_INT(sym(r, 4, nm_address(cxx, "SorterIiE3run", false, NULL, 0) + (uint64_t) round, false,
                                      NULL)->status,
                                  EP_SYM_OK);
                CHECK(ep_dwarf_open_handles() <= 1);
                if (rust)
                        CHECK_INT(sym(r, 6, nm_address(rust, "6module4func", false, NULL, 0) + (uint64_t) round, false,
                                      NULL)->status,
                                  EP_SYM_OK);
                CHECK(ep_dwarf_open_handles() <= 1);
        }
        /* Handles were closed and reopened as files took turns. */
        CHECK(ep_dwarf_opens() - opens >= (cxx ? 3u : 2u));

        r = ep_resolver_free(r);
        CHECK_INT(ep_dwarf_open_handles(), 0); /* closed with their files */

        /* A tiny per-handle budget: reopened after every lookup, same answers. */
        l.max_open = 8;
        l.max_handle_bytes = 1;
        ep_dwarf_set_limits(&l);
        opens = ep_dwarf_opens();
        {
                _cleanup_(ep_resolver_freep) EpResolver *fresh = new_resolver();
                check_chain(sym(fresh, 1, mark, false, NULL));
                check_chain(sym(fresh, 1, mark + 1, true, NULL));
        }
        CHECK_INT(ep_dwarf_opens() - opens, 2);
        CHECK_INT(ep_dwarf_open_handles(), 0);

        /* A tiny budget for all handles together: only the one used last stays open. */
        if (cxx) {
                l = EP_DWARF_LIMITS_DEFAULT;
                ep_dwarf_set_limits(&l);
                _cleanup_(ep_resolver_freep) EpResolver *both = new_resolver();
                check_chain(sym(both, 1, mark, false, NULL));
                CHECK_INT(sym(both, 4, nm_address(cxx, "SorterIiE3run", false, NULL, 0), false, NULL)->status, EP_SYM_OK);
                CHECK_INT(ep_dwarf_open_handles(), 2);
                both = ep_resolver_free(both);

                l.max_total_bytes = 1;
                ep_dwarf_set_limits(&l);
                both = new_resolver();
                check_chain(sym(both, 1, mark, false, NULL));
                CHECK_INT(ep_dwarf_open_handles(), 1);
                CHECK_INT(sym(both, 4, nm_address(cxx, "SorterIiE3run", false, NULL, 0), false, NULL)->status, EP_SYM_OK);
                CHECK_INT(ep_dwarf_open_handles(), 1);
                check_chain(sym(both, 1, mark + 1, true, NULL)); /* reopened, same answer */
                CHECK_INT(ep_dwarf_open_handles(), 1);
        }

        /* A unit cap below the program's unit: no DWARF, the symbol table answers. */
        l = EP_DWARF_LIMITS_DEFAULT;
        l.max_unit_bytes = 16;
        ep_dwarf_set_limits(&l);
        {
                _cleanup_(ep_resolver_freep) EpResolver *fresh = new_resolver();
                const EpSymResult *res = sym(fresh, 1, mark, false, NULL);
                CHECK_INT(res->status, EP_SYM_OK);
                CHECK_INT(res->n_lines, 1);
                CHECK_STR(res->lines[0].function, "ic_spin");
        }
        ep_dwarf_set_limits(NULL);
        printf("Dwarf handles: at most 1 open with max_open=1, reopened past the budget, unit cap honoured\n");
}

/* Overwrites len bytes at off of a copy of from with byte. */
static void corrupt_copy(const char *from, const char *to, uint64_t off, size_t len, int byte) {
        copy_file(from, to);
        int fd = open(to, O_WRONLY | O_CLOEXEC);
        CHECK(fd >= 0);
        uint8_t *buf = malloc(len);
        CHECK(buf);
        memset(buf, byte, len);
        CHECK_INT(pwrite(fd, buf, len, (off_t) off), (ssize_t) len);
        free(buf);
        close(fd);
}

static uint64_t section_offset(const char *path, const char *name, uint64_t *ret_size) {
        char cmd[4096];
        unsigned long long off = 0, size = 0;

        /* readelf -W -S: "[Nr] Name Type Address Off Size ..." */
        snprintf(cmd, sizeof cmd, "readelf -W -S '%s' | awk '$2 == \"%s\" { print $5, $6 } $3 == \"%s\" { print $6, $7 }'",
                 path, name, name);
        FILE *p = popen(cmd, "r");
        CHECK(p);
        CHECK(fscanf(p, "%llx %llx", &off, &size) == 2);
        pclose(p);
        *ret_size = size;
        return off;
}

/* ---- compressed DWARF ---- */

static bool debug_info_compressed(const char *path) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        Elf_Scn *scn = NULL;
        size_t shstrndx;
        bool compressed = false;

        CHECK(fd >= 0);
        CHECK(elf_version(EV_CURRENT) != EV_NONE);
        Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
        CHECK(elf && elf_getshdrstrndx(elf, &shstrndx) == 0);
        while ((scn = elf_nextscn(elf, scn))) {
                GElf_Shdr sh;
                CHECK(gelf_getshdr(scn, &sh));
                if (streq(elf_strptr(elf, shstrndx, sh.sh_name) ?: "", ".debug_info"))
                        compressed = sh.sh_flags & SHF_COMPRESSED;
        }
        elf_end(elf);
        close(fd);
        return compressed;
}

/* Compressed sections (Debian's -dbg packages ship them so): inflated in a private image
 * whose compressed pages are dropped once read. The same chains as the uncompressed file and
 * addr2line, after a handle closed for idleness was opened again, and after the pages the
 * open handle read were dropped. */
static void test_compressed(const char *prog, uint64_t mark) {
        uint64_t spin = nm_address(prog, "ic_spin", false, NULL, 0);
        char path[4096], cmd[9000];

        snprintf(path, sizeof path, "%s/compressed", tmp_root);
        snprintf(cmd, sizeof cmd, "objcopy --compress-debug-sections=zlib '%s' '%s'", prog, path);
        CHECK_INT(system(cmd), 0);
        CHECK(debug_info_compressed(path));

        files[2] = path;
        {
                _cleanup_(ep_resolver_freep) EpResolver *r = new_resolver();
                uint64_t opens = ep_dwarf_opens();

                check_chain(sym(r, 2, mark, false, NULL));
                CHECK_INT(ep_dwarf_close_idle(ep_clock_ns(CLOCK_MONOTONIC), 0), 0);
                check_chain(sym(r, 2, mark + 1, true, NULL));
                CHECK_U64(ep_dwarf_opens(), opens + 2);
                ep_dwarf_drop_pages();
                check_against_addr2line(r, 2, spin, spin + nm_size(prog, "ic_spin"));
        }
        CHECK_INT(unlink(path), 0);
}

/* A handle closed for idleness and opened again waits twice as long from then on, up to 16
 * times the idle time. No waiting: the idle checks are given times ahead of the clock. A
 * handle used at u and checked at t + x, t read after the use, has been idle for at least x
 * and at most x + (t - u); the margins (half an idle time, 50 s) dwarf t - u. */
static void test_idle_doubling(const char *prog) {
        _cleanup_(ep_resolver_freep) EpResolver *r = new_resolver();
        const uint64_t idle = 100 * NSEC_PER_SEC;
        uint64_t spin = nm_address(prog, "ic_spin", false, NULL, 0);

        files[1] = prog;
        for (unsigned k = 0; k <= 6; k++) {
                uint64_t opens = ep_dwarf_opens(), limit = idle << MIN(k, 4u), t;
                unsigned open;

                (void) sym(r, 1, spin + k, false, prog); /* a new address: the handle is needed */
                t = ep_clock_ns(CLOCK_MONOTONIC);
                CHECK_U64(ep_dwarf_opens(), opens + 1); /* opened (again) */
                open = ep_dwarf_open_handles();
                CHECK(open >= 1);
                CHECK_INT(ep_dwarf_close_idle(t + limit - idle / 2, idle), open);
                CHECK_INT(ep_dwarf_close_idle(t + limit + idle / 2, idle), open - 1);
        }
}

static void test_malformed(const char *prog, uint64_t mark) {
        static const char *const sections[] = { ".debug_info", ".debug_line", ".debug_abbrev", ".debug_aranges" };
        static const int bytes[] = { 0xff, 0x00, 0x80 };
        char path[4096];
        unsigned runs = 0;

        snprintf(path, sizeof path, "%s/corrupt", tmp_root);
        files[1] = path;
        for (size_t s = 0; s < ELEMENTSOF(sections); s++)
                for (size_t b = 0; b < ELEMENTSOF(bytes); b++)
                        for (unsigned part = 0; part < 3; part++) {
                                uint64_t size, off = section_offset(prog, sections[s], &size);
                                uint64_t at = off + size * part / 3, len = MIN(size - size * part / 3, (uint64_t) 64);

                                corrupt_copy(prog, path, at, (size_t) len, bytes[b]);
                                _cleanup_(ep_resolver_freep) EpResolver *r = new_resolver();
                                const EpSymResult *res = sym(r, 1, mark, false, NULL);
                                /* Whatever DWARF says, the function is there from .symtab. */
                                CHECK_INT(res->status, EP_SYM_OK);
                                CHECK(res->n_lines >= 1);
                                CHECK_STR(res->lines[res->n_lines - 1].function, "ic_spin");
                                runs++;
                        }
        CHECK_INT(unlink(path), 0);

        /* Truncated in the middle of its DWARF: never a crash, a status. */
        uint64_t size, off = section_offset(prog, ".debug_info", &size);
        copy_file(prog, path);
        CHECK_INT(truncate(path, (off_t) (off + size / 2)), 0);
        {
                _cleanup_(ep_resolver_freep) EpResolver *r = new_resolver();
                const EpSymResult *res = sym(r, 1, mark, false, NULL);
                CHECK(res->status == EP_SYM_OK || res->status == EP_SYM_BAD_FILE || res->status == EP_SYM_NOT_FOUND);
        }
        CHECK_INT(unlink(path), 0);
        printf("malformed DWARF: %u corrupted copies answered from .symtab, truncated copy answered\n", runs);
}

int main(void) {
        const char *prog = test_env("DW_PROG");
        const char *cxx = getenv("DW_CXX"), *rust = getenv("DW_RUST");

        source = test_env("DW_SOURCE");
        if (getenv("SYM_TEST_DEBUG"))
                log_set_max_level(LOG_DEBUG);
        CHECK(mkdtemp(tmp_root));

        test_demangle();
        uint64_t mark = nm_address(prog, "ic_inner_mark", false, NULL, 0);
        test_inline_chain(prog);
        test_debuglink(test_env("DW_PROG_LINK"), mark);
        test_build_id(test_env("DW_PROG_STRIPPED"), test_env("DW_PROG_DEBUG"), cxx ?: prog, mark);
        test_debug_file_appears(test_env("DW_PROG_STRIPPED"), test_env("DW_PROG_DEBUG"), cxx ?: prog, mark);
        if (cxx && *cxx)
                test_cxx(cxx, test_env("DW_CXX_NODWARF"));
        else
                TEST_SKIP_PART("no C++ compiler when meson was set up: C++ symbols from DWARF and .symtab do not run");
        if (rust && *rust)
                test_rust(rust);
        else
                TEST_SKIP_PART("rustc not found when meson was set up: Rust symbols from DWARF do not run");
        test_llvm_dynsym();
        test_handle_limit(prog, cxx && *cxx ? cxx : NULL, rust && *rust ? rust : NULL, mark);
        test_compressed(prog, mark);
        test_idle_doubling(prog);
        test_malformed(prog, mark);

        CHECK_INT(rmdir(tmp_root), 0);
        TEST_DONE("test-symbolizer-dwarf");
}
