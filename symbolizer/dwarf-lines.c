/* SPDX-License-Identifier: MIT */
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "clock.h"
#include "demangle.h"
#include "dwarf-lines.h"
#include "log.h"
#include "sigbus.h"

/* Estimates of what libdw keeps, to charge a handle's budget (they need not be exact, only
 * proportional): a line-table row, and a unit's DIEs and abbreviations per byte of unit. */
#define LINE_ROW_BYTES 48u
#define MAX_SEEN_UNITS 8192u    /* units charged per handle before it is reopened anyway */
#define MAX_CU_RANGES (1u << 20) /* our own address → unit table, when .debug_aranges is missing */
#define MAX_SCOPE_DEPTH 256u       /* nested scopes followed in one unit */
#define MAX_DIES_VISITED (1u << 22) /* DIEs one lookup may walk */

/* An address range and the DIE it belongs to (a unit, or a function). */
typedef struct CuRange {
        uint64_t lo, hi;
        Dwarf_Off die;
} CuRange;

/* The functions of one unit, by address: found once by walking the unit, so a lookup walks
 * only the DIEs of the function at the address (libdw finds a DIE's sibling by reading all its
 * children, so walking the unit per lookup costs the whole unit every time). */
typedef struct UnitIndex {
        Dwarf_Off unit;
        CuRange *funcs; /* sorted by lo */
        size_t n_funcs;
} UnitIndex;

struct EpDwarf {
        EpElfFile *elf;
        int error; /* < 0: unusable for good (no DWARF, malformed, too big) */

        /* While open: */
        Dwarf *dbg;
        Elf *own_elf; /* a private image when sections are compressed, else NULL */
        void *own_map;
        size_t own_size;
        int own_guard;
        uint64_t cost;
        uint64_t used_ns; /* CLOCK_MONOTONIC of the last lookup */
        bool pages_dropped; /* no lookup since the last ep_dwarf_drop_pages() */
        bool closed_idle;   /* the last close was for idleness */
        uint8_t idle_shift; /* it stays open idle_ns << idle_shift: doubled at each reopen */

        UnitIndex *seen; /* units read so far, sorted by offset */
        size_t n_seen;
        CuRange *cus;
        size_t n_cus;
        bool cus_built;

        EpDwarf *prev, *next; /* LRU among open handles, most recent first */
};

static struct {
        EpDwarfLimits limits;
        bool limits_set;
        EpDwarf *head, *tail;
        unsigned n_open;
        uint64_t opens;
} lru;

static const EpDwarfLimits *limits(void) {
        if (!lru.limits_set) {
                lru.limits = EP_DWARF_LIMITS_DEFAULT;
                lru.limits_set = true;
        }
        return &lru.limits;
}

unsigned ep_dwarf_open_handles(void) {
        return lru.n_open;
}

uint64_t ep_dwarf_opens(void) {
        return lru.opens;
}

void ep_dwarf_drop_pages(void) {
        for (EpDwarf *d = lru.head; d; d = d->next)
                if (!d->pages_dropped) {
                        ep_elf_drop_debug_pages(d->elf, d->own_map);
                        d->pages_dropped = true;
                }
}

static void dwarf_close(EpDwarf *d);

/* A handle reopened after it was closed for idleness stays open twice as long from then on, up
 * to 16 times: reopening inflates and indexes again (libc's debug file: ~50 ms), so a file whose
 * new addresses come just less often than the idle time would cost that much every time. */
#define IDLE_SHIFT_MAX 4

unsigned ep_dwarf_close_idle(uint64_t now_ns, uint64_t idle_ns) {
        for (EpDwarf *d = lru.tail, *prev; d; d = prev) {
                uint64_t limit = idle_ns > UINT64_MAX >> d->idle_shift ? UINT64_MAX : idle_ns << d->idle_shift;

                prev = d->prev;
                if (now_ns >= d->used_ns && now_ns - d->used_ns >= limit) {
                        dwarf_close(d);
                        d->closed_idle = true;
                }
        }
        return lru.n_open;
}

void ep_sym_lines_free(EpSymLine *lines, size_t n) {
        if (!lines)
                return;
        for (size_t i = 0; i < n; i++) {
                free(lines[i].function);
                free(lines[i].file);
        }
        free(lines);
}

