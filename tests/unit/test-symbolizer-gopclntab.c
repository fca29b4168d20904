/* SPDX-License-Identifier: MIT */
/* Go's pc-line table (symbolizer/gopclntab.c, resolve-go.c) against a real Go program
 * (tests/workloads/go/gospin.go) built twice: as is, and stripped (-ldflags=-s -w, then
 * objcopy --strip-all). The expected answers do not come from the code under test:
 *  - the program itself prints what the Go runtime says about its own addresses (`-frames`):
 *    the innermost function, file and line of every byte of its main.* functions, and the
 *    frames of a stack captured under two inlined calls;
 *  - lines marked "MARK:" in the source, and function addresses from the unstripped .symtab;
 *  - `go tool buildid` for the Go build ID.
 * The other layouts (Go 1.16 and 1.20 headers and records) are tested on tables converted
 * from the real one by a small writer in this file, which must answer exactly as the real one
 * for every address they cover. Malformed tables must fail cleanly.
 *
 * With GOPCLNTAB_WRITE_SEEDS=DIR it also writes the converted tables to DIR as fuzzing seeds
 * (tests/fuzz/corpus-gopclntab/). */

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include "elf-symbols.h"
#include "gopclntab.h"
#include "resolver-internal.h"
#include "test-util.h"

#define BLOB_VADDR 0x10000u /* where converted tables claim to be loaded (tests/fuzz too) */

/* ---- what the Go runtime says ---- */

typedef struct Truth {
        char kind; /* 'S' stack frame, 'P' one byte of a main.* function */
        uint64_t pc;
        char function[256];
        char file[1024];
        uint32_t line;
} Truth;

static Truth *truths;
static size_t n_truths;

static void read_truths(const char *prog) {
        char cmd[4096], line[2048];
        size_t cap = 0;

        snprintf(cmd, sizeof cmd, "'%s' -frames", prog);
        FILE *p = popen(cmd, "r");
        CHECK(p);
        while (fgets(line, sizeof line, p)) {
                Truth t = {};
                unsigned long long pc;
                unsigned ln;

                if (sscanf(line, "%c %llx %255s %1023s %u", &t.kind, &pc, t.function, t.file, &ln) != 5)
                        TEST_FAIL("unexpected line from %s -frames: %s", prog, line);
                t.pc = pc;
                t.line = ln;
                if (n_truths == cap) {
                        cap = cap ? cap * 2 : 1024;
                        truths = realloc(truths, cap * sizeof(Truth));
                        CHECK(truths);
                }
                truths[n_truths++] = t;
        }
        CHECK_INT(pclose(p), 0);
        CHECK(n_truths > 500);
}

/* ---- the source and the unstripped symbols ---- */

static const char *source_path;

/* Line number of the line containing `needle` in the Go source. */
static uint32_t source_line(const char *needle) {
        char buf[1024];
        uint32_t n = 0, found = 0;
        FILE *f = fopen(source_path, "re");

        CHECK(f);
        while (fgets(buf, sizeof buf, f)) {
                n++;
                if (strstr(buf, needle)) {
                        CHECK_INT(found, 0); /* unique */
                        found = n;
                }
        }
        fclose(f);
        if (!found)
                TEST_FAIL("\"%s\" not in %s", needle, source_path);
        return found;
}

typedef struct Image {
        int fd;
        Elf *elf;
        const uint8_t *data;
        size_t size;
} Image;

static Image image_open(const char *path) {
        Image im = {};

        CHECK(elf_version(EV_CURRENT) != EV_NONE);
        im.fd = open(path, O_RDONLY | O_CLOEXEC);
        CHECK(im.fd >= 0);
        im.elf = elf_begin(im.fd, ELF_C_READ_MMAP, NULL);
        CHECK(im.elf);
        im.data = (const uint8_t *) elf_rawfile(im.elf, &im.size);
        CHECK(im.data);
        return im;
}

static void image_close(Image *im) {
        elf_end(im->elf);
        close(im->fd);
}

/* Value of symbol `name` in .symtab, or 0 (and has_symtab false when there is none). */
static uint64_t symbol_value(Image *im, const char *name, bool *has_symtab) {
        Elf_Scn *scn = NULL;

        *has_symtab = false;
        while ((scn = elf_nextscn(im->elf, scn))) {
                GElf_Shdr sh;
                Elf_Data *d;

                if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB)
                        continue;
                *has_symtab = true;
                d = elf_getdata(scn, NULL);
                CHECK(d);
                for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
                        GElf_Sym sym;
                        const char *n;

                        if (!gelf_getsym(d, (int) i, &sym))
                                continue;
                        n = elf_strptr(im->elf, sh.sh_link, sym.st_name);
                        if (n && streq(n, name))
                                return sym.st_value;
                }
        }
        return 0;
}

/* Section `name`: its bytes and address. */
static const uint8_t *section(Image *im, const char *name, uint64_t *ret_addr, size_t *ret_size) {
        size_t shstrndx;
        Elf_Scn *scn = NULL;

        CHECK_INT(elf_getshdrstrndx(im->elf, &shstrndx), 0);
        while ((scn = elf_nextscn(im->elf, scn))) {
                GElf_Shdr sh;
                const char *n;

                if (!gelf_getshdr(scn, &sh))
                        continue;
                n = elf_strptr(im->elf, shstrndx, sh.sh_name);
                if (n && streq(n, name)) {
                        CHECK(sh.sh_offset + sh.sh_size <= im->size);
                        *ret_addr = sh.sh_addr;
                        *ret_size = sh.sh_size;
                        return im->data + sh.sh_offset;
                }
        }
        TEST_FAIL("no section %s", name);
}

/* Section holding address addr. */
static const uint8_t *section_at(Image *im, uint64_t addr, uint64_t *ret_addr, size_t *ret_size) {
        Elf_Scn *scn = NULL;

        while ((scn = elf_nextscn(im->elf, scn))) {
                GElf_Shdr sh;

                if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_PROGBITS && (sh.sh_flags & SHF_ALLOC) &&
                    addr >= sh.sh_addr && addr < sh.sh_addr + sh.sh_size) {
                        *ret_addr = sh.sh_addr;
                        *ret_size = sh.sh_size;
                        return im->data + sh.sh_offset;
                }
        }
        TEST_FAIL("no section holds 0x%" PRIx64, addr);
}

/* ---- checks against the runtime ---- */

