/* SPDX-License-Identifier: MIT */
#pragma once

/* Single-producer single-consumer ring of variable-length records in a sealed memfd, with an
 * eventfd to wake the consumer. One process creates it (ep_ring_create) and hands the two
 * descriptors to the peer over D-Bus ('h'); the peer maps them (ep_ring_attach). Positions live
 * in the shared header, so a consumer that restarts and re-attaches continues where the last
 * one stopped. Nothing read from the shared area is trusted, whichever side is the less
 * privileged one: a corrupt record length makes the consumer report -EBADMSG instead of
 * reading out of bounds; the producer keeps its own head (the shared one is only written) and
 * checks every tail it reads (ep_ring_peer_errors()). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

typedef struct EpRing EpRing;

/* Record header: 8 bytes, records are 8-byte aligned. */
typedef struct EpRingRecord {
        uint32_t len;  /* payload bytes, not counting this header or padding */
        uint16_t type; /* message type (wire.h); 0 is reserved for wrap padding */
        uint16_t flags;
} EpRingRecord;

/* data_size is rounded up to a power of two, at least 64 KiB. */
int ep_ring_create(const char *name, size_t data_size, EpRing **ret);
/* Maps a ring made by a peer. Takes no ownership of the descriptors (they are dup'ed). */
int ep_ring_attach(int memfd, int eventfd, EpRing **ret);
EpRing *ep_ring_free(EpRing *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpRing *, ep_ring_free);
#define _cleanup_ring_ _cleanup_(ep_ring_freep)

int ep_ring_memfd(const EpRing *r);
int ep_ring_eventfd(const EpRing *r);
size_t ep_ring_data_size(const EpRing *r);
/* Largest payload a single record may carry. */
size_t ep_ring_max_record(const EpRing *r);

/* Producer side. reserve returns a pointer to len writable bytes, or NULL when the ring is
 * full (the drop is counted in the shared header) or len is too large. commit publishes
 * the reserved record. Wake the consumer with ep_ring_notify() after a batch. */
void *ep_ring_reserve(EpRing *r, uint16_t type, uint32_t len);
void ep_ring_commit(EpRing *r);
int ep_ring_push(EpRing *r, uint16_t type, const void *data, uint32_t len);
/* Producer: bytes free for records (padding included), from its own head and a checked tail:
 * 0 when the consumer wrote an impossible one (counted, ep_ring_peer_errors()). */
size_t ep_ring_room(EpRing *r);
int ep_ring_notify(EpRing *r);

/* Consumer side. peek returns 1 and the next record, 0 when the ring is empty, or -EBADMSG
 * when the shared area holds an impossible record (the ring is then unusable: re-create).
 * consume releases the record returned by the last peek. */
int ep_ring_peek(EpRing *r, EpRingRecord *ret_header, const void **ret_payload);
void ep_ring_consume(EpRing *r);
/* Reads the eventfd counter so the next wake-up can be noticed; call before draining. */
void ep_ring_clear_wakeup(EpRing *r);

/* Discards everything unread (the producer does this when a new consumer takes over a ring
 * whose earlier records refer to state the new consumer never saw). Returns records dropped. */
uint64_t ep_ring_reset(EpRing *r);

/* Counters kept in the shared header. */
uint64_t ep_ring_records_written(const EpRing *r);
uint64_t ep_ring_records_dropped(const EpRing *r);
size_t ep_ring_bytes_used(const EpRing *r);
/* Producer: impossible read positions its consumer wrote (records are dropped meanwhile). */
uint64_t ep_ring_peer_errors(const EpRing *r);
/* Producer: bytes of consumed pages it gave back to the kernel (each costs a fault and a
 * zeroed page when written again). */
uint64_t ep_ring_released_bytes(const EpRing *r);
