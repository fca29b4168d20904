/* SPDX-License-Identifier: MIT */
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "shm-ring.h"
#include "tests.h"

static void test_roundtrip_and_wrap(void) {
        _cleanup_ring_ EpRing *p = NULL, *c = NULL;
        EpRingRecord h;
        const void *payload;
        uint8_t buf[3000];
        uint64_t produced = 0, consumed = 0;

        ASSERT_OK(ep_ring_create("test", 64 * 1024, &p));
        ASSERT_OK(ep_ring_attach(ep_ring_memfd(p), ep_ring_eventfd(p), &c));
        ASSERT_EQ(ep_ring_data_size(c), (size_t) 64 * 1024);

        /* Push and pop records of varying size many times around the ring, checking content. */
        for (int round = 0; round < 2000; round++) {
                uint32_t len = 1 + (round * 37) % sizeof buf;
                memset(buf, round & 0xff, len);
                ASSERT_OK(ep_ring_push(p, 1 + round % 7, buf, len));
                produced++;
                if (round % 3 == 2)
                        while (ep_ring_peek(c, &h, &payload) == 1) {
                                ASSERT_EQ(h.type, 1 + consumed % 7);
                                ASSERT_EQ(h.len, 1 + (consumed * 37) % sizeof buf);
                                ASSERT_EQ(((const uint8_t *) payload)[h.len - 1], consumed & 0xff);
                                ep_ring_consume(c);
                                consumed++;
                        }
        }
        while (ep_ring_peek(c, &h, &payload) == 1) {
                ep_ring_consume(c);
                consumed++;
        }
        ASSERT_EQ(consumed, produced);
        ASSERT_EQ(ep_ring_records_written(c), produced);
        ASSERT_EQ(ep_ring_records_dropped(c), 0u);
        ASSERT_EQ(ep_ring_bytes_used(p), 0u);
}

static void test_full_counts_drops(void) {
        _cleanup_ring_ EpRing *p = NULL;
        uint8_t buf[1000] = {};
        int ok = 0, full = 0;

        ASSERT_OK(ep_ring_create("test", 64 * 1024, &p));
        for (int i = 0; i < 100; i++) {
                if (ep_ring_push(p, 1, buf, sizeof buf) == 0)
                        ok++;
                else
                        full++;
        }
        ASSERT_TRUE(full > 0);
        ASSERT_EQ(ok, 64 * 1024 / 1008);
        ASSERT_EQ(ep_ring_records_dropped(p), (uint64_t) full);
        /* Oversized records are refused and counted, never written. */
        ASSERT_TRUE(ep_ring_reserve(p, 1, ep_ring_max_record(p) + 1) == NULL);
        ASSERT_EQ(ep_ring_records_dropped(p), (uint64_t) full + 1);
        ASSERT_EQ(ep_ring_reset(p), (uint64_t) ok);
        ASSERT_EQ(ep_ring_bytes_used(p), 0u);
}

static void test_corrupt_length_detected(void) {
        _cleanup_ring_ EpRing *p = NULL, *c = NULL;
        EpRingRecord h;
        const void *payload;
        uint32_t v = 42;

        ASSERT_OK(ep_ring_create("test", 64 * 1024, &p));
        ASSERT_OK(ep_ring_push(p, 3, &v, sizeof v));
        /* A hostile or buggy producer rewrites the record length to point past the data. */
        EpRingRecord *rec = (EpRingRecord *) ep_ring_reserve(p, 3, 8) - 1;
        rec->len = 1u << 30;
        ep_ring_commit(p);
        ASSERT_OK(ep_ring_attach(ep_ring_memfd(p), ep_ring_eventfd(p), &c));
        ASSERT_EQ(ep_ring_peek(c, &h, &payload), 1);
        ep_ring_consume(c);
        ASSERT_EQ(ep_ring_peek(c, &h, &payload), -EBADMSG);
}

static void test_cross_process(void) {
        _cleanup_ring_ EpRing *p = NULL;
        pid_t pid;
        int status;

        ASSERT_OK(ep_ring_create("test", 256 * 1024, &p));
        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                EpRing *c = NULL;
                uint64_t expect = 0;
                if (ep_ring_attach(ep_ring_memfd(p), ep_ring_eventfd(p), &c) < 0)
                        _exit(2);
                while (expect < 500000) {
                        EpRingRecord h;
                        const void *payload;
                        int k = ep_ring_peek(c, &h, &payload);
                        if (k < 0)
                                _exit(3);
                        if (k == 0)
                                continue;
                        uint64_t v;
                        memcpy(&v, payload, sizeof v);
                        if (v != expect)
                                _exit(4);
                        ep_ring_consume(c);
                        expect++;
                }
                _exit(0);
        }
        for (uint64_t i = 0; i < 500000;)
                if (ep_ring_push(p, 9, &i, sizeof i) == 0)
                        i++;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_EQ(WEXITSTATUS(status), 0);
}

