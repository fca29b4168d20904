/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demangle.h"
#include "grow-array.h"
#include "elf-plt.h"

#define MAX_RELOCS (1u << 20)      /* relocations looked at per file */
#define MAX_STUBS (1u << 20)       /* stubs kept per file */
#define STUB_SIZE_DEFAULT 16u      /* when a section's sh_entsize is not one linkers use */
#define RESOLVER_STUB_NAME ".plt"  /* the first .plt entry: jumps to the dynamic linker */

/* x86-64 relocation types (elf.h has them; named here for what they mean to a stub). */
enum {
        RELOC_GLOB_DAT = R_X86_64_GLOB_DAT,   /* .plt.got stubs: the GOT slot of a symbol */
        RELOC_JUMP_SLOT = R_X86_64_JUMP_SLOT, /* .plt / .plt.sec stubs */
        RELOC_IRELATIVE = R_X86_64_IRELATIVE, /* an ifunc called inside its own object */
};

typedef struct Reloc {
        uint64_t offset; /* the GOT slot */
        char *name;      /* the function the slot holds */
} Reloc;

typedef struct Stub {
        uint64_t addr;
        uint64_t size;
        char *name;
} Stub;

struct EpPltTable {
        Stub *stubs; /* sorted by addr */
        size_t n_stubs, cap_stubs;
};

typedef struct Relocs {
        Reloc *v; /* sorted by offset */
        size_t n;
        char **by_plt_index; /* .rela.plt's entries in order: what lazy stubs push */
        size_t n_plt;
} Relocs;

static void relocs_done(Relocs *r) {
        for (size_t i = 0; i < r->n; i++)
                free(r->v[i].name);
        free(r->v);
        free(r->by_plt_index);
}

EpPltTable *ep_plt_table_free(EpPltTable *t) {
        if (!t)
                return NULL;
        for (size_t i = 0; i < t->n_stubs; i++)
                free(t->stubs[i].name);
        free(t->stubs);
        free(t);
        return NULL;
}

size_t ep_plt_table_size(const EpPltTable *t) {
        return t->n_stubs;
}

