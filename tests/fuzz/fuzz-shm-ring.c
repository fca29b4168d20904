/* SPDX-License-Identifier: MIT */
/* libFuzzer target: a shared-memory ring (common/shm-ring.c) whose shared area a hostile peer
 * writes. A producer and a consumer map one ring, as two daemons do; the input is a sequence
 * of operations, each one byte then its arguments: a record pushed (u16 type, u8 length, the
 * bytes), a record read and released, or bytes written by the peer anywhere in the shared
 * area (u16 offset modulo its size, u8 length, the bytes): positions, lengths, counters,
 * records. Whatever the peer writes, the producer must neither write outside the ring nor
 * loop (ep_ring_room() and reserve() check the tail it reads), and the consumer must hand out
 * only records inside the ring or refuse the ring (-EBADMSG). Any crash, hang or sanitizer
 * report is a bug. Built with clang by tests/fuzz/meson.build; seeds in corpus-shm-ring/. */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "shm-ring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RING_DATA (64u * 1024)

static uint8_t take(const uint8_t **data, size_t *size) {
        uint8_t b = 0;

        if (*size > 0) {
                b = **data;
                (*data)++;
                (*size)--;
        }
        return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        EpRing *producer = NULL, *consumer = NULL;
        bool consumer_broken = false;
        struct stat st;
        uint8_t *shared;

        if (ep_ring_create("fuzz-ring", RING_DATA, &producer) < 0)
                abort();
        if (ep_ring_attach(ep_ring_memfd(producer), ep_ring_eventfd(producer), &consumer) < 0 ||
            fstat(ep_ring_memfd(producer), &st) < 0)
                abort();
        shared = mmap(NULL, (size_t) st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, ep_ring_memfd(producer), 0);
        if (shared == MAP_FAILED)
                abort();

        while (size > 0) {
                uint8_t op = take(&data, &size) % 3;

                if (op == 0) { /* the producer pushes */
                        uint16_t type = (uint16_t) (take(&data, &size) | take(&data, &size) << 8);
                        uint8_t len = take(&data, &size);
                        uint8_t payload[256] = {};

                        memcpy(payload, data, len < size ? len : size);
                        (void) ep_ring_push(producer, type ?: 1, payload, len);
                        (void) ep_ring_room(producer);
                } else if (op == 1 && !consumer_broken) { /* the consumer reads */
                        EpRingRecord h;
                        const void *p;
                        int r = ep_ring_peek(consumer, &h, &p);

                        if (r == -EBADMSG)
                                consumer_broken = true; /* unusable: a daemon re-creates it */
                        else if (r == 1) {
                                /* inside the ring's mapping (the data area is mapped twice) */
                                volatile uint8_t sum = 0;
                                for (uint32_t i = 0; i < h.len; i++)
                                        sum += ((const uint8_t *) p)[i];
                                (void) sum;
                                ep_ring_consume(consumer);
                        } else if (r != 0)
                                abort();
                } else if (op == 2) { /* the peer writes into the shared area */
                        size_t off = (size_t) (take(&data, &size) | take(&data, &size) << 8) % (size_t) st.st_size;
                        size_t len = take(&data, &size);

                        len = len < size ? len : size;
                        len = len < (size_t) st.st_size - off ? len : (size_t) st.st_size - off;
                        memcpy(shared + off, data, len);
                        data += len;
                        size -= len;
                }
        }
        munmap(shared, (size_t) st.st_size);
        ep_ring_free(consumer);
        ep_ring_free(producer);
        return 0;
}
