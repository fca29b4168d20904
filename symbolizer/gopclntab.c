/* SPDX-License-Identifier: MIT */
/* Go's pc-line table, read from the layout the Go runtime documents (runtime/symtab.go,
 * runtime/runtime2.go, debug/gosym). See gopclntab.h. All offsets are kept as uint64_t and
 * checked against the table size before every read. */

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gopclntab.h"
#include "log.h"

#define MAGIC_116 0xfffffffau
#define MAGIC_118 0xfffffff0u
#define MAGIC_120 0xfffffff1u

/* Indexes into a function's pcdata and funcdata arrays (the same for 1.16 to 1.2x). */
#define PCDATA_INL_TREE_INDEX 2
#define FUNCDATA_INL_TREE 3

#define MAX_VARINT_BYTES 5 /* a uint32 */

struct EpGoTable {
        const uint8_t *data;
        uint64_t size;
        uint64_t vaddr;
        EpGoVersion version;
        uint32_t quantum; /* instruction size unit of pc deltas */

        uint64_t nfunc;
        uint64_t text_start; /* 1.18+: base of function entries */
        uint64_t funcnames, cutab, filetab, pctab, pcln; /* offsets in data */

        /* Record layouts of this version. */
        uint64_t ftab_field;   /* 8 (1.16) or 4 bytes per functab field */
        uint64_t func_size;    /* fixed part of a function record */
        uint64_t inl_size;     /* one inline-tree entry */

        bool have_funcdata;
        uint64_t gofunc;
        EpGoRegion regions[EP_GO_MAX_REGIONS];
        size_t n_regions;
};

/* The fields of a function record this reader uses, whatever the version. */
typedef struct GoFunc {
        uint64_t off;   /* record offset in data */
        uint64_t entry; /* absolute */
        uint64_t end;   /* next function's entry */
        int32_t nameoff;
        uint32_t pcfile, pcln, npcdata, cu;
        uint8_t nfuncdata;
} GoFunc;

/* ---- bounded reads ---- */

static bool in_table(const EpGoTable *t, uint64_t off, uint64_t len) {
        return off <= t->size && len <= t->size - off;
}

static int read_u8(const EpGoTable *t, uint64_t off, uint8_t *ret) {
        if (!in_table(t, off, 1))
                return -ENOEXEC;
        *ret = t->data[off];
        return 0;
}