static void lookup(const EpGoTable *t, uint64_t pc, EpGoFrame *frames, size_t *n) {
        int r = ep_gopclntab_lookup(t, pc, frames, EP_GO_MAX_FRAMES, n, NULL);
        if (r < 0)
                TEST_FAIL("lookup 0x%" PRIx64 ": %s", pc, strerror(-r));
}

static void check_frame(const EpGoFrame *f, const Truth *want) {
        /* The runtime says "?" where it has no file (the padding after a function's code);
         * the symbolizer's "unknown" is "". */
        const char *want_file = streq(want->file, "?") ? "" : want->file;

        if (!streq(f->function, want->function) || !streq(f->file, want_file) || f->line != want->line)
                TEST_FAIL("0x%" PRIx64 ": got %s %s:%u, the Go runtime says %s %s:%u", want->pc, f->function,
                          f->file, f->line, want->function, want->file, want->line);
        test_checks++;
}

/* Every byte of the main.* functions: the innermost frame is what runtime.FuncForPC says. */
static void check_bytes(const EpGoTable *t) {
        size_t checked = 0;

        for (size_t i = 0; i < n_truths; i++) {
                EpGoFrame frames[EP_GO_MAX_FRAMES];
                size_t n;

                if (truths[i].kind != 'P')
                        continue;
                lookup(t, truths[i].pc, frames, &n);
                check_frame(&frames[0], &truths[i]);
                checked++;
        }
        CHECK(checked > 1000);
}

/* The captured stack: runtime.CallersFrames gives one frame per logical call, an inlined
 * callee and its callers each at the address the runtime walked to (the call site, parentPc),
 * so the chain we return for the first address of a physical frame is the next n frames. */
static void check_stack(const EpGoTable *t) {
        size_t i = 0, longest = 0;
        bool saw_capture_chain = false;

        while (i < n_truths && truths[i].kind == 'S') {
                EpGoFrame frames[EP_GO_MAX_FRAMES];
                size_t n;

                lookup(t, truths[i].pc, frames, &n);
                CHECK(i + n <= n_truths);
                for (size_t k = 0; k < n; k++)
                        check_frame(&frames[k], &truths[i + k]);
                if (n == 3 && streq(frames[0].function, "main.inner") && streq(frames[1].function, "main.middle") &&
                    streq(frames[2].function, "main.outer")) {
                        CHECK_INT(frames[0].line, source_line("MARK:inner-calls-capture"));
                        CHECK_INT(frames[1].line, source_line("MARK:middle-calls-inner"));
                        CHECK_INT(frames[2].line, source_line("MARK:outer-calls-middle"));
                        saw_capture_chain = true;
                }
                longest = MAX(longest, n);
                i += n;
        }
        CHECK(i >= 6);
        CHECK_INT(longest, 3);
        CHECK(saw_capture_chain);
}

/* Independent of the runtime: function entries from .symtab, lines from the source. */
static void check_marks(const EpGoTable *t, Image *symbols) {
        EpGoFrame frames[EP_GO_MAX_FRAMES];
        uint64_t entry, fib, work, end;
        size_t n;
        bool has_symtab;

        fib = symbol_value(symbols, "main.fib", &has_symtab);
        CHECK(has_symtab && fib != 0);
        work = symbol_value(symbols, "main.work", &has_symtab);
        CHECK(work != 0);

        /* The entry of fib: its own name, the func line (the prologue), entry reported. */
        CHECK_INT(ep_gopclntab_lookup(t, fib, frames, EP_GO_MAX_FRAMES, &n, &entry), 0);
        CHECK_INT(n, 1);
        CHECK_STR(frames[0].function, "main.fib");
        CHECK(endswith(frames[0].file, "/gospin.go"));
        CHECK_INT(frames[0].line, source_line("func fib(n int) int {"));
        CHECK_U64(entry, fib);

        /* Somewhere in fib: the recursive call line. */
        bool saw_recurse = false;
        for (uint64_t pc = fib; pc < fib + 0x100; pc++) {
                if (ep_gopclntab_lookup(t, pc, frames, EP_GO_MAX_FRAMES, &n, &entry) < 0 || entry != fib)
                        break;
                CHECK_STR(frames[n - 1].function, "main.fib");
                if (frames[0].line == source_line("MARK:fib-recurse"))
                        saw_recurse = true;
        }
        CHECK(saw_recurse);

        /* work: the inlined mix (callee first, at its body line; then work at the call line),
         * and the plain call of fib. */
        bool saw_inline = false, saw_fib_call = false;
        CHECK_INT(ep_gopclntab_lookup(t, work, frames, EP_GO_MAX_FRAMES, &n, &entry), 0);
        end = work;
        for (uint64_t pc = work; ep_gopclntab_lookup(t, pc, frames, EP_GO_MAX_FRAMES, &n, &entry) == 0 &&
                                 entry == work;
             pc++) {
                end = pc + 1;
                CHECK_STR(frames[n - 1].function, "main.work");
                if (n == 2 && streq(frames[0].function, "main.mix")) {
                        CHECK(endswith(frames[0].file, "/gospin.go"));
                        CHECK_INT(frames[0].line, source_line("MARK:mix-body"));
                        CHECK(endswith(frames[1].file, "/gospin.go"));
                        CHECK_INT(frames[1].line, source_line("MARK:work-calls-mix"));
                        saw_inline = true;
                }
                if (n == 1 && frames[0].line == source_line("MARK:work-calls-fib"))
                        saw_fib_call = true;
        }
        CHECK(saw_inline);
        CHECK(saw_fib_call);
        CHECK(end - work > 16);

        /* Outside every Go function. */
        CHECK_INT(ep_gopclntab_lookup(t, 0x10, frames, EP_GO_MAX_FRAMES, &n, NULL), -ENOENT);
        CHECK_INT(ep_gopclntab_lookup(t, UINT64_MAX - 1, frames, EP_GO_MAX_FRAMES, &n, NULL), -ENOENT);

        /* A short frame buffer gets the innermost frames. */
        for (size_t i = 0; i < n_truths; i++)
                if (truths[i].kind == 'S' && streq(truths[i].function, "main.inner")) {
                        CHECK_INT(ep_gopclntab_lookup(t, truths[i].pc, frames, 1, &n, NULL), 0);
                        CHECK_INT(n, 1);
                        CHECK_STR(frames[0].function, "main.inner");
                }
}

