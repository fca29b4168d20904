/* SPDX-License-Identifier: MIT */
/* The collector's trace intake: hand-built ring records (valid, truncated, lying about their
 * frame count, referring to unknown files) go through the decode function; counters,
 * de-duplication, symbolization requests, responses and the interval written to a store are
 * checked. No bus is involved. */

#include <errno.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collector.h"
#include "shm-ring.h"
#include "test-collector-util.h"
#include "wire-buf.h"
#include "wire-sym.h"
#include "wire.h"

#define KADDR 0xffffffff81000000ULL

static uint64_t rec[(sizeof(EpTraceMsg) + EP_MAX_FRAMES * sizeof(EpFrame)) / 8 + 8];

/* Builds an EP_MSG_TRACE record in rec; returns its length. */
static size_t trace(uint32_t pid, uint32_t tid, uint32_t cpu, const char *comm, const EpFrame *frames,
                    uint16_t n, uint16_t n_kernel) {
        EpTraceMsg *m = (EpTraceMsg *) rec;

        memset(rec, 0, sizeof(rec));
        m->time_ns = 1700000000000000000ULL + tid;
        m->pid = pid;
        m->tid = tid;
        m->cpu = cpu;
        m->n_frames = n;
        m->n_kernel = n_kernel;
        strncpy(m->comm, comm, EP_COMM_LEN);
        if (n > 0)
                memcpy(m->frames, frames, n * sizeof(EpFrame));
        return sizeof(EpTraceMsg) + n * sizeof(EpFrame);
}

static void announce_file(Collector *c, uint32_t key, uint8_t id_byte, const char *path) {
        uint8_t id[EP_FILE_ID_SIZE];
        EpWriter w;

        memset(id, id_byte, sizeof(id));
        ep_writer_init_dynamic(&w);
        ep_put_u32(&w, key);
        ep_put_bytes(&w, id, sizeof(id));
        ep_put_bytes(&w, id, sizeof(id)); /* its htlhash: a system file */
        ep_put_u64(&w, 12345);
        ep_put_str(&w, path);
        ASSERT_TRUE(!w.overflow);
        ASSERT_OK(collector_intake(c, EP_MSG_FILE, w.data, w.size));
        ep_writer_done(&w);
}

static void announce_process(Collector *c, uint32_t pid, uint64_t start, const char *comm, const char *exe) {
        EpWriter w;

        ep_writer_init_dynamic(&w);
        ep_put_u32(&w, pid);
        ep_put_u64(&w, start);
        ep_put_str(&w, comm);
        ep_put_str(&w, exe);
        ep_put_str(&w, "");
        ASSERT_OK(collector_intake(c, EP_MSG_PROCESS, w.data, w.size));
        ep_writer_done(&w);
}

static void respond(Collector *c, uint64_t cookie, uint8_t status, uint64_t elf_addr,
                    const char *function, int expect) {
        EpWriter w;

        ep_writer_init_dynamic(&w);
        ep_put_u64(&w, cookie);
        ep_put_u8(&w, status);
        ep_put_u64(&w, elf_addr);
        ep_put_str(&w, "");
        ep_put_u16(&w, function ? 2 : 0);
        if (function) {
                ep_put_str(&w, function);
                ep_put_str(&w, "/src/x.c");
                ep_put_u32(&w, 10);
                ep_put_str(&w, "outer");
                ep_put_str(&w, "/src/x.c");
                ep_put_u32(&w, 20);
        }
        ASSERT_TRUE(collector_sym_apply(c, EP_MSG_SYM_RESPONSE, w.data, w.size) == expect);
        ep_writer_done(&w);
}

static const EpFrame stack_a[] = {
        { .addr = KADDR + 0x10, .kind = EP_FRAME_KERNEL },
        { .addr = KADDR + 0x20, .kind = EP_FRAME_KERNEL },
        { .addr = 0x1000, .file_key = 7, .kind = EP_FRAME_NATIVE },
        { .addr = 0x2000, .file_key = 7, .kind = EP_FRAME_NATIVE, .flags = EP_FRAME_FLAG_RETURN_ADDRESS },
        { .addr = 0x3000, .file_key = 8, .kind = EP_FRAME_NATIVE, .flags = EP_FRAME_FLAG_RETURN_ADDRESS },
        { .addr = 0x7f0000001000, .kind = EP_FRAME_UNMAPPED, .flags = EP_FRAME_FLAG_RETURN_ADDRESS },
        { .addr = EP_STOP_BAD_FP, .kind = EP_FRAME_ABORT },
};

static uint64_t samples_in(const Interval *iv) {
        return iv->n_samples;
}

