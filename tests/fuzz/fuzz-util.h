/* SPDX-License-Identifier: MIT */
#pragma once

/* Shared by the fuzz targets that hand their input to code reading files by descriptor. */

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

/* The next record of an input made of records, each a u16 type, a u16 length and that many
 * bytes (fewer at the end of the input), as the targets that read ring records take theirs.
 * The payload is a copy (free it): the rings hand records out in place, 8-byte aligned, which
 * the input's bytes are not. false at the end of the input. */
static inline bool fuzz_next_record(const uint8_t **data, size_t *size, uint16_t *ret_type, void **ret_payload,
                                    uint16_t *ret_len) {
        uint16_t len;

        if (*size < 4)
                return false;
        memcpy(ret_type, *data, sizeof *ret_type);
        memcpy(&len, *data + 2, sizeof len);
        *data += 4;
        *size -= 4;
        len = (uint16_t) (len < *size ? len : *size);
        *ret_payload = malloc(len ?: 1);
        if (!*ret_payload)
                abort();
        memcpy(*ret_payload, *data, len);
        *data += len;
        *size -= len;
        *ret_len = len;
        return true;
}
