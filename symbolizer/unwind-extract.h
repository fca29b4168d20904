/* SPDX-License-Identifier: MIT */
#pragma once

/* Stack-delta extraction: the CFI of one ELF file (x86-64) as the table blob of
 * common/unwind-table.h, ready for the loader.
 *
 * Sources, in order of precedence: .eh_frame (libdw finds FDEs through .eh_frame_hdr),
 * .debug_frame of the file, and when those give fewer than 8 FDEs the .debug_frame of the
 * separate debug file (by build ID, then .gnu_debuglink; see unwind-debugfile.h). Each FDE's
 * rows are evaluated by libdw (dwarf_cfi_addrframe) and mapped by unwind-classify.c;
 * addresses become file offsets through the executable PT_LOAD segments. Special rules:
 *   - EP_CFA_SIGNAL for rt_sigreturn trampolines: CIE augmentation 'S', the symbol names
 *     __restore_rt / __vdso_rt_sigreturn, or the code "mov $15,%rax; syscall" at the start of
 *     a small FDE;
 *   - EP_CFA_STOP where the return address is undefined (glibc's _start, clone, clone3), and
 *     for entry code without CFI: the ELF entry point and _start/clone/clone3 symbols lying in
 *     a gap between FDEs;
 *   - EP_CFA_PLT for the binutils lazy-PLT expression;
 *   - no CFI at all: the one-rule EP_CFA_FP_FALLBACK table (flag EP_UNWIND_FP_FALLBACK).
 *
 * Hostile input is bounded (entries, rows, CFA program bytes run, table size) and yields an
 * error for that file; nothing is mapped (see unwind-elf.h), so truncation cannot fault.
 * Thread-safe: no global state besides libelf's version. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

typedef struct EpUnwindExtractOptions {
        const char *debug_root; /* separate debug files: NULL = /usr/lib/debug */
        bool no_debug_files;    /* never look for separate debug files */
        uint64_t max_fdes;      /* 0 = default (4 Mi CIEs + FDEs per section) */
        uint64_t max_spans;     /* 0 = default (16 Mi rule spans) */
        uint64_t max_cfa_bytes; /* 0 = default (1 GiB of CFA program bytes interpreted) */
} EpUnwindExtractOptions;

typedef struct EpUnwindExtractStats {
        uint64_t fdes;             /* FDEs walked (all sources) */
        uint64_t fdes_skipped;     /* undecodable, outside executable segments, or shadowed */
        uint64_t fdes_failed;      /* libdw could not evaluate a row: the rest of the FDE is a gap */
        uint64_t rows;             /* CFI rows evaluated */
        uint64_t rows_unsupported; /* rows that became EP_CFA_INVALID */
        uint64_t rows_fp_unsupported;
        uint64_t signal_frames;    /* FDEs or symbols marked EP_CFA_SIGNAL */
        uint64_t cfa_bytes;        /* CFA program bytes libdw ran (bounded by max_cfa_bytes) */
        uint32_t n_rules, n_entries;
        char debug_file[256];      /* the separate debug file used, "" if none */
        uint8_t build_id[EP_BUILD_ID_MAX]; /* GNU build ID of the file */
        size_t build_id_len;               /* 0: none */
} EpUnwindExtractStats;

/* ret_flags: EP_UNWIND_FROM_* and EP_UNWIND_FP_FALLBACK (also in the blob header).
 * path_hint: where the file lives, for .gnu_debuglink (NULL: from /proc/self/fd).
 * Errors: -ENOEXEC not a usable ELF file, -EPROTONOSUPPORT not x86-64, -ENODATA nothing
 * executable in it, -EBADMSG malformed CFI, -E2BIG over a bound, -EFBIG code beyond 4 GiB,
 * -EIO read failure (e.g. truncated under us), -ENOMEM. */
int ep_unwind_extract(int fd, const uint8_t file_id[EP_FILE_ID_SIZE], const char *path_hint, void **ret_blob,
                      size_t *ret_size, uint32_t *ret_flags);

int ep_unwind_extract_full(int fd, const uint8_t file_id[EP_FILE_ID_SIZE], const char *path_hint,
                           const EpUnwindExtractOptions *options, void **ret_blob, size_t *ret_size,
                           uint32_t *ret_flags, EpUnwindExtractStats *ret_stats);