static void test_decode(Collector *c) {
        EpFrame f[8];
        size_t len;

        announce_file(c, 7, 0xaa, "/usr/bin/app");
        announce_file(c, 8, 0xbb, "/usr/lib/libc.so.6");
        announce_file(c, 9, 0xaa, "/proc/1/root/usr/bin/app"); /* same file ID, other key */
        ASSERT_TRUE(c->files.n == 3); /* placeholder + 2 */
        ASSERT_TRUE(c->sym.n_file_queue == 2);
        announce_process(c, 100, 1111, "app", "/usr/bin/app");

        /* a valid trace */
        len = trace(100, 101, 0, "app", stack_a, 7, 2);
        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c->traces == 1 && c->decode_errors == 0);
        ASSERT_TRUE(c->frames.n == 7);
        ASSERT_TRUE(c->stacks.n == 1);
        /* kernel, native and UNMAPPED (perf map) frames are asked for, ABORT is not */
        ASSERT_TRUE(c->sym.n_frame_queue == 6);
        ASSERT_TRUE(c->pending_symbols == 6);

        /* the same trace again: nothing new */
        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c->traces == 2 && c->frames.n == 7 && c->stacks.n == 1 && c->sym.n_frame_queue == 6);
        ASSERT_TRUE(interval_entries(c->current) == 1 && samples_in(c->current) == 2);

        /* same frames via the other key of the same file ID: same frames, same stack */
        memcpy(f, stack_a, sizeof(stack_a));
        f[2].file_key = 9;
        f[3].file_key = 9;
        len = trace(100, 101, 0, "app", f, 7, 2);
        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c->frames.n == 7 && c->stacks.n == 1);

        /* the return-address flag is part of a frame's identity */
        f[2].flags = EP_FRAME_FLAG_RETURN_ADDRESS;
        len = trace(100, 102, 1, "worker", f, 7, 2);
        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c->frames.n == 8 && c->stacks.n == 2 && c->sym.n_frame_queue == 7);
        ASSERT_TRUE(interval_entries(c->current) == 2);

        /* a shorter stack that is a suffix of the first is its own stack */
        len = trace(100, 101, 0, "app", stack_a + 2, 5, 0);
        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c->frames.n == 8 && c->stacks.n == 3);

        /* a trace without frames is valid */
        len = trace(100, 101, 0, "app", NULL, 0, 0);
        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c->stacks.n == 4 && c->traces == 6);

        /* ---- bad records: counted, nothing else changes ---- */
        uint64_t frames = c->frames.n, stacks = c->stacks.n, traces = c->traces;

        /* shorter than the header */
        ASSERT_TRUE(collector_intake(c, EP_MSG_TRACE, rec, sizeof(EpTraceMsg) - 1) == -EBADMSG);
        ASSERT_TRUE(c->decode_errors == 1);
        /* truncated: the header says 7 frames, the record holds 6 */
        len = trace(100, 101, 0, "app", stack_a, 7, 2);
        ASSERT_TRUE(collector_intake(c, EP_MSG_TRACE, rec, len - sizeof(EpFrame)) == -EBADMSG);
        ASSERT_TRUE(c->decode_errors == 2);
        /* n_frames lies the other way: more bytes than frames */
        ((EpTraceMsg *) rec)->n_frames = 3;
        ASSERT_TRUE(collector_intake(c, EP_MSG_TRACE, rec, len) == -EBADMSG);
        ASSERT_TRUE(c->decode_errors == 3);
        /* n_kernel larger than n_frames */
        len = trace(100, 101, 0, "app", stack_a, 7, 8);
        ASSERT_TRUE(collector_intake(c, EP_MSG_TRACE, rec, len) == -EBADMSG);
        /* more frames than any trace may have, with a length to match */
        len = trace(100, 101, 0, "app", stack_a, 7, 2);
        ((EpTraceMsg *) rec)->n_frames = EP_MAX_FRAMES + 1;
        ASSERT_TRUE(trace_msg_validate(rec, sizeof(EpTraceMsg) + (EP_MAX_FRAMES + 1) * sizeof(EpFrame)) == -EBADMSG);
        ASSERT_TRUE(collector_intake(c, EP_MSG_TRACE, rec, len) == -EBADMSG);
        ASSERT_TRUE(c->decode_errors == 5);
        /* a file key never announced */
        memcpy(f, stack_a, sizeof(stack_a));
        f[4].file_key = 77;
        len = trace(100, 101, 0, "app", f, 7, 2);
        ASSERT_TRUE(collector_intake(c, EP_MSG_TRACE, rec, len) == -EBADMSG);
        /* an unknown frame kind */
        memcpy(f, stack_a, sizeof(stack_a));
        f[6].kind = 99;
        len = trace(100, 101, 0, "app", f, 7, 2);
        ASSERT_TRUE(collector_intake(c, EP_MSG_TRACE, rec, len) == -EBADMSG);
        ASSERT_TRUE(c->decode_errors == 7);
        /* malformed file, process and exit messages, an unknown type */
        ASSERT_TRUE(collector_intake(c, EP_MSG_FILE, "\1\0\0\0", 4) == -EBADMSG);
        ASSERT_TRUE(collector_intake(c, EP_MSG_PROCESS, "\1\0\0\0\0\0\0\0\0\0\0\0\xff\xff\xff\xff", 16) == -EBADMSG);
        ASSERT_TRUE(collector_intake(c, EP_MSG_PROCESS_EXIT, "\1\0\0\0\0", 5) == -EBADMSG);
        ASSERT_TRUE(collector_intake(c, 999, rec, 8) == -EBADMSG);
        ASSERT_TRUE(c->decode_errors == 11);
        ASSERT_TRUE(c->frames.n == frames && c->stacks.n == stacks && c->traces == traces);
        ASSERT_TRUE(c->last_error && *c->last_error);

        /* a pid the loader never announced gets a placeholder named after the thread */
        len = trace(200, 200, 1, "kworker/1:0", stack_a, 2, 2);
        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c->processes.live == 2);
        /* exit then reuse of pid 100: a new process */
        ASSERT_OK(collector_intake(c, EP_MSG_PROCESS_EXIT, (uint32_t[]) { 100 }, 4));
        announce_process(c, 100, 2222, "other", "/usr/bin/other");
        ASSERT_TRUE(c->processes.live == 3);
        len = trace(100, 100, 0, "other", stack_a, 7, 2);
        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, len));
        /* the 2-frame kernel stack above, and stack_a again: its UNMAPPED frame is another
         * frame in another process */
        ASSERT_TRUE(c->stacks.n == stacks + 2);
        ASSERT_TRUE(c->frames.n == frames + 1);
        ASSERT_TRUE(c->frames.items[frames].kind == EP_FRAME_UNMAPPED);
        ASSERT_TRUE(c->frames.items[frames].process != c->frames.items[5].process);
}

static void test_responses(Collector *c) {
        uint32_t pending = c->pending_symbols;
        Frame *f0 = &c->frames.items[0];

        /* nothing is attached, so everything is still queued */
        ASSERT_TRUE(f0->sym_state == SYM_STATE_QUEUED);
        ASSERT_TRUE(collector_sym_first_pending(c) == 0);
        respond(c, 0, EP_SYM_OK, KADDR + 0x10, "entry_SYSCALL_64", 0);
        /* the oldest frame answered: the next one is the oldest that waits */
        ASSERT_TRUE(collector_sym_first_pending(c) == 1);
        ASSERT_TRUE(f0->sym_state == SYM_STATE_DONE && f0->status == EP_SYM_OK);
        ASSERT_TRUE(f0->n_lines == 2 && strcmp(f0->lines[0].function, "entry_SYSCALL_64") == 0);
        ASSERT_TRUE(strcmp(f0->lines[1].function, "outer") == 0 && f0->lines[1].line == 20);
        ASSERT_TRUE(c->pending_symbols == pending - 1);
        /* a duplicate answer and an unknown cookie are ignored */
        respond(c, 0, EP_SYM_NOT_FOUND, 0, NULL, 0);
        ASSERT_TRUE(f0->status == EP_SYM_OK);
        respond(c, 1u << 30, EP_SYM_OK, 0, "nope", 0);
        /* an UNMAPPED frame named from a perf map */
        ASSERT_TRUE(c->frames.items[5].sym_state == SYM_STATE_QUEUED);
        respond(c, 5, EP_SYM_OK, 0x7f0000001000, "JS:*hot", 0);
        ASSERT_TRUE(c->frames.items[5].sym_state == SYM_STATE_DONE);
        ASSERT_TRUE(strcmp(c->frames.items[5].lines[0].function, "JS:*hot") == 0);
        /* ABORT frames are never asked for */
        ASSERT_TRUE(c->frames.items[6].sym_state == SYM_STATE_NONE);
        respond(c, 6, EP_SYM_OK, 0, "nope", 0);
        ASSERT_TRUE(c->frames.items[6].sym_state == SYM_STATE_NONE);
        pending--;
        ASSERT_TRUE(c->pending_symbols == pending - 1);

        /* a malformed response for a pending frame: counted, and the frame stops waiting */
        uint64_t errors = c->decode_errors;
        uint8_t bad[8 + 1 + 8 + 2] = { 1 };
        ASSERT_TRUE(collector_sym_apply(c, EP_MSG_SYM_RESPONSE, bad, sizeof(bad)) == -EBADMSG);
        ASSERT_TRUE(c->decode_errors == errors + 1);
        ASSERT_TRUE(c->frames.items[1].sym_state == SYM_STATE_DONE);
        ASSERT_TRUE(c->pending_symbols == pending - 2);
        ASSERT_TRUE(collector_sym_first_pending(c) == 2);
        /* a frame asked again (an UNMAPPED one) moves it back */
        c->frames.items[0].sym_state = SYM_STATE_NONE;
        ASSERT_OK(collector_sym_queue_frame(c, 0));
        ASSERT_TRUE(collector_sym_first_pending(c) == 0);
        respond(c, 0, EP_SYM_OK, KADDR + 0x10, "entry_SYSCALL_64", 0);
        ASSERT_TRUE(collector_sym_first_pending(c) == 2);
        ASSERT_TRUE(c->pending_symbols == pending - 2);

        /* a file response */
        EpWriter w;
        ep_writer_init_dynamic(&w);
        ep_put_u64(&w, 1);
        ep_put_u8(&w, EP_SYM_OK);
        ep_put_blob(&w, "\x01\x02\x03\x04", 4);
        ep_put_str(&w, "");
        ASSERT_OK(collector_sym_apply(c, EP_MSG_SYM_FILE_RESPONSE, w.data, w.size));
        ep_writer_done(&w);
        ASSERT_TRUE(c->files.items[1].gnu_build_id_len == 4 && c->files.items[1].sym_state == SYM_STATE_DONE);
}