static void test_attach_rejects_unsealed(void) {
        _cleanup_close_ int fd = memfd_create("x", MFD_CLOEXEC);
        EpRing *c = NULL;
        ASSERT_TRUE(fd >= 0);
        ASSERT_OK(ftruncate(fd, 4096 + 65536));
        ASSERT_EQ(ep_ring_attach(fd, fd, &c), -EPERM);
}

/* Bytes of the ring's memfd in memory. */
static uint64_t resident(const EpRing *r) {
        struct stat st;

        ASSERT_OK(fstat(ep_ring_memfd(r), &st) < 0 ? -errno : 0);
        return (uint64_t) st.st_blocks * 512;
}

static void push_seq(EpRing *p, uint64_t seq) {
        uint64_t buf[125]; /* 1000 bytes, every word the sequence number */

        for (size_t i = 0; i < ELEMENTSOF(buf); i++)
                buf[i] = seq;
        ASSERT_OK(ep_ring_push(p, 1, buf, sizeof buf));
}

static void pop_seq(EpRing *c, uint64_t seq) {
        EpRingRecord h;
        const void *payload;
        uint64_t buf[125];

        ASSERT_EQ(ep_ring_peek(c, &h, &payload), 1);
        ASSERT_EQ(h.len, sizeof buf);
        memcpy(buf, payload, sizeof buf);
        for (size_t i = 0; i < ELEMENTSOF(buf); i++)
                ASSERT_EQ(buf[i], seq);
        ep_ring_consume(c);
}

static void test_consumed_pages_released(void) {
        /* 8 MiB through a 1 MiB ring whose consumer keeps up: writing stays in the ring's
         * window (its first two 256 KiB chunks), so no page is given back and faulted in again,
         * and the ring holds no more than that in memory; every record arrives intact. */
        _cleanup_ring_ EpRing *p = NULL, *c = NULL;
        uint64_t seq = 0, next = 0;

        ASSERT_OK(ep_ring_create("test", 1 << 20, &p));
        ASSERT_OK(ep_ring_attach(ep_ring_memfd(p), ep_ring_eventfd(p), &c));
        while (seq < 8 * 1024) {
                for (int i = 0; i < 50; i++)
                        push_seq(p, seq++);
                while (next < seq)
                        pop_seq(c, next++);
        }
        ASSERT_TRUE(resident(p) <= 2 * 256 * 1024 + 4096);
        ASSERT_EQ(ep_ring_released_bytes(p), 0u);
        ASSERT_EQ(ep_ring_records_dropped(p), 0u);

        /* The early wraps that keep it there take none of its room: the producer steps over
         * its own padding, so a record written into the empty ring is all that is unread,
         * wrap or not (2,000 KB: four times round the window). */
        for (int i = 0; i < 2000; i++) {
                push_seq(p, seq++);
                ASSERT_EQ(ep_ring_bytes_used(p), 1008u);
                pop_seq(c, next++);
        }
        ASSERT_EQ(ep_ring_released_bytes(p), 0u);

        /* And a consumer that stops leaves the whole ring to fill (but for the padding of one
         * wrap at its end). */
        {
                uint64_t room = 0;

                while (ep_ring_bytes_used(p) + 1008 <= ep_ring_data_size(p) &&
                       ep_ring_reserve(p, 1, 1000) != NULL) {
                        ep_ring_commit(p);
                        room += 1008;
                }
                ASSERT_TRUE(room >= ep_ring_data_size(p) - 2 * 1008);
                for (uint64_t i = 0; i < room / 1008; i++) {
                        EpRingRecord h;
                        const void *payload;

                        ASSERT_EQ(ep_ring_peek(c, &h, &payload), 1);
                        ep_ring_consume(c);
                }
        }

        /* A consumer that lags by 600 records (600 KB) makes the writes leave the window: the
         * pages beyond it are given back once read, the window's are not. */
        for (int i = 0; i < 600; i++)
                push_seq(p, seq++);
        while (seq < 16 * 1024) {
                for (int i = 0; i < 50; i++)
                        push_seq(p, seq++);
                for (int i = 0; i < 50; i++)
                        pop_seq(c, next++);
        }
        while (next < seq)
                pop_seq(c, next++);
        ASSERT_TRUE(ep_ring_released_bytes(p) > 0);
        ASSERT_TRUE(resident(p) <= 4 * 256 * 1024 + 4096);
        ASSERT_EQ(ep_ring_records_dropped(p), 0u);

        /* Nearly full, then partly read, then written round into the pages the first reads
         * gave back: the unread records in between must survive the releases. */
        while (ep_ring_bytes_used(p) + 2 * 1008 < ep_ring_data_size(p))
                push_seq(p, seq++);
        ASSERT_TRUE(resident(p) >= 1000 * 1024);
        for (int i = 0; i < 300; i++)
                pop_seq(c, next++);
        for (int i = 0; i < 250; i++)
                push_seq(p, seq++);
        while (next < seq)
                pop_seq(c, next++);
        ASSERT_EQ(ep_ring_bytes_used(p), 0u);
        ASSERT_EQ(ep_ring_records_dropped(p), 0u);
}

