/* SPDX-License-Identifier: MIT */
#pragma once

/* Source lines and inline chains from DWARF (.debug_info, .debug_line) through libdw: for an
 * ELF virtual address, the chain of functions whose code is there, innermost first — each
 * DW_TAG_inlined_subroutine, then the DW_TAG_subprogram that contains them. The innermost
 * entry's file:line comes from the line table; each caller's from the DW_AT_call_file /
 * DW_AT_call_line of the inlined callee below it.
 *
 * Memory is bounded although files can be huge: the file is read through a mapping (libdw
 * reads lazily; nothing is copied), at most a few Dwarf handles are open at once (an LRU over
 * all files, separate from the resolver's file LRU), each handle is reopened once what it
 * caches (units and line tables read so far, inflated compressed sections) is estimated above
 * a budget, and a unit or line program above a size cap is not read at all. Single-threaded,
 * like the resolver that uses it.
 *
 * Errors (statuses, never crashes): -ENOENT no DWARF covers the address (or the file has none),
 * -ENOEXEC malformed DWARF, -E2BIG over a cap, -EIO the file changed under us, -ENOMEM. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "elf-symbols.h"
#include "resolver.h"

#define EP_DWARF_MAX_CHAIN 64 /* inline depth reported at most (outermost entries dropped) */

typedef struct EpDwarfLimits {
        unsigned max_open;         /* Dwarf handles open at once */
        uint64_t max_handle_bytes; /* estimated bytes one handle may keep before it is reopened */
        uint64_t max_total_bytes;  /* ... all open handles together (more: the oldest are closed) */
        uint64_t max_unit_bytes;   /* a compilation unit or line program bigger than this is skipped */
        uint64_t max_inflated;     /* compressed debug sections of one file, once inflated */
} EpDwarfLimits;

#define EP_DWARF_LIMITS_DEFAULT                         \
        ((EpDwarfLimits) {                              \
                .max_open = 8,                          \
                .max_handle_bytes = UINT64_C(24) << 20, \
                .max_total_bytes = UINT64_C(32) << 20,  \
                .max_unit_bytes = UINT64_C(64) << 20,   \
                .max_inflated = UINT64_C(512) << 20,    \
        })

/* NULL: the defaults. Applies to handles opened from now on (and closes the excess). */
void ep_dwarf_set_limits(const EpDwarfLimits *limits);
/* Dwarf handles open right now, and how often one was opened (for tests and benchmarks). */
unsigned ep_dwarf_open_handles(void);
uint64_t ep_dwarf_opens(void);
/* Drops what the open handles read of their files' mappings (not what libdw allocated): the
 * pages are read again, from the page cache, by the next lookup that needs them. */
void ep_dwarf_drop_pages(void);
/* Closes the handles no lookup used for idle_ns (reopened when one is needed again): the
 * working set of a steady state is a few files, not every file a burst of new code touched.
 * A closed handle gives back everything above, inflated sections included. A handle reopened
 * after such a close waits twice as long from then on (up to 16 × idle_ns). now_ns is
 * CLOCK_MONOTONIC (lookups stamp the handles with it). Returns how many handles stay open. */
unsigned ep_dwarf_close_idle(uint64_t now_ns, uint64_t idle_ns);

/* Whether f carries DWARF (a .debug_info with contents; not the NOBITS stub of a stripped file). */
bool ep_dwarf_present(EpElfFile *f);

typedef struct EpDwarf EpDwarf;

/* The DWARF of elf, which must outlive the EpDwarf. Nothing is read yet. */
int ep_dwarf_new(EpElfFile *elf, EpDwarf **ret);
EpDwarf *ep_dwarf_free(EpDwarf *d);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpDwarf *, ep_dwarf_free);

/* The inline chain at addr, innermost first: *ret_lines (new array of *ret_n >= 1 lines,
 * every string owned; free with ep_sym_lines_free()). A function that DWARF does not name is
 * NULL (the caller may fill it from a symbol table); unknown file is "", unknown line 0.
 * Names are demangled. */
int ep_dwarf_lines(EpDwarf *d, uint64_t addr, EpSymLine **ret_lines, size_t *ret_n);

void ep_sym_lines_free(EpSymLine *lines, size_t n);