/* Closes the interval into a store (no bus: written at once), then lets late symbols arrive
 * and checks the next write updates the rows. */
static void test_persist(Collector *c, const char *path) {
        uint64_t traces = c->traces;
        sqlite3 *db;
        size_t len;

        ASSERT_OK(store_open(path, &c->store));
        ASSERT_OK(collector_close_interval(c, NULL));
        ASSERT_TRUE(!c->closing);
        ASSERT_TRUE(c->intervals == 1);
        ASSERT_TRUE(c->samples_written == traces);
        ASSERT_TRUE(samples_in(c->current) == 0);

        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM intervals") == 1);
        ASSERT_TRUE((uint64_t) q_int(db, "SELECT sum(count) FROM samples") == traces);
        /* The store's frame identity has the return-address flag (UNIQUE(kind, file, addr,
         * flags), schema 3): the two frames that differ only by it are two rows, named at
         * offset - 1 and at the offset, and so are the two stacks that differ only there. */
        ASSERT_TRUE((size_t) q_int(db, "SELECT count(*) FROM frames") == c->frames.n);
        ASSERT_TRUE((size_t) q_int(db, "SELECT count(*) FROM stacks") == c->stacks.n);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames GROUP BY kind, file, addr ORDER BY 1 DESC LIMIT 1") == 2);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM processes") == 3);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM files") == 2);
        /* frames 0 (answered), 1 (malformed answer), the answered UNMAPPED one and the ABORT
         * one are final; the second process's UNMAPPED frame waits */
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames WHERE status IS NOT NULL") == 4);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frame_lines") == 2 + 2);
        /* UNMAPPED frames name their process's row: one per process */
        ASSERT_TRUE(q_int(db, "SELECT count(DISTINCT f.file) FROM frames f JOIN processes p ON p.id = f.file "
                              "WHERE f.kind = 3 AND p.pid = 100") == 2);
        ASSERT_TRUE(q_int(db, "SELECT length(gnu_build_id) FROM files WHERE path = '/usr/bin/app'") == 4);
        sqlite3_close(db);

        /* symbols arrive for the rest; one more trace */
        for (uint32_t i = 0; i < c->frames.n; i++)
                if (sym_state_pending(c->frames.items[i].sym_state))
                        respond(c, i, EP_SYM_OK, 0x400000 + i, "late", 0);
        ASSERT_TRUE(c->pending_symbols == 0);
        ASSERT_TRUE(c->n_dirty_frames == 5);
        len = trace(100, 100, 0, "other", stack_a, 7, 2);
        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, len));
        ASSERT_OK(collector_close_interval(c, NULL));
        ASSERT_TRUE(c->intervals == 2 && c->n_dirty_frames == 0);

        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM intervals") == 2);
        ASSERT_TRUE((uint64_t) q_int(db, "SELECT sum(count) FROM samples") == traces + 1);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames WHERE status IS NULL") == 0);
        /* 7 rows with 2 lines each: frame 0, the first UNMAPPED one, and the 5 late ones */
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frame_lines") == 2 + 2 + 5 * 2);
        /* no stack or frame row was written twice */
        ASSERT_TRUE((size_t) q_int(db, "SELECT count(*) FROM stacks") == c->stacks.n);
        ASSERT_TRUE((size_t) q_int(db, "SELECT count(*) FROM frames") == c->frames.n);
        /* an empty interval writes nothing */
        ASSERT_OK(collector_close_interval(c, NULL));
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM intervals") == 2);
        sqlite3_close(db);

        /* exited processes are forgotten once written, unless JIT frames refer to them (the
         * first pid 100 has one) */
        ASSERT_TRUE(c->processes.live == 3);

        /* A write that fails (another writer holds the lock) leaves no trace in memory: the
         * rows it meant to add are written by the next interval. */
        static const EpFrame fresh[] = {
                { .addr = KADDR + 0x999, .kind = EP_FRAME_KERNEL },
                { .addr = 0x9000, .file_key = 8, .kind = EP_FRAME_NATIVE },
        };
        sqlite3 *locker;
        uint64_t intervals = c->intervals, written = c->samples_written;
        size_t frames = c->frames.n, stacks = c->stacks.n;

        store_set_busy_timeout(c->store, 50);
        ASSERT_TRUE(sqlite3_open(path, &locker) == SQLITE_OK);
        ASSERT_TRUE(sqlite3_exec(locker, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK);
        len = trace(100, 100, 0, "other", fresh, 2, 1);
        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c->frames.n == frames + 2 && c->stacks.n == stacks + 1);
        ASSERT_OK(collector_close_interval(c, NULL));
        ASSERT_TRUE(c->intervals == intervals && c->samples_written == written);
        ASSERT_TRUE(c->store_errors == 1 && strstr(c->last_error, "Writing interval"));
        ASSERT_TRUE(c->frames.items[frames].store_id == 0 && c->stacks.items[stacks].store_id == 0);
        ASSERT_TRUE(sqlite3_exec(locker, "ROLLBACK", NULL, NULL, NULL) == SQLITE_OK);

        /* Fail late, after the new frame, stack rows were inserted: they are rolled back and
         * their ids forgotten. */
        ASSERT_TRUE(sqlite3_exec(locker, "CREATE TRIGGER no_samples BEFORE INSERT ON samples "
                                    "BEGIN SELECT RAISE(ABORT, 'test'); END", NULL, NULL, NULL) == SQLITE_OK);
        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, len));
        ASSERT_OK(collector_close_interval(c, NULL));
        ASSERT_TRUE(c->intervals == intervals && c->store_errors == 2);
        ASSERT_TRUE(c->frames.items[frames].store_id == 0 && c->frames.items[frames + 1].store_id == 0);
        ASSERT_TRUE(c->stacks.items[stacks].store_id == 0);
        ASSERT_TRUE(q_int(locker, "SELECT count(*) FROM stacks") == (int64_t) stacks);
        ASSERT_TRUE(sqlite3_exec(locker, "DROP TRIGGER no_samples", NULL, NULL, NULL) == SQLITE_OK);
        sqlite3_close(locker);

        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, len));
        ASSERT_OK(collector_close_interval(c, NULL));
        ASSERT_TRUE(c->intervals == intervals + 1 && c->samples_written == written + 1);
        ASSERT_TRUE(c->frames.items[frames].store_id != 0 && c->stacks.items[stacks].store_id != 0);
        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE((size_t) q_int(db, "SELECT count(*) FROM frames") == c->frames.n);
        ASSERT_TRUE((size_t) q_int(db, "SELECT count(*) FROM stacks") == c->stacks.n);
        ASSERT_TRUE((uint64_t) q_int(db, "SELECT sum(count) FROM samples") == traces + 2);
        sqlite3_close(db);
}

