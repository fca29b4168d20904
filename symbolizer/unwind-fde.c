/* SPDX-License-Identifier: MIT */
#include <dwarf.h>
#include <errno.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>

#include "byte-parse.h"
#include "macro.h"
#include "unwind-fde.h"

#define CIE_SLOTS 16 /* direct-mapped: real sections use a handful of CIEs */

typedef struct CieInfo {
        uint64_t offset;
        bool valid;       /* slot in use */
        bool usable;      /* we know how the FDEs of this CIE encode their range */
        uint8_t encoding; /* DW_EH_PE_* of initial location and range */
        uint32_t initial_len;
} CieInfo;

typedef struct Walk {
        const unsigned char *e_ident;
        Elf_Data *data;
        bool eh_frame, big_endian;
        unsigned address_size;
        uint64_t section_addr;
        CieInfo cies[CIE_SLOTS];
} Walk;

static int read_fixed(const uint8_t **p, const uint8_t *end, unsigned size, bool big_endian, bool is_signed,
                      uint64_t *ret) {
        uint64_t v = 0;

        if ((size_t) (end - *p) < size)
                return -EBADMSG;
        for (unsigned i = 0; i < size; i++) {
                unsigned shift = big_endian ? 8 * (size - 1 - i) : 8 * i;
                v |= (uint64_t) (*p)[i] << shift;
        }
        if (is_signed && size < 8 && (v >> (8 * size - 1)) & 1)
                v |= ~(uint64_t) 0 << (8 * size);
        *p += size;
        *ret = v;
        return 0;
}

int ep_fde_read_encoded(const uint8_t **p, const uint8_t *end, uint8_t encoding, unsigned address_size,
                        bool big_endian, uint64_t *ret) {
        switch (encoding & 0x0f) {
        case DW_EH_PE_absptr:
                if (address_size != 4 && address_size != 8)
                        return -EBADMSG;
                return read_fixed(p, end, address_size, big_endian, false, ret);
        case DW_EH_PE_uleb128:
                return ep_read_leb128(p, end, false, ret);
        case DW_EH_PE_udata2:
                return read_fixed(p, end, 2, big_endian, false, ret);
        case DW_EH_PE_udata4:
                return read_fixed(p, end, 4, big_endian, false, ret);
        case DW_EH_PE_udata8:
                return read_fixed(p, end, 8, big_endian, false, ret);
        case DW_EH_PE_sleb128:
                return ep_read_leb128(p, end, true, ret);
        case DW_EH_PE_sdata2:
                return read_fixed(p, end, 2, big_endian, true, ret);
        case DW_EH_PE_sdata4:
                return read_fixed(p, end, 4, big_endian, true, ret);
        case DW_EH_PE_sdata8:
                return read_fixed(p, end, 8, big_endian, true, ret);
        default:
                return -EBADMSG;
        }
}

/* The FDE pointer encoding a CIE announces: 'R' in a 'z' augmentation (.eh_frame); target
 * addresses otherwise. Unknown augmentations before 'R' leave the CIE unusable. */
static void parse_cie(const Walk *w, const Dwarf_CIE *cie, CieInfo *info) {
        const char *aug = cie->augmentation ?: "";
        const uint8_t *p = cie->augmentation_data, *end;

        info->usable = false;
        info->encoding = DW_EH_PE_absptr;
        if (cie->initial_instructions_end >= cie->initial_instructions)
                info->initial_len = (uint32_t) MIN((size_t) (cie->initial_instructions_end - cie->initial_instructions),
                                                   (size_t) UINT32_MAX);

        if (aug[0] == 0) {
                info->usable = true;
                return;
        }
        if (aug[0] != 'z' || !p)
                return;
        end = p + cie->augmentation_data_size;

        for (const char *c = aug + 1; *c; c++)
                switch (*c) {
                case 'R':
                        if (p >= end)
                                return;
                        info->encoding = *p++;
                        info->usable = true;
                        return;
                case 'P': {
                        uint64_t ignored;
                        if (p >= end)
                                return;
                        uint8_t penc = *p++;
                        if (penc == DW_EH_PE_omit)
                                break;
                        if (ep_fde_read_encoded(&p, end, penc, w->address_size, w->big_endian, &ignored) < 0)
                                return;
                        break;
                }
                case 'L':
                        if (p >= end)
                                return;
                        p++;
                        break;
                case 'S': /* signal frame */
                case 'B': /* arm64 B-key */
                case 'G': /* arm64 MTE */
                        break;
                default:
                        return; /* we cannot know how much data it owns */
                }
        /* 'z' without 'R': absolute pointers. */
        info->usable = true;
}

static const CieInfo *get_cie(Walk *w, uint64_t offset) {
        CieInfo *slot = &w->cies[(offset >> 2) % CIE_SLOTS];
        Dwarf_CFI_Entry entry;
        Dwarf_Off next = (Dwarf_Off) -1;

        if (slot->valid && slot->offset == offset)
                return slot;

        *slot = (CieInfo) { .offset = offset, .valid = true };
        if (offset >= w->data->d_size ||
            dwarf_next_cfi(w->e_ident, w->data, w->eh_frame, offset, &next, &entry) != 0 ||
            !dwarf_cfi_cie_p(&entry))
                return slot; /* not usable */
        parse_cie(w, &entry.cie, slot);
        return slot;
}

