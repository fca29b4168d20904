/* SPDX-License-Identifier: MIT */
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "unwind-builder.h"
#include "unwind-classify.h"
#include "unwind-debugfile.h"
#include "unwind-elf.h"
#include "unwind-extract.h"
#include "unwind-fde.h"

#define DEFAULT_MAX_FDES (4u << 20)
#define DEFAULT_MAX_SPANS (16u << 20)
#define DEFAULT_MAX_CFA_BYTES (1ull << 30) /* libLLVM needs 70 MB, the most seen 76 MB */
#define MAX_ROWS_PER_FDE (1u << 20)
#define MIN_FDES_WITHOUT_DEBUG_FILE 8 /* fewer: look for a separate debug file */
#define MAX_MARKS 32                  /* symbols that get a special rule */
#define MAX_SYMBOLS (16u << 20)       /* symbols scanned for them */
#define SMALL_FDE 32                  /* FDEs up to this size get their first bytes checked */
#define ENTRY_STUB_MAX 64             /* entry code without CFI: at most this long */

/* mov $15,%rax; syscall: rt_sigreturn on x86-64. */
static const uint8_t sigreturn_code[] = { 0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05 };

/* A symbol that gets a command rule: signal trampolines always, entry code only where no FDE
 * covers it. */
typedef struct Mark {
        uint64_t start, end;
        uint8_t kind; /* EP_CFA_SIGNAL or EP_CFA_STOP */
} Mark;

typedef struct Extract {
        const EpUnwindExtractOptions *opts;
        EpUnwindElf main;
        EpUnwindBuilder *builder;
        EpUnwindExtractStats stats;
        uint64_t budget; /* CFA program bytes libdw may still run */
        EpFdeList walked; /* every FDE range walked so far, sorted after each source */
        Mark marks[MAX_MARKS];
        size_t n_marks;
        uint32_t flags;
} Extract;

static void extract_done(Extract *x) {
        ep_unwind_builder_free(x->builder);
        ep_fde_list_done(&x->walked);
        ep_unwind_elf_close(&x->main);
}

/* ---- symbols with special meaning ---- */

static int mark_kind(const char *name, size_t max) {
        static const struct {
                const char *name;
                uint8_t kind;
        } table[] = {
                { "__restore_rt", EP_CFA_SIGNAL },        { "__vdso_rt_sigreturn", EP_CFA_SIGNAL },
                { "_start", EP_CFA_STOP },                { "__clone", EP_CFA_STOP },
                { "clone", EP_CFA_STOP },                 { "__clone3", EP_CFA_STOP },
                { "clone3", EP_CFA_STOP },
        };

        for (size_t i = 0; i < ELEMENTSOF(table); i++) {
                size_t len = strlen(table[i].name);
                if (len < max && memcmp(name, table[i].name, len + 1) == 0)
                        return table[i].kind;
        }
        return -1;
}

static void add_mark(Extract *x, uint64_t start, uint64_t size, uint8_t kind) {
        if (x->n_marks >= MAX_MARKS || start == 0)
                return;
        for (size_t i = 0; i < x->n_marks; i++)
                if (x->marks[i].start == start)
                        return; /* aliases (clone, __clone) */
        if (kind == EP_CFA_SIGNAL)
                size = MAX(size, (uint64_t) sizeof(sigreturn_code));
        else if (size == 0 || size > ENTRY_STUB_MAX)
                size = ENTRY_STUB_MAX;
        x->marks[x->n_marks++] = (Mark) { .start = start, .end = start + size, .kind = kind };
}

