/* SPDX-License-Identifier: MIT */
/* Unwind-table extraction on programs built for it (test-symbolizer-unwind-prog.c in several
 * builds) and on this machine's libc:
 *   - .eh_frame, -O2 without frame pointers: entry rules, a push, the realigned (DRAP) frame,
 *     the PLT, _start, a gap without CFI, a signal trampoline found by name;
 *   - with frame pointers: CFA = rbp + 16 and rbp at CFA - 16 after the prologue;
 *   - .debug_frame only, in the file and in a separate debug file (by build ID, by
 *     .gnu_debuglink from the path hint or from /proc/self/fd), no CFI → FP_FALLBACK;
 *   - libc: rt_sigreturn (found by its code) is SIGNAL, clone's child is STOP;
 *   - damaged input (truncation, flipped bytes, not ELF) gives errors or valid tables. */

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "test-symbolizer-unwind-util.h"
#include "unwind-builder.h"

static const uint8_t sigreturn_code[] = { 0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05 };

static void read_code(UnwElf *e, uint64_t vaddr, void *buf, size_t n) {
        CHECK(pread(e->fd, buf, n, (off_t) unw_vaddr_to_offset(e, vaddr)) == (ssize_t) n);
}

static uint64_t sym_off(UnwElf *e, const char *name) {
        uint64_t a = unw_symbol(e, name, NULL);
        if (a == 0)
                TEST_FAIL("no symbol %s", name);
        return unw_vaddr_to_offset(e, a);
}

/* Length of a push at the start of code (push %reg or push %r8-15), 0 if none. */
static size_t push_len(const uint8_t *code) {
        if (code[0] >= 0x50 && code[0] <= 0x57)
                return 1;
        if (code[0] == 0x41 && code[1] >= 0x50 && code[1] <= 0x57)
                return 2;
        return 0;
}

/* Common to every build with CFI for the C functions. */
static void check_c_functions(UnwElf *e, const void *blob) {
        uint8_t code[2];

        /* Function entry: CFA = rsp + 8, rbp untouched. */
        CHECK_RULE(unw_rule_at(blob, sym_off(e, "unw_leaf")), EP_CFA_SP, 8, EP_FP_SAME, 0);
        CHECK_RULE(unw_rule_at(blob, sym_off(e, "unw_pusher")), EP_CFA_SP, 8, EP_FP_SAME, 0);

        /* After the first push: CFA = rsp + 16. */
        read_code(e, unw_symbol(e, "unw_pusher", NULL), code, sizeof code);
        size_t n = push_len(code);
        if (n == 0)
                TEST_FAIL("unw_pusher does not start with a push (%02x %02x)", code[0], code[1]);
        struct ep_unwind_rule r = unw_rule_at(blob, sym_off(e, "unw_pusher") + n);
        CHECK_INT(r.cfa_kind, EP_CFA_SP);
        CHECK_INT(r.cfa_offset, 16);
        if (code[0] == 0x55) /* push %rbp */
                CHECK_RULE(r, EP_CFA_SP, 16, EP_FP_AT_CFA, -16);
}

