/* SPDX-License-Identifier: MIT */
#pragma once

/* SHA-256 (FIPS 180-4), for content identities (file IDs, stack hashes), not for security.
 * Our own so that no daemon links a TLS library for one hash: libcrypto alone cost each
 * daemon ~3.7 MB of resident memory (docs/PERFORMANCE.md, section 5). */

#include <stddef.h>
#include <stdint.h>

#define EP_SHA256_SIZE 32

typedef struct EpSha256 {
        uint32_t h[8];
        uint64_t length; /* bytes hashed so far */
        uint8_t block[64];
        size_t fill; /* bytes waiting in block */
} EpSha256;

void ep_sha256_init(EpSha256 *s);
void ep_sha256_update(EpSha256 *s, const void *data, size_t n);
void ep_sha256_final(EpSha256 *s, uint8_t ret[EP_SHA256_SIZE]);
/* The digest of one buffer. */
void ep_sha256(const void *data, size_t n, uint8_t ret[EP_SHA256_SIZE]);