/* JIT frames: UNMAPPED addresses are per process, asked for with the process's pid and start
 * time, answered from its perf map, written with processes.id in frames.file, asked again
 * later when the map had no name yet, and their process stays while they exist. */
static void respond_one(Collector *c, uint64_t cookie, uint8_t status, uint64_t addr, const char *function) {
        EpWriter w;

        ep_writer_init_dynamic(&w);
        ep_put_u64(&w, cookie);
        ep_put_u8(&w, status);
        ep_put_u64(&w, addr);
        ep_put_str(&w, "");
        ep_put_u16(&w, function ? 1 : 0);
        if (function) {
                ep_put_str(&w, function);
                ep_put_str(&w, "");
                ep_put_u32(&w, 0);
        }
        ASSERT_OK(collector_sym_apply(c, EP_MSG_SYM_RESPONSE, w.data, w.size));
        ep_writer_done(&w);
}

/* Reads the requests in ring; returns how many, each checked against its frame's process. */
static unsigned read_requests(Collector *c, EpRing *ring, uint64_t *ret_cookies, unsigned max) {
        unsigned n = 0;
        EpRingRecord h;
        const void *payload;

        while (ep_ring_peek(ring, &h, &payload) == 1) {
                EpSymRequestMsg m;
                EpReader rd;

                ASSERT_TRUE(h.type == EP_MSG_SYM_REQUEST);
                ep_reader_init(&rd, payload, h.len);
                ASSERT_TRUE(ep_get_sym_request(&rd, 4096, &m));
                ASSERT_TRUE(m.cookie < c->frames.n);
                const Frame *f = &c->frames.items[m.cookie];
                const Process *p = process_table_get(&c->processes, f->process);
                ASSERT_TRUE(m.kind == EP_FRAME_UNMAPPED && f->kind == EP_FRAME_UNMAPPED);
                ASSERT_TRUE(m.addr == f->addr);
                ASSERT_TRUE(p && m.pid == p->pid && m.start_time_ns == p->start_time_ns);
                ASSERT_TRUE(m.pid == 300 ? m.start_time_ns == 3000 : m.pid == 301 && m.start_time_ns == 3001);
                if (n < max)
                        ret_cookies[n] = m.cookie;
                n++;
                ep_ring_consume(ring);
        }
        return n;
}

static void test_jit(const char *path) {
        static const EpFrame jit_stack[] = {
                { .addr = 0x7f0000002000, .kind = EP_FRAME_UNMAPPED },
                { .addr = 0x7f0000003000, .kind = EP_FRAME_UNMAPPED, .flags = EP_FRAME_FLAG_RETURN_ADDRESS },
        };
        _cleanup_ring_ EpRing *req = NULL, *resp = NULL;
        uint64_t cookies[8];
        uint32_t node_idx, py_idx;
        sqlite3 *db;
        Collector c;
        size_t len;

        ASSERT_OK(collector_init(&c));
        ASSERT_OK(store_open(path, &c.store));
        announce_process(&c, 300, 3000, "node", "/usr/bin/node");
        announce_process(&c, 301, 3001, "python3.12", "/usr/bin/python3.12");

        /* The same addresses in two processes: four frames. */
        len = trace(300, 300, 0, "node", jit_stack, 2, 0);
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        len = trace(301, 301, 0, "python3.12", jit_stack, 2, 0);
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c.frames.n == 4 && c.stacks.n == 2);
        node_idx = c.frames.items[0].process;
        py_idx = c.frames.items[2].process;
        ASSERT_TRUE(node_idx != py_idx);
        ASSERT_TRUE(c.frames.items[1].process == node_idx && c.frames.items[3].process == py_idx);
        ASSERT_TRUE(c.frames.items[0].addr == c.frames.items[2].addr && c.frames.items[0].file == 0);
        /* again in the same process: nothing new, nothing asked again */
        len = trace(300, 300, 0, "node", jit_stack, 2, 0);
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c.frames.n == 4 && c.sym.n_frame_queue == 4 && c.pending_symbols == 4);

        /* The requests carry pid and start time. */
        ASSERT_OK(ep_ring_create("test-sym-req", 1 << 16, &req));
        ASSERT_OK(ep_ring_create("test-sym-resp", 1 << 16, &resp));
        ASSERT_OK(collector_sym_attach(&c, ep_ring_memfd(req), ep_ring_eventfd(req), ep_ring_memfd(resp),
                                       ep_ring_eventfd(resp)));
        ASSERT_TRUE(read_requests(&c, req, cookies, 8) == 4);
        ASSERT_TRUE(c.sym.n_frame_queue == 0);

        /* node's map names both, python's has no entry yet */
        respond_one(&c, 0, EP_SYM_OK, 0x7f0000002000, "LazyCompile:*hotLoop /tmp/x.js:3");
        respond_one(&c, 1, EP_SYM_OK, 0x7f0000003000, "LazyCompile:*main /tmp/x.js:9");
        respond_one(&c, 2, EP_SYM_NOT_FOUND, 0x7f0000002000, NULL);
        respond_one(&c, 3, EP_SYM_NO_FILE, 0x7f0000003000, NULL);
        ASSERT_TRUE(c.pending_symbols == 0);
        ASSERT_OK(collector_close_interval(&c, NULL));

        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames WHERE kind = 3") == 4);
        ASSERT_TRUE(q_int(db, "SELECT count(DISTINCT file) FROM frames WHERE kind = 3") == 2);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames f JOIN processes p ON p.id = f.file "
                              "WHERE f.kind = 3 AND p.pid = 300 AND p.start_time_ns = 3000") == 2);
        char buf[128];
        q_text(db, "SELECT l.function FROM frames f JOIN frame_lines l ON l.frame = f.id JOIN processes p "
                   "ON p.id = f.file WHERE p.pid = 300 AND f.addr = 139637976735744", buf, sizeof buf);
        ASSERT_STREQ(buf, "LazyCompile:*hotLoop /tmp/x.js:3");
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames f JOIN processes p ON p.id = f.file "
                              "WHERE p.pid = 301 AND f.status IS NOT NULL AND f.status != 0") == 2);
        sqlite3_close(db);

        /* Python's frames are asked again when seen in a later interval than their request:
         * the map may grow. */
        len = trace(301, 301, 0, "python3.12", jit_stack, 2, 0);
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c.pending_symbols == 2);
        collector_sym_flush(&c);
        ASSERT_TRUE(read_requests(&c, req, cookies, 8) == 2);
        ASSERT_TRUE((cookies[0] == 2 && cookies[1] == 3) || (cookies[0] == 3 && cookies[1] == 2));
        respond_one(&c, 2, EP_SYM_OK, 0x7f0000002000, "py::fib:/tmp/fib.py");
        respond_one(&c, 3, EP_SYM_NOT_FOUND, 0x7f0000003000, NULL);
        /* ... then two intervals after that second request, not one. */
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c.sym.n_frame_queue == 0 && c.pending_symbols == 0);
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c.pending_symbols == 1);
        collector_sym_flush(&c);
        ASSERT_TRUE(read_requests(&c, req, cookies, 8) == 1 && cookies[0] == 3);
        respond_one(&c, 3, EP_SYM_NOT_FOUND, 0x7f0000003000, NULL);
        /* node's named frames are never asked again */
        len = trace(300, 300, 0, "node", jit_stack, 2, 0);
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c.pending_symbols == 0);
        ASSERT_OK(collector_close_interval(&c, NULL));

        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        q_text(db, "SELECT l.function FROM frames f JOIN frame_lines l ON l.frame = f.id JOIN processes p "
                   "ON p.id = f.file WHERE p.pid = 301 AND f.addr = 139637976735744", buf, sizeof buf);
        ASSERT_STREQ(buf, "py::fib:/tmp/fib.py");
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames WHERE kind = 3") == 4);
        sqlite3_close(db);

        /* A bounded number of asks. */
        for (int i = 0; i < 10; i++) {
                ASSERT_OK(collector_close_interval(&c, NULL));
                ASSERT_OK(collector_close_interval(&c, NULL));
                len = trace(301, 301, 0, "python3.12", jit_stack, 2, 0);
                ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
                collector_sym_flush(&c);
                while (read_requests(&c, req, cookies, 8) > 0)
                        respond_one(&c, cookies[0], EP_SYM_NOT_FOUND, 0x7f0000003000, NULL);
        }
        ASSERT_TRUE(c.frames.items[3].sym_asks == 5 && c.pending_symbols == 0);

        /* node exits: its entry stays for its JIT frames (pinned) after its last interval. */
        ASSERT_OK(collector_intake(&c, EP_MSG_PROCESS_EXIT, (uint32_t[]) { 300 }, 4));
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_OK(collector_close_interval(&c, NULL));
        const Process *p = process_table_get(&c.processes, node_idx);
        ASSERT_TRUE(p && p->exited && p->pid == 300 && p->start_time_ns == 3000);
        /* a new process with node's pid gets its own frames */
        announce_process(&c, 300, 4000, "node", "/usr/bin/node");
        len = trace(300, 300, 0, "node", jit_stack, 2, 0);
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c.frames.n == 6 && c.frames.items[4].process != node_idx);

        collector_done(&c);
}