/* .symtab when present (unstripped files), else .dynsym. */
static void scan_symbols(Extract *x) {
        Elf_Scn *scn = NULL, *found = NULL;
        GElf_Shdr sh, found_sh;

        while ((scn = elf_nextscn(x->main.elf, scn))) {
                if (!gelf_getshdr(scn, &sh))
                        continue;
                if (sh.sh_type == SHT_SYMTAB) {
                        found = scn;
                        found_sh = sh;
                        break;
                }
                if (sh.sh_type == SHT_DYNSYM && !found) {
                        found = scn;
                        found_sh = sh;
                }
        }
        if (!found || found_sh.sh_entsize == 0)
                return;

        Elf_Data *syms = elf_getdata(found, NULL);
        Elf_Scn *str_scn = elf_getscn(x->main.elf, found_sh.sh_link);
        Elf_Data *strs = str_scn ? elf_getdata(str_scn, NULL) : NULL;
        if (!syms || !strs || !strs->d_buf)
                return;

        size_t n = MIN(syms->d_size / found_sh.sh_entsize, (size_t) MAX_SYMBOLS);
        for (size_t i = 0; i < n; i++) {
                GElf_Sym s;
                int kind;

                if (!gelf_getsym(syms, (int) i, &s) || s.st_name == 0 || s.st_name >= strs->d_size ||
                    s.st_shndx == SHN_UNDEF)
                        continue;
                if (GELF_ST_TYPE(s.st_info) != STT_FUNC && GELF_ST_TYPE(s.st_info) != STT_NOTYPE)
                        continue;
                const char *name = (const char *) strs->d_buf + s.st_name;
                if (name[0] != '_' && name[0] != 'c')
                        continue;
                kind = mark_kind(name, strs->d_size - s.st_name);
                if (kind >= 0)
                        add_mark(x, s.st_value, s.st_size, (uint8_t) kind);
        }
}

static bool overlaps_signal_mark(const Extract *x, uint64_t start, uint64_t end) {
        for (size_t i = 0; i < x->n_marks; i++)
                if (x->marks[i].kind == EP_CFA_SIGNAL && x->marks[i].start < end && start < x->marks[i].end)
                        return true;
        return false;
}

/* A signal trampoline by its code: at the FDE's start, or one byte in (glibc starts the FDE
 * at the nop before __restore_rt, for unwinders that look up return address - 1). */
static bool is_sigreturn_code(const Extract *x, uint64_t start, uint64_t end) {
        uint8_t code[sizeof(sigreturn_code) + 1];

        if (end - start < sizeof(sigreturn_code))
                return false;
        if (ep_unwind_elf_read_code(&x->main, start, code, MIN(sizeof code, (size_t) (end - start))) < 0)
                return false;
        return memcmp(code, sigreturn_code, sizeof sigreturn_code) == 0 ||
               (end - start > sizeof(sigreturn_code) && memcmp(code + 1, sigreturn_code, sizeof sigreturn_code) == 0);
}

/* ---- spans ---- */

static int add_span(Extract *x, uint64_t start, uint64_t end, const struct ep_unwind_rule *rule) {
        uint64_t off_start, off_end;

        if (!ep_unwind_elf_to_offsets(&x->main, start, end, &off_start, &off_end))
                return 0; /* not code we can map */
        return ep_unwind_builder_add(x->builder, off_start, off_end, rule);
}

/* ---- one CFI source ---- */

static int walk_fde(Extract *x, Dwarf_CFI *cfi, const EpFdeRange *fde, bool *ret_failed) {
        bool signal = overlaps_signal_mark(x, fde->start, fde->end) ||
                      (fde->end - fde->start <= SMALL_FDE && is_sigreturn_code(x, fde->start, fde->end));
        uint64_t addr = fde->start;
        int r;

        *ret_failed = false;
        if (signal)
                x->stats.signal_frames++;

        for (unsigned rows = 0; addr < fde->end; rows++) {
                struct ep_unwind_rule rule;
                Dwarf_Frame *frame = NULL;
                Dwarf_Addr rs, re;
                bool sigp = false;

                if (rows >= MAX_ROWS_PER_FDE || x->budget < fde->cost)
                        return -E2BIG;
                x->budget -= fde->cost;
                x->stats.cfa_bytes += fde->cost;

                if (dwarf_cfi_addrframe(cfi, addr, &frame) < 0 || !frame) {
                        *ret_failed = true;
                        return 0;
                }
                if (dwarf_frame_info(frame, &rs, &re, &sigp) < 0 || re <= addr || rs > addr) {
                        free(frame);
                        *ret_failed = true;
                        return 0;
                }
                uint64_t end = MIN((uint64_t) re, fde->end);

                if (signal || sigp)
                        rule = ep_unwind_command(EP_CFA_SIGNAL);
                else {
                        unsigned why = ep_unwind_classify_x86_64(frame, &rule);
                        if (rule.cfa_kind == EP_CFA_INVALID)
                                x->stats.rows_unsupported++;
                        if (why & EP_ROW_FP_UNSUPPORTED)
                                x->stats.rows_fp_unsupported++;
                }
                free(frame);
                x->stats.rows++;

                r = add_span(x, addr, end, &rule);
                if (r < 0)
                        return r;
                addr = end;
        }
        return 0;
}

