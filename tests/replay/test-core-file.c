/* SPDX-License-Identifier: MIT */
/* The core-dump reader (core-file.c) on a core built here byte by byte: threads and registers,
 * mapped files, auxv, memory from segments and from the mapped file behind them; then every
 * truncation and thousands of corrupted copies, which must fail cleanly or parse, never crash
 * or read out of bounds (run it under the sanitizers' build to see the latter). */
#include <elf.h>
#include <fcntl.h>
#include <sys/procfs.h>
#include <sys/stat.h>

#include "core-file.h"
#include "tests.h"

#define STACK_ADDR 0x7ffd0000ULL
#define STACK_FILESZ 0x100
#define STACK_MEMSZ 0x1000
#define TEXT_ADDR 0x400000ULL
#define TEXT_PAGES 2
#define VDSO_ADDR 0x7fff1000ULL

typedef struct Buf {
        uint8_t *p;
        size_t n;
} Buf;

static void put(Buf *b, const void *data, size_t n) {
        b->p = realloc(b->p, b->n + n);
        ASSERT_TRUE(b->p);
        memcpy(b->p + b->n, data, n);
        b->n += n;
}

static void pad4(Buf *b) {
        static const uint8_t zero[4];
        put(b, zero, (4 - b->n % 4) % 4);
}

static void note(Buf *b, const char *name, uint32_t type, const void *desc, size_t n) {
        Elf64_Nhdr h = { .n_namesz = strlen(name) + 1, .n_descsz = n, .n_type = type };
        put(b, &h, sizeof h);
        put(b, name, h.n_namesz);
        pad4(b);
        put(b, desc, n);
        pad4(b);
}

/* A core of one process: two threads, the text of `mapped` at TEXT_ADDR (offset one page), a
 * stack segment with only its first STACK_FILESZ bytes dumped, and a vDSO-like segment. */
static Buf make_core(const char *mapped) {
        Buf notes = {}, core = {};
        struct elf_prstatus st = {};
        uint64_t auxv[] = { AT_PAGESZ, 4096, AT_SYSINFO_EHDR, VDSO_ADDR, AT_NULL, 0 };

        for (int t = 0; t < 2; t++) {
                memset(&st, 0, sizeof st);
                st.pr_pid = 100 + t;
                st.pr_reg[EP_CORE_RIP] = TEXT_ADDR + 0x10 + t;
                st.pr_reg[EP_CORE_RSP] = STACK_ADDR + 8 * t;
                st.pr_reg[EP_CORE_RBP] = 0xdead0000 + t;
                note(&notes, "CORE", NT_PRSTATUS, &st, sizeof st);
        }
        note(&notes, "CORE", NT_AUXV, auxv, sizeof auxv);

        Buf file = {};
        uint64_t hdr[2] = { 1, 4096 }, m[3] = { TEXT_ADDR, TEXT_ADDR + TEXT_PAGES * 4096, 1 };
        put(&file, hdr, sizeof hdr);
        put(&file, m, sizeof m);
        put(&file, mapped, strlen(mapped) + 1);
        note(&notes, "CORE", NT_FILE, file.p, file.n);
        free(file.p);
        note(&notes, "GDB", 1, "ignored", 7);

        size_t phoff = sizeof(Elf64_Ehdr), n_ph = 3;
        size_t notes_off = phoff + n_ph * sizeof(Elf64_Phdr);
        size_t stack_off = notes_off + notes.n, vdso_off = stack_off + STACK_FILESZ;
        Elf64_Ehdr eh = {
                .e_type = ET_CORE,
                .e_machine = EM_X86_64,
                .e_version = EV_CURRENT,
                .e_phoff = phoff,
                .e_ehsize = sizeof eh,
                .e_phentsize = sizeof(Elf64_Phdr),
                .e_phnum = n_ph,
        };
        memcpy(eh.e_ident, ELFMAG, SELFMAG);
        eh.e_ident[EI_CLASS] = ELFCLASS64;
        eh.e_ident[EI_DATA] = ELFDATA2LSB;
        eh.e_ident[EI_VERSION] = EV_CURRENT;
        Elf64_Phdr ph[3] = {
                { .p_type = PT_NOTE, .p_offset = notes_off, .p_filesz = notes.n },
                { .p_type = PT_LOAD, .p_offset = stack_off, .p_vaddr = STACK_ADDR,
                  .p_filesz = STACK_FILESZ, .p_memsz = STACK_MEMSZ, .p_flags = PF_R | PF_W },
                { .p_type = PT_LOAD, .p_offset = vdso_off, .p_vaddr = VDSO_ADDR,
                  .p_filesz = 4096, .p_memsz = 4096, .p_flags = PF_R | PF_X },
        };
        put(&core, &eh, sizeof eh);
        put(&core, ph, sizeof ph);
        put(&core, notes.p, notes.n);
        free(notes.p);
        for (unsigned i = 0; i < STACK_FILESZ; i++) {
                uint8_t v = (uint8_t) i;
                put(&core, &v, 1);
        }
        for (unsigned i = 0; i < 4096; i++) {
                uint8_t v = 0x55;
                put(&core, &v, 1);
        }
        return core;
}

