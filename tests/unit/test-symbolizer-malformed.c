/* SPDX-License-Identifier: MIT */
/* Hostile and broken files: empty, garbage, truncated, absurd header counts and offsets,
 * corrupted section headers, random mutations of a real ELF, and a file truncated while it is
 * mapped (SIGBUS). Every case must end in an error or a plain answer, never a crash (the lead
 * also runs this under ASan/UBSan). */

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "elf-symbols.h"
#include "test-util.h"

static unsigned opened, refused, answered;

static int memfd_with(const void *data, size_t size) {
        int fd = memfd_create("elf", MFD_CLOEXEC);
        CHECK(fd >= 0);
        if (size > 0)
                CHECK(write(fd, data, size) == (ssize_t) size);
        return fd;
}

static void exercise_file(EpElfFile *f) {
        static const uint64_t probes[] = { 0, 1, 0x40, 0x1000, 0x1139, 0x12de, 0x2000, 0x3000, UINT64_MAX };
        EpBuildIds ids;
        size_t n;

        for (size_t i = 0; i < ELEMENTSOF(probes); i++) {
                uint64_t v = probes[i];
                char *name = NULL;
                int r;

                (void) ep_elf_offset_to_vaddr(f, probes[i], &v);
                r = ep_elf_lookup(f, v, &name, NULL);
                if (r == 0) {
                        CHECK(name);
                        CHECK(strlen(name) <= EP_SYMBOL_NAME_MAX);
                        answered++;
                } else
                        CHECK(r == -ENOENT || r == -ENOEXEC || r == -EIO);
                free(name);
        }
        (void) ep_elf_symbol_count(f, &n, NULL);
        if (ep_elf_build_ids(f, &ids) == 0) {
                CHECK(ids.gnu_len <= EP_BUILD_ID_MAX);
                CHECK(strlen(ids.go) <= EP_GO_BUILD_ID_MAX);
        }
}

static void exercise(const void *data, size_t size) {
        EpElfFile *f = NULL;
        int r = ep_elf_open(memfd_with(data, size), &f);

        if (r < 0) {
                if (r != -ENOEXEC && r != -EIO)
                        TEST_FAIL("unexpected error %d (%s) for a %zu byte file", r, strerror(-r), size);
                refused++;
                return;
        }
        opened++;
        exercise_file(f);
        ep_elf_free(f);
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t next_random(void) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
}

static uint8_t *read_file(const char *path, size_t *ret_size) {
        struct stat st;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        CHECK(fd >= 0);
        CHECK(fstat(fd, &st) == 0);
        uint8_t *p = malloc((size_t) st.st_size);
        CHECK(p);
        CHECK(read(fd, p, (size_t) st.st_size) == st.st_size);
        close(fd);
        *ret_size = (size_t) st.st_size;
        return p;
}

static void truncated_while_mapped(const uint8_t *elf, size_t size) {
        char path[] = "/tmp/test-symbolizer-trunc-XXXXXX";
        EpElfFile *f = NULL;
        char *name = NULL;
        int fd = mkstemp(path);

        CHECK(fd >= 0);
        CHECK(write(fd, elf, size) == (ssize_t) size);
        int fd2 = open(path, O_RDONLY | O_CLOEXEC);
        CHECK(fd2 >= 0);
        CHECK_INT(ep_elf_open(fd2, &f), 0);

        /* The profiled program's owner shrinks its file under our mapping. */
        CHECK(ftruncate(fd, 0) == 0);
        int r = ep_elf_lookup(f, 0x12e0, &name, NULL);
        CHECK_INT(r, -EIO);
        CHECK(!name);
        CHECK_INT(ep_elf_check(f), -EIO);
        EpBuildIds ids;
        CHECK_INT(ep_elf_build_ids(f, &ids), -EIO);
        uint64_t v;
        CHECK_INT(ep_elf_offset_to_vaddr(f, 0x12e0, &v), -EIO);
        ep_elf_free(f);

        close(fd);
        unlink(path);
}