/* Walks the FDEs of one section. FDEs overlapping what earlier sources covered are skipped
 * (.eh_frame wins over .debug_frame). Returns how many FDEs produced rows. */
static int walk_source(Extract *x, Dwarf_CFI *cfi, const EpUnwindElf *file, Elf_Scn *scn, bool eh_frame,
                       size_t *ret_walked) {
        EpFdeList list = {};
        Elf_Data *data;
        GElf_Shdr sh;
        size_t walked = 0, failed = 0;
        int r;

        *ret_walked = 0;
        if (!gelf_getshdr(scn, &sh))
                return -EBADMSG;
        data = elf_getdata(scn, NULL);
        if (!data)
                return -EBADMSG;

        r = ep_fde_collect(file->ehdr.e_ident, data, eh_frame, sh.sh_addr,
                           x->opts->max_fdes ?: DEFAULT_MAX_FDES, &list);
        if (r < 0)
                goto finish;
        x->stats.fdes_skipped += list.skipped;
        ep_fde_list_sort(&list);

        for (size_t i = 0; i < list.n; i++) {
                const EpFdeRange *f = &list.ranges[i];
                bool fde_failed;

                if (x->walked.n > 0 && ep_fde_list_overlaps(&x->walked, f->start, f->end)) {
                        x->stats.fdes_skipped++;
                        continue;
                }
                if (!ep_unwind_elf_to_offsets(&x->main, f->start, f->end, &(uint64_t) {0}, &(uint64_t) {0})) {
                        x->stats.fdes_skipped++; /* not in an executable segment of the file */
                        continue;
                }
                r = walk_fde(x, cfi, f, &fde_failed);
                if (r < 0)
                        goto finish;
                x->stats.fdes++;
                if (fde_failed) {
                        x->stats.fdes_failed++;
                        failed++;
                } else
                        walked++;
        }

        /* Remember what this source covered, for the next source and the gap marks. */
        for (size_t i = 0; i < list.n; i++) {
                EpFdeList *w = &x->walked;
                if (w->n == w->allocated) {
                        size_t n = MAX(w->allocated * 2, (size_t) 1024);
                        EpFdeRange *a = reallocarray(w->ranges, n, sizeof(EpFdeRange));
                        if (!a) {
                                r = -ENOMEM;
                                goto finish;
                        }
                        w->ranges = a;
                        w->allocated = n;
                }
                w->ranges[w->n++] = list.ranges[i];
        }
        ep_fde_list_sort(&x->walked);

        /* A section of which libdw could evaluate nothing is broken, not merely odd. */
        r = failed > 0 && walked == 0 ? -EBADMSG : 0;
        *ret_walked = walked;
finish:
        ep_fde_list_done(&list);
        return r;
}

static int walk_eh_frame(Extract *x, size_t *ret_walked) {
        GElf_Shdr sh;
        Elf_Scn *scn = ep_unwind_elf_section(&x->main, ".eh_frame", &sh);
        Dwarf_CFI *cfi;
        int r;

        *ret_walked = 0;
        /* lld types it SHT_X86_64_UNWIND, GNU ld SHT_PROGBITS. */
        if (!scn || (sh.sh_type != SHT_PROGBITS && sh.sh_type != SHT_X86_64_UNWIND) || sh.sh_size == 0)
                return 0;
        cfi = dwarf_getcfi_elf(x->main.elf);
        if (!cfi)
                return -EBADMSG;
        r = walk_source(x, cfi, &x->main, scn, true, ret_walked);
        dwarf_cfi_end(cfi);
        if (r >= 0 && *ret_walked > 0)
                x->flags |= EP_UNWIND_FROM_EH_FRAME;
        return r;
}

/* .debug_frame of file (the file itself or its separate debug file). libdw reads it through a
 * Dwarf handle, which also decompresses it. */
