/* SPDX-License-Identifier: MIT */
#pragma once

/* One ELF file opened for symbolization: file offset → ELF virtual address through the PT_LOAD
 * program headers, the function covering an address from .symtab (else .dynsym), and the
 * GNU / Go build IDs. The file is mapped read-only-shared-with-the-page-cache (copy-on-write
 * private mapping, never copied whole) and parsed with libelf. Everything read from it is
 * untrusted: malformed files give -ENOEXEC, a file truncated while mapped gives -EIO (see
 * sigbus.h); neither crashes.
 *
 * Errors: -ENOEXEC not a usable ELF, -EIO the file changed under us, -ENOENT nothing covers
 * the address, -ENOMEM. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <gelf.h>
#include <libelf.h>

#include "macro.h"
#include "wire.h"

#define EP_GO_BUILD_ID_MAX 128  /* real ones are 83 characters (4 × 20 base64 + 3 '/') */
#define EP_SYMBOL_NAME_MAX 16384 /* longer names are cut (mangled C++ can be long) */

typedef struct EpElfFile EpElfFile;

typedef struct EpBuildIds {
        uint8_t gnu[EP_BUILD_ID_MAX];
        size_t gnu_len;                   /* 0: none */
        char go[EP_GO_BUILD_ID_MAX + 1];  /* NUL-terminated, "" when none */
} EpBuildIds;

/* Takes ownership of fd (closed on failure, else kept until ep_elf_free()). */
int ep_elf_open(int fd, EpElfFile **ret);
EpElfFile *ep_elf_free(EpElfFile *f);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpElfFile *, ep_elf_free);

/* The libelf handle and the mapped image, for later parsers (stack deltas, DWARF) living in
 * this daemon. Reads through them must be followed by ep_elf_check() to notice truncation. */
Elf *ep_elf_handle(EpElfFile *f);
size_t ep_elf_size(const EpElfFile *f);
/* What the open file keeps resident for its symbols (for the resolver's budget of open files):
 * the symbol table read in full, its string table, our 16 bytes a function. The rest of the
 * mapping is resident only where read: DWARF, charged to its own handle (dwarf-lines.h),
 * whose pages are dropped from this mapping when the handle closes. */
size_t ep_elf_kept_bytes(EpElfFile *f);
/* Drops the pages of .debug_* sections of image, a mapping of f's whole file (NULL: f's own):
 * they are read again from the page cache when needed, so what a DWARF handle read, or the
 * compressed bytes it inflated, stops counting in the symbolizer's memory. Only whole pages
 * inside a section: the headers libdw may rewrite in a private image are never dropped. */
void ep_elf_drop_debug_pages(EpElfFile *f, void *image);
/* The read-only descriptor the file was opened from (owned by f), for a second, private
 * mapping: libdw inflates compressed sections by rewriting section headers in the image it
 * reads, which must not be the one ep_elf_lookup() reads. */
int ep_elf_fd(const EpElfFile *f);
/* -EIO once the file was seen to change under us (sticky), else 0. */
int ep_elf_check(EpElfFile *f);

int ep_elf_offset_to_vaddr(EpElfFile *f, uint64_t offset, uint64_t *ret_vaddr);

/* The function covering vaddr. *ret_name is a new string (cut at EP_SYMBOL_NAME_MAX),
 * *ret_sym_addr the symbol's start (either may be NULL). Symbols are read on first use. */
int ep_elf_lookup(EpElfFile *f, uint64_t vaddr, char **ret_name, uint64_t *ret_sym_addr);
/* The same, but only when the covering symbol is global or weak (-ENOENT otherwise): the
 * name the function is exported and called by. */
int ep_elf_lookup_public(EpElfFile *f, uint64_t vaddr, char **ret_name, uint64_t *ret_sym_addr);
/* Number of usable function symbols (loading them if needed), and which table they came
 * from (".symtab", ".dynsym" or ""). */
int ep_elf_symbol_count(EpElfFile *f, size_t *ret_count, const char **ret_table);

int ep_elf_build_ids(EpElfFile *f, EpBuildIds *ret);

/* The section after *scn (NULL: the first) into *scn, with its header and its name ("" when it
 * has none); false at the end, or once the file changed under us. */
bool ep_elf_next_section(EpElfFile *f, Elf_Scn **scn, GElf_Shdr *ret_shdr, const char **ret_name);
/* The section with that name (NULL when absent or unreadable); *ret_shdr filled when found. */
Elf_Scn *ep_elf_section(EpElfFile *f, const char *name, GElf_Shdr *ret_shdr);
/* .gnu_debuglink: *ret_name a new string (a plain file name), *ret_crc the CRC-32 of the debug
 * file. -ENOENT when there is none or it is malformed. */
int ep_elf_debuglink(EpElfFile *f, char **ret_name, uint32_t *ret_crc);

/* State other modules keep per file (a DWARF handle, the separate debug file), destroyed with
 * the file, before the file is unmapped. Setting replaces (and destroys) the previous one. */
void *ep_elf_userdata(EpElfFile *f);
void ep_elf_set_userdata(EpElfFile *f, void *data, void (*destroy)(void *data));