static int list_append(EpFdeList *list, const EpFdeRange *r) {
        if (list->n == list->allocated) {
                size_t n = MAX(list->allocated * 2, (size_t) 1024);
                EpFdeRange *a = reallocarray(list->ranges, n, sizeof(EpFdeRange));
                if (!a)
                        return -ENOMEM;
                list->ranges = a;
                list->allocated = n;
        }
        list->ranges[list->n++] = *r;
        return 0;
}

static int decode_fde(Walk *w, const Dwarf_FDE *fde, EpFdeList *list) {
        const uint8_t *base = w->data->d_buf, *p = fde->start, *end = fde->end;
        uint64_t start, len;
        const CieInfo *cie;

        if (!p || !end || p < base || end > base + w->data->d_size || p > end) {
                list->skipped++;
                return 0;
        }

        cie = get_cie(w, fde->CIE_pointer);
        /* Only absolute and pc-relative locations mean something without a running process. */
        if (!cie->usable || cie->encoding == DW_EH_PE_omit || (cie->encoding & DW_EH_PE_indirect) ||
            ((cie->encoding & 0x70) != DW_EH_PE_absptr && (cie->encoding & 0x70) != DW_EH_PE_pcrel)) {
                list->skipped++;
                return 0;
        }

        uint64_t field = w->section_addr + (uint64_t) (p - base);
        if (ep_fde_read_encoded(&p, end, cie->encoding, w->address_size, w->big_endian, &start) < 0 ||
            ep_fde_read_encoded(&p, end, cie->encoding & 0x0f, w->address_size, w->big_endian, &len) < 0) {
                list->skipped++;
                return 0;
        }
        if ((cie->encoding & 0x70) == DW_EH_PE_pcrel)
                start += field;
        if (w->address_size == 4) {
                start &= UINT32_MAX;
                len &= UINT32_MAX;
        }
        if (len == 0 || start + len < start || start == 0) {
                /* Empty, wrapping, or at address 0 (functions the linker discarded). */
                list->skipped++;
                return 0;
        }

        EpFdeRange r = {
                .start = start,
                .end = start + len,
                .cost = (uint32_t) MIN((uint64_t) (fde->end - fde->start) + cie->initial_len, (uint64_t) UINT32_MAX),
        };
        return list_append(list, &r);
}

int ep_fde_collect(const unsigned char *e_ident, Elf_Data *data, bool eh_frame, uint64_t section_addr,
                   size_t max_entries, EpFdeList *list) {
        Walk w = {
                .e_ident = e_ident,
                .data = data,
                .eh_frame = eh_frame,
                .big_endian = e_ident[EI_DATA] == ELFDATA2MSB,
                .address_size = e_ident[EI_CLASS] == ELFCLASS32 ? 4 : 8,
                .section_addr = section_addr,
        };
        Dwarf_Off off = 0;
        size_t n = 0;
        int r;

        if (!data || !data->d_buf || data->d_size == 0)
                return 0;

        while (off < data->d_size) {
                Dwarf_CFI_Entry entry;
                Dwarf_Off next = (Dwarf_Off) -1;

                if (++n > max_entries)
                        return -E2BIG;

                r = dwarf_next_cfi(e_ident, data, eh_frame, off, &next, &entry);
                if (r > 0)
                        break; /* the end (or .eh_frame's zero terminator) */
                if (r < 0) {
                        /* libdw says whether the entry can be stepped over. */
                        if (next == (Dwarf_Off) -1 || next <= off)
                                return -EBADMSG;
                        list->skipped++;
                        off = next;
                        continue;
                }
                if (next <= off && next != (Dwarf_Off) -1)
                        return -EBADMSG;

                if (!dwarf_cfi_cie_p(&entry)) {
                        r = decode_fde(&w, &entry.fde, list);
                        if (r < 0)
                                return r;
                }
                if (next == (Dwarf_Off) -1)
                        break;
                off = next;
        }
        return 0;
}

static int range_cmp(const void *a, const void *b) {
        const EpFdeRange *x = a, *y = b;

        if (x->start != y->start)
                return x->start < y->start ? -1 : 1;
        if (x->end != y->end)
                return x->end < y->end ? -1 : 1;
        return 0;
}

void ep_fde_list_sort(EpFdeList *list) {
        for (size_t i = 1; i < list->n; i++)
                if (range_cmp(&list->ranges[i - 1], &list->ranges[i]) > 0) {
                        qsort(list->ranges, list->n, sizeof(EpFdeRange), range_cmp);
                        return;
                }
}

bool ep_fde_list_overlaps(const EpFdeList *list, uint64_t start, uint64_t end) {
        size_t lo = 0, hi = list->n;

        /* First range starting at or after end; the ones before it may reach into [start, end).
         * Sorted by start, ends are not monotonic for overlapping (hostile) input, so look back
         * a bounded distance; real sections do not overlap at all. */
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (list->ranges[mid].start < end)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        for (size_t i = lo, k = 0; i > 0 && k < 16; i--, k++)
                if (list->ranges[i - 1].end > start)
                        return true;
        return false;
}

void ep_fde_list_done(EpFdeList *list) {
        free(list->ranges);
        *list = (EpFdeList) {};
}