/* ---- open handles ---- */

static void lru_unlink(EpDwarf *d) {
        if (d->prev)
                d->prev->next = d->next;
        else if (lru.head == d)
                lru.head = d->next;
        if (d->next)
                d->next->prev = d->prev;
        else if (lru.tail == d)
                lru.tail = d->prev;
        d->prev = d->next = NULL;
}

static void lru_push_front(EpDwarf *d) {
        d->next = lru.head;
        d->prev = NULL;
        if (lru.head)
                lru.head->prev = d;
        lru.head = d;
        if (!lru.tail)
                lru.tail = d;
}

static void dwarf_close(EpDwarf *d) {
        if (!d->dbg)
                return;
        dwarf_end(d->dbg);
        d->dbg = NULL;
        if (!d->own_map)
                ep_elf_drop_debug_pages(d->elf, NULL); /* what it read of the shared image */
        if (d->own_elf)
                elf_end(d->own_elf);
        d->own_elf = NULL;
        if (d->own_map)
                munmap(d->own_map, d->own_size);
        d->own_map = NULL;
        ep_sigbus_unregister(d->own_guard);
        d->own_guard = -1;
        for (size_t i = 0; i < d->n_seen; i++)
                free(d->seen[i].funcs);
        free(d->seen);
        d->seen = NULL;
        d->n_seen = 0;
        free(d->cus);
        d->cus = NULL;
        d->n_cus = 0;
        d->cus_built = false;
        d->cost = 0;
        lru_unlink(d);
        lru.n_open--;
}

static void lru_trim(unsigned keep) {
        while (lru.n_open > keep && lru.tail)
                dwarf_close(lru.tail);
}

/* Closes the least recently used handles but keep while the open handles' estimates add up
 * to more than max_total_bytes: eight handles of up to max_handle_bytes each were more than
 * the symbolizer's whole share of memory. */
static void lru_trim_bytes(const EpDwarf *keep) {
        uint64_t total = 0;

        for (const EpDwarf *d = lru.head; d; d = d->next)
                total += d->cost;
        for (EpDwarf *d = lru.tail, *prev; d && total > limits()->max_total_bytes; d = prev) {
                prev = d->prev;
                if (d == keep)
                        continue;
                total -= d->cost;
                dwarf_close(d);
        }
}

void ep_dwarf_set_limits(const EpDwarfLimits *l) {
        lru.limits = l ? *l : EP_DWARF_LIMITS_DEFAULT;
        if (lru.limits.max_open == 0)
                lru.limits.max_open = 1;
        lru.limits_set = true;
        lru_trim(lru.limits.max_open);
}

bool ep_dwarf_present(EpElfFile *f) {
        GElf_Shdr sh;

        if (ep_elf_section(f, ".debug_info", &sh) && sh.sh_type != SHT_NOBITS && sh.sh_size > 0)
                return true;
        /* Old-style compressed sections. */
        return ep_elf_section(f, ".zdebug_info", &sh) && sh.sh_type != SHT_NOBITS && sh.sh_size > 0;
}

/* What the compressed debug sections of f take once inflated (0: none compressed). */
static int inflated_size(EpElfFile *f, uint64_t *ret) {
        Elf *elf = ep_elf_handle(f);
        Elf_Scn *scn = NULL;
        size_t shstrndx;
        uint64_t total = 0;

        if (elf_getshdrstrndx(elf, &shstrndx) < 0)
                return -ENOEXEC;
        while ((scn = elf_nextscn(elf, scn))) {
                GElf_Shdr sh;
                const char *name;

                if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
                        continue;
                name = elf_strptr(elf, shstrndx, sh.sh_name);
                if (!name)
                        continue;
                if ((sh.sh_flags & SHF_COMPRESSED) && startswith(name, ".debug_")) {
                        GElf_Chdr ch;
                        if (!gelf_getchdr(scn, &ch))
                                return -ENOEXEC;
                        total += ch.ch_size;
                } else if (startswith(name, ".zdebug_")) {
                        /* "ZLIB" and the inflated size, 8 bytes big-endian. */
                        Elf_Data *data = elf_rawdata(scn, NULL);
                        if (!data || data->d_size < 12 || memcmp(data->d_buf, "ZLIB", 4) != 0)
                                return -ENOEXEC;
                        uint64_t v = 0;
                        for (int i = 0; i < 8; i++)
                                v = v << 8 | ((const uint8_t *) data->d_buf)[4 + i];
                        total += v;
                } else
                        continue;
                if (total > UINT64_MAX / 2)
                        return -E2BIG;
        }
        *ret = total;
        return ep_elf_check(f);
}

