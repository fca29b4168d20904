/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "elf-symbols.h"
#include "log.h"
#include "sigbus.h"

#define MAX_SYMBOLS (4u << 20)   /* function symbols kept per file (64 MiB at most) */
#define MAX_NESTED_LOOKBACK 8    /* earlier sized symbols checked when the nearest misses */
#define MAPPING_PAGE 4096u       /* the kernel maps file segments at page granularity */

typedef struct LoadSegment {
        uint64_t offset, filesz, vaddr;
} LoadSegment;

/* While building: everything needed to choose among symbols. */
typedef struct ElfSym {
        uint64_t addr, end; /* [addr, end) */
        uint32_t name;      /* offset in the string table */
        uint8_t score;      /* preference among symbols at one address */
        uint8_t sized;
        uint8_t public;
} ElfSym;

/* Kept per file: 16 bytes a function. */
#define NAME_SIZED 0x80000000u /* flag in .name: the symbol had a size (else it reaches to the next) */
#define NAME_PUBLIC 0x40000000u /* flag in .name: global or weak (a name other objects link to) */
#define NAME_FLAGS (NAME_SIZED | NAME_PUBLIC)
typedef struct FuncSym {
        uint64_t addr;
        uint32_t len;  /* end − addr, capped */
        uint32_t name; /* string table offset | NAME_FLAGS */
} FuncSym;

typedef struct SectionRange {
        uint64_t addr, end;
        bool alloc, exec;
} SectionRange;

struct EpElfFile {
        uint8_t *map;
        size_t map_size;
        int fd;    /* kept for readers that need their own mapping (DWARF, see dwarf-lines.c) */
        int guard; /* sigbus slot, or -1 */
        bool changed;
        Elf *elf;

        LoadSegment *loads;
        size_t n_loads;

        bool symbols_loaded;
        int symbols_error;
        FuncSym *syms;
        size_t n_syms;
        size_t strtab;   /* section index of the names */
        const char *table;

        void *userdata;
        void (*userdata_destroy)(void *data);
};

static int elf_lib_init(void) {
        static bool done = false;

        if (done)
                return 0;
        if (elf_version(EV_CURRENT) == EV_NONE)
                return -ENOTSUP;
        done = true;
        return 0;
}

static int check_fault(EpElfFile *f) {
        if (f->guard >= 0 && ep_sigbus_faulted(f->guard))
                f->changed = true;
        return f->changed ? -EIO : 0;
}

int ep_elf_check(EpElfFile *f) {
        return check_fault(f);
}

Elf *ep_elf_handle(EpElfFile *f) {
        return f->elf;
}

size_t ep_elf_size(const EpElfFile *f) {
        return f->map_size;
}

int ep_elf_fd(const EpElfFile *f) {
        return f->fd;
}

void *ep_elf_userdata(EpElfFile *f) {
        return f->userdata;
}

void ep_elf_set_userdata(EpElfFile *f, void *data, void (*destroy)(void *data)) {
        void *old = f->userdata;
        void (*old_destroy)(void *) = f->userdata_destroy;

        f->userdata = data;
        f->userdata_destroy = destroy;
        if (old && old_destroy)
                old_destroy(old);
}

EpElfFile *ep_elf_free(EpElfFile *f) {
        if (!f)
                return NULL;
        /* First: it may hold handles (libdw) that read through our Elf and mapping. */
        ep_elf_set_userdata(f, NULL, NULL);
        if (f->elf)
                elf_end(f->elf);
        if (f->map)
                munmap(f->map, f->map_size);
        /* Unregister only after the mapping is gone, so a zero page we put there cannot
         * outlive the range it belongs to. */
        ep_sigbus_unregister(f->guard);
        (void) close_nointr(f->fd);
        free(f->loads);
        free(f->syms);
        free(f);
        return NULL;
}