static EpGoVersion expected_version(const char *go) {
        char cmd[4096], out[64] = "";
        unsigned major = 0, minor = 0;

        snprintf(cmd, sizeof cmd, "'%s' env GOVERSION", go);
        FILE *p = popen(cmd, "r");
        CHECK(p);
        CHECK(fgets(out, sizeof out, p));
        pclose(p);
        CHECK_INT(sscanf(out, "go%u.%u", &major, &minor), 2);
        CHECK_INT(major, 1);
        return minor >= 20 ? EP_GO_1_20 : minor >= 18 ? EP_GO_1_18 : EP_GO_1_16;
}

static EpGoTable *table_of(Image *im) {
        EpGoTable *t = NULL;

        CHECK_INT(ep_gopclntab_from_elf(im->elf, im->data, im->size, &t), 0);
        return t;
}

static void test_program(const char *path, EpGoVersion version, Image *symbols, bool stripped) {
        Image im = image_open(path);
        _cleanup_(ep_gopclntab_freep) EpGoTable *t = table_of(&im);
        bool has_symtab;

        CHECK_INT(ep_gopclntab_version(t), version);
        CHECK(ep_gopclntab_func_count(t) > 1000); /* the runtime's functions are all there */
        (void) symbol_value(&im, "main.fib", &has_symtab);
        CHECK_INT(has_symtab, !stripped);

        check_bytes(t);
        check_stack(t);
        check_marks(t, symbols);
        image_close(&im);
        printf("%s: %zu functions, every byte of main.* and the inlined stack as the Go runtime says\n", path,
               ep_gopclntab_func_count(t));
}

/* ---- the resolver ---- */

static int no_file(void *userdata, const uint8_t id[EP_FILE_ID_SIZE]) {
        return -ENOENT;
}

static EpElfFile *elf_open_path(const char *path) {
        EpElfFile *f = NULL;
        int fd = open(path, O_RDONLY | O_CLOEXEC);

        CHECK(fd >= 0);
        CHECK_INT(ep_elf_open(fd, &f), 0);
        return f;
}

static void test_resolver(const char *stripped, const char *c_program) {
        EpFileSource src = { .open_file = no_file };
        EpSymStats stats = {};
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;
        uint8_t go_id[EP_FILE_ID_SIZE] = { 0x60 }, c_id[EP_FILE_ID_SIZE] = { 0xc0 };
        EpSymResult out = {};
        const Truth *capture = NULL;

        CHECK_INT(ep_resolver_new(&src, NULL, &stats, &r), 0);
        for (size_t i = 0; i < n_truths; i++)
                if (truths[i].kind == 'S' && streq(truths[i].function, "main.inner"))
                        capture = &truths[i];
        CHECK(capture);

        /* Twice with one file object (the cached table), then with the file reopened (a new
         * mapping: the table must be parsed again, not read through stale pointers). */
        for (int round = 0; round < 3; round++) {
                static EpElfFile *f;
                if (round != 1) {
                        ep_elf_free(f);
                        f = elf_open_path(stripped);
                }
                CHECK_INT(ep_resolve_go(r, go_id, f, capture->pc, capture->pc + 1, &out), 1);
                CHECK_INT(out.status, EP_SYM_OK);
                CHECK_U64(out.elf_addr, capture->pc + 1);
                CHECK_STR(out.module, "");
                CHECK_INT(out.n_lines, 3);
                for (unsigned k = 0; k < 3; k++) {
                        CHECK_STR(out.lines[k].function, capture[k].function);
                        CHECK_STR(out.lines[k].file, capture[k].file);
                        CHECK_INT(out.lines[k].line, capture[k].line);
                }
                ep_sym_result_done(&out);

                /* Not covered by the table: left to the other sources. */
                CHECK_INT(ep_resolve_go(r, go_id, f, 0x10, 0x10, &out), 0);
                CHECK_INT(out.n_lines, 0);
                if (round == 2)
                        f = ep_elf_free(f);
        }

        /* A C program is not Go (twice: the negative answer is cached). */
        EpElfFile *c = elf_open_path(c_program);
        CHECK_INT(ep_resolve_go(r, c_id, c, 0x1000, 0x1000, &out), 0);
        CHECK_INT(ep_resolve_go(r, c_id, c, 0x1000, 0x1000, &out), 0);
        CHECK_INT(out.n_lines, 0);
        ep_elf_free(c);
        CHECK_STR(stats.last_error, "");
}

/* ---- Go build ID ---- */

static void test_build_id(const char *go, const char *path) {
        char cmd[4096], want[256] = "";
        EpBuildIds ids;
        EpElfFile *f = elf_open_path(path);

        snprintf(cmd, sizeof cmd, "'%s' tool buildid '%s'", go, path);
        FILE *p = popen(cmd, "r");
        CHECK(p);
        CHECK(fgets(want, sizeof want, p));
        CHECK_INT(pclose(p), 0);
        want[strcspn(want, "\n")] = 0;
        CHECK(strlen(want) > 40);

        CHECK_INT(ep_elf_build_ids(f, &ids), 0);
        CHECK_STR(ids.go, want);
        ep_elf_free(f);
}

/* ---- a writer of tables in every layout, from the real one ---- */

typedef struct Buf {
        uint8_t *p;
        size_t n, cap;
} Buf;

static void buf_reserve(Buf *b, size_t more) {
        if (b->n + more <= b->cap)
                return;
        b->cap = MAX(b->cap * 2, b->n + more + 4096);
        b->p = realloc(b->p, b->cap);
        CHECK(b->p);
}

static void put(Buf *b, const void *data, size_t len) {
        buf_reserve(b, len);
        memcpy(b->p + b->n, data, len);
        b->n += len;
}

static void put8(Buf *b, uint8_t v) {
        put(b, &v, 1);
}

static void put32(Buf *b, uint32_t v) {
        for (int i = 0; i < 4; i++)
                put8(b, (uint8_t) (v >> (8 * i)));
}

static void put64(Buf *b, uint64_t v) {
        put32(b, (uint32_t) v);
        put32(b, (uint32_t) (v >> 32));
}

static void set32(Buf *b, size_t off, uint32_t v) {
        for (int i = 0; i < 4; i++)
                b->p[off + i] = (uint8_t) (v >> (8 * i));
}

static void set64(Buf *b, size_t off, uint64_t v) {
        set32(b, off, (uint32_t) v);
        set32(b, off + 4, (uint32_t) (v >> 32));
}

