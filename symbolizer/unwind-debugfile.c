/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "macro.h"
#include "unwind-debugfile.h"

static int add(char *ret[], int *n, char *path) {
        if (!path)
                return -ENOMEM;
        for (int i = 0; i < *n; i++)
                if (streq(ret[i], path)) {
                        free(path);
                        return 0;
                }
        ret[(*n)++] = path;
        return 0;
}

static char *join(const char *a, const char *b, const char *c) {
        char *p = NULL;
        return asprintf(&p, "%s%s%s", a, b, c) < 0 ? NULL : p;
}

int ep_unwind_debug_candidates(const char *root, const uint8_t *build_id, size_t build_id_len, const char *debuglink,
                               const char *path_hint, char *ret[EP_DEBUG_MAX_CANDIDATES]) {
        int n = 0, r;

        if (!root || !*root)
                root = EP_DEBUG_ROOT;

        if (build_id && build_id_len >= 2) {
                char hex[2 * 64 + 1];
                size_t len = MIN(build_id_len, (size_t) 64);

                for (size_t i = 0; i < len; i++)
                        snprintf(hex + 2 * i, 3, "%02x", build_id[i]);
                char *p = NULL;
                if (asprintf(&p, "%s/.build-id/%.2s/%s.debug", root, hex, hex + 2) < 0)
                        p = NULL;
                r = add(ret, &n, p);
                if (r < 0)
                        goto fail;
        }

        if (debuglink && *debuglink && !strchr(debuglink, '/') && path_hint && path_hint[0] == '/') {
                _cleanup_free_ char *dir = strdup(path_hint);
                if (!dir) {
                        r = -ENOMEM;
                        goto fail;
                }
                char *slash = strrchr(dir, '/');
                slash[1] = 0; /* keep the trailing slash: "/" stays "/" */

                const char *paths[3][3] = {
                        { dir, "", debuglink },
                        { dir, ".debug/", debuglink },
                        { root, dir, debuglink },
                };
                for (size_t i = 0; i < ELEMENTSOF(paths) && n < EP_DEBUG_MAX_CANDIDATES; i++) {
                        r = add(ret, &n, join(paths[i][0], paths[i][1], paths[i][2]));
                        if (r < 0)
                                goto fail;
                }
        }
        return n;

fail:
        while (n > 0)
                free(ret[--n]);
        return r;
}

int ep_unwind_debug_crc32(int fd, uint32_t *ret) {
        uint8_t buf[65536];
        uLong crc = crc32(0L, Z_NULL, 0);
        off_t off = 0;

        for (;;) {
                ssize_t k = pread(fd, buf, sizeof buf, off);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break;
                crc = crc32(crc, buf, (uInt) k);
                off += k;
        }
        *ret = (uint32_t) crc;
        return 0;
}