static int walk_debug_frame(Extract *x, const EpUnwindElf *file, size_t *ret_walked) {
        GElf_Shdr sh;
        Elf_Scn *scn = ep_unwind_elf_section(file, ".debug_frame", &sh);
        Dwarf *dwarf;
        Dwarf_CFI *cfi;
        int r;

        *ret_walked = 0;
        if (!scn || sh.sh_type != SHT_PROGBITS || sh.sh_size == 0)
                return 0;
        dwarf = dwarf_begin_elf(file->elf, DWARF_C_READ, NULL);
        if (!dwarf)
                return -EBADMSG;
        cfi = dwarf_getcfi(dwarf);
        if (!cfi) {
                dwarf_end(dwarf);
                return -EBADMSG;
        }
        r = walk_source(x, cfi, file, scn, false, ret_walked);
        dwarf_end(dwarf);
        if (r >= 0 && *ret_walked > 0)
                x->flags |= EP_UNWIND_FROM_DEBUG_FRAME;
        return r;
}

/* ---- separate debug file ---- */

static bool debug_file_matches(const EpUnwindElf *dbg, const uint8_t *build_id, size_t build_id_len,
                               const char *debuglink, uint32_t crc) {
        uint8_t id[EP_BUILD_ID_MAX];
        size_t len = 0;

        if (dbg->ehdr.e_machine != EM_X86_64)
                return false;
        if (build_id_len > 0)
                return ep_unwind_elf_build_id(dbg, id, &len) >= 0 && len == build_id_len &&
                       memcmp(id, build_id, len) == 0;
        if (debuglink) {
                uint32_t c;
                return ep_unwind_debug_crc32(dbg->fd, &c) >= 0 && c == crc;
        }
        return false;
}

