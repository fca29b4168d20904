/* SPDX-License-Identifier: MIT */
#pragma once

/* Everything native symbolization knows about one opened ELF file beyond its own symbol
 * tables: its separate debug file and the DWARF of whichever of the two has it. Kept with the
 * EpElfFile (ep_elf_set_userdata()), so it lives and dies with the resolver's file LRU entry;
 * the Dwarf handles themselves are bounded separately (dwarf-lines.h).
 *
 * Sources, in order: PLT stubs named after the function they call (elf-plt.h); the DWARF
 * inline chain (file, else its debug file); symbol tables
 * (.symtab, the debug file's .symtab, .dynsym) for the function when DWARF has none or does not
 * cover the address. Every name is demangled. */

#include <stddef.h>
#include <stdint.h>

#include "elf-symbols.h"
#include "resolver.h"

/* Names the code at ELF address vaddr (already moved into the call for return addresses).
 * path_hint: where the process maps the file (may be NULL), for .gnu_debuglink lookups.
 * 0 and *ret_lines, *ret_n (innermost first, n >= 1, each function set; free with
 * ep_sym_lines_free()); -ENOENT nothing names it; -ENOEXEC/-EIO the file itself is bad;
 * -ENOMEM. Problems in DWARF or a debug file are not errors: the next source is used. */
int ep_native_symbolize(EpElfFile *elf, const char *path_hint, uint64_t vaddr, EpSymLine **ret_lines, size_t *ret_n);

typedef enum EpNativeDebug {
        EP_NATIVE_DEBUG_NOT_NEEDED, /* the file's own .symtab and DWARF: debug files change nothing */
        EP_NATIVE_DEBUG_NONE,       /* needed, looked for, not found */
        EP_NATIVE_DEBUG_FOUND,
} EpNativeDebug;

typedef struct EpNativeDebugInfo {
        EpNativeDebug outcome;
        const char *search_path; /* the path hint the search used, NULL: build ID only */
        const char *debug_path;  /* EP_NATIVE_DEBUG_FOUND: the debug file */
} EpNativeDebugInfo;

/* What ep_native_symbolize() answers for elf are computed with: looks for the debug file
 * first, as it would for path_hint, when that was not done yet. The strings belong to elf
 * (valid until the next call for it, or until it is freed). 0, or -ENOMEM. */
int ep_native_debug_info(EpElfFile *elf, const char *path_hint, EpNativeDebugInfo *ret);