static void align(Buf *b, size_t a) {
        while (b->n % a)
                put8(b, 0);
}

static uint32_t rd32(const uint8_t *p) {
        return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

static uint64_t rd64(const uint8_t *p) {
        return rd32(p) | (uint64_t) rd32(p + 4) << 32;
}

/* The real table (1.18 or 1.20 layout), read trusting it: this is test scaffolding. */
typedef struct Src {
        const uint8_t *d;
        EpGoVersion version;
        uint64_t nfunc, text, names, cutab, filetab, pctab, pcln;
        uint64_t gofunc;
        const uint8_t *gofunc_data; /* the bytes at gofunc */
} Src;

typedef struct Prog {
        const uint8_t *p;
        size_t len; /* 0: none */
        int32_t max_value;
} Prog;

/* Length of the pc-value program at pctab offset off (terminator included). */
static Prog src_prog(const Src *s, uint32_t off) {
        Prog pr = { .max_value = -1 };
        const uint8_t *p, *start;
        uint32_t value = (uint32_t) -1;
        bool first = true;

        if (off == 0)
                return pr;
        start = p = s->d + s->pctab + off;
        for (;;) {
                uint32_t v[2] = {};
                for (int k = 0; k < 2; k++) {
                        for (int shift = 0;; shift += 7) {
                                uint8_t b = *p++;
                                v[k] |= (uint32_t) (b & 0x7f) << shift;
                                if (!(b & 0x80))
                                        break;
                        }
                        if (k == 0 && v[0] == 0 && !first)
                                goto done;
                }
                value += (v[0] & 1) ? ~(v[0] >> 1) : v[0] >> 1;
                pr.max_value = MAX(pr.max_value, (int32_t) value);
                if (v[1] != 0)
                        first = false;
        }
done:
        pr.p = start;
        pr.len = (size_t) (p - start);
        return pr;
}

static const char *src_str(const Src *s, uint64_t off) {
        return (const char *) s->d + off;
}

typedef struct SrcFunc {
        uint64_t entry;
        const char *name;
        Prog pcfile, pcln, inl;
        uint32_t cu;
        const uint8_t *tree; /* inline tree entries (src layout), inl.max_value + 1 of them */
} SrcFunc;

static SrcFunc src_func(const Src *s, uint64_t i) {
        const uint8_t *ft = s->d + s->pcln + 8 * i;
        const uint8_t *f = s->d + s->pcln + rd32(ft + 4);
        uint64_t func_size = s->version == EP_GO_1_20 ? 44 : 40;
        uint32_t npcdata = rd32(f + 28);
        uint8_t nfuncdata = f[func_size - 1];
        SrcFunc sf = {
                .entry = s->text + rd32(ft),
                .name = src_str(s, s->names + rd32(f + 4)),
                .pcfile = src_prog(s, rd32(f + 20)),
                .pcln = src_prog(s, rd32(f + 24)),
                .cu = rd32(f + 32),
        };

        if (npcdata > 2 && nfuncdata > 3) {
                uint32_t tree_off = rd32(f + func_size + 4 * npcdata + 4 * 3);
                if (tree_off != UINT32_MAX) {
                        sf.inl = src_prog(s, rd32(f + func_size + 4 * 2));
                        sf.tree = s->gofunc_data + tree_off;
                }
        }
        return sf;
}

/* Writes the functions [first, last] of the real table as a table of layout `version`,
 * loaded at BLOB_VADDR, with their inline trees after it (go.func.* = BLOB_VADDR). */
static Buf convert(const Src *s, uint64_t first, uint64_t last, EpGoVersion version) {
        Buf b = {};
        size_t nfunc = last - first + 1, hdr = version == EP_GO_1_16 ? 64 : 72;
        size_t src_inl = s->version == EP_GO_1_20 ? 16 : 20, dst_inl = version == EP_GO_1_20 ? 16 : 20;
        SrcFunc *fs = calloc(nfunc, sizeof(SrcFunc));
        uint32_t *name_off = calloc(nfunc, sizeof(uint32_t)), *cu_off = calloc(nfunc, sizeof(uint32_t));
        uint32_t *prog_off = calloc(nfunc * 3, sizeof(uint32_t)), *func_off = calloc(nfunc, sizeof(uint32_t));
        uint32_t **tree_names = calloc(nfunc, sizeof(uint32_t *));
        size_t *tree_pos = calloc(nfunc, sizeof(size_t)), *fd_pos = calloc(nfunc, sizeof(size_t));
        uint64_t end = s->text + rd32(s->d + s->pcln + 8 * (last + 1));
        size_t names, files, cutab, pctab, pcln;
        uint32_t nfiles = 0;

        CHECK(fs && name_off && cu_off && prog_off && func_off && tree_names && tree_pos && fd_pos);
        for (size_t i = 0; i < nfunc; i++)
                fs[i] = src_func(s, first + i);

        buf_reserve(&b, hdr);
        memset(b.p, 0, hdr);
        b.n = hdr;

        /* Names: functions, then the callees of their inline trees. */
        names = b.n;
        for (size_t i = 0; i < nfunc; i++) {
                name_off[i] = (uint32_t) (b.n - names);
                put(&b, fs[i].name, strlen(fs[i].name) + 1);
                if (!fs[i].tree)
                        continue;
                tree_names[i] = calloc((size_t) fs[i].inl.max_value + 1, sizeof(uint32_t));
                CHECK(tree_names[i]);
                for (int32_t k = 0; k <= fs[i].inl.max_value; k++) {
                        const uint8_t *e = fs[i].tree + (size_t) k * src_inl;
                        const char *n = src_str(s, s->names + rd32(e + (s->version == EP_GO_1_20 ? 4 : 12)));
                        tree_names[i][k] = (uint32_t) (b.n - names);
                        put(&b, n, strlen(n) + 1);
                }
        }

        /* Files of each function's CU (as many as its pcfile table uses), one CU each. */
        files = b.n;
        Buf cu = {};
        for (size_t i = 0; i < nfunc; i++) {
                cu_off[i] = nfiles;
                for (int32_t k = 0; k <= fs[i].pcfile.max_value; k++) {
                        uint32_t fo = rd32(s->d + s->cutab + 4 * ((uint64_t) fs[i].cu + (uint64_t) k));
                        if (fo == UINT32_MAX)
                                put32(&cu, UINT32_MAX);
                        else {
                                put32(&cu, (uint32_t) (b.n - files));
                                const char *fn = src_str(s, s->filetab + fo);
                                put(&b, fn, strlen(fn) + 1);
                        }
                        nfiles++;
                }
        }
        cutab = b.n;
        put(&b, cu.p, cu.n);
        free(cu.p);

        /* pc-value programs; offset 0 means "none", so one byte of padding first. */
        pctab = b.n;
        put8(&b, 0);
        for (size_t i = 0; i < nfunc; i++) {
                const Prog *progs[3] = { &fs[i].pcfile, &fs[i].pcln, &fs[i].inl };
                for (int k = 0; k < 3; k++)
                        if (progs[k]->len) {
                                prog_off[3 * i + k] = (uint32_t) (b.n - pctab);
                                put(&b, progs[k]->p, progs[k]->len);
                        }
        }

        /* Function table, then the records. */
        align(&b, 8);
        pcln = b.n;
        size_t field = version == EP_GO_1_16 ? 8 : 4;
        for (size_t i = 0; i < 2 * nfunc + 1; i++)
                field == 8 ? put64(&b, 0) : put32(&b, 0);
        for (size_t i = 0; i < nfunc; i++) {
                align(&b, 8);
                func_off[i] = (uint32_t) (b.n - pcln);
                if (version == EP_GO_1_16)
                        put64(&b, fs[i].entry);
                else
                        put32(&b, (uint32_t) (fs[i].entry - s->text));
                put32(&b, name_off[i]);
                put32(&b, 0); /* args */
                put32(&b, 0); /* deferreturn */
                put32(&b, 0); /* pcsp */
                put32(&b, prog_off[3 * i]);
                put32(&b, prog_off[3 * i + 1]);
                put32(&b, 4); /* npcdata: an odd number of words before funcdata, so 1.16 pads */
                put32(&b, cu_off[i]);
                if (version == EP_GO_1_20)
                        put32(&b, 0); /* startLine */
                put8(&b, 0);   /* funcID */
                put8(&b, 0);   /* flag */
                put8(&b, 0);
                put8(&b, 4);   /* nfuncdata */
                put32(&b, 0);
                put32(&b, 0);
                put32(&b, prog_off[3 * i + 2]);
                put32(&b, 0);
                if (version == EP_GO_1_16) {
                        if ((BLOB_VADDR + b.n) & 4)
                                put32(&b, 0);
                        fd_pos[i] = b.n + 3 * 8;
                        for (int k = 0; k < 4; k++)
                                put64(&b, 0);
                } else {
                        fd_pos[i] = b.n + 3 * 4;
                        for (int k = 0; k < 4; k++)
                                put32(&b, UINT32_MAX);
                }
        }
        for (size_t i = 0; i <= nfunc; i++) {
                uint64_t e = i < nfunc ? fs[i].entry : end;
                if (version == EP_GO_1_16) {
                        set64(&b, pcln + 16 * i, e);
                        if (i < nfunc)
                                set64(&b, pcln + 16 * i + 8, func_off[i]);
                } else {
                        set32(&b, pcln + 8 * i, (uint32_t) (e - s->text));
                        if (i < nfunc)
                                set32(&b, pcln + 8 * i + 4, func_off[i]);
                }
        }

        /* Inline trees after the table, in the target's entry layout. */
        for (size_t i = 0; i < nfunc; i++) {
                if (!fs[i].tree)
                        continue;
                align(&b, 8);
                tree_pos[i] = b.n;
                for (int32_t k = 0; k <= fs[i].inl.max_value; k++) {
                        const uint8_t *e = fs[i].tree + (size_t) k * src_inl;
                        uint32_t parent_pc = rd32(e + (s->version == EP_GO_1_20 ? 8 : 16));
                        if (version == EP_GO_1_20) {
                                put32(&b, 0); /* funcID, padding */
                                put32(&b, tree_names[i][k]);
                                put32(&b, parent_pc);
                                put32(&b, 0); /* startLine */
                        } else {
                                put32(&b, 0xffff); /* parent (unused by the reader), funcID */
                                put32(&b, 0);      /* file */
                                put32(&b, 0);      /* line */
                                put32(&b, tree_names[i][k]);
                                put32(&b, parent_pc);
                        }
                }
                CHECK_INT(b.n - tree_pos[i], ((size_t) fs[i].inl.max_value + 1) * dst_inl);
                if (version == EP_GO_1_16)
                        set64(&b, fd_pos[i], BLOB_VADDR + tree_pos[i]);
                else
                        set32(&b, fd_pos[i], (uint32_t) tree_pos[i]);
        }

        /* The header. */
        set32(&b, 0, version == EP_GO_1_16 ? 0xfffffffa : version == EP_GO_1_18 ? 0xfffffff0 : 0xfffffff1);
        b.p[6] = 1;
        b.p[7] = 8;
        size_t w = 8;
        set64(&b, w, nfunc), w += 8;
        set64(&b, w, nfiles), w += 8;
        if (version != EP_GO_1_16)
                set64(&b, w, s->text), w += 8;
        set64(&b, w, names), w += 8;
        set64(&b, w, cutab), w += 8;
        set64(&b, w, files), w += 8;
        set64(&b, w, pctab), w += 8;
        set64(&b, w, pcln), w += 8;
        CHECK_INT(w, hdr);

        for (size_t i = 0; i < nfunc; i++)
                free(tree_names[i]);
        free(tree_names);
        free(fs);
        free(name_off);
        free(cu_off);
        free(prog_off);
        free(func_off);
        free(tree_pos);
        free(fd_pos);
        return b;
}

static EpGoTable *blob_open(const uint8_t *data, size_t size) {
        EpGoTable *t = NULL;
        EpGoRegion region = { BLOB_VADDR, data, size };

        CHECK_INT(ep_gopclntab_open(data, size, BLOB_VADDR, &t), 0);
        ep_gopclntab_set_funcdata(t, BLOB_VADDR, &region, 1);
        return t;
}

static void frames_equal(uint64_t pc, const EpGoFrame *a, size_t na, const EpGoFrame *b, size_t nb) {
        if (na != nb)
                TEST_FAIL("0x%" PRIx64 ": %zu frames, expected %zu", pc, na, nb);
        for (size_t k = 0; k < na; k++)
                if (!streq(a[k].function, b[k].function) || !streq(a[k].file, b[k].file) || a[k].line != b[k].line)
                        TEST_FAIL("0x%" PRIx64 " frame %zu: %s %s:%u, expected %s %s:%u", pc, k, a[k].function,
                                  a[k].file, a[k].line, b[k].function, b[k].file, b[k].line);
        test_checks++;
}

/* Index range of the main.* functions in the real table. */
static void main_range(const Src *s, uint64_t *first, uint64_t *last) {
        *first = UINT64_MAX;
        for (uint64_t i = 0; i < s->nfunc; i++) {
                const uint8_t *f = s->d + s->pcln + rd32(s->d + s->pcln + 8 * i + 4);
                if (startswith(src_str(s, s->names + rd32(f + 4)), "main.")) {
                        if (*first == UINT64_MAX)
                                *first = i;
                        *last = i;
                }
        }
        CHECK(*first != UINT64_MAX && *last > *first + 4);
}

static Src src_of(Image *unstripped) {
        Src s = {};
        uint64_t addr, sec_addr;
        size_t size, sec_size;
        bool has_symtab;

        s.d = section(unstripped, ".gopclntab", &addr, &size);
        s.version = rd32(s.d) == 0xfffffff0 ? EP_GO_1_18 : EP_GO_1_20;
        s.nfunc = rd64(s.d + 8);
        s.text = rd64(s.d + 24);
        s.names = rd64(s.d + 32);
        s.cutab = rd64(s.d + 40);
        s.filetab = rd64(s.d + 48);
        s.pctab = rd64(s.d + 56);
        s.pcln = rd64(s.d + 64);
        /* go.func.* from the symbol table: independent of the module-data search. */
        s.gofunc = symbol_value(unstripped, "go.func.*", &has_symtab) ?: symbol_value(unstripped, "go:func.*", &has_symtab);
        CHECK(s.gofunc);
        const uint8_t *sec = section_at(unstripped, s.gofunc, &sec_addr, &sec_size);
        s.gofunc_data = sec + (s.gofunc - sec_addr);
        return s;
}

static void write_file(const char *dir, const char *name, const void *data, size_t size) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *f = fopen(path, "we");
        CHECK(f);
        CHECK_INT(fwrite(data, 1, size, f), size);
        CHECK_INT(fclose(f), 0);
}