static void check_omit(const char *path) {
        EpUnwindExtractStats st;
        uint32_t flags = 0;
        UnwElf e = unw_elf_open(path);
        void *blob = unw_extract(path, NULL, &flags, &st);
        uint64_t size = 0, a;
        bool deref = false;

        CHECK(flags & EP_UNWIND_FROM_EH_FRAME);
        CHECK(!(flags & EP_UNWIND_FP_FALLBACK));
        CHECK(st.fdes > 5);
        CHECK_INT(st.fdes_failed, 0);
        check_c_functions(&e, blob);

        /* The realigned frame: somewhere in its body CFA = *(rbp - 8), rbp saved at rbp + 0. */
        a = unw_symbol(&e, "unw_realigned", &size);
        CHECK(a && size > 0);
        CHECK_RULE(unw_rule_at(blob, unw_vaddr_to_offset(&e, a)), EP_CFA_SP, 8, EP_FP_SAME, 0);
        for (uint64_t off = unw_vaddr_to_offset(&e, a); off < unw_vaddr_to_offset(&e, a) + size; off++) {
                struct ep_unwind_rule r = unw_rule_at(blob, off);
                if (r.cfa_kind == EP_CFA_DEREF_FP) {
                        /* gcc keeps the DRAP register right below the saved rbp: -8 (further
                         * down when it saves more first, as with sanitizers). */
                        CHECK(r.cfa_offset < 0 && r.cfa_offset % 8 == 0);
                        CHECK_INT(r.fp_rule, EP_FP_AT_FP);
                        CHECK_INT(r.fp_offset, 0);
                        deref = true;
                }
        }
        CHECK(deref);

        /* .plt: PLT0 pushes (rsp + 16), the entries use the PLT expression. */
        a = unw_section(&e, ".plt", &size);
        CHECK(a && size >= 32);
        CHECK_RULE(unw_rule_at(blob, unw_vaddr_to_offset(&e, a)), EP_CFA_SP, 16, EP_FP_SAME, 0);
        CHECK_INT(unw_rule_at(blob, unw_vaddr_to_offset(&e, a + 16)).cfa_kind, EP_CFA_PLT);
        CHECK_INT(unw_rule_at(blob, unw_vaddr_to_offset(&e, a + 16 + 11)).cfa_kind, EP_CFA_PLT);

        /* glibc's _start says the return address is undefined: the root. */
        CHECK_INT(unw_rule_at(blob, sym_off(&e, "_start")).cfa_kind, EP_CFA_STOP);

        /* Code without CFI, longer than padding: a gap. */
        CHECK_INT(unw_rule_at(blob, sym_off(&e, "unw_nocfi") + 8).cfa_kind, EP_CFA_INVALID);

        /* The trampoline by name, and the nop before it (return address - 1 lookups). */
        CHECK_INT(unw_rule_at(blob, sym_off(&e, "__restore_rt")).cfa_kind, EP_CFA_SIGNAL);
        CHECK_INT(unw_rule_at(blob, sym_off(&e, "__restore_rt") - 1).cfa_kind, EP_CFA_SIGNAL);
        CHECK(st.signal_frames >= 1);

        /* Past the end of all code: the terminating INVALID. */
        const EpUnwindTableHeader *h = ep_unwind_table_header(blob);
        const EpUnwindEntry *last = &ep_unwind_table_entries(blob)[h->n_entries - 1];
        CHECK_INT(ep_unwind_table_rules(blob)[last->rule].cfa_kind, EP_CFA_INVALID);
        CHECK_INT(unw_rule_at(blob, last->file_offset + 100).cfa_kind, EP_CFA_INVALID);

        free(blob);
        unw_elf_close(&e);
}

static void check_frame_pointer(const char *path) {
        uint32_t flags = 0;
        UnwElf e = unw_elf_open(path);
        void *blob = unw_extract(path, NULL, &flags, NULL);
        const char *fns[] = { "unw_plt_caller", "unw_chain" };

        CHECK(flags & EP_UNWIND_FROM_EH_FRAME);
        check_c_functions(&e, blob);

        for (size_t i = 0; i < ELEMENTSOF(fns); i++) {
                uint8_t code[4];
                uint64_t off = sym_off(&e, fns[i]);

                read_code(&e, unw_symbol(&e, fns[i], NULL), code, sizeof code);
                /* push %rbp; mov %rsp,%rbp */
                if (code[0] != 0x55 || code[1] != 0x48 || code[2] != 0x89 || code[3] != 0xe5)
                        TEST_FAIL("%s does not start with the frame-pointer prologue", fns[i]);
                CHECK_RULE(unw_rule_at(blob, off), EP_CFA_SP, 8, EP_FP_SAME, 0);
                CHECK_RULE(unw_rule_at(blob, off + 1), EP_CFA_SP, 16, EP_FP_AT_CFA, -16);
                CHECK_RULE(unw_rule_at(blob, off + 4), EP_CFA_FP, 16, EP_FP_AT_CFA, -16);
        }
        free(blob);
        unw_elf_close(&e);
}