static int read_loads(EpElfFile *f) {
        size_t phnum;

        if (elf_getphdrnum(f->elf, &phnum) < 0)
                return -ENOEXEC;
        if (phnum == 0)
                return 0;

        f->loads = calloc(phnum, sizeof(LoadSegment));
        if (!f->loads)
                return -ENOMEM;

        for (size_t i = 0; i < phnum; i++) {
                GElf_Phdr ph;

                if (!gelf_getphdr(f->elf, (int) i, &ph))
                        return -ENOEXEC;
                if (ph.p_type != PT_LOAD || ph.p_filesz == 0)
                        continue;
                if (ph.p_offset > f->map_size || ph.p_filesz > f->map_size - ph.p_offset)
                        continue; /* claims bytes the file does not have: ignore it */
                f->loads[f->n_loads++] = (LoadSegment) {
                        .offset = ph.p_offset,
                        .filesz = ph.p_filesz,
                        .vaddr = ph.p_vaddr,
                };
        }
        return 0;
}

int ep_elf_open(int fd, EpElfFile **ret) {
        _cleanup_close_ int fd_owned = fd;
        _cleanup_(ep_elf_freep) EpElfFile *f = NULL;
        struct stat st;
        int r;

        r = elf_lib_init();
        if (r < 0)
                return r;
        r = ep_sigbus_install();
        if (r < 0)
                return r;

        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode) || st.st_size < (off_t) EI_NIDENT)
                return -ENOEXEC;
        if ((uint64_t) st.st_size > SIZE_MAX)
                return -EFBIG;

        f = calloc(1, sizeof(EpElfFile));
        if (!f)
                return -ENOMEM;
        f->guard = -1;
        f->fd = -EBADF;
        f->map_size = (size_t) st.st_size;

        /* Private and writable so that libelf may convert data in place without ever touching
         * the file; pages nobody writes stay shared with the page cache. */
        void *p = mmap(NULL, f->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
                f->map_size = 0;
                return -errno;
        }
        f->map = p;

        r = ep_sigbus_register(f->map, f->map_size);
        if (r < 0)
                return r;
        f->guard = r;

        f->elf = elf_memory((char *) f->map, f->map_size);
        if (!f->elf)
                return check_fault(f) ?: -ENOEXEC;
        if (elf_kind(f->elf) != ELF_K_ELF || gelf_getclass(f->elf) == ELFCLASSNONE)
                return check_fault(f) ?: -ENOEXEC;

        r = read_loads(f);
        if (check_fault(f) < 0)
                return -EIO;
        if (r < 0)
                return r;

        f->fd = TAKE_FD(fd_owned);
        *ret = TAKE_PTR(f);
        return 0;
}

int ep_elf_offset_to_vaddr(EpElfFile *f, uint64_t offset, uint64_t *ret_vaddr) {
        if (f->changed)
                return -EIO;

        for (size_t i = 0; i < f->n_loads; i++) {
                const LoadSegment *s = &f->loads[i];

                if (offset >= s->offset && offset - s->offset < s->filesz) {
                        *ret_vaddr = s->vaddr + (offset - s->offset);
                        return 0;
                }
        }

        /* The mapping of a segment starts at the page below p_offset; an address in that head
         * still belongs to the segment's virtual range. */
        for (size_t i = 0; i < f->n_loads; i++) {
                const LoadSegment *s = &f->loads[i];
                uint64_t head = s->offset & ~(uint64_t) (MAPPING_PAGE - 1);

                if (offset >= head && offset < s->offset && s->vaddr >= s->offset - offset) {
                        *ret_vaddr = s->vaddr - (s->offset - offset);
                        return 0;
                }
        }

        return -ENOENT;
}

/* ---- symbols ---- */

static int sym_compare(const void *a, const void *b) {
        const ElfSym *x = a, *y = b;

        if (x->addr != y->addr)
                return x->addr < y->addr ? -1 : 1;
        if (x->score != y->score)
                return x->score > y->score ? -1 : 1; /* best first */
        /* Stable among equals: the name offset orders the table deterministically. */
        return x->name < y->name ? -1 : x->name > y->name;
}

