/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>

#include "wire-buf.h"

void ep_writer_init(EpWriter *w, void *buf, size_t cap) {
        *w = (EpWriter) { .data = buf, .cap = cap };
}

void ep_writer_init_dynamic(EpWriter *w) {
        *w = (EpWriter) { .owned = true };
}

void ep_writer_done(EpWriter *w) {
        if (w->owned)
                free(w->data);
        *w = (EpWriter) {};
}

void ep_writer_reset(EpWriter *w) {
        w->size = 0;
        w->overflow = false;
}

static bool writer_reserve(EpWriter *w, size_t n) {
        if (w->overflow)
                return false;
        if (n <= w->cap - w->size)
                return true;
        if (w->owned) {
                size_t want = MAX(w->cap * 2, MAX(w->size + n, (size_t) 256));
                uint8_t *p = realloc(w->data, want);
                if (p) {
                        w->data = p;
                        w->cap = want;
                        return true;
                }
        }
        w->overflow = true;
        return false;
}

void ep_put_bytes(EpWriter *w, const void *p, size_t n) {
        if (n == 0 || !writer_reserve(w, n))
                return;
        memcpy(w->data + w->size, p, n);
        w->size += n;
}

void ep_put_u8(EpWriter *w, uint8_t v) {
        ep_put_bytes(w, &v, sizeof v);
}
void ep_put_u16(EpWriter *w, uint16_t v) {
        ep_put_bytes(w, &v, sizeof v);
}
void ep_put_u32(EpWriter *w, uint32_t v) {
        ep_put_bytes(w, &v, sizeof v);
}
void ep_put_u64(EpWriter *w, uint64_t v) {
        ep_put_bytes(w, &v, sizeof v);
}

void ep_put_blob(EpWriter *w, const void *p, size_t n) {
        if (n > UINT32_MAX) {
                w->overflow = true;
                return;
        }
        ep_put_u32(w, (uint32_t) n);
        ep_put_bytes(w, p, n);
}

void ep_put_strn(EpWriter *w, const char *s, size_t n) {
        ep_put_blob(w, s, s ? strnlen(s, n) : 0);
}

void ep_put_str(EpWriter *w, const char *s) {
        ep_put_blob(w, s, s ? strlen(s) : 0);
}

void ep_reader_init(EpReader *r, const void *data, size_t size) {
        *r = (EpReader) { .data = data, .size = size };
}

bool ep_reader_done(const EpReader *r) {
        return !r->error && r->pos == r->size;
}

static const uint8_t *reader_take(EpReader *r, size_t n) {
        const uint8_t *p;

        if (r->error || n > r->size - r->pos) {
                r->error = true;
                return NULL;
        }
        p = r->data + r->pos;
        r->pos += n;
        return p;
}

void ep_get_bytes(EpReader *r, void *p, size_t n) {
        const uint8_t *src = reader_take(r, n);
        if (src)
                memcpy(p, src, n);
        else
                memset(p, 0, n);
}

#define DEFINE_GET(type, name)                      \
        type name(EpReader *r) {                    \
                type v;                             \
                ep_get_bytes(r, &v, sizeof v);      \
                return v;                           \
        }
DEFINE_GET(uint8_t, ep_get_u8)
DEFINE_GET(uint16_t, ep_get_u16)
DEFINE_GET(uint32_t, ep_get_u32)
DEFINE_GET(uint64_t, ep_get_u64)

const void *ep_get_blob(EpReader *r, size_t max_len, size_t *ret_len) {
        uint32_t n = ep_get_u32(r);
        const uint8_t *p;

        if (r->error || n > max_len) {
                r->error = true;
                *ret_len = 0;
                return NULL;
        }
        p = reader_take(r, n);
        *ret_len = p ? n : 0;
        return p ? p : (const void *) "";
}

char *ep_get_str(EpReader *r, size_t max_len) {
        size_t n;
        const char *p = ep_get_blob(r, max_len, &n);
        char *s;

        if (r->error)
                return NULL;
        if (memchr(p, 0, n)) {
                r->error = true;
                return NULL;
        }
        s = malloc(n + 1);
        if (!s) {
                r->error = true;
                return NULL;
        }
        memcpy(s, p, n);
        s[n] = 0;
        return s;
}