static void check_debug_frame(const char *path) {
        uint32_t flags = 0;
        UnwElf e = unw_elf_open(path);
        void *blob;

        CHECK(unw_section(&e, ".eh_frame", NULL) == 0);
        blob = unw_extract(path, NULL, &flags, NULL);
        CHECK(flags & EP_UNWIND_FROM_DEBUG_FRAME);
        CHECK(!(flags & (EP_UNWIND_FROM_EH_FRAME | EP_UNWIND_FROM_DEBUG_FILE | EP_UNWIND_FP_FALLBACK)));
        check_c_functions(&e, blob);
        /* _start lost its CFI with .eh_frame: the entry point still ends the unwind. */
        CHECK_INT(unw_rule_at(blob, sym_off(&e, "_start")).cfa_kind, EP_CFA_STOP);
        free(blob);
        unw_elf_close(&e);
}

static void check_split(const char *path, const char *debug_path) {
        char root[] = "/tmp/test-unwind-root-XXXXXX", link[512], hex[128];
        EpUnwindExtractOptions opts = {};
        EpUnwindExtractStats st;
        uint8_t id[EP_BUILD_ID_MAX];
        size_t id_len = 0;
        uint32_t flags = 0;
        UnwElf e = unw_elf_open(path);
        void *blob;

        CHECK(mkdtemp(root));
        opts.debug_root = root;

        /* Read the build ID the way the test binary was linked. */
        {
                Elf_Scn *scn = NULL;
                while ((scn = elf_nextscn(e.elf, scn))) {
                        GElf_Shdr sh;
                        GElf_Nhdr nh;
                        size_t name_off, desc_off;
                        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
                                continue;
                        Elf_Data *d = elf_getdata(scn, NULL);
                        if (d && gelf_getnote(d, 0, &nh, &name_off, &desc_off) > 0 && nh.n_type == NT_GNU_BUILD_ID) {
                                id_len = nh.n_descsz;
                                memcpy(id, (uint8_t *) d->d_buf + desc_off, id_len);
                        }
                }
        }
        CHECK(id_len == 20);
        ep_hex_encode(id, id_len, hex);

        /* 1. Nothing to find (the debuglink's directory has no such file either when the hint
         *    points elsewhere): the frame-pointer fallback. */
        opts.no_debug_files = true;
        blob = unw_extract(path, &opts, &flags, &st);
        CHECK(flags & EP_UNWIND_FP_FALLBACK);
        CHECK_INT(ep_unwind_table_header(blob)->n_rules, 1);
        CHECK_INT(ep_unwind_table_header(blob)->n_entries, 1);
        CHECK_INT(unw_rule_at(blob, sym_off(&e, "unw_leaf")).cfa_kind, EP_CFA_FP_FALLBACK);
        free(blob);
        opts.no_debug_files = false;

        /* 2. By build ID under the debug root. */
        snprintf(link, sizeof link, "%s/.build-id", root);
        CHECK(mkdir(link, 0755) == 0);
        snprintf(link, sizeof link, "%s/.build-id/%.2s", root, hex);
        CHECK(mkdir(link, 0755) == 0);
        snprintf(link, sizeof link, "%s/.build-id/%.2s/%s.debug", root, hex, hex + 2);
        CHECK(symlink(debug_path, link) == 0);
        {
                uint8_t fid[EP_FILE_ID_SIZE];
                size_t size;
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                CHECK(fd >= 0);
                CHECK_INT(ep_file_id_from_fd(fd, fid, NULL), 0);
                /* No path hint at all: only the build ID can find it. */
                CHECK_INT(ep_unwind_extract_full(fd, fid, "/nonexistent/x", &opts, &blob, &size, &flags, &st), 0);
                CHECK_INT(ep_unwind_table_validate(blob, size), 0);
                close(fd);
        }
        CHECK((flags & (EP_UNWIND_FROM_DEBUG_FILE | EP_UNWIND_FROM_DEBUG_FRAME)) ==
              (EP_UNWIND_FROM_DEBUG_FILE | EP_UNWIND_FROM_DEBUG_FRAME));
        CHECK_STR(st.debug_file, link);
        check_c_functions(&e, blob);
        free(blob);
        CHECK(unlink(link) == 0);

        /* 3. By .gnu_debuglink next to the file (the debug file sits in the same build dir). */
        blob = unw_extract(path, &opts, &flags, &st);
        CHECK(flags & EP_UNWIND_FROM_DEBUG_FILE);
        CHECK(strstr(st.debug_file, "test-symbolizer-unwind-prog.debug"));
        check_c_functions(&e, blob);
        free(blob);

        /* 4. The same without a path hint: found from /proc/self/fd. */
        {
                uint8_t fid[EP_FILE_ID_SIZE];
                size_t size;
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                CHECK(fd >= 0);
                CHECK_INT(ep_file_id_from_fd(fd, fid, NULL), 0);
                CHECK_INT(ep_unwind_extract_full(fd, fid, NULL, &opts, &blob, &size, &flags, &st), 0);
                CHECK(flags & EP_UNWIND_FROM_DEBUG_FILE);
                free(blob);
                close(fd);
        }

        snprintf(link, sizeof link, "%s/.build-id/%.2s", root, hex);
        (void) rmdir(link);
        snprintf(link, sizeof link, "%s/.build-id", root);
        (void) rmdir(link);
        (void) rmdir(root);
        unw_elf_close(&e);
}

