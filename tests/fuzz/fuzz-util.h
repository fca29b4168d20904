/* SPDX-License-Identifier: MIT */
#pragma once

/* Shared by the fuzz targets that hand their input to code reading files by descriptor. */

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Replaces the contents of *fd (a memfd created on first use) with data; aborts on failure, as
 * a fuzzer that cannot set up its input has nothing to report. */
static inline int fuzz_memfd_fill(int *fd, const char *name, const uint8_t *data, size_t size) {
        if (*fd < 0) {
                *fd = memfd_create(name, MFD_CLOEXEC);
                if (*fd < 0)
                        abort();
        }
        if (ftruncate(*fd, 0) < 0)
                abort();
        for (size_t done = 0; done < size;) {
                ssize_t k = pwrite(*fd, data + done, size - done, (off_t) done);
                if (k <= 0)
                        abort();
                done += (size_t) k;
        }
        return *fd;
}