static bool sym_public(const GElf_Sym *s) {
        uint8_t bind = GELF_ST_BIND(s->st_info);
        return bind == STB_GLOBAL || bind == STB_WEAK;
}

/* Among aliases at one address: functions, sized, global, then the name with the fewest
 * leading underscores (glibc's `read` over `__read`: the name people call). */
static uint8_t sym_score(const GElf_Sym *s, const char *name) {
        uint8_t type = GELF_ST_TYPE(s->st_info), bind = GELF_ST_BIND(s->st_info);
        unsigned underscores = 0;

        while (name && name[underscores] == '_' && underscores < 3)
                underscores++;
        return (uint8_t) ((((type == STT_FUNC || type == STT_GNU_IFUNC) ? 8 : 0) +
                           (s->st_size > 0 ? 4 : 0) +
                           (bind == STB_GLOBAL ? 2 : bind == STB_WEAK ? 1 : 0)) * 4 +
                          (3 - underscores));
}

static int read_sections(EpElfFile *f, SectionRange **ret, size_t *ret_n) {
        size_t shnum;

        if (elf_getshdrnum(f->elf, &shnum) < 0)
                return -ENOEXEC;
        /* Symbols name sections with 16-bit indexes below SHN_LORESERVE. */
        shnum = MIN(shnum, (size_t) SHN_LORESERVE);

        SectionRange *sec = calloc(MAX(shnum, (size_t) 1), sizeof(SectionRange));
        if (!sec)
                return -ENOMEM;

        for (size_t i = 1; i < shnum; i++) {
                Elf_Scn *scn = elf_getscn(f->elf, i);
                GElf_Shdr sh;

                if (!scn || !gelf_getshdr(scn, &sh))
                        continue;
                sec[i].addr = sh.sh_addr;
                sec[i].end = sh.sh_addr + sh.sh_size < sh.sh_addr ? UINT64_MAX : sh.sh_addr + sh.sh_size;
                sec[i].alloc = sh.sh_flags & SHF_ALLOC;
                sec[i].exec = sh.sh_flags & SHF_EXECINSTR;
        }

        *ret = sec;
        *ret_n = shnum;
        return 0;
}

static bool skip_name(EpElfFile *f, GElf_Half machine, size_t strtab, uint32_t name) {
        if (name == 0)
                return true;
        if (machine != EM_ARM && machine != EM_AARCH64)
                return false;
        /* ARM mapping symbols ($a, $t, $d, $x) mark code/data runs, not functions. */
        const char *s = elf_strptr(f->elf, strtab, name);
        return !s || s[0] == '$';
}