static void test_layouts(Image *unstripped, const char *stripped_path, const char *seed_dir) {
        Src s = src_of(unstripped);
        Image stripped = image_open(stripped_path);
        _cleanup_(ep_gopclntab_freep) EpGoTable *real = table_of(&stripped);
        uint64_t first, last, text_end;
        const EpGoVersion versions[] = { EP_GO_1_16, EP_GO_1_18, EP_GO_1_20 };
        static const char *const seed_names[] = { "gospin-main-go116", "gospin-main-go118", "gospin-main-go120" };

        main_range(&s, &first, &last);
        text_end = s.text + rd32(s.d + s.pcln + 8 * (last + 1));
        for (size_t v = 0; v < ELEMENTSOF(versions); v++) {
                Buf b = convert(&s, first, last, versions[v]);
                _cleanup_(ep_gopclntab_freep) EpGoTable *t = blob_open(b.p, b.n);
                size_t inlined = 0, compared = 0;

                CHECK_INT(ep_gopclntab_version(t), versions[v]);
                CHECK_INT(ep_gopclntab_func_count(t), last - first + 1);
                for (uint64_t pc = s.text + rd32(s.d + s.pcln + 8 * first); pc < text_end; pc++) {
                        EpGoFrame a[EP_GO_MAX_FRAMES], e[EP_GO_MAX_FRAMES];
                        size_t na, ne;

                        lookup(t, pc, a, &na);
                        lookup(real, pc, e, &ne);
                        frames_equal(pc, a, na, e, ne);
                        inlined += na > 1;
                        compared++;
                }
                CHECK(inlined > 10);
                /* Just outside: not covered. */
                EpGoFrame fr[1];
                size_t n;
                uint64_t entry0;
                CHECK_INT(ep_gopclntab_func_entry(t, 0, &entry0), 0);
                CHECK_INT(ep_gopclntab_lookup(t, entry0 - 1, fr, 1, &n, NULL), -ENOENT);
                CHECK_INT(ep_gopclntab_lookup(t, text_end, fr, 1, &n, NULL), -ENOENT);
                CHECK_INT(ep_gopclntab_func_entry(t, last - first + 1, &entry0), -ERANGE);

                printf("layout %d: %zu bytes, %zu addresses as the real table (%zu with inline frames)\n",
                       versions[v], b.n, compared, inlined);
                if (seed_dir)
                        write_file(seed_dir, seed_names[v], b.p, b.n);
                free(b.p);
        }
        image_close(&stripped);
}

