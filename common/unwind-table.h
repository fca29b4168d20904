/* SPDX-License-Identifier: MIT */
#pragma once

/* The per-file unwind table as one blob: what the symbolizer extracts, caches in SQLite and
 * hands to the loader in a sealed memfd (Symbolizer1.GetUnwindTable). Host byte order.
 *
 *   EpUnwindTableHeader
 *   struct ep_unwind_rule rules[n_rules]        de-duplicated within the file
 *   EpUnwindEntry entries[n_entries]            sorted by file_offset, strictly increasing
 *
 * Addresses are FILE OFFSETS (not ELF virtual addresses), so the loader, which does not parse
 * ELF, maps a PC to a table position with only /proc/PID/maps: off = pc - start + pgoff.
 * Entry i covers [entries[i].file_offset, entries[i+1].file_offset); consecutive entries
 * never carry the same rule (merged); a gap between functions is an entry whose rule is
 * EP_CFA_INVALID, and the last entry always is one (it ends the covered range). */

#include <stddef.h>
#include <stdint.h>

#include "unwind-rule.h"
#include "wire.h"

#define EP_UNWIND_TABLE_MAGIC 0x54555045u /* "EPUT" */
#define EP_UNWIND_TABLE_VERSION 1u
#define EP_UNWIND_TABLE_MAX_RULES 65535u
#define EP_UNWIND_TABLE_MAX_ENTRIES (1u << 26)

enum {
        EP_UNWIND_FROM_EH_FRAME = 1 << 0,
        EP_UNWIND_FROM_DEBUG_FRAME = 1 << 1,
        EP_UNWIND_FROM_DEBUG_FILE = 1 << 2, /* a separate debug file supplied .debug_frame */
        EP_UNWIND_FP_FALLBACK = 1 << 3,     /* no CFI at all: one FP_FALLBACK rule */
};

typedef struct EpUnwindTableHeader {
        uint32_t magic;
        uint32_t version;
        uint8_t file_id[EP_FILE_ID_SIZE];
        uint32_t n_rules;
        uint32_t n_entries;
        uint32_t flags; /* EP_UNWIND_* */
        uint32_t reserved;
} EpUnwindTableHeader;

typedef struct EpUnwindEntry {
        uint32_t file_offset;
        uint16_t rule; /* index into rules[] */
        uint16_t reserved;
} EpUnwindEntry;

/* Checks a blob from an untrusted or corrupt source: magic, version, sizes, counts, order,
 * rule indices and rule field ranges. 0 when usable, -EBADMSG otherwise. */
int ep_unwind_table_validate(const void *blob, size_t size);

/* Views into a validated blob. */
static inline const EpUnwindTableHeader *ep_unwind_table_header(const void *blob) {
        return blob;
}
static inline const struct ep_unwind_rule *ep_unwind_table_rules(const void *blob) {
        return (const struct ep_unwind_rule *) ((const uint8_t *) blob + sizeof(EpUnwindTableHeader));
}
static inline const EpUnwindEntry *ep_unwind_table_entries(const void *blob) {
        const EpUnwindTableHeader *h = blob;
        return (const EpUnwindEntry *) (ep_unwind_table_rules(blob) + h->n_rules);
}
static inline size_t ep_unwind_table_size(uint32_t n_rules, uint32_t n_entries) {
        return sizeof(EpUnwindTableHeader) + (size_t) n_rules * sizeof(struct ep_unwind_rule) +
               (size_t) n_entries * sizeof(EpUnwindEntry);
}
/* Index of the entry covering file offset off, or -1. */
long ep_unwind_table_find(const void *blob, uint32_t off);