/* libdw inflates compressed sections by rewriting their headers in the image it reads: give
 * it a private mapping of its own, so the symbol reader's image is never touched and closing
 * the handle frees what was inflated. */
static int map_private_image(EpDwarf *d) {
        size_t size = ep_elf_size(d->elf);
        void *p;
        int r;

        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, ep_elf_fd(d->elf), 0);
        if (p == MAP_FAILED)
                return -errno;
        d->own_map = p;
        d->own_size = size;
        r = ep_sigbus_register(p, size);
        if (r < 0)
                return r;
        d->own_guard = r;
        d->own_elf = elf_memory(p, size);
        return d->own_elf ? 0 : -ENOEXEC;
}

static int check_changed(EpDwarf *d) {
        int r = ep_elf_check(d->elf);

        if (r == 0 && d->own_guard >= 0 && ep_sigbus_faulted(d->own_guard))
                r = -EIO;
        return r;
}

/* Undoes a dwarf_open() that failed half way. */
static int open_failed(EpDwarf *d, int r) {
        if (d->own_elf)
                elf_end(d->own_elf);
        d->own_elf = NULL;
        if (d->own_map)
                munmap(d->own_map, d->own_size);
        d->own_map = NULL;
        ep_sigbus_unregister(d->own_guard);
        d->own_guard = -1;
        lru_unlink(d);
        lru.n_open--;
        if (r != -ENOMEM)
                d->error = r; /* do not try again with every lookup */
        return r;
}

static int dwarf_open(EpDwarf *d) {
        uint64_t inflated = 0;
        int r;

        if (d->error < 0)
                return d->error;
        d->used_ns = ep_clock_ns(CLOCK_MONOTONIC);
        d->pages_dropped = false;
        if (d->dbg) {
                lru_unlink(d);
                lru_push_front(d);
                return 0;
        }

        r = inflated_size(d->elf, &inflated);
        if (r == -EIO || r == -ENOMEM)
                return r;
        if (r < 0 || inflated > limits()->max_inflated) {
                log_debug("Compressed DWARF sections %s (%" PRIu64 " bytes inflated): not reading them.",
                          r < 0 ? "malformed" : "too big", inflated);
                return d->error = r < 0 ? r : -E2BIG;
        }

        lru_trim(limits()->max_open - 1);
        d->own_guard = -1;
        lru.n_open++;
        lru_push_front(d);
        if (inflated > 0) {
                r = map_private_image(d);
                if (r < 0)
                        return open_failed(d, r);
        }

        d->dbg = dwarf_begin_elf(d->own_elf ?: ep_elf_handle(d->elf), DWARF_C_READ, NULL);
        if (!d->dbg) {
                log_debug("Unusable DWARF: %s", dwarf_errmsg(-1));
                return open_failed(d, check_changed(d) ?: -ENOEXEC);
        }
        r = check_changed(d);
        if (r < 0) {
                dwarf_close(d);
                return d->error = r;
        }
        d->cost = inflated;
        lru.opens++;
        if (d->closed_idle && d->idle_shift < IDLE_SHIFT_MAX)
                d->idle_shift++;
        d->closed_idle = false;
        /* libdw inflated the compressed sections into buffers of its own as it opened them:
         * the compressed bytes it read (a third of a file like libc's debug file) are not
         * needed any more. */
        if (d->own_map)
                ep_elf_drop_debug_pages(d->elf, d->own_map);
        return 0;
}