static void write_file(const char *path, const void *p, size_t n) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, p, n), (ssize_t) n);
        close(fd);
}

static void check_good(const char *core_path, const char *mapped) {
        _cleanup_(ep_core_freep) EpCore *c = NULL;
        uint8_t buf[64], want[64];
        uint64_t v, start, end;

        ASSERT_OK(ep_core_open(core_path, &c));
        ASSERT_EQ(ep_core_n_threads(c), 2);
        ASSERT_EQ(ep_core_thread(c, 0)->tid, 100);
        ASSERT_EQ(ep_core_thread(c, 1)->tid, 101);
        ASSERT_EQ(ep_core_thread(c, 1)->regs[EP_CORE_RIP], TEXT_ADDR + 0x11);
        ASSERT_EQ(ep_core_thread(c, 1)->regs[EP_CORE_RSP], STACK_ADDR + 8);
        ASSERT_EQ(ep_core_thread(c, 0)->regs[EP_CORE_RBP], 0xdead0000);
        ASSERT_TRUE(ep_core_thread(c, 2) == NULL);

        ASSERT_EQ(ep_core_n_mappings(c), 1);
        ASSERT_STREQ(ep_core_mapping(c, 0)->path, mapped);
        ASSERT_EQ(ep_core_mapping(c, 0)->offset, 4096);
        ASSERT_TRUE(ep_core_mapping_at(c, TEXT_ADDR + 5) == ep_core_mapping(c, 0));
        ASSERT_TRUE(ep_core_mapping_at(c, TEXT_ADDR + TEXT_PAGES * 4096) == NULL);

        ASSERT_OK(ep_core_auxv(c, AT_SYSINFO_EHDR, &v));
        ASSERT_EQ(v, VDSO_ADDR);
        ASSERT_EQ(ep_core_auxv(c, AT_HWCAP, &v), -ENOENT);
        ASSERT_OK(ep_core_segment_at(c, VDSO_ADDR + 10, &start, &end));
        ASSERT_EQ(start, VDSO_ADDR);
        ASSERT_EQ(end, VDSO_ADDR + 4096);
        ASSERT_EQ(ep_core_segment_at(c, STACK_ADDR + STACK_FILESZ, &start, &end), -ENOENT);

        /* Dumped bytes; the tail of the segment that was not dumped; across the end. */
        ASSERT_OK(ep_core_read(c, STACK_ADDR + 16, buf, 16));
        for (int i = 0; i < 16; i++)
                ASSERT_EQ(buf[i], 16 + i);
        ASSERT_EQ(ep_core_read(c, STACK_ADDR + STACK_FILESZ, buf, 8), -EFAULT);
        ASSERT_EQ(ep_core_read(c, STACK_ADDR + STACK_FILESZ - 4, buf, 8), -EFAULT);
        ASSERT_EQ(ep_core_read(c, UINT64_MAX - 3, buf, 8), -EFAULT);
        ASSERT_EQ(ep_core_read(c, 0, buf, 8), -EFAULT);

        /* Text comes from the mapped file at mapping offset + (addr - start). */
        ASSERT_OK(ep_core_read(c, TEXT_ADDR + 100, buf, 64));
        for (int i = 0; i < 64; i++)
                want[i] = (uint8_t) ((4096 + 100 + i) * 7);
        ASSERT_TRUE(memcmp(buf, want, 64) == 0);
        /* Past the end of the file (the mapping is longer): not available. */
        ASSERT_EQ(ep_core_read(c, TEXT_ADDR + TEXT_PAGES * 4096 - 8, buf, 16), -EFAULT);
}

