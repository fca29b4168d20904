/* SPDX-License-Identifier: MIT */
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