/* Answers every request waiting in req: frames with the name "f<addr>", files with no IDs. */
static void answer_all(Collector *c, EpRing *req) {
        EpRingRecord h;
        const void *payload;
        char name[32];

        collector_sym_flush(c);
        while (ep_ring_peek(req, &h, &payload) == 1) {
                EpSymRequestMsg m;
                EpReader rd;
                EpWriter w;

                ep_reader_init(&rd, payload, h.len);
                if (h.type == EP_MSG_SYM_FILE_REQUEST) {
                        uint64_t cookie = ep_get_u64(&rd);

                        ep_ring_consume(req);
                        ep_writer_init_dynamic(&w);
                        ep_put_u64(&w, cookie);
                        ep_put_u8(&w, EP_SYM_OK);
                        ep_put_blob(&w, "", 0);
                        ep_put_str(&w, "");
                        ASSERT_OK(collector_sym_apply(c, EP_MSG_SYM_FILE_RESPONSE, w.data, w.size));
                        ep_writer_done(&w);
                        continue;
                }
                ASSERT_TRUE(h.type == EP_MSG_SYM_REQUEST && ep_get_sym_request(&rd, 4096, &m));
                ep_ring_consume(req);
                snprintf(name, sizeof(name), "f%" PRIx64, m.addr);
                respond_one(c, m.cookie, EP_SYM_OK, m.addr, name);
        }
        ASSERT_TRUE(c->pending_symbols == 0);
}

static void push_leaf(Collector *c, uint64_t addr) {
        const EpFrame f[] = { { .addr = addr, .file_key = 7, .kind = EP_FRAME_NATIVE } };
        size_t len = trace(400, 401, 0, "app", f, 1, 0);

        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, len));
}

/* Past max_frames (and four times what the last interval used) the frame and stack tables
 * start over right after an interval is written; what comes again is interned again and
 * written to the same store rows, with its symbol. */
static void test_table_restart(const char *path) {
        _cleanup_ring_ EpRing *req = NULL, *resp = NULL;
        char name[32];
        sqlite3 *db;
        Collector c;

        ASSERT_OK(collector_init(&c));
        ASSERT_OK(store_open(path, &c.store));
        c.max_frames = 8;
        announce_file(&c, 7, 0x11, "/usr/bin/app");
        announce_process(&c, 400, 4000, "app", "/usr/bin/app");
        ASSERT_OK(ep_ring_create("test-sym-req", 1 << 16, &req));
        ASSERT_OK(ep_ring_create("test-sym-resp", 1 << 16, &resp));
        ASSERT_OK(collector_sym_attach(&c, ep_ring_memfd(req), ep_ring_eventfd(req), ep_ring_memfd(resp),
                                       ep_ring_eventfd(resp)));

        /* 1: 20 frames, all used by this interval: kept. */
        for (uint64_t i = 0; i < 20; i++)
                push_leaf(&c, 0x1000 + 0x10 * i);
        answer_all(&c, req);
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_TRUE(c.frames.n == 20 && c.table_restarts == 0);
        ASSERT_TRUE(collector_sym_first_pending(&c) == 20);

        /* 2: one known frame: the other 19 are stale, the tables start over. */
        push_leaf(&c, 0x1000);
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_TRUE(c.frames.n == 0 && c.stacks.n == 0 && c.table_restarts == 1);

        /* 3: the same frame again: interned and symbolized again, same rows. */
        push_leaf(&c, 0x1000);
        push_leaf(&c, 0x1000);
        ASSERT_TRUE(c.frames.n == 1 && c.pending_symbols == 1);
        ASSERT_TRUE(collector_sym_first_pending(&c) == 0); /* counts from the new table's start */
        answer_all(&c, req);
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_TRUE(c.frames.n == 1 && c.table_restarts == 1); /* within bounds: kept */

        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM intervals") == 3);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames") == 20);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM stacks") == 20);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frame_lines") == 20);
        /* Intervals 2 and 3 used one stack, the one interval 1 wrote for 0x1000. */
        ASSERT_TRUE(q_int(db, "SELECT count(DISTINCT stack) FROM samples WHERE interval > "
                              "(SELECT min(id) FROM intervals)") == 1);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM samples WHERE interval = (SELECT max(id) FROM intervals) "
                              "AND stack IN (SELECT stack FROM samples WHERE interval = "
                              "(SELECT min(id) FROM intervals))") == 1);
        ASSERT_TRUE(q_int(db, "SELECT sum(count) FROM samples WHERE interval = (SELECT max(id) FROM intervals)") == 2);
        q_text(db, "SELECT l.function FROM frame_lines l JOIN frames f ON f.id = l.frame WHERE f.addr = 4096", name,
               sizeof(name));
        ASSERT_TRUE(strcmp(name, "f1000") == 0);
        sqlite3_close(db);
        collector_done(&c);
}