/* Parses a damaged core; whatever it yields must be usable without crashing. */
static void poke(const char *path) {
        _cleanup_(ep_core_freep) EpCore *c = NULL;
        uint8_t buf[32];
        uint64_t v, s, e;

        if (ep_core_open(path, &c) < 0)
                return;
        for (size_t i = 0; i < ep_core_n_threads(c); i++)
                (void) ep_core_read(c, ep_core_thread(c, i)->regs[EP_CORE_RSP], buf, sizeof buf);
        for (size_t i = 0; i < ep_core_n_mappings(c); i++)
                (void) ep_core_read(c, ep_core_mapping(c, i)->start, buf, sizeof buf);
        (void) ep_core_auxv(c, AT_SYSINFO_EHDR, &v);
        (void) ep_core_segment_at(c, VDSO_ADDR, &s, &e);
        (void) ep_core_read(c, STACK_ADDR, buf, sizeof buf);
}

int main(void) {
        char dir[] = "/tmp/test-core-file-XXXXXX", mapped[256], core_path[256], bad_path[256];
        uint8_t text[TEXT_PAGES * 4096 - 16]; /* shorter than the mapping */
        uint64_t rng = 0x9e3779b97f4a7c15ULL;

        ASSERT_TRUE(mkdtemp(dir));
        snprintf(mapped, sizeof mapped, "%s/mapped.bin", dir);
        snprintf(core_path, sizeof core_path, "%s/good.core", dir);
        snprintf(bad_path, sizeof bad_path, "%s/bad.core", dir);
        for (size_t i = 0; i < sizeof text; i++)
                text[i] = (uint8_t) (i * 7);
        write_file(mapped, text, sizeof text);

        Buf core = make_core(mapped);
        write_file(core_path, core.p, core.n);
        check_good(core_path, mapped);

        /* Not a core at all. */
        {
                _cleanup_(ep_core_freep) EpCore *c = NULL;
                ASSERT_EQ(ep_core_open(mapped, &c), -EBADMSG);
                ASSERT_TRUE(ep_core_open("/nonexistent/core", &c) < 0);
        }

        /* Every truncation. */
        for (size_t n = 0; n < core.n; n += (n < 1024 ? 1 : 61)) {
                write_file(bad_path, core.p, n);
                poke(bad_path);
        }

        /* Random corruption of the headers and notes (the segment data is not interpreted). */
        size_t hot = core.n - STACK_FILESZ - 4096;
        uint8_t *copy = malloc(core.n);
        ASSERT_TRUE(copy);
        for (int iter = 0; iter < 1500; iter++) {
                memcpy(copy, core.p, core.n);
                for (int k = 0; k < 1 + iter % 4; k++) {
                        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                        size_t at = (size_t) (rng % hot);
                        copy[at] = iter % 3 == 0 ? 0xff : iter % 3 == 1 ? 0 : (uint8_t) (rng >> 32);
                }
                write_file(bad_path, copy, core.n);
                poke(bad_path);
        }
        free(copy);
        free(core.p);

        unlink(bad_path);
        unlink(core_path);
        unlink(mapped);
        rmdir(dir);
        return tests_summary("test-core-file");
}