static uint32_t le32(const uint8_t *p) {
        return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

static uint64_t le64(const uint8_t *p) {
        return (uint64_t) le32(p) | (uint64_t) le32(p + 4) << 32;
}

static int read_u32(const EpGoTable *t, uint64_t off, uint32_t *ret) {
        if (!in_table(t, off, 4))
                return -ENOEXEC;
        *ret = le32(t->data + off);
        return 0;
}

static int read_u64(const EpGoTable *t, uint64_t off, uint64_t *ret) {
        if (!in_table(t, off, 8))
                return -ENOEXEC;
        *ret = le64(t->data + off);
        return 0;
}

/* A NUL-terminated string starting at off: it must end inside the table. */
static int read_str(const EpGoTable *t, uint64_t off, const char **ret) {
        if (off >= t->size)
                return -ENOEXEC;
        if (!memchr(t->data + off, 0, t->size - off))
                return -ENOEXEC;
        *ret = (const char *) t->data + off;
        return 0;
}

/* len bytes of program memory at vaddr, from the regions given by set_funcdata. */
static const uint8_t *read_mem(const EpGoTable *t, uint64_t vaddr, uint64_t len) {
        for (size_t i = 0; i < t->n_regions; i++) {
                const EpGoRegion *r = &t->regions[i];

                if (vaddr >= r->vaddr && vaddr - r->vaddr <= r->size && len <= r->size - (vaddr - r->vaddr))
                        return r->data + (vaddr - r->vaddr);
        }
        return NULL;
}

/* Go's varint: 7 bits a byte, low first; longer than a uint32 is malformed. */
static int read_uvarint(const EpGoTable *t, uint64_t *off, uint32_t *ret) {
        uint32_t v = 0;

        for (unsigned i = 0; i < MAX_VARINT_BYTES; i++) {
                uint8_t b;
                int r = read_u8(t, *off + i, &b);
                if (r < 0)
                        return r;
                v |= (uint32_t) (b & 0x7f) << (7 * i);
                if (!(b & 0x80)) {
                        *off += i + 1;
                        *ret = v;
                        return 0;
                }
        }
        return -ENOEXEC;
}

/* ---- header ---- */

static int parse_header(EpGoTable *t) {
        uint32_t magic;
        uint8_t pad1, pad2, quantum, ptr_size;
        int r;

        if (t->size < 8)
                return -ENOEXEC;
        magic = le32(t->data);
        pad1 = t->data[4];
        pad2 = t->data[5];
        quantum = t->data[6];
        ptr_size = t->data[7];

        switch (magic) {
        case MAGIC_116:
                t->version = EP_GO_1_16;
                break;
        case MAGIC_118:
                t->version = EP_GO_1_18;
                break;
        case MAGIC_120:
                t->version = EP_GO_1_20;
                break;
        case 0xfaffffffu: /* the known magics written big-endian */
        case 0xf0ffffffu:
        case 0xf1ffffffu:
        case 0xfffffffbu: /* Go 1.2–1.15: no CU table, another function layout */
        case 0xfbffffffu:
                return -ENOTSUP;
        default:
                return -ENOEXEC;
        }
        if (pad1 != 0 || pad2 != 0)
                return -ENOEXEC;
        if (ptr_size == 4)
                return -ENOTSUP;
        if (ptr_size != 8 || quantum == 0 || quantum > 4)
                return -ENOEXEC;
        t->quantum = quantum;

        /* 1.16: nfunc, nfiles, funcnameOffset, cuOffset, filetabOffset, pctabOffset,
         * pclnOffset; 1.18+ inserts textStart after nfiles. */
        uint64_t words[8];
        size_t n_words = t->version == EP_GO_1_16 ? 7 : 8;
        for (size_t i = 0; i < n_words; i++) {
                r = read_u64(t, 8 + 8 * i, &words[i]);
                if (r < 0)
                        return r;
        }
        t->nfunc = words[0];
        size_t w = 2;
        if (t->version != EP_GO_1_16)
                t->text_start = words[w++];
        t->funcnames = words[w++];
        t->cutab = words[w++];
        t->filetab = words[w++];
        t->pctab = words[w++];
        t->pcln = words[w++];

        if (t->nfunc == 0 || t->nfunc > EP_GO_MAX_FUNCS)
                return -ENOEXEC;
        if (t->funcnames >= t->size || t->cutab >= t->size || t->filetab >= t->size || t->pctab >= t->size ||
            t->pcln >= t->size)
                return -ENOEXEC;

        if (t->version == EP_GO_1_16) {
                t->ftab_field = 8;
                t->func_size = 44;
                t->inl_size = 20;
        } else {
                t->ftab_field = 4;
                t->func_size = t->version == EP_GO_1_18 ? 40 : 44;
                t->inl_size = t->version == EP_GO_1_18 ? 20 : 16;
        }

        /* nfunc (entry, offset) pairs and the end address of the last function. */
        if (!in_table(t, t->pcln, (2 * t->nfunc + 1) * t->ftab_field))
                return -ENOEXEC;
        return 0;
}

int ep_gopclntab_open(const uint8_t *data, size_t size, uint64_t vaddr, EpGoTable **ret) {
        _cleanup_(ep_gopclntab_freep) EpGoTable *t = NULL;
        int r;

        t = calloc(1, sizeof(EpGoTable));
        if (!t)
                return -ENOMEM;
        t->data = data;
        t->size = size;
        t->vaddr = vaddr;

        r = parse_header(t);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(t);
        return 0;
}

EpGoTable *ep_gopclntab_free(EpGoTable *t) {
        free(t);
        return NULL;
}

void ep_gopclntab_set_funcdata(EpGoTable *t, uint64_t gofunc, const EpGoRegion *regions, size_t n_regions) {
        t->gofunc = gofunc;
        t->n_regions = MIN(n_regions, (size_t) EP_GO_MAX_REGIONS);
        memcpy(t->regions, regions, t->n_regions * sizeof(EpGoRegion));
        t->have_funcdata = true;
}

EpGoVersion ep_gopclntab_version(const EpGoTable *t) {
        return t->version;
}

size_t ep_gopclntab_func_count(const EpGoTable *t) {
        return (size_t) t->nfunc;
}

/* ---- function table ---- */

/* Field `field` (0 entry, 1 offset) of functab slot i; slot nfunc holds only the end. */
static int ftab_read(const EpGoTable *t, uint64_t i, unsigned field, uint64_t *ret) {
        uint64_t off = t->pcln + (2 * i + field) * t->ftab_field;
        uint32_t v32;
        int r;

        if (t->ftab_field == 8)
                return read_u64(t, off, ret);
        r = read_u32(t, off, &v32);
        if (r < 0)
                return r;
        *ret = v32;
        return 0;
}

/* Entry addresses are absolute in 1.16 and textStart-relative after. */
static int ftab_entry(const EpGoTable *t, uint64_t i, uint64_t *ret) {
        uint64_t v;
        int r;

        r = ftab_read(t, i, 0, &v);
        if (r < 0)
                return r;
        *ret = t->version == EP_GO_1_16 ? v : t->text_start + v;
        return 0;
}

int ep_gopclntab_func_entry(const EpGoTable *t, size_t i, uint64_t *ret_entry) {
        if (i >= t->nfunc)
                return -ERANGE;
        return ftab_entry(t, i, ret_entry);
}

/* The function whose [entry, next entry) holds pc: the last entry <= pc by binary search.
 * An unsorted (malformed) table cannot loop; it only finds nothing or a wrong neighbour,
 * which the range check below and the record's own entry reject. */
static int find_func(const EpGoTable *t, uint64_t pc, uint64_t *ret_index) {
        uint64_t lo = 0, hi = t->nfunc, entry, end;
        int r;

        r = ftab_entry(t, 0, &entry);
        if (r < 0)
                return r;
        if (pc < entry)
                return -ENOENT;

        while (hi - lo > 1) {
                uint64_t mid = lo + (hi - lo) / 2;

                r = ftab_entry(t, mid, &entry);
                if (r < 0)
                        return r;
                if (entry <= pc)
                        lo = mid;
                else
                        hi = mid;
        }

        r = ftab_entry(t, lo, &entry);
        if (r < 0)
                return r;
        r = ftab_entry(t, lo + 1, &end);
        if (r < 0)
                return r;
        if (pc < entry || pc >= end)
                return -ENOENT;
        *ret_index = lo;
        return 0;
}

static int read_func(const EpGoTable *t, uint64_t i, GoFunc *ret) {
        uint64_t funcoff, entry, end, off;
        GoFunc f = {};
        int r;

        r = ftab_read(t, i, 1, &funcoff);
        if (r < 0)
                return r;
        r = ftab_entry(t, i, &entry);
        if (r < 0)
                return r;
        r = ftab_entry(t, i + 1, &end);
        if (r < 0)
                return r;
        if (funcoff > t->size)
                return -ENOEXEC;
        off = t->pcln + funcoff;
        if (!in_table(t, off, t->func_size))
                return -ENOEXEC;

        /* Both layouts: the entry field, then nameoff, args, deferreturn, pcsp, pcfile, pcln,
         * npcdata, cuOffset as 32-bit words; 1.16's entry is 8 bytes, later ones 4. */
        const uint8_t *p = t->data + off;
        uint64_t record_entry;
        if (t->version == EP_GO_1_16) {
                record_entry = le64(p);
                p += 8;
        } else {
                record_entry = t->text_start + le32(p);
                p += 4;
        }
        /* The function table and the record must agree: a cheap check that the offset really
         * leads to this function's record. */
        if (record_entry != entry)
                return -ENOEXEC;

        f.off = off;
        f.entry = entry;
        f.end = end;
        f.nameoff = (int32_t) le32(p);
        f.pcfile = le32(p + 16);
        f.pcln = le32(p + 20);
        f.npcdata = le32(p + 24);
        f.cu = le32(p + 28);
        f.nfuncdata = t->data[off + t->func_size - 1]; /* always the record's last byte */
        *ret = f;
        return 0;
}

static int func_name(const EpGoTable *t, int32_t nameoff, const char **ret) {
        if (nameoff < 0)
                return -ENOEXEC;
        return read_str(t, t->funcnames + (uint64_t) nameoff, ret);
}

/* ---- pc-value tables ---- */

/* The value of the pc-value table at pctab offset `table` for pc in function f: a sequence
 * of (value delta zig-zag varint, pc delta varint) pairs starting from value −1 at the entry;
 * the value holds until pc reaches the accumulated address. A zero value delta after the
 * first pair ends the table. -ENOENT: no table or pc past its end. */
static int pcvalue(const EpGoTable *t, const GoFunc *f, uint32_t table, uint64_t pc, int32_t *ret) {
        uint64_t off, cur = f->entry;
        uint32_t value = (uint32_t) -1;
        int r;

        if (table == 0)
                return -ENOENT;
        off = t->pctab + table;

        for (;;) {
                uint32_t uvdelta, pcdelta;

                r = read_uvarint(t, &off, &uvdelta);
                if (r < 0)
                        return r;
                if (uvdelta == 0 && cur != f->entry)
                        return -ENOENT;
                r = read_uvarint(t, &off, &pcdelta);
                if (r < 0)
                        return r;

                /* Zig-zag: the low bit is the sign. Wrapping arithmetic, as in Go's int32. */
                uint32_t vdelta = (uvdelta & 1) ? ~(uvdelta >> 1) : uvdelta >> 1;
                value += vdelta;
                cur += (uint64_t) pcdelta * t->quantum;
                if (pc < cur) {
                        *ret = (int32_t) value;
                        return 0;
                }
                /* Past the function: the rest cannot apply to pc (and ends the walk early on
                 * tables that never terminate inside the bounds). */
                if (cur >= f->end)
                        return -ENOENT;
        }
}

/* File name of pc in f: the pcfile value indexes the function's CU in cutab, which gives an
 * offset into filetab. "" when Go recorded no file. */
static int pc_file(const EpGoTable *t, const GoFunc *f, uint64_t pc, const char **ret) {
        int32_t fileno;
        uint32_t fileoff;
        int r;

        r = pcvalue(t, f, f->pcfile, pc, &fileno);
        if (r == -ENOENT || (r >= 0 && fileno < 0)) {
                *ret = "";
                return 0;
        }
        if (r < 0)
                return r;

        r = read_u32(t, t->cutab + ((uint64_t) f->cu + (uint64_t) fileno) * 4, &fileoff);
        if (r < 0)
                return r;
        if (fileoff == UINT32_MAX) {
                *ret = "";
                return 0;
        }
        return read_str(t, t->filetab + fileoff, ret);
}

static int pc_line(const EpGoTable *t, const GoFunc *f, uint64_t pc, uint32_t *ret) {
        int32_t line;
        int r;

        r = pcvalue(t, f, f->pcln, pc, &line);
        if (r == -ENOENT || (r >= 0 && line < 0)) {
                *ret = 0;
                return 0;
        }
        if (r < 0)
                return r;
        *ret = (uint32_t) line;
        return 0;
}

static int pc_position(const EpGoTable *t, const GoFunc *f, uint64_t pc, EpGoFrame *frame) {
        int r;

        r = pc_file(t, f, pc, &frame->file);
        if (r < 0)
                return r;
        return pc_line(t, f, pc, &frame->line);
}

/* ---- inline trees ---- */

typedef struct InlTree {
        uint32_t index_table; /* pctab offset of PCDATA_InlTreeIndex */
        uint64_t base;        /* address of the first entry */
} InlTree;

/* Whether f has inlined calls, and where their tree is. */
static int inl_tree(const EpGoTable *t, const GoFunc *f, InlTree *ret) {
        uint64_t pcdata = f->off + t->func_size;
        int r;

        *ret = (InlTree) {};
        if (!t->have_funcdata || f->npcdata <= PCDATA_INL_TREE_INDEX || f->nfuncdata <= FUNCDATA_INL_TREE)
                return 0;

        r = read_u32(t, pcdata + 4 * PCDATA_INL_TREE_INDEX, &ret->index_table);
        if (r < 0)
                return r;
        if (ret->index_table == 0)
                return 0;

        uint64_t funcdata = pcdata + 4 * (uint64_t) f->npcdata;
        if (t->version == EP_GO_1_16) {
                /* Pointer-sized entries, aligned to 8 in memory. */
                if ((t->vaddr + funcdata) & 4)
                        funcdata += 4;
                r = read_u64(t, funcdata + 8 * FUNCDATA_INL_TREE, &ret->base);
                if (r < 0)
                        return r;
        } else {
                uint32_t off;

                r = read_u32(t, funcdata + 4 * FUNCDATA_INL_TREE, &off);
                if (r < 0)
                        return r;
                ret->base = off == UINT32_MAX ? 0 : t->gofunc + off;
        }
        if (ret->base == 0)
                ret->index_table = 0;
        return 0;
}

/* Entry ix of the tree: the inlined function's name and the offset (from f's entry) of an
 * instruction whose position is the call site in the caller. */
static int inl_entry(const EpGoTable *t, const InlTree *tree, int32_t ix, int32_t *ret_nameoff,
                     int32_t *ret_parent_pc) {
        const uint8_t *p;

        if (ix < 0)
                return -ENOEXEC;
        p = read_mem(t, tree->base + (uint64_t) ix * t->inl_size, t->inl_size);
        if (!p)
                return -ENOEXEC;
        if (t->version == EP_GO_1_20) {
                /* funcID, 3 pad, nameOff, parentPc, startLine */
                *ret_nameoff = (int32_t) le32(p + 4);
                *ret_parent_pc = (int32_t) le32(p + 8);
        } else {
                /* parent (int16), funcID, pad, file, line, func_, parentPc */
                *ret_nameoff = (int32_t) le32(p + 12);
                *ret_parent_pc = (int32_t) le32(p + 16);
        }
        return 0;
}

/* ---- lookup ---- */

int ep_gopclntab_lookup(const EpGoTable *t, uint64_t pc, EpGoFrame *frames, size_t max_frames, size_t *ret_n,
                        uint64_t *ret_entry) {
        uint64_t index;
        GoFunc f;
        InlTree tree;
        size_t n = 0;
        int r;

        if (max_frames == 0)
                return -EINVAL;

        r = find_func(t, pc, &index);
        if (r < 0)
                return r;
        r = read_func(t, index, &f);
        if (r < 0)
                return r;
        r = inl_tree(t, &f, &tree);
        if (r < 0)
                return r;

        /* Each inlined call: its callee's name at the current position, then continue from the
         * call site in the caller (parentPc), whose tree index names the next level. The
         * position of every frame is the pcfile/pcln value where it is looked at. */
        for (unsigned depth = 0; tree.index_table != 0; depth++) {
                int32_t ix, nameoff, parent_pc;

                r = pcvalue(t, &f, tree.index_table, pc, &ix);
                if (r == -ENOENT || (r >= 0 && ix < 0))
                        break;
                if (r < 0)
                        return r;
                if (depth >= EP_GO_MAX_INLINE_DEPTH)
                        return -ENOEXEC; /* a cycle of parentPc, or beyond what Go emits */

                r = inl_entry(t, &tree, ix, &nameoff, &parent_pc);
                if (r < 0)
                        return r;
                if (n < max_frames) {
                        EpGoFrame *fr = &frames[n++];
                        r = func_name(t, nameoff, &fr->function);
                        if (r < 0)
                                return r;
                        r = pc_position(t, &f, pc, fr);
                        if (r < 0)
                                return r;
                }

                if (parent_pc < 0 || (uint64_t) parent_pc >= f.end - f.entry)
                        return -ENOEXEC;
                pc = f.entry + (uint64_t) parent_pc;
        }

        if (n < max_frames) {
                EpGoFrame *fr = &frames[n++];
                r = func_name(t, f.nameoff, &fr->function);
                if (r < 0)
                        return r;
                r = pc_position(t, &f, pc, fr);
                if (r < 0)
                        return r;
        }

        *ret_n = n;
        if (ret_entry)
                *ret_entry = f.entry;
        return 0;
}

/* ---- ELF ---- */

/* moduledata (runtime/symtab.go) as 8-byte words: the table pointer, then the slices
 * funcnametab, cutab, filetab, pctab, pclntable, ftab (3 words each), findfunctab, minpc,
 * maxpc, text, etext, noptrdata … enoptrbss, [covctrs, ecovctrs: 1.20+], end, gcdata, gcbss,
 * types, etypes, rodata, gofunc. */
#define MD_FUNCNAMETAB 1
#define MD_CUTAB 4
#define MD_FILETAB 7
#define MD_PCTAB 10
#define MD_PCLNTABLE 13
#define MD_TEXT 22
#define MD_GOFUNC_118 38
#define MD_GOFUNC_120 40

static bool section_data(const GElf_Shdr *sh, const uint8_t *image, size_t image_size, const uint8_t **ret) {
        if (sh->sh_type != SHT_PROGBITS || sh->sh_offset > image_size || sh->sh_size > image_size - sh->sh_offset)
                return false;
        *ret = image + sh->sh_offset;
        return true;
}

/* The module data of the table at pclntab: a word equal to the table's address, followed by
 * the slices the header describes and the text start. Then gofunc. Searched in the writable
 * data sections, where the linker puts it (.noptrdata); 0 when not found. */
static uint64_t find_gofunc(const EpGoTable *t, const EpGoRegion *data_regions, size_t n) {
        size_t gofunc_word = t->version == EP_GO_1_20 ? MD_GOFUNC_120 : MD_GOFUNC_118;
        size_t md_size = (gofunc_word + 1) * 8;

        for (size_t i = 0; i < n; i++) {
                const EpGoRegion *r = &data_regions[i];

                if (r->size < md_size)
                        continue;
                for (uint64_t off = (8 - (r->vaddr & 7)) & 7; off <= r->size - md_size; off += 8) {
                        const uint8_t *md = r->data + off;

                        if (le64(md) != t->vaddr)
                                continue;
                        if (le64(md + 8 * MD_FUNCNAMETAB) != t->vaddr + t->funcnames ||
                            le64(md + 8 * MD_CUTAB) != t->vaddr + t->cutab ||
                            le64(md + 8 * MD_FILETAB) != t->vaddr + t->filetab ||
                            le64(md + 8 * MD_PCTAB) != t->vaddr + t->pctab ||
                            le64(md + 8 * MD_PCLNTABLE) != t->vaddr + t->pcln ||
                            le64(md + 8 * MD_TEXT) != t->text_start)
                                continue;

                        /* rodata precedes gofunc, which lies inside it. */
                        uint64_t rodata = le64(md + 8 * (gofunc_word - 1)), gofunc = le64(md + 8 * gofunc_word);
                        if (gofunc < rodata || !read_mem(t, gofunc, 1))
                                return 0;
                        return gofunc;
                }
        }
        return 0;
}

int ep_gopclntab_from_elf(Elf *elf, const uint8_t *image, size_t image_size, EpGoTable **ret) {
        _cleanup_(ep_gopclntab_freep) EpGoTable *t = NULL;
        EpGoRegion regions[EP_GO_MAX_REGIONS], writable[EP_GO_MAX_REGIONS];
        size_t n_regions = 0, n_writable = 0, shstrndx;
        const uint8_t *table = NULL;
        uint64_t table_size = 0, table_vaddr = 0;
        Elf_Scn *scn = NULL;
        int r;

        if (elf_getshdrstrndx(elf, &shstrndx) < 0)
                return -ENOENT; /* no section headers: not recognised (see gopclntab.h) */

        while ((scn = elf_nextscn(elf, scn))) {
                GElf_Shdr sh;
                const uint8_t *p;
                const char *name;

                if (!gelf_getshdr(scn, &sh) || !(sh.sh_flags & SHF_ALLOC) || sh.sh_addr == 0)
                        continue;
                if (!section_data(&sh, image, image_size, &p))
                        continue;
                name = elf_strptr(elf, shstrndx, sh.sh_name);
                if (name && (streq(name, ".gopclntab") || streq(name, ".data.rel.ro.gopclntab"))) {
                        table = p;
                        table_size = sh.sh_size;
                        table_vaddr = sh.sh_addr;
                }
                if (n_regions < EP_GO_MAX_REGIONS)
                        regions[n_regions++] = (EpGoRegion) { sh.sh_addr, p, sh.sh_size };
                if ((sh.sh_flags & SHF_WRITE) && n_writable < EP_GO_MAX_REGIONS)
                        writable[n_writable++] = (EpGoRegion) { sh.sh_addr, p, sh.sh_size };
        }
        if (!table)
                return -ENOENT;

        r = ep_gopclntab_open(table, table_size, table_vaddr, &t);
        if (r < 0)
                return r;

        uint64_t gofunc = 0;
        ep_gopclntab_set_funcdata(t, 0, regions, n_regions);
        if (t->version != EP_GO_1_16) {
                gofunc = find_gofunc(t, writable, n_writable);
                if (gofunc == 0) {
                        /* Names, files and lines still work; inlined calls are not expanded. */
                        log_debug("Go table at 0x%" PRIx64 ": module data not found, no inline frames", table_vaddr);
                        t->have_funcdata = false;
                }
        }
        t->gofunc = gofunc;

        *ret = TAKE_PTR(t);
        return 0;
}