int ep_dwarf_new(EpElfFile *elf, EpDwarf **ret) {
        EpDwarf *d = calloc(1, sizeof(EpDwarf));

        if (!d)
                return -ENOMEM;
        d->elf = elf;
        d->own_guard = -1;
        *ret = d;
        return 0;
}

EpDwarf *ep_dwarf_free(EpDwarf *d) {
        if (!d)
                return NULL;
        dwarf_close(d);
        free(d);
        return NULL;
}

/* ---- finding the unit ---- */

static int cu_range_compare(const void *a, const void *b) {
        const CuRange *x = a, *y = b;
        return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Address ranges of every unit, for files without (complete) .debug_aranges: rustc and clang
 * do not write them by default. Built once per open handle. */
static int build_cu_ranges(EpDwarf *d) {
        Dwarf_Off off = 0, next;
        size_t hsize, cap = 0;

        d->cus_built = true;
        while (dwarf_next_unit(d->dbg, off, &next, &hsize, NULL, NULL, NULL, NULL, NULL, NULL) == 0) {
                Dwarf_Die cu;
                Dwarf_Addr base, lo, hi;
                ptrdiff_t o = 0;

                if (next <= off)
                        break;
                if (dwarf_offdie(d->dbg, off + hsize, &cu) && dwarf_tag(&cu) != DW_TAG_type_unit)
                        while ((o = dwarf_ranges(&cu, o, &base, &lo, &hi)) > 0) {
                                if (hi <= lo)
                                        continue;
                                if (d->n_cus >= MAX_CU_RANGES)
                                        goto done;
                                if (d->n_cus == cap) {
                                        size_t ncap = cap ? cap * 2 : 64;
                                        CuRange *t = reallocarray(d->cus, ncap, sizeof(CuRange));
                                        if (!t)
                                                return -ENOMEM;
                                        d->cus = t;
                                        cap = ncap;
                                }
                                d->cus[d->n_cus++] = (CuRange) { lo, hi, dwarf_dieoffset(&cu) };
                        }
                off = next;
        }
done:
        if (d->n_cus > 0)
                qsort(d->cus, d->n_cus, sizeof(CuRange), cu_range_compare);
        d->cost += d->n_cus * sizeof(CuRange);
        return 0;
}


/* The range holding addr in ranges sorted by start: the latest start at or below addr is the
 * innermost of nested ones; a few earlier ones are looked at for an enclosing range when that
 * one ends before addr. NULL when none holds it. */
static const CuRange *range_find(const CuRange *ranges, size_t n, uint64_t addr) {
        size_t lo = 0, hi = n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (ranges[mid].lo <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        for (size_t i = lo, k = 0; i > 0 && k < 16; i--, k++)
                if (addr < ranges[i - 1].hi)
                        return &ranges[i - 1];
        return NULL;
}
static int find_unit(EpDwarf *d, uint64_t addr, Dwarf_Die *ret) {
        int r;

        if (dwarf_addrdie(d->dbg, addr, ret))
                return 0;

        if (!d->cus_built) {
                r = build_cu_ranges(d);
                if (r < 0)
                        return r;
        }
        const CuRange *c = range_find(d->cus, d->n_cus, addr);
        if (!c)
                return -ENOENT;
        return dwarf_offdie(d->dbg, c->die, ret) ? 0 : -ENOEXEC;
}

/* ---- functions of a unit ---- */

static bool code_scope(int tag) {
        return tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block ||
               tag == DW_TAG_entry_point || tag == DW_TAG_try_block || tag == DW_TAG_catch_block ||
               tag == DW_TAG_with_stmt;
}

static bool container(int tag) {
        return tag == DW_TAG_namespace || tag == DW_TAG_module || tag == DW_TAG_class_type ||
               tag == DW_TAG_structure_type || tag == DW_TAG_union_type || tag == DW_TAG_interface_type;
}


typedef struct Indexer {
        CuRange *funcs;
        size_t n, cap;
        unsigned visited;
} Indexer;

static int index_add(Indexer *x, Dwarf_Die *die) {
        Dwarf_Addr base, lo, hi;
        ptrdiff_t o = 0;

        while ((o = dwarf_ranges(die, o, &base, &lo, &hi)) > 0) {
                if (hi <= lo)
                        continue;
                if (x->n == x->cap) {
                        size_t ncap = x->cap ? x->cap * 2 : 64;
                        CuRange *t = reallocarray(x->funcs, ncap, sizeof(CuRange));
                        if (!t)
                                return -ENOMEM;
                        x->funcs = t;
                        x->cap = ncap;
                }
                x->funcs[x->n++] = (CuRange) { lo, hi, dwarf_dieoffset(die) };
        }
        return 0;
}

/* Every function with code under parent: inside namespaces and types (Rust functions, C++
 * members), and inside functions (nested functions, members of local classes). */
static int index_children(Indexer *x, Dwarf_Die *parent, unsigned depth) {
        Dwarf_Die child;
        int k, r;

        if (depth >= MAX_SCOPE_DEPTH)
                return 0;
        k = dwarf_child(parent, &child);
        if (k != 0)
                return k < 0 ? -ENOEXEC : 0;
        do {
                if (++x->visited > MAX_DIES_VISITED)
                        return -E2BIG;
                int tag = dwarf_tag(&child);
                if (tag == DW_TAG_subprogram || tag == DW_TAG_entry_point) {
                        r = index_add(x, &child);
                        if (r < 0)
                                return r;
                }
                if (tag == DW_TAG_subprogram || tag == DW_TAG_lexical_block || container(tag)) {
                        r = index_children(x, &child, depth + 1);
                        if (r < 0)
                                return r;
                }
        } while ((k = dwarf_siblingof(&child, &child)) == 0);
        return k < 0 ? -ENOEXEC : 0;
}

/* The index of the unit around cudie, built the first time: the unit's size is checked
 * against the cap and its estimated cost charged to the handle. *ret_new when just built. */
static int unit_index(EpDwarf *d, Dwarf_Die *cudie, UnitIndex **ret, bool *ret_new) {
        Dwarf_Off die_off = dwarf_dieoffset(cudie), rel = dwarf_cuoffset(cudie), next;
        size_t hsize, lo = 0, hi = d->n_seen;
        Indexer x = {};
        int r;

        *ret_new = false;
        if (rel > die_off)
                return -ENOEXEC;
        Dwarf_Off unit = die_off - rel;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (d->seen[mid].unit < unit)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo < d->n_seen && d->seen[lo].unit == unit) {
                *ret = &d->seen[lo];
                return 0;
        }

        if (dwarf_next_unit(d->dbg, unit, &next, &hsize, NULL, NULL, NULL, NULL, NULL, NULL) != 0 ||
            next <= unit)
                return -ENOEXEC;
        if (next - unit > limits()->max_unit_bytes)
                return -E2BIG;
        if (d->n_seen >= MAX_SEEN_UNITS)
                d->cost = UINT64_MAX; /* reopen after this lookup: it still gets its answer */

        r = index_children(&x, cudie, 0);
        if (r < 0) {
                free(x.funcs);
                return r;
        }
        if (x.n > 0)
                qsort(x.funcs, x.n, sizeof(CuRange), cu_range_compare);

        UnitIndex *t = reallocarray(d->seen, d->n_seen + 1, sizeof(UnitIndex));
        if (!t) {
                free(x.funcs);
                return -ENOMEM;
        }
        d->seen = t;
        memmove(&d->seen[lo + 1], &d->seen[lo], (d->n_seen - lo) * sizeof(UnitIndex));
        d->seen[lo] = (UnitIndex) { .unit = unit, .funcs = x.funcs, .n_funcs = x.n };
        d->n_seen++;
        if (d->cost != UINT64_MAX)
                d->cost += (next - unit) + x.cap * sizeof(CuRange);
        *ret = &d->seen[lo];
        *ret_new = true;
        return 0;
}

/* The function DIE whose code holds pc (the innermost when they nest), or -ENOENT. */
static int unit_function(EpDwarf *d, const UnitIndex *ui, uint64_t pc, Dwarf_Die *ret) {
        const CuRange *f = range_find(ui->funcs, ui->n_funcs, pc);
        if (!f)
                return -ENOENT;
        return dwarf_offdie(d->dbg, f->die, ret) ? 0 : -ENOEXEC;
}

/* ---- names and files ---- */

static char *die_name(Dwarf_Die *die) {
        Dwarf_Attribute a;
        const char *s = NULL;
        char *out = NULL;

        /* dwarf_attr_integrate follows DW_AT_abstract_origin and DW_AT_specification. */
        if (dwarf_attr_integrate(die, DW_AT_linkage_name, &a) || dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a))
                s = dwarf_formstring(&a);
        if (!s && dwarf_attr_integrate(die, DW_AT_name, &a))
                s = dwarf_formstring(&a);
        if (!s || !*s)
                return NULL;
        if (ep_demangle(s, &out) < 0)
                return NULL;
        return out;
}

