/* SPDX-License-Identifier: MIT */
#pragma once

/* Minimal assertions for the symbolizer's unit tests (tests/unit/test-symbolizer-*.c). */

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "macro.h"
#include "resolver.h"

static unsigned test_checks;

#define TEST_FAIL(...)                                                         \
        do {                                                                   \
                fprintf(stderr, "%s:%d: FAILED: ", __FILE__, __LINE__);        \
                fprintf(stderr, __VA_ARGS__);                                  \
                fputc('\n', stderr);                                           \
                exit(EXIT_FAILURE);                                            \
        } while (0)

#define CHECK(expr)                                                            \
        do {                                                                   \
                test_checks++;                                                 \
                if (!(expr))                                                   \
                        TEST_FAIL("%s", #expr);                                \
        } while (0)

#define CHECK_INT(a, b)                                                        \
        do {                                                                   \
                long long _a = (long long) (a), _b = (long long) (b);          \
                test_checks++;                                                 \
                if (_a != _b)                                                  \
                        TEST_FAIL("%s == %lld, expected %s == %lld", #a, _a, #b, _b); \
        } while (0)

#define CHECK_U64(a, b)                                                        \
        do {                                                                   \
                uint64_t _a = (uint64_t) (a), _b = (uint64_t) (b);             \
                test_checks++;                                                 \
                if (_a != _b)                                                  \
                        TEST_FAIL("%s == 0x%" PRIx64 ", expected 0x%" PRIx64, #a, _a, _b); \
        } while (0)

#define CHECK_STR(a, b)                                                        \
        do {                                                                   \
                const char *_a = (a), *_b = (b);                               \
                test_checks++;                                                 \
                if (!_a || !_b || strcmp(_a, _b) != 0)                         \
                        TEST_FAIL("%s == \"%s\", expected \"%s\"", #a, _a ?: "(null)", _b ?: "(null)"); \
        } while (0)

/* A part this machine cannot run (a tool or library it lacks), named on stderr. TEST_DONE then
 * ends the test as skipped (77), so a partial run is never reported as a pass. */
static unsigned test_parts_skipped __attribute__((unused));

#define TEST_SKIP_PART(...)                                                    \
        do {                                                                   \
                fprintf(stderr, "SKIP: ");                                     \
                fprintf(stderr, __VA_ARGS__);                                  \
                fputc('\n', stderr);                                           \
                test_parts_skipped++;                                          \
        } while (0)

#define TEST_DONE(name)                                                        \
        do {                                                                   \
                printf("%s: %u checks passed, %u parts skipped\n", (name), test_checks, \
                       test_parts_skipped);                                    \
                return test_parts_skipped > 0 ? 77 : EXIT_SUCCESS;             \
        } while (0)

static inline const char *test_env(const char *name) {
        const char *v = getenv(name);
        if (!v || !*v) {
                fprintf(stderr, "%s is not set (run through meson test)\n", name);
                exit(77); /* skipped */
        }
        return v;
}

typedef struct TestOffset {
        char name[64];
        uint64_t offset;
} TestOffset;

/* The file offsets the test target reports when run as `TARGET offsets` (one "name offset"
 * line per function): at most max of them into ret; returns how many. */
static inline size_t test_target_offsets(const char *target, TestOffset *ret, size_t max) {
        char cmd[4096], line[256];
        size_t n = 0;

        snprintf(cmd, sizeof cmd, "'%s' offsets", target);
        FILE *p = popen(cmd, "r");
        CHECK(p);
        while (fgets(line, sizeof line, p) && n < max) {
                unsigned long long off;
                if (sscanf(line, "%63s %llu", ret[n].name, &off) == 2)
                        ret[n++].offset = off;
        }
        pclose(p);
        return n;
}

/* ... of one symbol. */
static inline uint64_t test_target_offset(const char *target, const char *symbol) {
        TestOffset o[32];
        size_t n = test_target_offsets(target, o, ELEMENTSOF(o));
        uint64_t found = 0;

        for (size_t i = 0; i < n; i++)
                if (strcmp(o[i].name, symbol) == 0)
                        found = o[i].offset;
        CHECK(found > 0);
        return found;
}

/* Two answers are the same, line by line. */
static inline void test_check_same_result(const EpSymResult *a, const EpSymResult *b) {
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

/* A memfd holding text, positioned at its start (as the loader hands files over): a new fd or
 * a negative errno. */
static inline int test_memfd_with(const char *name, const char *text) {
        size_t len = strlen(text);
        int fd = memfd_create(name, MFD_CLOEXEC);

        if (fd < 0)
                return -errno;
        if (write(fd, text, len) != (ssize_t) len || lseek(fd, 0, SEEK_SET) < 0) {
                close(fd);
                return -EIO;
        }
        return fd;
}

/* File offset of an ELF address of the file at path, from its program headers (what the loader
 * sends for a frame). */
static inline uint64_t test_file_offset(const char *path, uint64_t vaddr) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        uint64_t off = UINT64_MAX;
        size_t n;
        Elf *e;

        CHECK(fd >= 0);
        elf_version(EV_CURRENT);
        e = elf_begin(fd, ELF_C_READ, NULL);
        CHECK(e);
        CHECK(elf_getphdrnum(e, &n) == 0);
        for (size_t i = 0; i < n; i++) {
                GElf_Phdr ph;
                CHECK(gelf_getphdr(e, (int) i, &ph));
                if (ph.p_type == PT_LOAD && vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz)
                        off = vaddr - ph.p_vaddr + ph.p_offset;
        }
        elf_end(e);
        close(fd);
        CHECK(off != UINT64_MAX);
        return off;
}