/* Collects function symbols of one table into f->syms. */
static int collect_table(EpElfFile *f, Elf_Scn *scn, const SectionRange *sec, size_t n_sec) {
        GElf_Shdr sh;
        GElf_Ehdr eh;

        if (!gelf_getshdr(scn, &sh) || !gelf_getehdr(f->elf, &eh))
                return -ENOEXEC;
        if (sh.sh_link == 0 || sh.sh_link >= n_sec)
                return -ENOEXEC;

        Elf_Scn *strscn = elf_getscn(f->elf, sh.sh_link);
        GElf_Shdr strsh;
        if (!strscn || !gelf_getshdr(strscn, &strsh) || strsh.sh_type != SHT_STRTAB)
                return -ENOEXEC;

        Elf_Data *data = elf_getdata(scn, NULL);
        if (!data || data->d_type != ELF_T_SYM)
                return -ENOEXEC;
        size_t entsize = gelf_fsize(f->elf, ELF_T_SYM, 1, EV_CURRENT);
        if (entsize == 0)
                return -ENOEXEC;
        size_t n = data->d_size / entsize;

        ElfSym *syms = NULL;
        size_t n_syms = 0, cap = 0;

        for (size_t i = 1; i < n && n_syms < MAX_SYMBOLS; i++) {
                GElf_Sym s;

                if (!gelf_getsym(data, (int) i, &s))
                        break;

                uint8_t type = GELF_ST_TYPE(s.st_info);
                if (s.st_shndx == SHN_UNDEF || s.st_shndx >= SHN_LORESERVE)
                        continue; /* imports, absolute values, commons, extended indexes */
                if (type == STT_NOTYPE) {
                        /* Assembly labels: functions only when they sit in code. */
                        if (s.st_shndx >= n_sec || !sec[s.st_shndx].exec)
                                continue;
                } else if (type != STT_FUNC && type != STT_GNU_IFUNC)
                        continue;
                if (s.st_value == 0 && s.st_size == 0)
                        continue;
                if (s.st_name & NAME_FLAGS)
                        continue; /* a string table over 1 GiB: not a real one */
                if (skip_name(f, eh.e_machine, sh.sh_link, s.st_name))
                        continue;

                if (n_syms == cap) {
                        size_t ncap = cap ? cap * 2 : 256;
                        ElfSym *t = reallocarray(syms, ncap, sizeof(ElfSym));
                        if (!t) {
                                free(syms);
                                return -ENOMEM;
                        }
                        syms = t;
                        cap = ncap;
                }

                uint64_t end;
                if (s.st_size > 0)
                        end = s.st_value + s.st_size < s.st_value ? UINT64_MAX : s.st_value + s.st_size;
                else if (s.st_shndx < n_sec && sec[s.st_shndx].alloc &&
                         s.st_value >= sec[s.st_shndx].addr && s.st_value < sec[s.st_shndx].end)
                        end = sec[s.st_shndx].end; /* refined to the next symbol below */
                else
                        end = UINT64_MAX;

                syms[n_syms++] = (ElfSym) {
                        .addr = s.st_value,
                        .end = end,
                        .name = s.st_name,
                        .score = sym_score(&s, elf_strptr(f->elf, sh.sh_link, s.st_name)),
                        .sized = s.st_size > 0,
                        .public = sym_public(&s),
                };
        }

        if (n_syms == 0) {
                free(syms);
                return 0;
        }

        qsort(syms, n_syms, sizeof(ElfSym), sym_compare);

        /* One symbol per address (the best, sorted first), and no size-0 labels inside a
         * sized function: the function names those addresses better. */
        size_t k = 0;
        uint64_t cover_end = 0;
        bool covering = false;
        for (size_t i = 0; i < n_syms; i++) {
                ElfSym *s = &syms[i];

                if (k > 0 && syms[k - 1].addr == s->addr)
                        continue;
                if (!s->sized && covering && s->addr < cover_end)
                        continue;
                if (s->sized && (!covering || s->end > cover_end || s->addr >= cover_end)) {
                        covering = true;
                        cover_end = s->end;
                }
                syms[k++] = *s;
        }
        n_syms = k;

        /* A size-0 symbol reaches to the next symbol, and no further than its section. */
        for (size_t i = 0; i < n_syms; i++) {
                ElfSym *s = &syms[i];

                if (s->sized)
                        continue;
                if (i + 1 < n_syms)
                        s->end = MIN(s->end, syms[i + 1].addr);
                else if (s->end == UINT64_MAX)
                        s->end = s->addr + 1; /* last, and no section to bound it: exact only */
        }

        FuncSym *out = calloc(n_syms, sizeof(FuncSym));
        if (!out) {
                free(syms);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n_syms; i++)
                out[i] = (FuncSym) {
                        .addr = syms[i].addr,
                        .len = (uint32_t) MIN(syms[i].end - syms[i].addr, (uint64_t) UINT32_MAX),
                        .name = syms[i].name | (syms[i].sized ? NAME_SIZED : 0) |
                                (syms[i].public ? NAME_PUBLIC : 0),
                };
        free(syms);
        f->syms = out;
        f->n_syms = n_syms;
        f->strtab = sh.sh_link;
        return 0;
}