/* ---- malformed tables ---- */

/* Looks up every address the table claims, plus some; returns how many lookups failed
 * with -ENOEXEC. Anything but 0, -ENOENT, -ENOEXEC is a bug. */
static size_t lookup_all(const uint8_t *data, size_t size) {
        EpGoTable *t = NULL;
        EpGoRegion region = { BLOB_VADDR, data, size };
        size_t bad = 0;
        int r;

        r = ep_gopclntab_open(data, size, BLOB_VADDR, &t);
        if (r < 0) {
                CHECK(r == -ENOEXEC || r == -ENOTSUP);
                return 1;
        }
        ep_gopclntab_set_funcdata(t, BLOB_VADDR, &region, 1);
        for (size_t i = 0; i < ep_gopclntab_func_count(t) && i < 64; i++) {
                uint64_t entry;
                if (ep_gopclntab_func_entry(t, i, &entry) < 0) {
                        bad++;
                        continue;
                }
                for (uint64_t d = 0; d < 96; d += 3) {
                        EpGoFrame frames[EP_GO_MAX_FRAMES];
                        size_t n;
                        r = ep_gopclntab_lookup(t, entry + d, frames, EP_GO_MAX_FRAMES, &n, NULL);
                        CHECK(r == 0 || r == -ENOENT || r == -ENOEXEC);
                        if (r == 0)
                                for (size_t k = 0; k < n; k++)
                                        CHECK(frames[k].function && frames[k].file &&
                                              strlen(frames[k].function) < size);
                        bad += r == -ENOEXEC;
                }
        }
        ep_gopclntab_free(t);
        return bad;
}

static int open_status(const uint8_t *data, size_t size) {
        EpGoTable *t = NULL;
        int r = ep_gopclntab_open(data, size, BLOB_VADDR, &t);
        ep_gopclntab_free(t);
        return r;
}

