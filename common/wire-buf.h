/* SPDX-License-Identifier: MIT */
#pragma once

/* Bounds-checked little helpers to serialize ring messages that carry strings or variable
 * arrays. Writers record overflow instead of failing each call; readers record truncation.
 * Check ->error once at the end. Integers are host byte order (both ends share one host). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

typedef struct EpWriter {
        uint8_t *data;
        size_t size, cap;
        bool overflow; /* a put did not fit in cap; contents are unusable */
        bool owned;    /* data is heap memory that grows on demand */
} EpWriter;

typedef struct EpReader {
        const uint8_t *data;
        size_t size, pos;
        bool error; /* a get ran past the end, or a string was not valid */
} EpReader;

/* A writer over caller memory (fixed cap) or, with ep_writer_init_dynamic, a growing heap buffer. */
void ep_writer_init(EpWriter *w, void *buf, size_t cap);
void ep_writer_init_dynamic(EpWriter *w);
void ep_writer_done(EpWriter *w);
void ep_writer_reset(EpWriter *w);
void ep_put_bytes(EpWriter *w, const void *p, size_t n);
void ep_put_u8(EpWriter *w, uint8_t v);
void ep_put_u16(EpWriter *w, uint16_t v);
void ep_put_u32(EpWriter *w, uint32_t v);
void ep_put_u64(EpWriter *w, uint64_t v);
/* A string: u32 length then the bytes, no NUL. NULL is written as the empty string. */
void ep_put_str(EpWriter *w, const char *s);
void ep_put_strn(EpWriter *w, const char *s, size_t n);
/* A blob: u32 length then the bytes. */
void ep_put_blob(EpWriter *w, const void *p, size_t n);

void ep_reader_init(EpReader *r, const void *data, size_t size);
bool ep_reader_done(const EpReader *r); /* true when every byte was read and no error */
void ep_get_bytes(EpReader *r, void *p, size_t n);
uint8_t ep_get_u8(EpReader *r);
uint16_t ep_get_u16(EpReader *r);
uint32_t ep_get_u32(EpReader *r);
uint64_t ep_get_u64(EpReader *r);
/* Returns a freshly allocated NUL-terminated copy (never NULL unless ->error or OOM; strings
 * with an embedded NUL set ->error), longer than max_len bytes sets ->error. */
char *ep_get_str(EpReader *r, size_t max_len);
/* Returns a pointer into the reader's buffer and its length; no copy. */
const void *ep_get_blob(EpReader *r, size_t max_len, size_t *ret_len);
