/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/types.h>

#include "line-reader.h"
#include "macro.h"

int ep_for_each_line(FILE *f, size_t max_len, ep_line_fn fn, void *userdata) {
        _cleanup_free_ char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        int r;

        errno = 0;
        while ((n = getline(&line, &cap, f)) >= 0) {
                size_t len = (size_t) n;

                while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
                        len--;
                if (len > max_len)
                        continue;
                r = fn(userdata, line, len);
                if (r < 0)
                        return r;
        }
        if (ferror(f))
                return errno > 0 ? -errno : -EIO;
        return 0;
}

int ep_fdopen_dup(int fd, FILE **ret) {
        _cleanup_close_ int copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (copy < 0)
                return -errno;

        FILE *f = fdopen(copy, "re");
        if (!f)
                return -errno;
        TAKE_FD(copy);
        *ret = f;
        return 0;
}
