/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "sha256.h"

/* FIPS 180-4, 4.2.2: the first 32 bits of the fractional parts of the cube roots of the
 * first 64 primes. */
static const uint32_t K[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, unsigned n) {
        return (x >> n) | (x << (32 - n));
}

static uint32_t load_be32(const uint8_t *p) {
        return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16 | (uint32_t) p[2] << 8 | p[3];
}

static void store_be32(uint8_t *p, uint32_t v) {
        p[0] = (uint8_t) (v >> 24);
        p[1] = (uint8_t) (v >> 16);
        p[2] = (uint8_t) (v >> 8);
        p[3] = (uint8_t) v;
}

/* FIPS 180-4, 6.2.2: one 512-bit block. */
static void compress(uint32_t h[8], const uint8_t block[64]) {
        uint32_t w[64], v[8];

        for (unsigned t = 0; t < 16; t++)
                w[t] = load_be32(block + 4 * t);
        for (unsigned t = 16; t < 64; t++) {
                uint32_t s0 = ror(w[t - 15], 7) ^ ror(w[t - 15], 18) ^ (w[t - 15] >> 3);
                uint32_t s1 = ror(w[t - 2], 17) ^ ror(w[t - 2], 19) ^ (w[t - 2] >> 10);
                w[t] = w[t - 16] + s0 + w[t - 7] + s1;
        }
        memcpy(v, h, sizeof v);
        for (unsigned t = 0; t < 64; t++) {
                uint32_t e = v[4], a = v[0];
                uint32_t t1 = v[7] + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & v[5]) ^ (~e & v[6])) + K[t] + w[t];
                uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & v[1]) ^ (a & v[2]) ^ (v[1] & v[2]));
                memmove(v + 1, v, 7 * sizeof v[0]);
                v[4] += t1;
                v[0] = t1 + t2;
        }
        for (unsigned i = 0; i < 8; i++)
                h[i] += v[i];
}

void ep_sha256_init(EpSha256 *s) {
        /* 5.3.3: the first 32 bits of the fractional parts of the square roots of the first
         * 8 primes. */
        *s = (EpSha256) { .h = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c,
                                 0x1f83d9ab, 0x5be0cd19 } };
}

void ep_sha256_update(EpSha256 *s, const void *data, size_t n) {
        const uint8_t *p = data;

        s->length += n;
        while (n > 0) {
                size_t k = sizeof s->block - s->fill;
                if (k > n)
                        k = n;
                memcpy(s->block + s->fill, p, k);
                s->fill += k;
                p += k;
                n -= k;
                if (s->fill == sizeof s->block) {
                        compress(s->h, s->block);
                        s->fill = 0;
                }
        }
}

void ep_sha256_final(EpSha256 *s, uint8_t ret[EP_SHA256_SIZE]) {
        /* 5.1.1: a 1 bit, zeros up to 56 bytes into a block, the length in bits (big-endian). */
        uint64_t bits = s->length * 8;
        uint8_t pad[72] = { 0x80 };
        size_t n_pad = (s->fill < 56 ? 56 : 120) - s->fill;

        for (unsigned i = 0; i < 8; i++)
                pad[n_pad + i] = (uint8_t) (bits >> (56 - 8 * i));
        ep_sha256_update(s, pad, n_pad + 8);
        for (unsigned i = 0; i < 8; i++)
                store_be32(ret + 4 * i, s->h[i]);
}

void ep_sha256(const void *data, size_t n, uint8_t ret[EP_SHA256_SIZE]) {
        EpSha256 s;

        ep_sha256_init(&s);
        ep_sha256_update(&s, data, n);
        ep_sha256_final(&s, ret);
}
