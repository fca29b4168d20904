/* SPDX-License-Identifier: MIT */
#pragma once

/* The stubs of an x86-64 ELF file's procedure linkage table (.plt, .plt.sec, .plt.got), each
 * named after the function it jumps to, as perf and objdump name them ("clock_gettime@plt"):
 * no symbol table covers them, yet a sample lands in one whenever a program calls into a
 * shared library. A stub is tied to its function by the GOT slot its indirect jump reads (the
 * relocation at that slot names the symbol; an IRELATIVE one names the ifunc resolver at its
 * addend), or, for a lazy-binding stub without that jump, by the relocation index it pushes.
 * The first .plt entry, which calls the dynamic linker's resolver, is named ".plt".
 *
 * Only the instruction shapes linkers emit are decoded (an optional endbr64 and bnd prefix,
 * then jmp *disp32(%rip), push imm32 or push disp32(%rip)); anything else stays unnamed. The
 * file is untrusted: every count is bounded, reads go through libelf on the guarded mapping
 * (ep_elf_check() after them). Other machines have no stubs here (an empty table). */

#include <stdint.h>

#include "elf-symbols.h"
#include "macro.h"

typedef struct EpPltTable EpPltTable;

/* The file's stubs (an empty table when it has none). -EIO: the file changed under us;
 * -ENOMEM. */
int ep_plt_table_read(EpElfFile *f, EpPltTable **ret);
EpPltTable *ep_plt_table_free(EpPltTable *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpPltTable *, ep_plt_table_free);

/* The name of the stub covering vaddr (a new string, C++ and Rust names demangled), -ENOENT
 * when none does, -ENOMEM. */
int ep_plt_table_lookup(const EpPltTable *t, uint64_t vaddr, char **ret_name);
/* Stubs known, for tests and the memory budget. */
size_t ep_plt_table_size(const EpPltTable *t);