static int reloc_compare(const void *a, const void *b) {
        const Reloc *x = a, *y = b;
        return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static const Reloc *reloc_at(const Relocs *r, uint64_t offset) {
        Reloc key = { .offset = offset };
        return r->n > 0 ? bsearch(&key, r->v, r->n, sizeof *r->v, reloc_compare) : NULL;
}

/* The function a relocation puts in its slot: the symbol's name, or for IRELATIVE the name of
 * the ifunc whose resolver sits at the addend. NULL when it names none. */
static char *reloc_target(EpElfFile *f, const GElf_Rela *rela, Elf_Data *syms, size_t strtab) {
        uint32_t type = GELF_R_TYPE(rela->r_info), index = GELF_R_SYM(rela->r_info);
        GElf_Sym sym;
        const char *name;
        char *ifunc = NULL;

        if (type == RELOC_IRELATIVE) {
                if (ep_elf_lookup(f, (uint64_t) rela->r_addend, &ifunc, NULL) < 0)
                        return NULL;
                return ifunc;
        }
        if ((type != RELOC_JUMP_SLOT && type != RELOC_GLOB_DAT) || index == 0 || !syms ||
            !gelf_getsym(syms, (int) index, &sym))
                return NULL;
        name = elf_strptr(ep_elf_handle(f), strtab, sym.st_name);
        return name && name[0] ? strndup(name, EP_SYMBOL_NAME_MAX) : NULL;
}

/* One SHT_RELA section's function relocations into r; is_plt: it is .rela.plt (DT_JMPREL),
 * whose order lazy stubs refer to. */
static int relocs_add_section(EpElfFile *f, Elf_Scn *scn, const GElf_Shdr *sh, bool is_plt, Relocs *r) {
        Elf *elf = ep_elf_handle(f);
        Elf_Scn *symscn = elf_getscn(elf, sh->sh_link);
        Elf_Data *data = elf_getdata(scn, NULL), *syms = NULL;
        GElf_Shdr symsh;
        size_t n, entsize = gelf_fsize(elf, ELF_T_RELA, 1, EV_CURRENT);

        if (!data || data->d_type != ELF_T_RELA || entsize == 0)
                return 0;
        if (symscn && gelf_getshdr(symscn, &symsh) && symsh.sh_type == SHT_DYNSYM)
                syms = elf_getdata(symscn, NULL);
        n = MIN(data->d_size / entsize, (size_t) MAX_RELOCS - r->n);
        if (n == 0)
                return 0;

        Reloc *v = reallocarray(r->v, r->n + n, sizeof *v);
        if (!v)
                return -ENOMEM;
        r->v = v;
        if (is_plt) {
                free(r->by_plt_index);
                r->by_plt_index = calloc(n, sizeof(char *));
                if (!r->by_plt_index)
                        return -ENOMEM;
                r->n_plt = n;
        }
        for (size_t i = 0; i < n; i++) {
                GElf_Rela rela;
                char *name;

                if (!gelf_getrela(data, (int) i, &rela))
                        break;
                name = reloc_target(f, &rela, syms, syms ? symsh.sh_link : 0);
                if (!name)
                        continue;
                if (is_plt)
                        r->by_plt_index[i] = name;
                r->v[r->n++] = (Reloc) { .offset = rela.r_offset, .name = name };
        }
        return ep_elf_check(f);
}

static int relocs_read(EpElfFile *f, Relocs *r) {
        Elf_Scn *scn = NULL;
        const char *name;
        GElf_Shdr sh;
        int k;

        while (r->n < MAX_RELOCS && ep_elf_next_section(f, &scn, &sh, &name)) {
                if (sh.sh_type != SHT_RELA)
                        continue;
                k = relocs_add_section(f, scn, &sh, streq(name, ".rela.plt"), r);
                if (k < 0)
                        return k;
        }
        if (r->n > 0)
                qsort(r->v, r->n, sizeof *r->v, reloc_compare);
        return ep_elf_check(f);
}

static uint32_t load_le32(const uint8_t *p) {
        return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

/* What the stub at addr (its bytes b[0..size)) calls: a name owned by r, RESOLVER_STUB_NAME
 * for the resolver's stub, NULL when it is none of the shapes linkers emit. */
static const char *stub_target(const Relocs *r, uint64_t addr, const uint8_t *b, size_t size) {
        static const uint8_t endbr64[] = { 0xf3, 0x0f, 0x1e, 0xfa };
        size_t i = 0;

        if (size >= sizeof endbr64 && memcmp(b, endbr64, sizeof endbr64) == 0)
                i = sizeof endbr64;
        if (i < size && b[i] == 0xf2) /* bnd */
                i++;
        if (i + 6 <= size && b[i] == 0xff && b[i + 1] == 0x25) { /* jmp *disp32(%rip) */
                uint64_t slot = addr + i + 6 + (uint64_t) (int64_t) (int32_t) load_le32(b + i + 2);
                const Reloc *rel = reloc_at(r, slot);
                return rel ? rel->name : NULL;
        }
        if (i + 5 <= size && b[i] == 0x68) { /* push imm32: a lazy stub of .rela.plt's entry */
                uint32_t index = load_le32(b + i + 1);
                return index < r->n_plt ? r->by_plt_index[index] : NULL;
        }
        if (i + 6 <= size && b[i] == 0xff && b[i + 1] == 0x35) /* push disp32(%rip): the resolver's */
                return RESOLVER_STUB_NAME;
        return NULL;
}

/* The name a stub of target is shown by: "@plt" after the function's (demangled) name. */
static char *stub_name(const char *target) {
        _cleanup_free_ char *demangled = NULL;
        char *name;

        if (streq(target, RESOLVER_STUB_NAME))
                return strdup(target);
        if (ep_demangle(target, &demangled) < 0 || asprintf(&name, "%s@plt", demangled) < 0)
                return NULL;
        return name;
}

static int stubs_add_section(EpElfFile *f, Elf_Scn *scn, const GElf_Shdr *sh, const Relocs *r, EpPltTable *t) {
        Elf_Data *data = elf_rawdata(scn, NULL);
        size_t size = sh->sh_entsize == 8 || sh->sh_entsize == 16 || sh->sh_entsize == 32 ? sh->sh_entsize
                                                                                          : STUB_SIZE_DEFAULT;

        if (!data || !data->d_buf)
                return 0;
        for (size_t off = 0; off + size <= data->d_size && t->n_stubs < MAX_STUBS; off += size) {
                const char *target = stub_target(r, sh->sh_addr + off, (const uint8_t *) data->d_buf + off, size);
                Stub stub = { .addr = sh->sh_addr + off, .size = size };

                if (!target)
                        continue;
                stub.name = stub_name(target);
                if (!stub.name || ARRAY_PUSH(t->stubs, t->n_stubs, t->cap_stubs, stub) < 0) {
                        free(stub.name);
                        return -ENOMEM;
                }
        }
        return ep_elf_check(f);
}

static int stub_compare(const void *a, const void *b) {
        const Stub *x = a, *y = b;
        return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static bool is_plt_section(const char *name) {
        return streq(name, ".plt") || streq(name, ".plt.sec") || streq(name, ".plt.got");
}

static int stubs_read(EpElfFile *f, const Relocs *r, EpPltTable *t) {
        Elf_Scn *scn = NULL;
        const char *name;
        GElf_Shdr sh;
        int k;

        while (ep_elf_next_section(f, &scn, &sh, &name)) {
                if (sh.sh_type != SHT_PROGBITS || !(sh.sh_flags & SHF_EXECINSTR) || !is_plt_section(name))
                        continue;
                k = stubs_add_section(f, scn, &sh, r, t);
                if (k < 0)
                        return k;
        }
        if (t->n_stubs > 0)
                qsort(t->stubs, t->n_stubs, sizeof *t->stubs, stub_compare);
        return ep_elf_check(f);
}

int ep_plt_table_read(EpElfFile *f, EpPltTable **ret) {
        _cleanup_(ep_plt_table_freep) EpPltTable *t = NULL;
        Relocs r = {};
        GElf_Ehdr eh;
        int k = 0;

        t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        if (gelf_getehdr(ep_elf_handle(f), &eh) && eh.e_machine == EM_X86_64 && eh.e_ident[EI_CLASS] == ELFCLASS64) {
                k = relocs_read(f, &r);
                if (k >= 0)
                        k = stubs_read(f, &r, t);
                relocs_done(&r);
        }
        if (k < 0)
                return k;
        *ret = TAKE_PTR(t);
        return 0;
}

int ep_plt_table_lookup(const EpPltTable *t, uint64_t vaddr, char **ret_name) {
        size_t lo = 0, hi = t->n_stubs;
        const Stub *s;
        char *name;

        while (lo < hi) { /* the last stub starting at or below vaddr */
                size_t mid = lo + (hi - lo) / 2;
                if (t->stubs[mid].addr <= vaddr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo == 0)
                return -ENOENT;
        s = &t->stubs[lo - 1];
        if (vaddr - s->addr >= s->size)
                return -ENOENT;
        name = strdup(s->name);
        if (!name)
                return -ENOMEM;
        *ret_name = name;
        return 0;
}