/* A trace seen before is found by the hash of its frames; what a file key means decides. */
static void test_seen_before(void) {
        static const EpFrame native_only[] = {
                { .addr = KADDR + 0x10, .kind = EP_FRAME_KERNEL },
                { .addr = 0x1000, .file_key = 7, .kind = EP_FRAME_NATIVE },
                { .addr = 0x3000, .file_key = 8, .kind = EP_FRAME_NATIVE, .flags = EP_FRAME_FLAG_RETURN_ADDRESS },
        };
        uint32_t first, libc;
        size_t len;
        Collector c;

        ASSERT_OK(collector_init(&c));
        announce_file(&c, 7, 0xaa, "/usr/bin/app");
        announce_file(&c, 8, 0xbb, "/usr/lib/libc.so.6");
        libc = file_table_by_key(&c.files, 8);
        announce_process(&c, 100, 1111, "app", "/usr/bin/app");

        len = trace(100, 101, 0, "app", native_only, 3, 1);
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c.traces == 1 && c.traces_seen_before == 0 && c.stacks.n == 1 && c.frames.n == 3);
        first = 0;
        /* again, and from another thread on another CPU: the same stack, counted for each */
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        len = trace(100, 102, 1, "worker", native_only, 3, 1);
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c.traces == 3 && c.traces_seen_before == 2 && c.stacks.n == 1 && c.frames.n == 3);
        ASSERT_TRUE(samples_in(c.current) == 3 && interval_entries(c.current) == 2);

        /* A trace with a frame of the process's own (UNMAPPED) is interned every time: its
         * frames are another process's when the pid is reused. */
        len = trace(100, 101, 0, "app", stack_a, 7, 2);
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c.traces == 5 && c.traces_seen_before == 2 && c.stacks.n == 2);

        /* Key 8 is another file now (a new loader session would do that): the same bytes are
         * another stack, whose last frame is in the new file. */
        announce_file(&c, 8, 0xcc, "/usr/lib/other.so.1");
        ASSERT_TRUE(file_table_by_key(&c.files, 8) != libc);
        len = trace(100, 101, 0, "app", native_only, 3, 1);
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c.traces_seen_before == 2 && c.stacks.n == 3);
        ASSERT_TRUE(c.frames.items[stack_table_frames(&c.stacks, 2)[2]].file == file_table_by_key(&c.files, 8));
        ASSERT_TRUE(c.frames.items[stack_table_frames(&c.stacks, first)[2]].file == libc);
        /* the same announcement again changes nothing: remembered traces stay */
        announce_file(&c, 8, 0xcc, "/usr/lib/other.so.1");
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_TRUE(c.traces_seen_before == 3 && c.stacks.n == 3);
        collector_done(&c);
}


/* Takes every request out of req: frame cookies into frames[], file cookies into files[]
 * (at most 8 each); returns how many of each through the pointers. */
static void take_requests(EpRing *req, uint64_t frames[8], size_t *n_frames, uint64_t files[8], size_t *n_files) {
        EpRingRecord h;
        const void *payload;

        *n_frames = *n_files = 0;
        while (ep_ring_peek(req, &h, &payload) == 1) {
                EpReader rd;

                ep_reader_init(&rd, payload, h.len);
                if (h.type == EP_MSG_SYM_FILE_REQUEST) {
                        ASSERT_TRUE(*n_files < 8);
                        files[(*n_files)++] = ep_get_u64(&rd);
                } else {
                        EpSymRequestMsg m;

                        ASSERT_TRUE(h.type == EP_MSG_SYM_REQUEST && ep_get_sym_request(&rd, 4096, &m));
                        ASSERT_TRUE(*n_frames < 8);
                        frames[(*n_frames)++] = m.cookie;
                }
                ep_ring_consume(req);
        }
}

static void respond_file(Collector *c, uint64_t cookie, uint8_t status) {
        EpWriter w;

        ep_writer_init_dynamic(&w);
        ep_put_u64(&w, cookie);
        ep_put_u8(&w, status);
        ep_put_blob(&w, (const uint8_t[]) { 0xab, 0xcd }, status == EP_SYM_OK ? 2 : 0);
        ep_put_str(&w, "");
        ASSERT_OK(collector_sym_apply(c, EP_MSG_SYM_FILE_RESPONSE, w.data, w.size));
        ep_writer_done(&w);
}

/* One trace of pid's main thread: taken in, its new frames and files sent to the symbolizer. */
static void send_trace(Collector *c, uint32_t pid, const char *comm, const EpFrame *stack, uint32_t n) {
        size_t len = trace(pid, pid, 0, comm, stack, n, 0);

        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, len));
        collector_sym_flush(c);
}

/* A collector with a store at path and a symbolizer session over two new rings (the test
 * plays the symbolizer's side). */
static void open_attached(Collector *c, const char *path, EpRing **ret_req, EpRing **ret_resp) {
        ASSERT_OK(collector_init(c));
        ASSERT_OK(store_open(path, &c->store));
        ASSERT_OK(ep_ring_create("test-sym-req", 1 << 16, ret_req));
        ASSERT_OK(ep_ring_create("test-sym-resp", 1 << 16, ret_resp));
        ASSERT_OK(collector_sym_attach(c, ep_ring_memfd(*ret_req), ep_ring_eventfd(*ret_req),
                                       ep_ring_memfd(*ret_resp), ep_ring_eventfd(*ret_resp)));
}

/* A passing failure (EP_SYM_RETRY: the loader timed out, ...) is not an answer: the frame and
 * the file stay pending and are asked again by the timer (collector_sym_retry_due()) after a
 * back-off of 1 s, 2 s, ... up to 30 s, with no new trace of them; the interval is written
 * meanwhile without waiting, with the frame's row pending (status NULL), and the row gets the
 * name once a retry brings it. A per-process frame's retries end when its process exits.
 * Fails on code that took RETRY (or NO_FILE, as before) for an answer. */