/* The shared header as the peer maps it: the positions a hostile consumer writes. Their offsets
 * are checked against what the producer wrote, not taken on faith. */
typedef struct PeerView {
        uint8_t *map;
        size_t size;
        _Atomic uint64_t *head, *tail;
} PeerView;

static void peer_view(EpRing *p, PeerView *ret) {
        struct stat st;

        ASSERT_OK(fstat(ep_ring_memfd(p), &st) < 0 ? -errno : 0);
        ret->size = (size_t) st.st_size;
        ret->map = mmap(NULL, ret->size, PROT_READ | PROT_WRITE, MAP_SHARED, ep_ring_memfd(p), 0);
        ASSERT_TRUE(ret->map != MAP_FAILED);
        ret->head = (_Atomic uint64_t *) (ret->map + 64);
        ret->tail = (_Atomic uint64_t *) (ret->map + 128);
        ASSERT_EQ(*ret->head, ep_ring_bytes_used(p) + *ret->tail);
}

/* Reads everything there is: the number of records. */
static uint64_t drain(EpRing *c) {
        EpRingRecord h;
        const void *payload;
        uint64_t n = 0;

        while (ep_ring_peek(c, &h, &payload) == 1) {
                ep_ring_consume(c);
                n++;
        }
        return n;
}

/* A consumer that writes the header (the less privileged side: the collector for the loader's
 * ring, the exporter for the collector's) cannot make the producer write out of bounds, loop,
 * or overwrite what is unread; the producer counts it and goes on once a consumer takes over. */
static void test_hostile_consumer(void) {
        _cleanup_ring_ EpRing *p = NULL, *c = NULL;
        size_t size = 64 * 1024;
        uint8_t buf[100] = {};
        uint64_t dropped;
        PeerView v;

        ASSERT_OK(ep_ring_create("test", size, &p));
        ASSERT_OK(ep_ring_push(p, 1, buf, sizeof buf));
        peer_view(p, &v);
        ASSERT_OK(ep_ring_attach(ep_ring_memfd(p), ep_ring_eventfd(p), &c));

        /* An unaligned head a few bytes before the end: the producer writes from its own. */
        *v.head = 3 * size - 3;
        for (uint64_t i = 0; i < 2000; i++) {
                ASSERT_OK(ep_ring_push(p, 2, &i, sizeof i));
                drain(c);
        }
        ASSERT_EQ(ep_ring_peer_errors(p), 0u);
        ASSERT_EQ(ep_ring_records_dropped(p), 0u);
        ASSERT_EQ(ep_ring_room(p), size);

        /* A tail far beyond head (the release loop ran for 2^64 bytes), unaligned, or moved
         * back: each push is refused and counted, at once. */
        dropped = ep_ring_records_dropped(p);
        const uint64_t tails[] = { UINT64_MAX - 7, *v.tail + 3, 0 };
        for (size_t i = 0; i < ELEMENTSOF(tails); i++) {
                *v.tail = tails[i];
                ASSERT_EQ(ep_ring_push(p, 1, buf, sizeof buf), -ENOBUFS);
                ASSERT_EQ(ep_ring_peer_errors(p), 2 * (uint64_t) i + 1);
                ASSERT_EQ(ep_ring_room(p), 0u); /* what a producer looks at first says so too */
                ASSERT_EQ(ep_ring_peer_errors(p), 2 * (uint64_t) i + 2);
        }
        ASSERT_EQ(ep_ring_records_dropped(p), dropped + ELEMENTSOF(tails));

        /* A consumer takes the ring over: it starts from the producer's positions. */
        ep_ring_reset(p);
        c = ep_ring_free(c);
        ASSERT_OK(ep_ring_attach(ep_ring_memfd(p), ep_ring_eventfd(p), &c));
        for (uint64_t i = 0; i < 3; i++)
                ASSERT_OK(ep_ring_push(p, 3, &i, sizeof i));
        for (uint64_t i = 0; i < 3; i++) {
                EpRingRecord h;
                const void *payload;
                uint64_t got;

                ASSERT_EQ(ep_ring_peek(c, &h, &payload), 1);
                memcpy(&got, payload, sizeof got);
                ASSERT_EQ(got, i);
                ep_ring_consume(c);
        }
        ASSERT_EQ(drain(c), 0u);

        /* A ring whose peer left impossible positions is not taken over. */
        *v.head = *v.tail + 4;
        c = ep_ring_free(c);
        ASSERT_EQ(ep_ring_attach(ep_ring_memfd(p), ep_ring_eventfd(p), &c), -EBADMSG);
        ASSERT_OK(munmap(v.map, v.size) < 0 ? -errno : 0);
}

int main(void) {
        test_roundtrip_and_wrap();
        test_full_counts_drops();
        test_corrupt_length_detected();
        test_cross_process();
        test_attach_rejects_unsealed();
        test_consumed_pages_released();
        test_hostile_consumer();
        return tests_summary("shm-ring");
}
