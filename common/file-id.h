/* SPDX-License-Identifier: MIT */
#pragma once

/* File identity used everywhere a file is named across processes and restarts: the OTel
 * "htlhash": SHA-256 over (first 4096 bytes ‖ last 4096 bytes ‖ file length as big-endian
 * u64), first 16 bytes. Cheap (8 KiB read) and stable across paths, containers and rebuilds
 * that do not change content. */

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

int ep_file_id_from_fd(int fd, uint8_t ret_id[EP_FILE_ID_SIZE], uint64_t *ret_size);
/* 32 lowercase hex characters and a NUL. */
void ep_file_id_to_hex(const uint8_t id[EP_FILE_ID_SIZE], char ret[2 * EP_FILE_ID_SIZE + 1]);
void ep_hex_encode(const void *p, size_t n, char *ret); /* ret holds 2n+1 */