static void check_no_cfi(const char *path) {
        uint32_t flags = 0;
        EpUnwindExtractOptions opts = { .no_debug_files = true };
        void *blob = unw_extract(path, &opts, &flags, NULL);

        CHECK(flags & EP_UNWIND_FP_FALLBACK);
        CHECK_INT(ep_unwind_table_header(blob)->n_rules, 1);
        CHECK_INT(ep_unwind_table_rules(blob)[0].cfa_kind, EP_CFA_FP_FALLBACK);
        free(blob);
}

static void check_libc(void) {
        Dl_info info;
        EpUnwindExtractStats st;
        uint32_t flags = 0;
        uint64_t clone_addr, clone_size = 0;
        bool stop = false, sig = false;

        CHECK(dladdr((void *) gnu_get_libc_version, &info) && info.dli_fname);
        const char *path = info.dli_fname;
        UnwElf e = unw_elf_open(path);
        void *blob = unw_extract(path, NULL, &flags, &st);
        CHECK(flags & EP_UNWIND_FROM_EH_FRAME);
        CHECK(st.fdes > 1000);
        printf("libc %s: %" PRIu64 " FDEs, %" PRIu64 " rows (%" PRIu64 " not expressible), %u rules, %u entries\n",
               path, st.fdes, st.rows, st.rows_unsupported, st.n_rules, st.n_entries);

        /* rt_sigreturn found by its code: SIGNAL, also one byte before. */
        size_t n;
        CHECK(elf_getphdrnum(e.elf, &n) == 0);
        for (size_t i = 0; i < n && !sig; i++) {
                GElf_Phdr ph;
                CHECK(gelf_getphdr(e.elf, (int) i, &ph));
                if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X))
                        continue;
                uint8_t *code = malloc(ph.p_filesz);
                CHECK(code);
                CHECK(pread(e.fd, code, ph.p_filesz, (off_t) ph.p_offset) == (ssize_t) ph.p_filesz);
                for (size_t k = 1; k + sizeof sigreturn_code <= ph.p_filesz; k++)
                        if (memcmp(code + k, sigreturn_code, sizeof sigreturn_code) == 0 &&
                            unw_rule_at(blob, ph.p_offset + k).cfa_kind == EP_CFA_SIGNAL) {
                                CHECK_INT(unw_rule_at(blob, ph.p_offset + k - 1).cfa_kind, EP_CFA_SIGNAL);
                                sig = true;
                                break;
                        }
                free(code);
        }
        CHECK(sig);

        /* clone's child path marks the return address undefined. */
        clone_addr = unw_symbol(&e, "clone", &clone_size);
        CHECK(clone_addr && clone_size > 0);
        for (uint64_t off = unw_vaddr_to_offset(&e, clone_addr); off < unw_vaddr_to_offset(&e, clone_addr) + clone_size;
             off++)
                if (unw_rule_at(blob, off).cfa_kind == EP_CFA_STOP)
                        stop = true;
        CHECK(stop);

        free(blob);
        unw_elf_close(&e);
}