/* What a lookup of pc in the table b says. */
static int lookup_status(const Buf *b, uint64_t pc) {
        _cleanup_(ep_gopclntab_freep) EpGoTable *t = blob_open(b->p, b->n);
        EpGoFrame frames[EP_GO_MAX_FRAMES];
        size_t n;
        return ep_gopclntab_lookup(t, pc, frames, EP_GO_MAX_FRAMES, &n, NULL);
}

static void test_malformed(Image *unstripped) {
        Src s = src_of(unstripped);
        uint64_t first, last;

        main_range(&s, &first, &last);
        Buf good = convert(&s, first, last, EP_GO_1_18);
        CHECK_INT(lookup_all(good.p, good.n), 0);

        /* Every truncation, each in a buffer of exactly that size (so a sanitizer or valgrind
         * sees any read past it): refused while the function table is incomplete, and never
         * a crash after (a cut record or inline tree fails only the lookups that need it). */
        uint64_t ftab_end = rd64(good.p + 64) + (2 * (last - first + 1) + 1) * 4;
        for (size_t len = 0; len < good.n; len++) {
                uint8_t *copy = malloc(len ?: 1);
                CHECK(copy);
                memcpy(copy, good.p, len);
                if (len < ftab_end)
                        CHECK(open_status(copy, len) < 0);
                (void) lookup_all(copy, len);
                free(copy);
        }

        /* Header fields. */
        Buf b = { .p = malloc(good.n), .n = good.n };
        CHECK(b.p);
#define RESET() memcpy(b.p, good.p, good.n)
        RESET();
        set32(&b, 0, 0x12345678);
        CHECK_INT(open_status(b.p, b.n), -ENOEXEC);
        RESET();
        set32(&b, 0, 0xf0ffffff); /* big-endian 1.18 */
        CHECK_INT(open_status(b.p, b.n), -ENOTSUP);
        RESET();
        set32(&b, 0, 0xfffffffb); /* Go 1.2–1.15 */
        CHECK_INT(open_status(b.p, b.n), -ENOTSUP);
        RESET();
        b.p[7] = 4; /* 32-bit */
        CHECK_INT(open_status(b.p, b.n), -ENOTSUP);
        RESET();
        b.p[7] = 16;
        CHECK_INT(open_status(b.p, b.n), -ENOEXEC);
        RESET();
        b.p[4] = 1; /* padding */
        CHECK_INT(open_status(b.p, b.n), -ENOEXEC);
        RESET();
        b.p[6] = 0; /* quantum */
        CHECK_INT(open_status(b.p, b.n), -ENOEXEC);
        RESET();
        set64(&b, 8, 1ull << 40); /* nfunc */
        CHECK_INT(open_status(b.p, b.n), -ENOEXEC);
        RESET();
        set64(&b, 8, EP_GO_MAX_FUNCS); /* allowed count, but the table is too small for it */
        CHECK_INT(open_status(b.p, b.n), -ENOEXEC);
        RESET();
        set64(&b, 8, 0);
        CHECK_INT(open_status(b.p, b.n), -ENOEXEC);
        for (size_t w = 32; w <= 64; w += 8) { /* each region offset past the end */
                RESET();
                set64(&b, w, good.n);
                CHECK_INT(open_status(b.p, b.n), -ENOEXEC);
                RESET();
                set64(&b, w, UINT64_MAX - 3);
                CHECK_INT(open_status(b.p, b.n), -ENOEXEC);
        }

        /* Records: every 32-bit word of the function table and the records set to values that
         * point elsewhere or nowhere; lookups fail or answer, never crash. */
        uint64_t pcln = rd64(good.p + 64);
        static const uint32_t evil[] = { 0, 1, 0x7fffffff, 0x80000000, 0xfffffff0, UINT32_MAX };
        size_t failures = 0;
        for (size_t off = pcln; off + 4 <= good.n; off += 4)
                for (size_t e = 0; e < ELEMENTSOF(evil); e++) {
                        RESET();
                        set32(&b, off, evil[e]);
                        failures += lookup_all(b.p, b.n) > 0;
                }
        CHECK(failures > 100);

        /* A varint that never ends: every pc-value byte with its continuation bit set. */
        RESET();
        uint64_t pctab = rd64(good.p + 56);
        for (size_t off = pctab; off < pcln; off++)
                b.p[off] |= 0x80;
        CHECK(lookup_all(b.p, b.n) > 0);

        /* Strings without their NUL: names run into each other up to the next region; a
         * name running to the end of the table must be refused. */
        RESET();
        uint64_t names = rd64(good.p + 32);
        for (size_t off = names; off < rd64(good.p + 48); off++)
                if (b.p[off] == 0)
                        b.p[off] = 'x';
        (void) lookup_all(b.p, b.n);
        RESET();
        for (size_t off = names; off < b.n; off++)
                if (b.p[off] == 0)
                        b.p[off] = 'x';
        CHECK(lookup_all(b.p, b.n) > 0);
        RESET();
#undef RESET
        free(b.p);
        free(good.p);
}

/* A hand-made table of one function main.f at 0x401000 (16 bytes, f.go line 10) in the
 * 1.20 layout, whose inline-index program is `inl` and whose single inline-tree entry (main.g)
 * has parentPc `parent_pc`. */