static const char *comp_dir(Dwarf_Die *cudie) {
        Dwarf_Attribute a;
        return dwarf_attr(cudie, DW_AT_comp_dir, &a) ? dwarf_formstring(&a) : NULL;
}

/* A source file name as DWARF gives it, joined to the compilation directory when relative. */
static char *file_name(Dwarf_Die *cudie, const char *name) {
        const char *dir;
        char *out = NULL;

        if (!name || !*name)
                return strdup("");
        dir = name[0] == '/' ? NULL : comp_dir(cudie);
        if (!dir || !*dir)
                return strdup(name);
        return asprintf(&out, "%s/%s", dir, name) < 0 ? NULL : out;
}

static const char *call_file(Dwarf_Die *cudie, Dwarf_Die *die) {
        Dwarf_Attribute a;
        Dwarf_Word idx;
        Dwarf_Files *files;
        size_t n;

        if (!dwarf_attr(die, DW_AT_call_file, &a) || dwarf_formudata(&a, &idx) != 0)
                return NULL;
        if (dwarf_getsrcfiles(cudie, &files, &n) != 0 || idx >= n)
                return NULL;
        return dwarf_filesrc(files, idx, NULL, NULL);
}

static uint32_t call_line(Dwarf_Die *die) {
        Dwarf_Attribute a;
        Dwarf_Word v;

        if (!dwarf_attr(die, DW_AT_call_line, &a) || dwarf_formudata(&a, &v) != 0)
                return 0;
        return v > UINT32_MAX ? 0 : (uint32_t) v;
}

