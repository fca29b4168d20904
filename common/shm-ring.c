/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "log.h"
#include "shm-ring.h"

#define RING_MAGIC 0x31525045u /* "EPR1" */
#define RING_HEADER_SIZE 4096u
#define RING_MIN_DATA (64u * 1024u)
#define RING_MAX_DATA (1u << 30)
#define RING_RELEASE_CHUNK (256u * 1024u)
#define REC_HDR sizeof(EpRingRecord)

/* The shared header. Producer and consumer positions sit on separate cache lines; both only
 * ever grow (bytes since creation), the offset in the data area is position & (size - 1). */
typedef struct RingShared {
        uint32_t magic;
        uint32_t header_size;
        uint64_t data_size;
        _Alignas(64) _Atomic uint64_t head;
        _Atomic uint64_t records_written;
        _Atomic uint64_t records_dropped;
        _Alignas(64) _Atomic uint64_t tail;
} RingShared;

_Static_assert(sizeof(RingShared) <= RING_HEADER_SIZE, "ring header too large");

struct EpRing {
        int memfd, eventfd;
        RingShared *shared;
        uint8_t *data;
        size_t map_size, data_size;
        uint64_t head;         /* producer: its own head; the shared one is only written */
        uint64_t tail_seen;    /* producer: the last tail that was valid (tails only grow) */
        uint64_t pending_head; /* producer: end of the reserved record */
        uint64_t pending_tail; /* consumer: end of the peeked record */
        uint64_t released;     /* producer: the pages of positions before this were given back */
        uint64_t released_bytes; /* producer: how many bytes of pages were given back */
        size_t release_chunk;  /* producer: pages are given back this many bytes at a time */
        size_t window;         /* producer: the first bytes of the data area, never given back */
        uint8_t *dirty;        /* producer: a bit per chunk written since it was given back */
        bool release_failed;   /* producer: the memfd cannot punch holes; keep everything */
        uint64_t peer_errors;  /* producer: impossible tails the consumer wrote */
};

/* The producer's side of giving pages back: chunks of 256 KiB (a quarter of a small ring), the
 * first two of them the window. all_dirty: pages may be in memory that this side did not
 * write (a ring made by a peer). */
static int release_setup(EpRing *r, bool all_dirty) {
        size_t n_chunks;

        r->release_chunk = MIN(RING_RELEASE_CHUNK, r->data_size / 4);
        r->window = 2 * r->release_chunk;
        n_chunks = r->data_size / r->release_chunk;
        r->dirty = calloc((n_chunks + 7) / 8, 1);
        if (!r->dirty)
                return -ENOMEM;
        if (all_dirty)
                memset(r->dirty, 0xff, (n_chunks + 7) / 8);
        return 0;
}

static bool chunk_dirty(const EpRing *r, size_t c) {
        return r->dirty[c / 8] & (1u << (c % 8));
}

/* The chunks of data offsets [off, off + n) outside the window were written. */
static void mark_written(EpRing *r, size_t off, size_t n) {
        for (size_t c = MAX(off, r->window) / r->release_chunk; c * r->release_chunk < off + n; c++)
                r->dirty[c / 8] |= (uint8_t) (1u << (c % 8));
}

/* A wrap-padding record at off, up to the end of the data area. */
static void write_padding(EpRing *r, size_t off) {
        EpRingRecord *h = (EpRingRecord *) (r->data + off);

        *h = (EpRingRecord) { .len = (uint32_t) (r->data_size - off - REC_HDR), .type = 0 };
        mark_written(r, off, REC_HDR);
}

static size_t round_pow2(size_t n) {
        size_t p = RING_MIN_DATA;
        while (p < n && p < RING_MAX_DATA)
                p <<= 1;
        return p;
}

static int ring_map(EpRing *r, size_t map_size) {
        void *p = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, r->memfd, 0);
        if (p == MAP_FAILED)
                return -errno;
        r->shared = p;
        r->map_size = map_size;
        r->data = (uint8_t *) p + RING_HEADER_SIZE;
        return 0;
}