static void test_retry(const char *path) {
        static const EpFrame stack[] = {
                { .addr = 0x1000, .file_key = 7, .kind = EP_FRAME_NATIVE },
                { .addr = 0x7f0000001000, .kind = EP_FRAME_UNMAPPED, .flags = EP_FRAME_FLAG_RETURN_ADDRESS },
        };
        _cleanup_ring_ EpRing *req = NULL, *resp = NULL;
        uint64_t frames[8], files[8];
        size_t n_frames, n_files;
        char buf[128];
        sqlite3 *db;
        Collector c;

        ep_clock_set(tests_clock);
        open_attached(&c, path, &req, &resp);
        announce_file(&c, 7, 0x77, "/usr/lib/libx.so");
        announce_process(&c, 500, 5000, "jit", "/usr/bin/jit");
        send_trace(&c, 500, "jit", stack, 2);
        take_requests(req, frames, &n_frames, files, &n_files);
        ASSERT_TRUE(n_frames == 2 && frames[0] == 0 && frames[1] == 1 && n_files == 1);
        uint64_t file_cookie = files[0];

        /* Everything answered RETRY: still pending, nothing in flight. */
        respond(&c, 0, EP_SYM_RETRY, 0, NULL, 0);
        respond(&c, 1, EP_SYM_RETRY, 0, NULL, 0);
        respond_file(&c, file_cookie, EP_SYM_RETRY);
        ASSERT_TRUE(c.pending_symbols == 2 && collector_sym_first_pending(&c) == 0);
        ASSERT_TRUE(collector_sym_retrying(&c) == 3);
        ASSERT_TRUE(c.frames.items[0].sym_state == SYM_STATE_RETRY);

        /* The interval does not wait for retries; the rows are written pending. */
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_TRUE(!c.closing);
        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames WHERE status IS NULL") == 2);
        sqlite3_close(db);

        /* Not due before its second; due after it, with no trace of it. */
        collector_sym_retry_due(&c, ep_now_ns(CLOCK_MONOTONIC) + COLLECTOR_SYM_RETRY_FIRST_NS - 1);
        take_requests(req, frames, &n_frames, files, &n_files);
        ASSERT_TRUE(n_frames == 0 && n_files == 0 && collector_sym_retrying(&c) == 3);
        tests_clock_advance(COLLECTOR_SYM_RETRY_FIRST_NS);
        collector_sym_retry_due(&c, ep_now_ns(CLOCK_MONOTONIC));
        take_requests(req, frames, &n_frames, files, &n_files);
        ASSERT_TRUE(n_frames == 2 && n_files == 1 && files[0] == file_cookie);
        ASSERT_TRUE(collector_sym_retrying(&c) == 0 && c.sym.retries_sent == 3);

        /* The native frame and its file are named now; the JIT frame fails again. */
        respond(&c, 0, EP_SYM_OK, 0x401000, "work", 0);
        respond_file(&c, file_cookie, EP_SYM_OK);
        respond(&c, 1, EP_SYM_RETRY, 0, NULL, 0);
        ASSERT_TRUE(c.pending_symbols == 1 && collector_sym_first_pending(&c) == 1);
        ASSERT_OK(collector_close_interval(&c, NULL)); /* empty: writes the pending updates */
        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        q_text(db, "SELECT l.function FROM frames f JOIN frame_lines l ON l.frame = f.id "
                   "WHERE f.kind = 1 AND l.depth = 0", buf, sizeof buf);
        ASSERT_STREQ(buf, "work");
        ASSERT_TRUE(q_int(db, "SELECT status FROM frames WHERE kind = 1") == EP_SYM_OK);
        ASSERT_TRUE(q_int(db, "SELECT length(gnu_build_id) FROM files") == 2);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames WHERE status IS NULL") == 1);
        sqlite3_close(db);

        /* The second back-off is 2 s. */
        tests_clock_advance(2 * COLLECTOR_SYM_RETRY_FIRST_NS - 1);
        collector_sym_retry_due(&c, ep_now_ns(CLOCK_MONOTONIC));
        take_requests(req, frames, &n_frames, files, &n_files);
        ASSERT_TRUE(n_frames == 0);
        tests_clock_advance(1);
        collector_sym_retry_due(&c, ep_now_ns(CLOCK_MONOTONIC));
        take_requests(req, frames, &n_frames, files, &n_files);
        ASSERT_TRUE(n_frames == 1 && frames[0] == 1);
        /* ... and it is capped: after many failures, at most COLLECTOR_SYM_RETRY_MAX_NS. */
        for (int i = 0; i < 10; i++) {
                respond(&c, 1, EP_SYM_RETRY, 0, NULL, 0);
                tests_clock_advance(COLLECTOR_SYM_RETRY_MAX_NS);
                collector_sym_retry_due(&c, ep_now_ns(CLOCK_MONOTONIC));
                take_requests(req, frames, &n_frames, files, &n_files);
                ASSERT_TRUE(n_frames == 1 && frames[0] == 1);
        }

        /* Its process exits: the retry due next answers NO_FILE instead of asking. */
        respond(&c, 1, EP_SYM_RETRY, 0, NULL, 0);
        ASSERT_OK(collector_intake(&c, EP_MSG_PROCESS_EXIT, (uint32_t[]) { 500 }, 4));
        tests_clock_advance(COLLECTOR_SYM_RETRY_MAX_NS);
        collector_sym_retry_due(&c, ep_now_ns(CLOCK_MONOTONIC));
        take_requests(req, frames, &n_frames, files, &n_files);
        ASSERT_TRUE(n_frames == 0 && c.pending_symbols == 0 && collector_sym_retrying(&c) == 0);
        ASSERT_TRUE(c.frames.items[1].status == EP_SYM_NO_FILE);
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames WHERE status IS NULL") == 0);
        sqlite3_close(db);

        collector_done(&c);
        ep_clock_set(NULL);
}

/* The stored frame at file offset addr names function want first. */
static void check_stored_leaf(const char *path, uint64_t addr, const char *want) {
        char sql[256], buf[128];
        sqlite3 *db;

        snprintf(sql, sizeof sql, "SELECT l.function FROM frames f JOIN frame_lines l ON l.frame = f.id "
                                  "WHERE f.addr = %" PRIu64 " AND l.depth = 0", addr);
        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        q_text(db, sql, buf, sizeof buf);
        ASSERT_STREQ(buf, want);
        sqlite3_close(db);
}

static void file_changed(Collector *c, uint8_t id_byte, size_t len, int expect) {
        uint8_t id[EP_FILE_ID_SIZE];

        memset(id, id_byte, sizeof(id));
        ASSERT_TRUE(collector_sym_apply(c, EP_MSG_SYM_FILE_CHANGED, id, len) == expect);
}

/* How many lines the stored frame at file offset addr has. */
static int stored_lines(const char *path, uint64_t addr) {
        char sql[256];
        sqlite3 *db;
        int n;

        snprintf(sql, sizeof sql, "SELECT count(*) FROM frame_lines l JOIN frames f ON l.frame = f.id "
                                  "WHERE f.addr = %" PRIu64, addr);
        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        n = q_int(db, sql);
        sqlite3_close(db);
        return n;
}

/* The symbolizer says a file's answers changed (EP_MSG_SYM_FILE_CHANGED: its debug file
 * appeared): the answered frames of that file, and only those, are asked again with no new
 * trace of them; the new answers replace the stored ones (a name replaces NOT_FOUND, and a
 * name with one line is replaced by its inline chain), and a failure after that never
 * replaces a name, in memory or in the store. Frames already asked are not asked twice. */