/* ---- the chain ---- */

typedef struct Chain {
        EpSymLine lines[EP_DWARF_MAX_CHAIN];
        size_t n;
} Chain;

static int chain_add(Chain *c, Dwarf_Die *cudie, char *function, const char *file, uint32_t line) {
        if (c->n >= EP_DWARF_MAX_CHAIN) {
                free(function);
                return 0; /* deeper than we report: keep the innermost part */
        }
        char *f = file_name(cudie, file);
        if (!f) {
                free(function);
                return -ENOMEM;
        }
        c->lines[c->n++] = (EpSymLine) { .function = function, .file = f, .line = line };
        return 0;
}

/* The code scopes containing pc inside one function, outermost first: into scopes that
 * contain pc (and through namespaces and types on the way, for nested functions). Our own
 * walk rather than dwarf_getscopes(): that one finds nothing in rustc's units here, walks the
 * whole unit per lookup, and continues into abstract definitions, which are not callers.
 * Bounded in depth and in DIEs visited. */
typedef struct Walk {
        uint64_t pc;
        unsigned visited;
        Dwarf_Die path[MAX_SCOPE_DEPTH];
        size_t n;
} Walk;

/* 1: found (appended to the path), 0: not under parent, < 0: malformed or over a bound. */
static int walk_children(Walk *w, Dwarf_Die *parent, unsigned depth) {
        Dwarf_Die child;
        int k, r;

        if (depth >= MAX_SCOPE_DEPTH)
                return 0;
        k = dwarf_child(parent, &child);
        if (k != 0)
                return k < 0 ? -ENOEXEC : 0;
        do {
                if (++w->visited > MAX_DIES_VISITED)
                        return -E2BIG;
                int tag = dwarf_tag(&child);
                if (code_scope(tag)) {
                        if (dwarf_haspc(&child, w->pc) > 0) {
                                if (w->n < MAX_SCOPE_DEPTH)
                                        w->path[w->n++] = child;
                                r = walk_children(w, &child, depth + 1);
                                return r < 0 && r != -ENOEXEC ? r : 1; /* a broken inner part: what we have */
                        }
                } else if (container(tag)) {
                        r = walk_children(w, &child, depth + 1);
                        if (r != 0)
                                return r;
                }
        } while ((k = dwarf_siblingof(&child, &child)) == 0);
        return k < 0 ? -ENOEXEC : 0;
}

