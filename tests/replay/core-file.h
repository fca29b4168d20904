/* SPDX-License-Identifier: MIT */
#pragma once

/* A reader of x86-64 ELF core dumps (as written by gcore or the kernel) for the replay tests:
 * the threads and their registers (NT_PRSTATUS), the mapped files (NT_FILE), the auxiliary
 * vector (NT_AUXV) and the memory (PT_LOAD segments; bytes a core does not hold, such as the
 * text of mapped files, are read from the mapped file itself). A core is input: every size,
 * offset and count in it is checked, and a malformed core gives -EBADMSG, never a crash. */

#include <stddef.h>
#include <stdint.h>

#include "macro.h"

/* Registers in the kernel's user_regs_struct order (the layout of pr_reg). */
enum {
        EP_CORE_R15, EP_CORE_R14, EP_CORE_R13, EP_CORE_R12, EP_CORE_RBP, EP_CORE_RBX,
        EP_CORE_R11, EP_CORE_R10, EP_CORE_R9, EP_CORE_R8, EP_CORE_RAX, EP_CORE_RCX,
        EP_CORE_RDX, EP_CORE_RSI, EP_CORE_RDI, EP_CORE_ORIG_RAX, EP_CORE_RIP, EP_CORE_CS,
        EP_CORE_EFLAGS, EP_CORE_RSP, EP_CORE_SS, EP_CORE_FS_BASE, EP_CORE_GS_BASE,
        EP_CORE_DS, EP_CORE_ES, EP_CORE_FS, EP_CORE_GS,
        _EP_CORE_NREGS,
};

typedef struct EpCoreThread {
        int tid;
        uint64_t regs[_EP_CORE_NREGS];
} EpCoreThread;

typedef struct EpCoreMapping {
        uint64_t start, end; /* [start, end) */
        uint64_t offset;     /* file offset of start, in bytes */
        char *path;
} EpCoreMapping;

typedef struct EpCore EpCore;

int ep_core_open(const char *path, EpCore **ret);
EpCore *ep_core_free(EpCore *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpCore *, ep_core_free);

size_t ep_core_n_threads(const EpCore *c);
const EpCoreThread *ep_core_thread(const EpCore *c, size_t i);
size_t ep_core_n_mappings(const EpCore *c);
const EpCoreMapping *ep_core_mapping(const EpCore *c, size_t i);
/* The mapping covering addr, or NULL. */
const EpCoreMapping *ep_core_mapping_at(const EpCore *c, uint64_t addr);
/* An auxiliary vector entry (AT_*); -ENOENT when absent. */
int ep_core_auxv(const EpCore *c, uint64_t type, uint64_t *ret);

/* Reads n bytes at addr of the dumped process: from the core's segments, else from the
 * mapped file that backs the address. -EFAULT when some byte is not available. */
int ep_core_read(EpCore *c, uint64_t addr, void *buf, size_t n);
/* Where the core's own segments hold addr: [*ret_start, *ret_end) is the dumped range around
 * it (for copying a whole in-memory image such as the vDSO). -ENOENT when not dumped. */
int ep_core_segment_at(const EpCore *c, uint64_t addr, uint64_t *ret_start, uint64_t *ret_end);