static Buf tiny_table(const uint8_t *inl, size_t inl_len, uint32_t parent_pc) {
        static const uint8_t pcfile[] = { 2, 16, 0 }; /* value 0 for 16 bytes */
        static const uint8_t pcln[] = { 22, 16, 0 };  /* value 10 for 16 bytes */
        Buf b = {};

        buf_reserve(&b, 72);
        memset(b.p, 0, 72);
        b.n = 72;
        size_t names = b.n;
        put(&b, "main.f\0main.g\0", 14);
        size_t files = b.n;
        put(&b, "f.go\0", 5);
        size_t cutab = b.n;
        put32(&b, 0);
        size_t pctab = b.n;
        put8(&b, 0);
        size_t off_file = b.n - pctab;
        put(&b, pcfile, sizeof pcfile);
        size_t off_line = b.n - pctab;
        put(&b, pcln, sizeof pcln);
        size_t off_inl = b.n - pctab;
        put(&b, inl, inl_len);

        align(&b, 8);
        size_t ftab = b.n;
        put32(&b, 0), put32(&b, 16); /* entry 0, record at ftab + 16 */
        put32(&b, 16), put32(&b, 0); /* end */
        put32(&b, 0);                /* entryoff */
        put32(&b, 0);                /* nameoff: main.f */
        put32(&b, 0), put32(&b, 0), put32(&b, 0);
        put32(&b, (uint32_t) off_file);
        put32(&b, (uint32_t) off_line);
        put32(&b, 3); /* npcdata */
        put32(&b, 0); /* cu */
        put32(&b, 0); /* startLine */
        put8(&b, 0), put8(&b, 0), put8(&b, 0), put8(&b, 4);
        put32(&b, 0), put32(&b, 0), put32(&b, (uint32_t) off_inl);
        size_t funcdata = b.n;
        put32(&b, UINT32_MAX), put32(&b, UINT32_MAX), put32(&b, UINT32_MAX), put32(&b, 0);
        align(&b, 8);
        set32(&b, funcdata + 12, (uint32_t) b.n); /* tree offset from go.func.* (the blob) */
        put32(&b, 0), put32(&b, 7 /* main.g */), put32(&b, parent_pc), put32(&b, 0);

        set32(&b, 0, 0xfffffff1);
        b.p[6] = 1, b.p[7] = 8;
        set64(&b, 8, 1), set64(&b, 16, 1), set64(&b, 24, 0x401000), set64(&b, 32, names);
        set64(&b, 40, cutab), set64(&b, 48, files), set64(&b, 56, pctab), set64(&b, 64, ftab);
        return b;
}

static void test_tiny(const char *seed_dir) {
        EpGoFrame frames[EP_GO_MAX_FRAMES];
        size_t n;

        /* Index 0 at every address, and parentPc 4 is again inside: 4 → entry 0 → 4 … The walk
         * stops at the depth cap with -ENOEXEC instead of looping. */
        static const uint8_t everywhere[] = { 2, 16, 0 };
        Buf b = tiny_table(everywhere, sizeof everywhere, 4);
        if (seed_dir)
                write_file(seed_dir, "tiny-inline-cycle-go120", b.p, b.n);
        {
                _cleanup_(ep_gopclntab_freep) EpGoTable *t = blob_open(b.p, b.n);
                CHECK_INT(ep_gopclntab_lookup(t, 0x401008, frames, EP_GO_MAX_FRAMES, &n, NULL), -ENOEXEC);
        }
        free(b.p);

        /* Index 0 for [0, 4), −1 after; parentPc 8: one inlined frame below 4, none above. */
        static const uint8_t first4[] = { 2, 4, 3, 12, 0 };
        b = tiny_table(first4, sizeof first4, 8);
        if (seed_dir)
                write_file(seed_dir, "tiny-inline-go120", b.p, b.n);
        {
                _cleanup_(ep_gopclntab_freep) EpGoTable *t = blob_open(b.p, b.n);
                uint64_t entry;

                CHECK_INT(ep_gopclntab_lookup(t, 0x401001, frames, EP_GO_MAX_FRAMES, &n, &entry), 0);
                CHECK_INT(n, 2);
                CHECK_U64(entry, 0x401000);
                CHECK_STR(frames[0].function, "main.g");
                CHECK_STR(frames[0].file, "f.go");
                CHECK_INT(frames[0].line, 10);
                CHECK_STR(frames[1].function, "main.f");
                CHECK_STR(frames[1].file, "f.go");
                CHECK_INT(frames[1].line, 10);

                CHECK_INT(ep_gopclntab_lookup(t, 0x401008, frames, EP_GO_MAX_FRAMES, &n, NULL), 0);
                CHECK_INT(n, 1);
                CHECK_STR(frames[0].function, "main.f");
                CHECK_INT(ep_gopclntab_lookup(t, 0x401010, frames, EP_GO_MAX_FRAMES, &n, NULL), -ENOENT);
                CHECK_INT(ep_gopclntab_lookup(t, 0x400fff, frames, EP_GO_MAX_FRAMES, &n, NULL), -ENOENT);
        }
        {
                /* Without the memory of inline trees: the outer function only. */
                EpGoTable *t = NULL;
                CHECK_INT(ep_gopclntab_open(b.p, b.n, BLOB_VADDR, &t), 0);
                CHECK_INT(ep_gopclntab_lookup(t, 0x401001, frames, EP_GO_MAX_FRAMES, &n, NULL), 0);
                CHECK_INT(n, 1);
                CHECK_STR(frames[0].function, "main.f");
                ep_gopclntab_free(t);
        }
        free(b.p);

        /* parentPc outside the function, and an index past the tree's memory. */
        b = tiny_table(first4, sizeof first4, 16);
        CHECK_INT(lookup_status(&b, 0x401001), -ENOEXEC);
        free(b.p);
        static const uint8_t huge_index[] = { 0xfe, 0xff, 0xff, 0x0f, 16, 0 }; /* +0x3fffffff */
        b = tiny_table(huge_index, sizeof huge_index, 8);
        CHECK_INT(lookup_status(&b, 0x401001), -ENOEXEC);
        free(b.p);
        /* A varint of six bytes. */
        static const uint8_t long_varint[] = { 0x82, 0x80, 0x80, 0x80, 0x80, 0x00, 16, 0 };
        b = tiny_table(long_varint, sizeof long_varint, 8);
        CHECK_INT(lookup_status(&b, 0x401001), -ENOEXEC);
        free(b.p);
}

int main(void) {
        const char *prog = test_env("GO_TEST_PROG");
        const char *stripped = test_env("GO_TEST_PROG_STRIPPED");
        const char *go = test_env("GO_TEST_GO");
        const char *c_program = test_env("SYM_TEST_TARGET");
        const char *seed_dir = getenv("GOPCLNTAB_WRITE_SEEDS");

        source_path = test_env("GO_TEST_SOURCE");
        read_truths(prog);

        EpGoVersion version = expected_version(go);
        Image unstripped = image_open(prog);
        test_program(prog, version, &unstripped, false);
        test_program(stripped, version, &unstripped, true);
        test_resolver(stripped, c_program);
        test_build_id(go, prog);
        test_build_id(go, stripped);
        if (version != EP_GO_1_16) {
                test_layouts(&unstripped, stripped, seed_dir);
                test_malformed(&unstripped);
        }
        test_tiny(seed_dir);
        image_close(&unstripped);
        free(truths);
        TEST_DONE("symbolizer-gopclntab");
}