static Elf_Scn *find_section_by_type(Elf *elf, GElf_Word type) {
        Elf_Scn *scn = NULL;

        while ((scn = elf_nextscn(elf, scn))) {
                GElf_Shdr sh;

                if (gelf_getshdr(scn, &sh) && sh.sh_type == type)
                        return scn;
        }
        return NULL;
}

static int load_symbols(EpElfFile *f) {
        _cleanup_free_ SectionRange *sec = NULL;
        size_t n_sec = 0;
        int r;

        if (f->symbols_loaded)
                return f->symbols_error;
        f->symbols_loaded = true;
        f->table = "";

        r = read_sections(f, &sec, &n_sec);
        if (r >= 0) {
                static const struct {
                        GElf_Word type;
                        const char *name;
                } tables[] = { { SHT_SYMTAB, ".symtab" }, { SHT_DYNSYM, ".dynsym" } };

                for (size_t i = 0; i < ELEMENTSOF(tables) && f->n_syms == 0; i++) {
                        Elf_Scn *scn = find_section_by_type(f->elf, tables[i].type);
                        if (!scn)
                                continue;
                        r = collect_table(f, scn, sec, n_sec);
                        if (r == -ENOMEM)
                                break;
                        if (r < 0) {
                                /* A broken table; the other one may still be usable. */
                                log_debug_errno(r, "Unusable %s, skipping: %m", tables[i].name);
                                r = 0;
                                continue;
                        }
                        if (f->n_syms > 0)
                                f->table = tables[i].name;
                }
        }

        if (check_fault(f) < 0)
                r = -EIO;
        if (r < 0) {
                free(f->syms);
                f->syms = NULL;
                f->n_syms = 0;
        }
        f->symbols_error = r < 0 ? r : 0;
        return f->symbols_error;
}

