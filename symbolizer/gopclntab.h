/* SPDX-License-Identifier: MIT */
#pragma once

/* Go's pc-line table (".gopclntab"): the function, file and line of an address in a Go
 * program, inlined calls included. The Go linker writes it into every Go executable for the
 * runtime's own tracebacks, so it survives `strip` and `-ldflags=-s -w`.
 *
 * Layouts read (little-endian, 8-byte pointers only; the magic names the layout):
 *   0xfffffffa  Go 1.16–1.17: function table of absolute (entry, offset) pairs; funcdata are
 *               absolute addresses
 *   0xfffffff0  Go 1.18–1.19: entries relative to the header's textStart; funcdata are
 *               offsets from the module's go.func.* symbol (moduledata.gofunc)
 *   0xfffffff1  Go 1.20+:     as 1.18, plus startLine in each function record and a shorter
 *               inline-tree entry
 * Anything else is -ENOTSUP (older Go, big-endian, 32-bit) or -ENOEXEC (not a table).
 *
 * Nothing is copied: an EpGoTable points into memory the caller keeps alive and unchanged
 * (in the symbolizer, the mapped ELF file). All of it is untrusted: every read is bounds-checked
 * at lookup time, not only at open, so a table that passed the header checks still cannot make
 * a lookup read outside the given memory. A malformed table gives -ENOEXEC, never a crash. */

#include <gelf.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

#define EP_GO_MAX_INLINE_DEPTH 64 /* inlined calls followed per address (cycles end here) */
#define EP_GO_MAX_FRAMES (EP_GO_MAX_INLINE_DEPTH + 1)
#define EP_GO_MAX_FUNCS (1u << 24)  /* functions per table (Kubernetes-sized binaries have ~10^5) */
#define EP_GO_MAX_REGIONS 32        /* memory ranges searched for inline trees */

typedef enum EpGoVersion {
        EP_GO_1_16 = 116, /* also 1.17 */
        EP_GO_1_18 = 118, /* also 1.19 */
        EP_GO_1_20 = 120, /* and later */
} EpGoVersion;

typedef struct EpGoTable EpGoTable;

/* A range of the program's memory as the linker laid it out (ELF virtual addresses). */
typedef struct EpGoRegion {
        uint64_t vaddr;
        const uint8_t *data;
        size_t size;
} EpGoRegion;

/* One logical frame. The strings point into the table (NUL-terminated there). */
typedef struct EpGoFrame {
        const char *function;
        const char *file; /* "" when unknown */
        uint32_t line;    /* 0 when unknown */
} EpGoFrame;

/* Checks the header of the table at data (size bytes, loaded at vaddr). Returns 0, -ENOEXEC
 * (not a table, or inconsistent), -ENOTSUP (a layout not read here), -ENOMEM. */
int ep_gopclntab_open(const uint8_t *data, size_t size, uint64_t vaddr, EpGoTable **ret);
EpGoTable *ep_gopclntab_free(EpGoTable *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpGoTable *, ep_gopclntab_free);

/* Where inline trees can be read: gofunc is the module's go.func.* address (Go 1.18+; unused
 * for 1.16), regions the program memory it and the 1.16 funcdata pointers refer to (copied,
 * at most EP_GO_MAX_REGIONS). Without this, lookups return the outermost function only. */
void ep_gopclntab_set_funcdata(EpGoTable *t, uint64_t gofunc, const EpGoRegion *regions, size_t n_regions);

EpGoVersion ep_gopclntab_version(const EpGoTable *t);
size_t ep_gopclntab_func_count(const EpGoTable *t);
/* Entry address of function i (in table order), or -ENOEXEC / -ERANGE. */
int ep_gopclntab_func_entry(const EpGoTable *t, size_t i, uint64_t *ret_entry);

/* Frames at pc, innermost (inlined) first, the function containing pc last; at most
 * max_frames (EP_GO_MAX_FRAMES is always enough). *ret_entry (may be NULL) is that function's
 * entry. Returns 0, -ENOENT (no function covers pc), -ENOEXEC (malformed table). */
int ep_gopclntab_lookup(const EpGoTable *t, uint64_t pc, EpGoFrame *frames, size_t max_frames, size_t *ret_n,
                        uint64_t *ret_entry);

/* The table of an ELF executable: the .gopclntab section (stripped binaries keep section
 * headers; without them the file is not recognised), with the memory of its allocated
 * sections for inline trees and, for Go 1.18+, go.func.* found through the module data that
 * points at the table. image/image_size is the file as mapped, which must outlive the table.
 * Returns 0, -ENOENT (no Go table: not a Go program), -ENOEXEC / -ENOTSUP as _open(),
 * -ENOMEM. */
int ep_gopclntab_from_elf(Elf *elf, const uint8_t *image, size_t image_size, EpGoTable **ret);
