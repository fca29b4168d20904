/* SPDX-License-Identifier: MIT */
#pragma once

/* Small decoders shared by parsers of untrusted bytes (DWARF CFI, protobuf replies, perf maps):
 * every read is bounded by end. */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

/* The value of a hexadecimal digit, -1 when c is none. */
static inline int ep_hex_digit(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

/* LEB128 (DWARF), which is also protobuf's varint when unsigned; is_signed sign-extends from
 * the last byte's bit 6. Advances *p; -EBADMSG when it runs past end or over 64 bits. */
static inline int ep_read_leb128(const uint8_t **p, const uint8_t *end, bool is_signed, uint64_t *ret) {
        uint64_t v = 0;

        for (unsigned shift = 0; shift < 64; shift += 7) {
                if (*p >= end)
                        return -EBADMSG;
                uint8_t b = *(*p)++;
                v |= (uint64_t) (b & 0x7f) << shift;
                if (!(b & 0x80)) {
                        if (is_signed && shift + 7 < 64 && (b & 0x40))
                                v |= ~(uint64_t) 0 << (shift + 7);
                        *ret = v;
                        return 0;
                }
        }
        return -EBADMSG;
}