size_t ep_elf_kept_bytes(EpElfFile *f) {
        static const GElf_Word types[] = { SHT_SYMTAB, SHT_DYNSYM };
        size_t total = (size_t) sysconf(_SC_PAGESIZE); /* headers */

        for (size_t i = 0; i < ELEMENTSOF(types); i++) {
                Elf_Scn *scn = find_section_by_type(f->elf, types[i]), *names;
                GElf_Shdr sh, nsh;

                if (!scn || !gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
                        continue;
                size_t size = MIN((size_t) sh.sh_size, f->map_size);
                total += size + (sh.sh_entsize ? size / sh.sh_entsize * sizeof(FuncSym) : 0);
                names = elf_getscn(f->elf, sh.sh_link);
                if (names && gelf_getshdr(names, &nsh) && nsh.sh_type != SHT_NOBITS)
                        total += MIN((size_t) nsh.sh_size, f->map_size);
                break;
        }
        return total;
}

void ep_elf_drop_debug_pages(EpElfFile *f, void *image) {
        size_t page = (size_t) sysconf(_SC_PAGESIZE);
        uint8_t *base = image ?: f->map;
        Elf_Scn *scn = NULL;
        const char *name;
        GElf_Shdr sh;

        while (ep_elf_next_section(f, &scn, &sh, &name)) {
                if (sh.sh_type == SHT_NOBITS || sh.sh_size == 0 || sh.sh_offset >= f->map_size ||
                    !startswith(name, ".debug_"))
                        continue;
                /* Whole pages inside the section only: its neighbours' pages stay. */
                size_t lo = ((size_t) sh.sh_offset + page - 1) / page * page;
                size_t hi = (size_t) MIN(sh.sh_offset + sh.sh_size, (uint64_t) f->map_size) / page * page;
                if (hi > lo)
                        (void) madvise(base + lo, hi - lo, MADV_DONTNEED);
        }
}

int ep_elf_symbol_count(EpElfFile *f, size_t *ret_count, const char **ret_table) {
        int r = load_symbols(f);
        if (r < 0)
                return r;
        if (ret_count)
                *ret_count = f->n_syms;
        if (ret_table)
                *ret_table = f->table;
        return 0;
}

static bool covers(const FuncSym *s, uint64_t vaddr) {
        return vaddr >= s->addr && vaddr - s->addr < s->len;
}

static const FuncSym *find_symbol(const EpElfFile *f, uint64_t vaddr) {
        size_t lo = 0, hi = f->n_syms;

        /* The last symbol starting at or below vaddr. */
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (f->syms[mid].addr <= vaddr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo == 0)
                return NULL;

        const FuncSym *s = &f->syms[lo - 1];
        if (covers(s, vaddr))
                return s;

        /* A sized function may enclose a smaller sized symbol that ends before vaddr. */
        for (size_t i = 1; i <= MAX_NESTED_LOOKBACK && i < lo; i++) {
                const FuncSym *p = &f->syms[lo - 1 - i];
                if ((p->name & NAME_SIZED) && covers(p, vaddr))
                        return p;
        }
        return NULL;
}

static int lookup(EpElfFile *f, uint64_t vaddr, bool public_only, char **ret_name, uint64_t *ret_sym_addr) {
        int r;

        if (f->changed)
                return -EIO;
        r = load_symbols(f);
        if (r < 0)
                return r;

        const FuncSym *s = find_symbol(f, vaddr);
        if (!s || (public_only && !(s->name & NAME_PUBLIC)))
                return -ENOENT;

        if (ret_name) {
                const char *name = elf_strptr(f->elf, f->strtab, s->name & ~NAME_FLAGS);
                if (!name)
                        return check_fault(f) ?: -ENOEXEC;

                char *copy = strndup(name, EP_SYMBOL_NAME_MAX);
                if (!copy)
                        return -ENOMEM;
                if (check_fault(f) < 0) {
                        free(copy);
                        return -EIO;
                }
                *ret_name = copy;
        }
        if (ret_sym_addr)
                *ret_sym_addr = s->addr;
        return 0;
}

int ep_elf_lookup(EpElfFile *f, uint64_t vaddr, char **ret_name, uint64_t *ret_sym_addr) {
        return lookup(f, vaddr, false, ret_name, ret_sym_addr);
}

int ep_elf_lookup_public(EpElfFile *f, uint64_t vaddr, char **ret_name, uint64_t *ret_sym_addr) {
        return lookup(f, vaddr, true, ret_name, ret_sym_addr);
}

/* ---- build IDs ---- */

static void scan_notes(Elf_Data *data, EpBuildIds *ids) {
        size_t off = 0, next;
        GElf_Nhdr nh;
        size_t name_off, desc_off;

        while (data && off < data->d_size &&
               (next = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
                const char *name = (const char *) data->d_buf + name_off;
                const uint8_t *desc = (const uint8_t *) data->d_buf + desc_off;

                if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && memcmp(name, "GNU", 4) == 0 &&
                    ids->gnu_len == 0 && nh.n_descsz > 0 && nh.n_descsz <= EP_BUILD_ID_MAX) {
                        memcpy(ids->gnu, desc, nh.n_descsz);
                        ids->gnu_len = nh.n_descsz;
                }

                /* The Go linker writes name "Go\0\0", type 4 (build ID). */
                if (nh.n_type == 4 && (nh.n_namesz == 3 || nh.n_namesz == 4) &&
                    memcmp(name, "Go", 3) == 0 && ids->go[0] == 0) {
                        size_t n = strnlen((const char *) desc, MIN((size_t) nh.n_descsz, (size_t) EP_GO_BUILD_ID_MAX));
                        bool printable = n > 0;
                        for (size_t i = 0; i < n; i++)
                                if (desc[i] < 0x20 || desc[i] > 0x7e)
                                        printable = false;
                        if (printable) {
                                memcpy(ids->go, desc, n);
                                ids->go[n] = 0;
                        }
                }
                off = next;
        }
}

int ep_elf_build_ids(EpElfFile *f, EpBuildIds *ret) {
        EpBuildIds ids = {};
        size_t phnum;

        if (f->changed)
                return -EIO;

        /* Program headers first: they survive strip --strip-section-headers. */
        if (elf_getphdrnum(f->elf, &phnum) == 0)
                for (size_t i = 0; i < phnum; i++) {
                        GElf_Phdr ph;

                        if (!gelf_getphdr(f->elf, (int) i, &ph) || ph.p_type != PT_NOTE)
                                continue;
                        if (ph.p_offset > f->map_size || ph.p_filesz > f->map_size - ph.p_offset)
                                continue;
                        Elf_Data *d = elf_getdata_rawchunk(f->elf, (int64_t) ph.p_offset, ph.p_filesz,
                                                           ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
                        scan_notes(d, &ids);
                }

        if (ids.gnu_len == 0 || ids.go[0] == 0) {
                Elf_Scn *scn = NULL;
                while ((scn = elf_nextscn(f->elf, scn))) {
                        GElf_Shdr sh;
                        if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_NOTE)
                                scan_notes(elf_getdata(scn, NULL), &ids);
                }
        }

        if (check_fault(f) < 0)
                return -EIO;
        *ret = ids;
        return 0;
}

/* ---- sections ---- */

bool ep_elf_next_section(EpElfFile *f, Elf_Scn **scn, GElf_Shdr *ret_shdr, const char **ret_name) {
        size_t shstrndx;

        if (f->changed || elf_getshdrstrndx(f->elf, &shstrndx) < 0)
                return false;
        while ((*scn = elf_nextscn(f->elf, *scn))) {
                GElf_Shdr sh;
                const char *name;

                if (!gelf_getshdr(*scn, &sh))
                        continue;
                name = elf_strptr(f->elf, shstrndx, sh.sh_name);
                if (check_fault(f) < 0)
                        return false;
                *ret_shdr = sh;
                *ret_name = name ?: "";
                return true;
        }
        return false;
}

Elf_Scn *ep_elf_section(EpElfFile *f, const char *name, GElf_Shdr *ret_shdr) {
        Elf_Scn *scn = NULL;
        const char *n;
        GElf_Shdr sh;

        while (ep_elf_next_section(f, &scn, &sh, &n))
                if (streq(n, name)) {
                        if (ret_shdr)
                                *ret_shdr = sh;
                        return scn;
                }
        return NULL;
}

int ep_elf_debuglink(EpElfFile *f, char **ret_name, uint32_t *ret_crc) {
        GElf_Shdr sh;
        Elf_Scn *scn = ep_elf_section(f, ".gnu_debuglink", &sh);
        Elf_Data *data;

        if (!scn || sh.sh_type == SHT_NOBITS)
                return -ENOENT;
        data = elf_rawdata(scn, NULL);
        if (!data || !data->d_buf || data->d_size < 8)
                return check_fault(f) ?: -ENOENT;

        /* NUL-terminated name, padded to 4 bytes, then the CRC in the file's byte order. */
        size_t len = strnlen(data->d_buf, data->d_size);
        size_t crc_off = (len + 4) & ~(size_t) 3;
        if (len == 0 || len >= 256 || crc_off + 4 > data->d_size)
                return -ENOENT;

        uint8_t b[4];
        memcpy(b, (const uint8_t *) data->d_buf + crc_off, 4);
        GElf_Ehdr eh;
        if (!gelf_getehdr(f->elf, &eh))
                return -ENOENT;
        uint32_t crc = eh.e_ident[EI_DATA] == ELFDATA2MSB ?
                (uint32_t) b[0] << 24 | (uint32_t) b[1] << 16 | (uint32_t) b[2] << 8 | b[3] :
                (uint32_t) b[3] << 24 | (uint32_t) b[2] << 16 | (uint32_t) b[1] << 8 | b[0];

        char *name = strndup(data->d_buf, len);
        if (!name)
                return -ENOMEM;
        if (check_fault(f) < 0) {
                free(name);
                return -EIO;
        }
        *ret_name = name;
        *ret_crc = crc;
        return 0;
}
