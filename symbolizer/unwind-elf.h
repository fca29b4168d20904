/* SPDX-License-Identifier: MIT */
#pragma once

/* What unwind extraction needs from an ELF file, read with pread() through libelf
 * (ELF_C_READ): nothing is mapped, so a file truncated by its owner while we read it gives a
 * short read and an error, never SIGBUS, and extraction may run on any thread. Sections are
 * read only when asked for. */

#include <gelf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define EP_UNWIND_MAX_EXEC_SEGMENTS 16

typedef struct EpUnwindSegment {
        uint64_t vaddr, offset, filesz;
} EpUnwindSegment;

typedef struct EpUnwindElf {
        Elf *elf;
        int fd; /* not owned */
        uint64_t file_size;
        GElf_Ehdr ehdr;
        bool has_interp;
        EpUnwindSegment exec[EP_UNWIND_MAX_EXEC_SEGMENTS]; /* executable PT_LOADs inside the file */
        size_t n_exec;
} EpUnwindElf;

/* -ENOEXEC not an ELF file / broken headers, -EIO read error. fd stays the caller's. */
int ep_unwind_elf_open(int fd, EpUnwindElf *ret);
void ep_unwind_elf_close(EpUnwindElf *e);

/* The section called name (first match), or NULL. */
Elf_Scn *ep_unwind_elf_section(const EpUnwindElf *e, const char *name, GElf_Shdr *ret_shdr);
/* GNU build ID from PT_NOTE, else SHT_NOTE sections; -ENOENT when there is none. */
int ep_unwind_elf_build_id(const EpUnwindElf *e, uint8_t ret[EP_BUILD_ID_MAX], size_t *ret_len);
/* .gnu_debuglink: a plain file name (no '/') and the CRC-32 of the debug file; -ENOENT. */
int ep_unwind_elf_debuglink(const EpUnwindElf *e, char ret_name[256], uint32_t *ret_crc);

/* ELF virtual address range → file offsets through the executable segment holding start,
 * clipped to it. false when no executable segment holds start. */
bool ep_unwind_elf_to_offsets(const EpUnwindElf *e, uint64_t start, uint64_t end, uint64_t *ret_start,
                              uint64_t *ret_end);
/* n code bytes at a virtual address (inside an executable segment); -ENXIO otherwise, -EIO. */
int ep_unwind_elf_read_code(const EpUnwindElf *e, uint64_t vaddr, void *buf, size_t n);