/* Damaged files: never a crash; either an error or a valid table. */
static void check_damaged(const char *path) {
        struct stat st;
        uint8_t id[EP_FILE_ID_SIZE] = { 7 };
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        uint8_t *orig;
        unsigned seed = 12345, ok = 0, errors = 0;

        CHECK(fd >= 0 && fstat(fd, &st) == 0);
        orig = malloc((size_t) st.st_size);
        CHECK(orig && pread(fd, orig, (size_t) st.st_size, 0) == st.st_size);
        close(fd);

        UnwElf e = unw_elf_open(path);
        uint64_t eh_size = 0, eh = unw_section(&e, ".eh_frame", &eh_size);
        uint64_t eh_off = unw_vaddr_to_offset(&e, eh);
        unw_elf_close(&e);
        CHECK(eh && eh_size > 64);

        for (int round = 0; round < 400; round++) {
                int mfd = memfd_create("damaged", MFD_CLOEXEC);
                size_t size = (size_t) st.st_size;
                uint8_t *copy = malloc(size);
                void *blob = NULL;
                size_t blob_size = 0;
                uint32_t flags;

                CHECK(mfd >= 0 && copy);
                memcpy(copy, orig, size);
                if (round < 100)
                        size = (size_t) rand_r(&seed) % size; /* truncated */
                else
                        for (int k = 0; k < 1 + round % 8; k++) /* bytes of .eh_frame changed */
                                copy[eh_off + (size_t) rand_r(&seed) % eh_size] = (uint8_t) rand_r(&seed);
                CHECK(write(mfd, copy, size) == (ssize_t) size);

                int r = ep_unwind_extract(mfd, id, NULL, &blob, &blob_size, &flags);
                if (r >= 0) {
                        CHECK_INT(ep_unwind_table_validate(blob, blob_size), 0);
                        ok++;
                } else
                        errors++;
                free(blob);
                free(copy);
                close(mfd);
        }
        printf("damaged copies: %u tables, %u errors\n", ok, errors);
        CHECK(errors > 0);

        /* Not ELF at all. */
        int mfd = memfd_create("text", MFD_CLOEXEC);
        void *blob;
        size_t blob_size;
        CHECK(write(mfd, "hello, this is not an ELF file at all\n", 38) == 38);
        CHECK_INT(ep_unwind_extract(mfd, id, NULL, &blob, &blob_size, NULL), -ENOEXEC);
        close(mfd);
        free(orig);
}

int main(void) {
        check_omit(test_env("UNW_PROG_OMIT"));
        check_frame_pointer(test_env("UNW_PROG_FP"));
        check_debug_frame(test_env("UNW_PROG_DEBUGFRAME"));
        check_split(test_env("UNW_PROG_SPLIT"), test_env("UNW_PROG_DEBUG"));
        check_no_cfi(test_env("UNW_PROG_NOCFI"));
        check_libc();
        check_damaged(test_env("UNW_PROG_OMIT"));
        TEST_DONE("symbolizer-unwind-extract");
}
