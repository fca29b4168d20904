/* SPDX-License-Identifier: MIT */
#include <sys/stat.h>

#include "file-id.h"
#include "macro.h"
#include "sha256.h"

#define HTLHASH_CHUNK 4096

static int read_full_at(int fd, void *buf, size_t n, off_t off) {
        size_t done = 0;
        while (done < n) {
                ssize_t k = pread(fd, (uint8_t *) buf + done, n - done, off + done);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        return -EIO; /* the file shrank while we read it */
                done += k;
        }
        return 0;
}

int ep_file_id_from_fd(int fd, uint8_t ret_id[EP_FILE_ID_SIZE], uint64_t *ret_size) {
        uint8_t head[HTLHASH_CHUNK], tail[HTLHASH_CHUNK], len_be[8], digest[EP_SHA256_SIZE];
        struct stat st;
        size_t head_n, tail_n;
        uint64_t size;
        EpSha256 sha;
        int r;

        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EBADFD;
        size = st.st_size;
        head_n = MIN(size, (uint64_t) HTLHASH_CHUNK);
        tail_n = head_n;
        r = read_full_at(fd, head, head_n, 0);
        if (r < 0)
                return r;
        r = read_full_at(fd, tail, tail_n, size - tail_n);
        if (r < 0)
                return r;
        for (int i = 0; i < 8; i++)
                len_be[i] = (uint8_t) (size >> (56 - 8 * i));

        ep_sha256_init(&sha);
        ep_sha256_update(&sha, head, head_n);
        ep_sha256_update(&sha, tail, tail_n);
        ep_sha256_update(&sha, len_be, sizeof len_be);
        ep_sha256_final(&sha, digest);
        memcpy(ret_id, digest, EP_FILE_ID_SIZE);
        if (ret_size)
                *ret_size = size;
        return 0;
}

void ep_hex_encode(const void *p, size_t n, char *ret) {
        static const char hex[] = "0123456789abcdef";
        const uint8_t *b = p;
        for (size_t i = 0; i < n; i++) {
                ret[2 * i] = hex[b[i] >> 4];
                ret[2 * i + 1] = hex[b[i] & 15];
        }
        ret[2 * n] = 0;
}

void ep_file_id_to_hex(const uint8_t id[EP_FILE_ID_SIZE], char ret[2 * EP_FILE_ID_SIZE + 1]) {
        ep_hex_encode(id, EP_FILE_ID_SIZE, ret);
}
