/* SPDX-License-Identifier: MIT */
#pragma once

/* Helpers for tests/unit/test-symbolizer-unwind-*.c: symbol and section addresses of a test
 * binary read with libelf, turned into file offsets the way the table is keyed, and the rule
 * a table gives for an offset. */

#include <fcntl.h>
#include <gelf.h>
#include <unistd.h>

#include "file-id.h"
#include "macro.h"
#include "test-util.h"
#include "unwind-extract.h"
#include "unwind-table.h"

typedef struct UnwElf {
        int fd;
        Elf *elf;
} UnwElf;

static inline UnwElf unw_elf_open(const char *path) {
        UnwElf e = { .fd = open(path, O_RDONLY | O_CLOEXEC) };

        if (e.fd < 0)
                TEST_FAIL("cannot open %s", path);
        CHECK(elf_version(EV_CURRENT) != EV_NONE);
        e.elf = elf_begin(e.fd, ELF_C_READ, NULL);
        CHECK(e.elf);
        return e;
}

static inline void unw_elf_close(UnwElf *e) {
        elf_end(e->elf);
        close(e->fd);
}

/* ELF virtual address → file offset through PT_LOAD. */
static inline uint64_t unw_vaddr_to_offset(UnwElf *e, uint64_t vaddr) {
        size_t n;

        CHECK(elf_getphdrnum(e->elf, &n) == 0);
        for (size_t i = 0; i < n; i++) {
                GElf_Phdr ph;
                CHECK(gelf_getphdr(e->elf, (int) i, &ph));
                if (ph.p_type == PT_LOAD && vaddr >= ph.p_vaddr && vaddr - ph.p_vaddr < ph.p_filesz)
                        return vaddr - ph.p_vaddr + ph.p_offset;
        }
        TEST_FAIL("address 0x%" PRIx64 " is in no PT_LOAD", vaddr);
}

/* A symbol's address and size from .symtab (else .dynsym); 0 if absent. */
static inline uint64_t unw_symbol(UnwElf *e, const char *name, uint64_t *ret_size) {
        for (int pass = 0; pass < 2; pass++) {
                Elf_Scn *scn = NULL;
                while ((scn = elf_nextscn(e->elf, scn))) {
                        GElf_Shdr sh;
                        if (!gelf_getshdr(scn, &sh) || sh.sh_type != (pass == 0 ? SHT_SYMTAB : SHT_DYNSYM))
                                continue;
                        Elf_Data *d = elf_getdata(scn, NULL);
                        for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize; i++) {
                                GElf_Sym s;
                                const char *n;
                                if (!gelf_getsym(d, (int) i, &s))
                                        continue;
                                n = elf_strptr(e->elf, sh.sh_link, s.st_name);
                                if (n && streq(n, name) && s.st_value != 0) {
                                        if (ret_size)
                                                *ret_size = s.st_size;
                                        return s.st_value;
                                }
                        }
                }
        }
        return 0;
}

static inline uint64_t unw_section(UnwElf *e, const char *name, uint64_t *ret_size) {
        Elf_Scn *scn = NULL;
        size_t shstrndx;

        CHECK(elf_getshdrstrndx(e->elf, &shstrndx) == 0);
        while ((scn = elf_nextscn(e->elf, scn))) {
                GElf_Shdr sh;
                const char *n;
                if (!gelf_getshdr(scn, &sh))
                        continue;
                n = elf_strptr(e->elf, shstrndx, sh.sh_name);
                if (n && streq(n, name)) {
                        if (ret_size)
                                *ret_size = sh.sh_size;
                        return sh.sh_addr;
                }
        }
        return 0;
}

/* The rule covering a file offset (INVALID before the first entry). */
static inline struct ep_unwind_rule unw_rule_at(const void *blob, uint64_t off) {
        long i = ep_unwind_table_find(blob, (uint32_t) off);

        if (i < 0)
                return (struct ep_unwind_rule) { .cfa_kind = EP_CFA_INVALID };
        return ep_unwind_table_rules(blob)[ep_unwind_table_entries(blob)[i].rule];
}

#define CHECK_RULE(rule, kind, cfa_off, fp, fp_off)                                          \
        do {                                                                                   \
                struct ep_unwind_rule _r = (rule);                                             \
                test_checks++;                                                                 \
                if (_r.cfa_kind != (kind) || _r.cfa_offset != (cfa_off) || _r.fp_rule != (fp) || \
                    _r.fp_offset != (fp_off))                                                  \
                        TEST_FAIL("%s: rule {kind %u, cfa %d, fp %u/%d}, expected {%u, %d, %u/%d}", \
                                  #rule, _r.cfa_kind, _r.cfa_offset, _r.fp_rule, _r.fp_offset,  \
                                  (unsigned) (kind), (int) (cfa_off), (unsigned) (fp), (int) (fp_off)); \
        } while (0)

/* Extracts a file and checks the blob is valid. */
static inline void *unw_extract(const char *path, const EpUnwindExtractOptions *opts, uint32_t *ret_flags,
                                EpUnwindExtractStats *ret_stats) {
        uint8_t id[EP_FILE_ID_SIZE];
        void *blob = NULL;
        size_t size = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC), r;

        if (fd < 0)
                TEST_FAIL("cannot open %s", path);
        CHECK_INT(ep_file_id_from_fd(fd, id, NULL), 0);
        r = ep_unwind_extract_full(fd, id, path, opts, &blob, &size, ret_flags, ret_stats);
        if (r < 0)
                TEST_FAIL("extracting %s: %s", path, strerror(-r));
        CHECK_INT(ep_unwind_table_validate(blob, size), 0);
        CHECK(memcmp(ep_unwind_table_header(blob)->file_id, id, EP_FILE_ID_SIZE) == 0);
        close(fd);
        return blob;
}