static void test_file_changed(const char *path) {
        static const EpFrame stack[] = {
                { .addr = 0x1000, .file_key = 7, .kind = EP_FRAME_NATIVE },
                { .addr = 0x2000, .file_key = 7, .kind = EP_FRAME_NATIVE, .flags = EP_FRAME_FLAG_RETURN_ADDRESS },
                { .addr = 0x3000, .file_key = 8, .kind = EP_FRAME_NATIVE, .flags = EP_FRAME_FLAG_RETURN_ADDRESS },
        };
        _cleanup_ring_ EpRing *req = NULL, *resp = NULL;
        uint64_t frames[8], files[8];
        size_t n_frames, n_files;
        sqlite3 *db;
        Collector c;

        open_attached(&c, path, &req, &resp);
        announce_file(&c, 7, 0x77, "/usr/lib/libc.so.6");
        announce_file(&c, 8, 0x88, "/usr/bin/prog");
        announce_process(&c, 600, 6000, "prog", "/usr/bin/prog");
        send_trace(&c, 600, "prog", stack, 3);
        take_requests(req, frames, &n_frames, files, &n_files);
        ASSERT_TRUE(n_frames == 3 && n_files == 2);
        respond(&c, 0, EP_SYM_NOT_FOUND, 0, NULL, 0);
        respond_one(&c, 1, EP_SYM_OK, 0x402000, "read");
        respond(&c, 2, EP_SYM_NOT_FOUND, 0, NULL, 0);
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_TRUE(stored_lines(path, 0x1000) == 0 && stored_lines(path, 0x2000) == 1);

        /* A short message is counted and changes nothing. */
        uint64_t errors = c.decode_errors;
        file_changed(&c, 0x77, EP_FILE_ID_SIZE - 1, -EBADMSG);
        ASSERT_TRUE(c.decode_errors == errors + 1 && c.pending_symbols == 0 && c.sym.files_changed == 0);

        /* A file we never heard of: counted, nothing to ask. */
        file_changed(&c, 0x99, EP_FILE_ID_SIZE, 0);
        ASSERT_TRUE(c.sym.files_changed == 1 && c.sym.asked_again == 0 && c.pending_symbols == 0);

        /* libc's two frames are asked again, the program's is not. */
        file_changed(&c, 0x77, EP_FILE_ID_SIZE, 0);
        collector_sym_flush(&c);
        take_requests(req, frames, &n_frames, files, &n_files);
        ASSERT_TRUE(n_frames == 2 && frames[0] == 0 && frames[1] == 1 && n_files == 0);
        ASSERT_TRUE(c.sym.asked_again == 2 && c.pending_symbols == 2 && c.sym.files_changed == 2);
        respond(&c, 0, EP_SYM_OK, 0x401000, "ic_inner", 0);
        respond(&c, 1, EP_SYM_OK, 0x402000, "__libc_read", 0);
        ASSERT_TRUE(c.pending_symbols == 0);
        ASSERT_TRUE(c.frames.items[1].n_lines == 2);
        ASSERT_STREQ(c.frames.items[1].lines[0].function, "__libc_read");
        ASSERT_STREQ(c.frames.items[1].lines[1].function, "outer");
        ASSERT_OK(collector_close_interval(&c, NULL));
        check_stored_leaf(path, 0x1000, "ic_inner");
        check_stored_leaf(path, 0x2000, "__libc_read");
        ASSERT_TRUE(stored_lines(path, 0x1000) == 2 && stored_lines(path, 0x2000) == 2);
        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT status FROM frames WHERE addr = 12288") == EP_SYM_NOT_FOUND);
        sqlite3_close(db);

        /* Asked again once more (said twice before a request went out: asked once), and failing
         * this time: the names stay. */
        file_changed(&c, 0x77, EP_FILE_ID_SIZE, 0);
        file_changed(&c, 0x77, EP_FILE_ID_SIZE, 0);
        collector_sym_flush(&c);
        take_requests(req, frames, &n_frames, files, &n_files);
        ASSERT_TRUE(n_frames == 2 && c.sym.asked_again == 4 && c.sym.files_changed == 4);
        respond(&c, 0, EP_SYM_NO_FILE, 0, NULL, 0);
        respond(&c, 1, EP_SYM_NOT_FOUND, 0, NULL, 0);
        ASSERT_TRUE(c.frames.items[0].status == EP_SYM_OK && c.frames.items[0].n_lines == 2);
        ASSERT_STREQ(c.frames.items[1].lines[0].function, "__libc_read");
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames WHERE addr IN (4096, 8192) AND status = 0") == 2);
        sqlite3_close(db);
        check_stored_leaf(path, 0x1000, "ic_inner");

        collector_done(&c);
}

/* A program names itself after the loader announced it (PR_SET_NAME): its main thread's
 * samples carry the name, the process takes it (as ps shows it), and the stored row follows.
 * Another thread's name is that thread's. */
static void test_process_renamed(const char *path) {
        Collector c;
        sqlite3 *db;
        size_t len;

        ASSERT_OK(collector_init(&c));
        ASSERT_OK(store_open(path, &c.store));
        announce_file(&c, 7, 0xaa, "/usr/bin/app");
        announce_file(&c, 8, 0xbb, "/usr/lib/libc.so.6");
        announce_process(&c, 600, 6666, "python3", "/usr/bin/python3");
        len = trace(600, 600, 0, "python3", stack_a, 7, 2);
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_TRUE(c.intervals == 1);

        len = trace(600, 601, 0, "worker", stack_a, 7, 2);
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_STREQ(c.processes.items[0].comm, "python3");
        len = trace(600, 600, 0, "\x1b]0;pwned", stack_a, 7, 2);
        ASSERT_OK(collector_intake(&c, EP_MSG_TRACE, rec, len));
        ASSERT_STREQ(c.processes.items[0].comm, "\x1b]0;pwned");
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_TRUE(c.intervals == 2);

        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM processes WHERE pid = 600") == 1);
        ASSERT_TRUE(q_int(db, "SELECT comm = char(27) || ']0;pwned' FROM processes WHERE pid = 600") == 1);
        sqlite3_close(db);
        collector_done(&c);
}

int main(void) {
        char dir[] = "/tmp/test-collector-intake.XXXXXX", path[256], cmd[300];
        Collector c;

        ASSERT_TRUE(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/profiles.db", dir);

        ASSERT_OK(collector_init(&c));
        test_decode(&c);
        test_responses(&c);
        test_persist(&c, path);
        collector_done(&c);
        test_seen_before();

        snprintf(path, sizeof(path), "%s/jit.db", dir);
        test_jit(path);
        snprintf(path, sizeof(path), "%s/restart.db", dir);
        test_table_restart(path);
        snprintf(path, sizeof(path), "%s/retry.db", dir);
        test_retry(path);
        snprintf(path, sizeof(path), "%s/changed.db", dir);
        test_file_changed(path);
        snprintf(path, sizeof(path), "%s/renamed.db", dir);
        test_process_renamed(path);

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ASSERT_TRUE(system(cmd) == 0);
        printf("OK\n");
        return 0;
}
