/* SPDX-License-Identifier: MIT */
#include <linux/magic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

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

static void put_le64(EpSha256 *sha, uint64_t v) {
        uint8_t b[8];

        for (int i = 0; i < 8; i++)
                b[i] = (uint8_t) (v >> (8 * i));
        ep_sha256_update(sha, b, sizeof b);
}

static int htlhash(int fd, uint64_t size, uint8_t ret[EP_FILE_ID_SIZE]) {
        uint8_t head[HTLHASH_CHUNK], tail[HTLHASH_CHUNK], len_be[8], digest[EP_SHA256_SIZE];
        size_t n = MIN(size, (uint64_t) HTLHASH_CHUNK);
        EpSha256 sha;
        int r;

        r = read_full_at(fd, head, n, 0);
        if (r < 0)
                return r;
        r = read_full_at(fd, tail, n, size - n);
        if (r < 0)
                return r;
        for (int i = 0; i < 8; i++)
                len_be[i] = (uint8_t) (size >> (56 - 8 * i));
        ep_sha256_init(&sha);
        ep_sha256_update(&sha, head, n);
        ep_sha256_update(&sha, tail, n);
        ep_sha256_update(&sha, len_be, sizeof len_be);
        ep_sha256_final(&sha, digest);
        memcpy(ret, digest, EP_FILE_ID_SIZE);
        return 0;
}

/* Content only root chose: its owner is root (the kernel's, not a user namespace's), nobody
 * else may write it, and the owner was not reported by a FUSE daemon. */
static bool system_file(int fd, const struct stat *st) {
        struct statfs fs;

        if (st->st_uid != 0 || (st->st_mode & (S_IWGRP | S_IWOTH)))
                return false;
        return fstatfs(fd, &fs) == 0 && fs.f_type != FUSE_SUPER_MAGIC;
}

int ep_file_identify(int fd, EpFileIdentity *ret) {
        static const char salt[] = "ebpf-profiler file of a user";
        uint8_t digest[EP_SHA256_SIZE];
        EpFileIdentity out = {};
        struct stat st;
        EpSha256 sha;
        int r;

        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EBADFD;
        out.size = (uint64_t) st.st_size;
        r = htlhash(fd, out.size, out.htlhash);
        if (r < 0)
                return r;
        out.system = system_file(fd, &st);
        if (out.system)
                memcpy(out.id, out.htlhash, EP_FILE_ID_SIZE);
        else {
                ep_sha256_init(&sha);
                ep_sha256_update(&sha, salt, sizeof salt);
                ep_sha256_update(&sha, out.htlhash, EP_FILE_ID_SIZE);
                put_le64(&sha, st.st_uid);
                put_le64(&sha, st.st_dev);
                put_le64(&sha, st.st_ino);
                ep_sha256_final(&sha, digest);
                memcpy(out.id, digest, EP_FILE_ID_SIZE);
        }
        *ret = out;
        return 0;
}

int ep_file_id_from_fd(int fd, uint8_t ret_id[EP_FILE_ID_SIZE], uint64_t *ret_size) {
        EpFileIdentity ident;
        int r;

        r = ep_file_identify(fd, &ident);
        if (r < 0)
                return r;
        memcpy(ret_id, ident.id, EP_FILE_ID_SIZE);
        if (ret_size)
                *ret_size = ident.size;
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
