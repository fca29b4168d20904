/* SPDX-License-Identifier: MIT */
#pragma once

/* File identity used everywhere a file is named across processes and restarts.
 *
 * The htlhash (OTel's, what backends know a file by): SHA-256 over (first 4096 bytes ‖ last
 * 4096 bytes ‖ file length as big-endian u64), first 16 bytes. Cheap (8 KiB read) and stable
 * across paths, containers and rebuilds that do not change content -- and forged by anyone who
 * copies a library's first and last pages into a file of its size. So it is the file ID only
 * of a file whose content no unprivileged user chose: owned by root, writable by nobody else,
 * not on FUSE (whose daemon reports any owner). Any other file's ID also hashes its owner,
 * device and inode: a forgery names only itself, and can take no system library's cached
 * unwind table or symbols (the caches are keyed by file ID). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

typedef struct EpFileIdentity {
        uint8_t id[EP_FILE_ID_SIZE];      /* what the profiler names it by */
        uint8_t htlhash[EP_FILE_ID_SIZE]; /* what an OTLP backend names it by */
        uint64_t size;
        bool system;                      /* id == htlhash: root's, writable by root only */
} EpFileIdentity;

int ep_file_identify(int fd, EpFileIdentity *ret);
/* The ID alone (ep_file_identify()). */
int ep_file_id_from_fd(int fd, uint8_t ret_id[EP_FILE_ID_SIZE], uint64_t *ret_size);
/* 32 lowercase hex characters and a NUL. */
void ep_file_id_to_hex(const uint8_t id[EP_FILE_ID_SIZE], char ret[2 * EP_FILE_ID_SIZE + 1]);
void ep_hex_encode(const void *p, size_t n, char *ret); /* ret holds 2n+1 */