int main(void) {
        const char *target = test_env("SYM_TEST_TARGET");
        size_t size;
        _cleanup_free_ uint8_t *elf = read_file(target, &size);
        _cleanup_free_ uint8_t *buf = malloc(size + 4096);
        CHECK(buf);

        /* Not files of the right kind. */
        EpElfFile *f = NULL;
        CHECK_INT(ep_elf_open(memfd_with(NULL, 0), &f), -ENOEXEC);
        CHECK_INT(ep_elf_open(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC), &f), -ENOEXEC);
        CHECK_INT(ep_elf_open(memfd_with("\177ELF", 4), &f), -ENOEXEC);

        /* Garbage, and garbage behind a valid ELF identification. */
        for (size_t i = 0; i < 4096; i++)
                buf[i] = (uint8_t) next_random();
        exercise(buf, 4096);
        memcpy(buf, elf, EI_NIDENT);
        exercise(buf, 4096);

        /* Every truncation length through the headers, then coarser steps. */
        for (size_t n = 1; n < size; n += n < 1024 ? 1 : 97)
                exercise(elf, n);

        /* Absurd header counts and offsets. */
        const Elf64_Ehdr *eh = (const Elf64_Ehdr *) elf;
        CHECK(eh->e_ident[EI_CLASS] == ELFCLASS64);
        struct {
                size_t off, width;
                uint64_t value;
        } pokes[] = {
                { offsetof(Elf64_Ehdr, e_phnum), 2, 0xffff },
                { offsetof(Elf64_Ehdr, e_phoff), 8, UINT64_MAX - 8 },
                { offsetof(Elf64_Ehdr, e_phoff), 8, size - 8 },
                { offsetof(Elf64_Ehdr, e_phentsize), 2, 1 },
                { offsetof(Elf64_Ehdr, e_shnum), 2, 0xffff },
                { offsetof(Elf64_Ehdr, e_shnum), 2, 0 },
                { offsetof(Elf64_Ehdr, e_shoff), 8, UINT64_MAX - 64 },
                { offsetof(Elf64_Ehdr, e_shoff), 8, size - 10 },
                { offsetof(Elf64_Ehdr, e_shentsize), 2, 7 },
                { offsetof(Elf64_Ehdr, e_shstrndx), 2, 0xfffe },
                { offsetof(Elf64_Ehdr, e_shstrndx), 2, SHN_XINDEX },
        };
        for (size_t i = 0; i < ELEMENTSOF(pokes); i++) {
                memcpy(buf, elf, size);
                memcpy(buf + pokes[i].off, &pokes[i].value, pokes[i].width);
                exercise(buf, size);
        }

        /* Each section header field of each section set to something hostile. */
        static const uint64_t values[] = { 0, 1, 0xffff, 0x7fffffff, UINT64_MAX, UINT64_MAX / 2 };
        for (unsigned s = 0; s < eh->e_shnum; s++) {
                size_t base = eh->e_shoff + (size_t) s * sizeof(Elf64_Shdr);
                static const struct {
                        size_t off, width;
                } fields[] = {
                        { offsetof(Elf64_Shdr, sh_type), 4 },   { offsetof(Elf64_Shdr, sh_addr), 8 },
                        { offsetof(Elf64_Shdr, sh_offset), 8 }, { offsetof(Elf64_Shdr, sh_size), 8 },
                        { offsetof(Elf64_Shdr, sh_link), 4 },   { offsetof(Elf64_Shdr, sh_entsize), 8 },
                        { offsetof(Elf64_Shdr, sh_addralign), 8 },
                };
                if (base + sizeof(Elf64_Shdr) > size)
                        break;
                for (size_t i = 0; i < ELEMENTSOF(fields); i++)
                        for (size_t v = 0; v < ELEMENTSOF(values); v++) {
                                memcpy(buf, elf, size);
                                memcpy(buf + base + fields[i].off, &values[v], fields[i].width);
                                exercise(buf, size);
                        }
        }

        /* Program headers likewise (notes and loads). */
        for (unsigned p = 0; p < eh->e_phnum; p++) {
                size_t base = eh->e_phoff + (size_t) p * sizeof(Elf64_Phdr);
                static const size_t fields[] = { offsetof(Elf64_Phdr, p_offset), offsetof(Elf64_Phdr, p_filesz),
                                                 offsetof(Elf64_Phdr, p_vaddr), offsetof(Elf64_Phdr, p_align) };
                for (size_t i = 0; i < ELEMENTSOF(fields); i++)
                        for (size_t v = 0; v < ELEMENTSOF(values); v++) {
                                memcpy(buf, elf, size);
                                memcpy(buf + base + fields[i], &values[v], 8);
                                exercise(buf, size);
                        }
        }

        /* Random mutations, mostly in the headers, the tables and the notes. */
        for (unsigned iter = 0; iter < 3000; iter++) {
                memcpy(buf, elf, size);
                unsigned flips = 1 + (unsigned) (next_random() % 16);
                for (unsigned j = 0; j < flips; j++) {
                        size_t pos;
                        switch (next_random() % 3) {
                        case 0: pos = next_random() % 0x400; break;                       /* ehdr, phdrs, notes */
                        case 1: pos = eh->e_shoff + next_random() % (size - eh->e_shoff); /* shdrs */ break;
                        default: pos = next_random() % size; break;
                        }
                        buf[pos % size] ^= (uint8_t) (1 + next_random() % 255);
                }
                exercise(buf, size);
        }

        truncated_while_mapped(elf, size);

        printf("malformed: %u files opened, %u refused, %u lookups answered\n", opened, refused, answered);
        CHECK(opened > 100 && refused > 100);
        TEST_DONE("test-symbolizer-malformed");
}
