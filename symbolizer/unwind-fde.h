/* SPDX-License-Identifier: MIT */
#pragma once

/* The FDEs of one CFI section as address ranges. The section is walked entry by entry with
 * libdw's dwarf_next_cfi(); what libdw leaves encoded is decoded here: each FDE's initial
 * location and length, in the pointer encoding the CIE's 'R' augmentation names (.eh_frame)
 * or as target-sized absolute addresses (.debug_frame). The rows of each FDE are then
 * interpreted by libdw (dwarf_cfi_addrframe), not here.
 *
 * Untrusted input: every read is bounds-checked, entries that cannot be decoded are skipped
 * and counted, a section whose walk cannot continue is -EBADMSG. */

#include <elfutils/libdw.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct EpFdeRange {
        uint64_t start, end; /* ELF virtual addresses, [start, end) */
        uint32_t cost;       /* bytes of CFA program libdw runs for a row of it (CIE + FDE) */
} EpFdeRange;

typedef struct EpFdeList {
        EpFdeRange *ranges;
        size_t n, allocated;
        size_t skipped; /* FDEs without a usable range (encoding we do not follow, empty, wrapping) */
} EpFdeList;

/* Appends the FDEs of one section to list. data is the section's contents, section_addr its
 * sh_addr (pc-relative pointers in .eh_frame count from it). At most max_entries CIEs and FDEs
 * are read: -E2BIG beyond. */
int ep_fde_collect(const unsigned char *e_ident, Elf_Data *data, bool eh_frame, uint64_t section_addr,
                   size_t max_entries, EpFdeList *list);

/* Sorts by start address (then end). */
void ep_fde_list_sort(EpFdeList *list);
/* True when [start, end) intersects one of the sorted list's ranges. */
bool ep_fde_list_overlaps(const EpFdeList *list, uint64_t start, uint64_t end);
void ep_fde_list_done(EpFdeList *list);

/* DW_EH_PE_* pointer decoding, exposed for tests. Reads one value of the given encoding's
 * format (low nibble) at *p (advancing it) without applying its base; -EBADMSG when it does
 * not fit before end or the format is unknown. */
int ep_fde_read_encoded(const uint8_t **p, const uint8_t *end, uint8_t encoding, unsigned address_size,
                        bool big_endian, uint64_t *ret);
