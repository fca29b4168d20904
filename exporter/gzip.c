/* SPDX-License-Identifier: MIT */
#include <stdint.h>
#include <stdlib.h>
#include <zlib.h>

#include "gzip.h"
#include "macro.h"

int exp_gzip(const void *data, size_t size, void **ret, size_t *ret_size) {
        _cleanup_free_ unsigned char *out = NULL;
        z_stream z = {};
        size_t cap;
        int r;

        if (size > (1u << 30))
                return -E2BIG; /* far beyond any OTLP request limit */
        /* windowBits 15 + 16: gzip header and trailer instead of zlib's. */
        r = deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
        if (r != Z_OK)
                return r == Z_MEM_ERROR ? -ENOMEM : -EINVAL;
        cap = deflateBound(&z, size);
        out = malloc(cap);
        if (!out) {
                deflateEnd(&z);
                return -ENOMEM;
        }
        z.next_in = (unsigned char *) data;
        z.avail_in = (uInt) size;
        z.next_out = out;
        z.avail_out = (uInt) cap;
        r = deflate(&z, Z_FINISH);
        deflateEnd(&z);
        if (r != Z_STREAM_END)
                return -EIO;
        *ret_size = z.total_out;
        *ret = TAKE_PTR(out);
        return 0;
}

int exp_gunzip(const void *data, size_t size, size_t max, void **ret, size_t *ret_size) {
        _cleanup_free_ unsigned char *out = NULL;
        size_t cap = MIN(MAX(size * 4, (size_t) 4096), max + 1);
        z_stream z = {};
        int r;

        if (size > UINT32_MAX)
                return -E2BIG;
        if (inflateInit2(&z, 15 + 16) != Z_OK)
                return -ENOMEM;
        z.next_in = (unsigned char *) data;
        z.avail_in = (uInt) size;
        for (;;) {
                unsigned char *p = realloc(out, cap);
                if (!p) {
                        r = -ENOMEM;
                        break;
                }
                out = p;
                z.next_out = out + z.total_out;
                z.avail_out = (uInt) (cap - z.total_out);
                r = inflate(&z, Z_FINISH);
                if (r == Z_STREAM_END) {
                        r = z.total_out > max ? -EFBIG : 0;
                        break;
                }
                if (r != Z_BUF_ERROR && r != Z_OK) {
                        r = r == Z_MEM_ERROR ? -ENOMEM : -EBADMSG;
                        break;
                }
                if (z.avail_in == 0) {
                        r = -EBADMSG; /* truncated */
                        break;
                }
                if (cap > max) {
                        r = -EFBIG;
                        break;
                }
                cap = MIN(cap * 2, max + 1);
        }
        inflateEnd(&z);
        if (r < 0)
                return r;
        *ret_size = z.total_out;
        *ret = TAKE_PTR(out);
        return 0;
}