static int walk_scopes(Dwarf_Die *cudie, Dwarf_Die *function, uint64_t addr, const char *file, uint32_t line,
                       Chain *c) {
        _cleanup_free_ Walk *w = calloc(1, sizeof(Walk));
        int r;

        if (!w)
                return -ENOMEM;
        w->pc = addr;
        w->path[w->n++] = *function;
        r = walk_children(w, function, 0);
        if (r < 0 && r != -ENOEXEC)
                return r; /* a broken inner part: the chain down to it */

        /* Innermost first: each inlined copy at the current position, then its call site
         * becomes the caller's position. */
        for (size_t i = w->n; i > 0; i--) {
                Dwarf_Die *s = &w->path[i - 1];

                switch (dwarf_tag(s)) {
                case DW_TAG_inlined_subroutine:
                        r = chain_add(c, cudie, die_name(s), file, line);
                        file = call_file(cudie, s);
                        line = call_line(s);
                        break;
                case DW_TAG_subprogram:
                case DW_TAG_entry_point:
                        return chain_add(c, cudie, die_name(s), file, line);
                default:
                        r = 0;
                        break;
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

static int lookup(EpDwarf *d, uint64_t addr, Chain *c) {
        Dwarf_Die cudie, function;
        Dwarf_Line *row;
        Dwarf_Lines *table;
        UnitIndex *ui;
        size_t n_rows = 0;
        const char *file = NULL;
        bool new_unit;
        int line = 0, r;

        r = find_unit(d, addr, &cudie);
        if (r < 0)
                return r;
        r = unit_index(d, &cudie, &ui, &new_unit);
        if (r < 0)
                return r;

        if (dwarf_getsrclines(&cudie, &table, &n_rows) == 0) {
                if (new_unit && d->cost != UINT64_MAX)
                        d->cost += n_rows * LINE_ROW_BYTES;
                row = dwarf_getsrc_die(&cudie, addr);
                if (row) {
                        file = dwarf_linesrc(row, NULL, NULL);
                        if (dwarf_lineno(row, &line) != 0 || line < 0)
                                line = 0;
                }
        }

        r = unit_function(d, ui, addr, &function);
        if (r == -ENOENT) {
                /* Code no function describes: a line without a name, if there is one. */
                if (line == 0)
                        return -ENOENT;
                return chain_add(c, &cudie, NULL, file, (uint32_t) line);
        }
        if (r < 0)
                return r;
        r = walk_scopes(&cudie, &function, addr, file, (uint32_t) line, c);
        if (r < 0)
                return r;
        return c->n > 0 ? 0 : -ENOENT;
}

int ep_dwarf_lines(EpDwarf *d, uint64_t addr, EpSymLine **ret_lines, size_t *ret_n) {
        Chain c = {};
        int r, k;

        r = dwarf_open(d);
        if (r < 0)
                return r;

        r = lookup(d, addr, &c);
        k = check_changed(d);
        if (k < 0)
                r = k;
        if (r >= 0) {
                EpSymLine *out = calloc(c.n, sizeof(EpSymLine));
                if (!out)
                        r = -ENOMEM;
                else {
                        memcpy(out, c.lines, c.n * sizeof(EpSymLine));
                        *ret_lines = out;
                        *ret_n = c.n;
                        c.n = 0;
                }
        }
        for (size_t i = 0; i < c.n; i++) {
                free(c.lines[i].function);
                free(c.lines[i].file);
        }

        /* Bounded memory: libdw keeps every unit and line table it read until dwarf_end(). */
        if (d->dbg && (r == -EIO || d->cost > limits()->max_handle_bytes))
                dwarf_close(d);
        lru_trim_bytes(d);
        if (r == -EIO)
                d->error = r;
        return r;
}