static int walk_debug_file(Extract *x, const char *path_hint, size_t *ret_walked) {
        char *candidates[EP_DEBUG_MAX_CANDIDATES] = {};
        const uint8_t *build_id = x->stats.build_id;
        size_t build_id_len = x->stats.build_id_len;
        char debuglink[256];
        uint32_t crc = 0;
        bool have_link;
        int n, r = 0;

        *ret_walked = 0;
        have_link = ep_unwind_elf_debuglink(&x->main, debuglink, &crc) >= 0;
        if (build_id_len == 0 && !have_link)
                return 0;

        n = ep_unwind_debug_candidates(x->opts->debug_root, build_id, build_id_len, have_link ? debuglink : NULL,
                                       path_hint, candidates);
        if (n < 0)
                return n;

        for (int i = 0; i < n && r == 0 && *ret_walked == 0; i++) {
                /* O_NONBLOCK: a FIFO planted under a debuglink name must not hang us (the
                 * descriptor is checked to be a regular file before any read). */
                _cleanup_close_ int fd = open(candidates[i], O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
                EpUnwindElf dbg;

                if (fd < 0)
                        continue;
                if (ep_unwind_elf_open(fd, &dbg) < 0)
                        continue;
                if (debug_file_matches(&dbg, build_id, build_id_len, have_link ? debuglink : NULL, crc)) {
                        r = walk_debug_frame(x, &dbg, ret_walked);
                        if (r < 0)
                                log_debug_errno(r, "Separate debug file %s: unusable .debug_frame: %m", candidates[i]);
                        if (r >= 0 && *ret_walked > 0) {
                                x->flags |= EP_UNWIND_FROM_DEBUG_FILE;
                                snprintf(x->stats.debug_file, sizeof x->stats.debug_file, "%s", candidates[i]);
                        }
                        r = r == -ENOMEM ? r : 0; /* a bad debug file is not the file's fault */
                }
                ep_unwind_elf_close(&dbg);
        }

        for (int i = 0; i < n; i++)
                free(candidates[i]);
        return r;
}

/* ---- entry code without CFI ---- */

static bool walked_covers(const Extract *x, uint64_t addr) {
        return x->walked.n > 0 && ep_fde_list_overlaps(&x->walked, addr, addr + 1);
}

static uint64_t next_walked_start(const Extract *x, uint64_t addr) {
        size_t lo = 0, hi = x->walked.n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (x->walked.ranges[mid].start <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo < x->walked.n ? x->walked.ranges[lo].start : UINT64_MAX;
}

static int add_gap_marks(Extract *x) {
        int r;

        /* The ELF entry point starts a process: of an executable, and of the dynamic loader
         * (ET_DYN without an interpreter; its _start has no CFI). A mark only applies where
         * no CFI covers the address, so a library's e_entry described by CFI is unaffected. */
        if (x->main.ehdr.e_entry != 0)
                add_mark(x, x->main.ehdr.e_entry, 0, EP_CFA_STOP);

        for (size_t i = 0; i < x->n_marks; i++) {
                const Mark *m = &x->marks[i];
                struct ep_unwind_rule rule = ep_unwind_command(m->kind);

                if (walked_covers(x, m->start))
                        continue; /* CFI describes it (signal FDEs were marked while walking) */
                uint64_t start = m->start, end = MIN(m->end, next_walked_start(x, m->start));
                if (m->kind == EP_CFA_SIGNAL) {
                        uint8_t before;
                        /* Libcs put a nop before the trampoline, and the unwinder looks a
                         * return address up at address - 1: cover the nop too. */
                        if (ep_unwind_elf_read_code(&x->main, start - 1, &before, 1) >= 0 && before == 0x90 &&
                            !walked_covers(x, start - 1))
                                start--;
                        x->stats.signal_frames++;
                }
                r = add_span(x, start, end, &rule);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* ---- entry point ---- */

int ep_unwind_extract_full(int fd, const uint8_t file_id[EP_FILE_ID_SIZE], const char *path_hint,
                           const EpUnwindExtractOptions *options, void **ret_blob, size_t *ret_size,
                           uint32_t *ret_flags, EpUnwindExtractStats *ret_stats) {
        static const EpUnwindExtractOptions defaults = {};
        Extract x = { .opts = options ?: &defaults };
        char hint[4096];
        size_t eh = 0, dbg = 0, sep = 0;
        int r;

        x.budget = x.opts->max_cfa_bytes ?: DEFAULT_MAX_CFA_BYTES;

        r = ep_unwind_elf_open(fd, &x.main);
        if (r < 0)
                return r;
        if (x.main.ehdr.e_machine != EM_X86_64 || x.main.ehdr.e_ident[EI_CLASS] != ELFCLASS64) {
                r = -EPROTONOSUPPORT;
                goto finish;
        }
        if (x.main.n_exec == 0) {
                r = -ENODATA;
                goto finish;
        }
        for (size_t i = 0; i < x.main.n_exec; i++)
                if (x.main.exec[i].offset + x.main.exec[i].filesz > UINT32_MAX) {
                        r = -EFBIG;
                        goto finish;
                }

        r = ep_unwind_builder_new(x.opts->max_spans ?: DEFAULT_MAX_SPANS, &x.builder);
        if (r < 0)
                goto finish;

        if (ep_unwind_elf_build_id(&x.main, x.stats.build_id, &x.stats.build_id_len) < 0)
                x.stats.build_id_len = 0;
        scan_symbols(&x);

        r = walk_eh_frame(&x, &eh);
        if (r < 0)
                goto finish;
        r = walk_debug_frame(&x, &x.main, &dbg);
        if (r < 0)
                goto finish;

        if (eh + dbg < MIN_FDES_WITHOUT_DEBUG_FILE && !x.opts->no_debug_files) {
                if (!path_hint) {
                        char link[64];
                        ssize_t k;

                        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
                        k = readlink(link, hint, sizeof hint - 1);
                        if (k > 0 && hint[0] == '/') {
                                hint[k] = 0;
                                path_hint = hint;
                        }
                }
                r = walk_debug_file(&x, path_hint, &sep);
                if (r < 0)
                        goto finish;
        }

        /* Without any CFI the builder stays empty and makes the FP_FALLBACK table: entry and
         * signal marks alone would only make things worse than the frame-pointer walk. */
        if (eh + dbg + sep > 0) {
                r = add_gap_marks(&x);
                if (r < 0)
                        goto finish;
        }

        void *blob;
        size_t size;
        r = ep_unwind_builder_finish(x.builder, file_id, x.flags, &blob, &size);
        if (r < 0)
                goto finish;

        const EpUnwindTableHeader *h = blob;
        x.stats.n_rules = h->n_rules;
        x.stats.n_entries = h->n_entries;
        if (ret_flags)
                *ret_flags = h->flags;
        if (ret_stats)
                *ret_stats = x.stats;
        *ret_blob = blob;
        *ret_size = size;
        r = 0;

finish:
        extract_done(&x);
        return r;
}

int ep_unwind_extract(int fd, const uint8_t file_id[EP_FILE_ID_SIZE], const char *path_hint, void **ret_blob,
                      size_t *ret_size, uint32_t *ret_flags) {
        return ep_unwind_extract_full(fd, file_id, path_hint, NULL, ret_blob, ret_size, ret_flags, NULL);
}