int ep_ring_create(const char *name, size_t data_size, EpRing **ret) {
        _cleanup_(ep_ring_freep) EpRing *r = NULL;
        int r_;

        r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        r->memfd = r->eventfd = -EBADF;
        r->data_size = round_pow2(data_size);

        r->memfd = memfd_create(name ?: "ep-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (r->memfd < 0)
                return -errno;
        if (ftruncate(r->memfd, RING_HEADER_SIZE + r->data_size) < 0)
                return -errno;
        /* A peer must not be able to shrink the file under our mapping (SIGBUS). */
        if (fcntl(r->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
                return -errno;
        r->eventfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (r->eventfd < 0)
                return -errno;
        r_ = ring_map(r, RING_HEADER_SIZE + r->data_size);
        if (r_ < 0)
                return r_;

        r->shared->magic = RING_MAGIC;
        r->shared->header_size = RING_HEADER_SIZE;
        r->shared->data_size = r->data_size;
        r_ = release_setup(r, false);
        if (r_ < 0)
                return r_;
        *ret = TAKE_PTR(r);
        return 0;
}

int ep_ring_attach(int memfd, int eventfd_, EpRing **ret) {
        _cleanup_(ep_ring_freep) EpRing *r = NULL;
        struct stat st;
        int seals, r_;

        r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        r->memfd = fcntl(memfd, F_DUPFD_CLOEXEC, 3);
        if (r->memfd < 0)
                return -errno;
        r->eventfd = fcntl(eventfd_, F_DUPFD_CLOEXEC, 3);
        if (r->eventfd < 0)
                return -errno;

        seals = fcntl(r->memfd, F_GET_SEALS);
        if (seals < 0)
                return -errno;
        if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
                return -EPERM;
        if (fstat(r->memfd, &st) < 0)
                return -errno;
        if (st.st_size < (off_t) (RING_HEADER_SIZE + RING_MIN_DATA) ||
            st.st_size > (off_t) (RING_HEADER_SIZE + (uint64_t) RING_MAX_DATA))
                return -EBADMSG;
        r_ = ring_map(r, st.st_size);
        if (r_ < 0)
                return r_;

        r->data_size = st.st_size - RING_HEADER_SIZE;
        if (r->shared->magic != RING_MAGIC || r->shared->header_size != RING_HEADER_SIZE ||
            r->shared->data_size != r->data_size || (r->data_size & (r->data_size - 1)) != 0)
                return -EBADMSG;

        r->head = r->pending_head = atomic_load_explicit(&r->shared->head, memory_order_acquire);
        r->tail_seen = r->pending_tail = atomic_load_explicit(&r->shared->tail, memory_order_acquire);
        /* Whichever side this is, the positions it starts from are the peer's: checked once
         * here, a producer keeps its own head from now on (peer_tail()). */
        if ((r->head & 7) || (r->tail_seen & 7) || r->head - r->tail_seen > r->data_size)
                return -EBADMSG;
        r->released = r->pending_tail;
        r_ = release_setup(r, true);
        if (r_ < 0)
                return r_;
        *ret = TAKE_PTR(r);
        return 0;
}

EpRing *ep_ring_free(EpRing *r) {
        if (!r)
                return NULL;
        if (r->shared)
                munmap(r->shared, r->map_size);
        close_nointr(r->memfd);
        close_nointr(r->eventfd);
        free(r->dirty);
        free(r);
        return NULL;
}

int ep_ring_memfd(const EpRing *r) {
        return r->memfd;
}
int ep_ring_eventfd(const EpRing *r) {
        return r->eventfd;
}
size_t ep_ring_data_size(const EpRing *r) {
        return r->data_size;
}
size_t ep_ring_max_record(const EpRing *r) {
        return r->data_size / 4 - REC_HDR;
}

static void count_drop(EpRing *r) {
        atomic_fetch_add_explicit(&r->shared->records_dropped, 1, memory_order_relaxed);
}

/* The consumer's tail, as the producer may use it: 8-aligned, not before the last one seen,
 * not past the producer's own head. Anything else is an impossible position the consumer
 * wrote (a bug or an attack: the consumer side is the less privileged one): counted, logged
 * once, and the ring taken as full until a consumer takes it over again (ep_ring_reset()).
 * The consumer is woken: one that reads the ring finds it broken and asks for it again.
 * Without the check, a tail beyond head made the release loop run for 2^64 bytes and a tail
 * far behind let records overwrite unread ones. */
static bool peer_tail(EpRing *r, uint64_t *ret) {
        uint64_t tail = atomic_load_explicit(&r->shared->tail, memory_order_acquire);

        if ((tail & 7) || tail < r->tail_seen || tail > r->head) {
                if (r->peer_errors++ == 0)
                        log_warning("The consumer of ring %d wrote an impossible read position (%" PRIu64
                                    ", written up to %" PRIu64 "): nothing more is written to it until a "
                                    "consumer takes it over.", r->memfd, tail, r->head);
                (void) ep_ring_notify(r);
                return false;
        }
        r->tail_seen = tail;
        *ret = tail;
        return true;
}

/* Gives the pages of consumed records back to the kernel (a hole punched in the memfd), so a
 * ring holds in memory only its window (the first two chunks) and what is unread, plus up to
 * two chunks, whatever its size: without this every page of a ring stays resident in both
 * peers once the positions went round it. The producer does it, not the consumer: positions
 * below tail are read and done with, and nobody but the producer writes their pages again --
 * later, after this returns (the kernel then hands it fresh zero pages). Only the free space is
 * released: positions [head - size, tail), whose pages are those of the positions [head, tail +
 * size) not written yet; a position below head - size shares its page with one below head,
 * which may be unread. Whole chunks only, one call per chunk the consumer goes through. The
 * window stays: a producer whose consumer keeps up writes in it (ep_ring_reserve()), and a
 * page given back costs a fault, a zeroed page and this call when it is written again. */
static void release_consumed(EpRing *r, uint64_t head, uint64_t tail) {
        uint64_t chunk = r->release_chunk, start, end;

        if (r->release_failed)
                return;
        start = MAX(r->released, head > r->data_size ? head - r->data_size : 0);
        start = (start + chunk - 1) / chunk * chunk;
        end = tail / chunk * chunk;
        if (end <= start)
                return;
        for (; start < end; start += chunk) {
                size_t off = start & (r->data_size - 1), c = off / chunk;

                if (off < r->window || !chunk_dirty(r, c))
                        continue; /* the window, or a hole already (padding only) */
                if (fallocate(r->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                              (off_t) (RING_HEADER_SIZE + off), (off_t) chunk) < 0) {
                        r->release_failed = true; /* e.g. a seccomp filter: memory as before */
                        return;
                }
                r->dirty[c / 8] &= (uint8_t) ~(1u << (c % 8));
                r->released_bytes += chunk;
        }
        r->released = end;
}

void *ep_ring_reserve(EpRing *r, uint16_t type, uint32_t len) {
        uint64_t head, tail, total, pad = 0;
        size_t off, contiguous;
        EpRingRecord *h;

        if (type == 0 || len > ep_ring_max_record(r)) {
                count_drop(r);
                return NULL;
        }
        total = REC_HDR + ALIGN8((uint64_t) len);
        head = r->head;
        if (!peer_tail(r, &tail)) {
                count_drop(r);
                return NULL;
        }
        release_consumed(r, head, tail);
        off = head & (r->data_size - 1);
        contiguous = r->data_size - off;
        if (contiguous < total)
                pad = contiguous; /* records never straddle the end: pad to it and wrap */
        else if (head == tail && off >= r->window / 2 && total <= off) {
                /* All read, and past half the window: wrap early, so that the batch this record
                 * starts is written in pages that are in memory (the window's) unless it is
                 * larger than half the window. The padding is published on its own and stepped
                 * over here (the consumer has nothing to read, so tail is ours to move; if it
                 * stepped over the padding first, tail is there already): the ring keeps all of
                 * its room. Consumers read tail before head, so they never see tail past head. */
                uint64_t expected = head;

                write_padding(r, off);
                head += contiguous;
                r->head = head;
                atomic_store_explicit(&r->shared->head, head, memory_order_release);
                (void) atomic_compare_exchange_strong_explicit(&r->shared->tail, &expected, head,
                                                               memory_order_acq_rel, memory_order_relaxed);
                tail = r->tail_seen = head;
                off = 0;
        }
        if (head + pad + total - tail > r->data_size) {
                count_drop(r);
                return NULL;
        }
        if (pad) {
                write_padding(r, off); /* pad == contiguous */
                head += pad;
                off = 0;
        }
        mark_written(r, off, total);
        h = (EpRingRecord *) (r->data + off);
        *h = (EpRingRecord) { .len = len, .type = type };
        r->pending_head = head + total;
        return h + 1;
}

void ep_ring_commit(EpRing *r) {
        r->head = r->pending_head;
        atomic_store_explicit(&r->shared->head, r->head, memory_order_release);
        atomic_fetch_add_explicit(&r->shared->records_written, 1, memory_order_relaxed);
}

int ep_ring_push(EpRing *r, uint16_t type, const void *data, uint32_t len) {
        void *p = ep_ring_reserve(r, type, len);
        if (!p)
                return -ENOBUFS;
        memcpy(p, data, len);
        ep_ring_commit(r);
        return 0;
}

int ep_ring_notify(EpRing *r) {
        uint64_t one = 1;
        if (write(r->eventfd, &one, sizeof one) < 0 && errno != EAGAIN)
                return -errno;
        return 0;
}

void ep_ring_clear_wakeup(EpRing *r) {
        uint64_t v;
        (void) !read(r->eventfd, &v, sizeof v);
}

/* Validates the record at position tail and returns its header copy and total size. */
static int ring_record_at(const EpRing *r, uint64_t tail, uint64_t head, EpRingRecord *ret_hdr,
                          uint64_t *ret_total) {
        size_t off = tail & (r->data_size - 1);
        EpRingRecord h;
        uint64_t total;

        if (head - tail > r->data_size || (off & 7) || r->data_size - off < REC_HDR)
                return -EBADMSG;
        memcpy(&h, r->data + off, sizeof h);
        total = REC_HDR + ALIGN8((uint64_t) h.len);
        if (total > r->data_size - off || total > head - tail)
                return -EBADMSG;
        *ret_hdr = h;
        *ret_total = total;
        return 0;
}

int ep_ring_peek(EpRing *r, EpRingRecord *ret_header, const void **ret_payload) {
        /* tail first: the producer moves it over an early wrap's padding after publishing a
         * head past it (ep_ring_reserve()). */
        for (;;) {
                uint64_t tail = atomic_load_explicit(&r->shared->tail, memory_order_acquire);
                uint64_t head = atomic_load_explicit(&r->shared->head, memory_order_acquire);
                EpRingRecord h;
                uint64_t total;
                int k;

                if (tail == head)
                        return 0;
                k = ring_record_at(r, tail, head, &h, &total);
                /* The producer may have stepped over an early wrap's padding since tail was
                 * loaded, and then written a lap over the position read: what was read is not
                 * a record, and moving tail from it would move tail back. Read again from the
                 * current positions. */
                atomic_thread_fence(memory_order_acquire);
                if (atomic_load_explicit(&r->shared->tail, memory_order_relaxed) != tail)
                        continue;
                if (k < 0)
                        return k;
                if (h.type == 0) { /* wrap padding */
                        atomic_store_explicit(&r->shared->tail, tail + total, memory_order_release);
                        continue;
                }
                *ret_header = h;
                *ret_payload = r->data + (tail & (r->data_size - 1)) + REC_HDR;
                r->pending_tail = tail + total;
                return 1;
        }
}

void ep_ring_consume(EpRing *r) {
        atomic_store_explicit(&r->shared->tail, r->pending_tail, memory_order_release);
}

uint64_t ep_ring_reset(EpRing *r) {
        uint64_t head = r->head, tail = atomic_load_explicit(&r->shared->tail, memory_order_acquire);
        uint64_t n = 0;

        /* The shared head too: the last consumer may have written it. */
        atomic_store_explicit(&r->shared->head, head, memory_order_release);
        while (tail != head) {
                EpRingRecord h;
                uint64_t total;
                if (ring_record_at(r, tail, head, &h, &total) < 0)
                        break;
                if (h.type != 0)
                        n++;
                tail += total;
        }
        atomic_store_explicit(&r->shared->tail, head, memory_order_release);
        r->tail_seen = head;
        atomic_fetch_add_explicit(&r->shared->records_dropped, n, memory_order_relaxed);
        return n;
}

uint64_t ep_ring_records_written(const EpRing *r) {
        return atomic_load_explicit(&r->shared->records_written, memory_order_relaxed);
}
uint64_t ep_ring_peer_errors(const EpRing *r) {
        return r->peer_errors;
}
uint64_t ep_ring_released_bytes(const EpRing *r) {
        return r->released_bytes;
}
uint64_t ep_ring_records_dropped(const EpRing *r) {
        return atomic_load_explicit(&r->shared->records_dropped, memory_order_relaxed);
}
size_t ep_ring_room(EpRing *r) {
        uint64_t tail;

        if (!peer_tail(r, &tail))
                return 0;
        return r->data_size - (size_t) (r->head - tail);
}

size_t ep_ring_bytes_used(const EpRing *r) {
        uint64_t tail = atomic_load_explicit(&r->shared->tail, memory_order_acquire); /* see peek */
        uint64_t head = atomic_load_explicit(&r->shared->head, memory_order_acquire);
        return head - tail;
}
