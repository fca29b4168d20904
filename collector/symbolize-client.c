/* SPDX-License-Identifier: MIT */
/* The collector's side of a symbolizer session: one request per new frame and per new file,
 * batched into the request ring; responses applied to the frame and file tables. */

#include <inttypes.h>
#include <limits.h>
#include <string.h>
#include <sys/epoll.h>

#include "array.h"
#include "collector.h"
#include "frame-kind.h"
#include "log.h"
#include "wire-buf.h"
#include "wire-sym.h"

#define SYM_MODULE_MAX 256
#define SYM_FUNCTION_MAX 65536
#define SYM_LINES_MAX 1024
#define SYM_GO_BUILD_ID_MAX 1024

/* A failed reserve counts as a drop in the ring's shared header; we retry instead, so check
 * for room first. Worst case the record needs wrap padding smaller than itself. */
static bool ring_has_room(EpRing *r, size_t len) {
        size_t total = sizeof(EpRingRecord) + ALIGN8(len);

        return ep_ring_room(r) >= 2 * total;
}

int collector_sym_queue_frame(Collector *c, uint32_t idx) {
        Frame *f = frame_table_get(&c->frames, idx);
        int r;

        if (!f || f->sym_state == SYM_STATE_QUEUED)
                return 0;
        r = ARRAY_PUSH(c->sym.frame_queue, c->sym.n_frame_queue, c->sym.cap_frame_queue, idx);
        if (r < 0)
                return r;
        if (!sym_state_pending(f->sym_state))
                c->pending_symbols++;
        f->sym_state = SYM_STATE_QUEUED;
        c->sym.first_pending = MIN(c->sym.first_pending, idx);
        return 0;
}

uint32_t collector_sym_first_pending(const Collector *c) {
        uint32_t i = c->sym.first_pending;

        while (i < c->frames.n && !sym_state_pending(c->frames.items[i].sym_state))
                i++;
        return i;
}

int collector_sym_queue_file(Collector *c, uint32_t idx) {
        FileEntry *f = file_table_get(&c->files, idx);
        int r;

        if (!f || idx == 0 || f->sym_state == SYM_STATE_QUEUED)
                return 0;
        r = ARRAY_PUSH(c->sym.file_queue, c->sym.n_file_queue, c->sym.cap_file_queue, idx);
        if (r < 0)
                return r;
        f->sym_state = SYM_STATE_QUEUED;
        return 0;
}

static int send_file_request(Collector *c, uint32_t idx) {
        FileEntry *f = file_table_get(&c->files, idx);
        uint8_t buf[8 + EP_FILE_ID_SIZE + 4 + PATH_MAX];
        EpWriter w;
        int r;

        ep_writer_init(&w, buf, sizeof(buf));
        ep_put_u64(&w, idx);
        ep_put_bytes(&w, f->file_id, EP_FILE_ID_SIZE);
        ep_put_str(&w, f->path);
        if (w.overflow)
                return -E2BIG;
        if (!ring_has_room(c->sym.req, w.size))
                return -ENOBUFS;
        r = ep_ring_push(c->sym.req, EP_MSG_SYM_FILE_REQUEST, buf, (uint32_t) w.size);
        if (r < 0)
                return r;
        f->sym_state = SYM_STATE_REQUESTED;
        return 0;
}

static int send_frame_request(Collector *c, uint32_t idx) {
        static const uint8_t no_file_id[EP_FILE_ID_SIZE] = {};
        Frame *f = frame_table_get(&c->frames, idx);
        FileEntry *file = f->file ? file_table_get(&c->files, f->file) : NULL;
        uint8_t buf[8 + 1 + EP_FILE_ID_SIZE + 8 + 1 + 4 + PATH_MAX + 4 + 8];
        EpWriter w;
        int r;

        EpSymRequestMsg msg = {
                .cookie = idx,
                .kind = f->kind,
                .flags = f->flags,
                .addr = f->addr,
                .path = file ? file->path : "",
        };
        memcpy(msg.file_id, file ? file->file_id : no_file_id, EP_FILE_ID_SIZE);
        if (ep_frame_kind_per_process(f->kind)) {
                /* Named from that process's perf map or memory; the start time tells a reused
                 * pid apart.
                 * The entry is pinned while the frame exists. */
                const Process *p = process_table_get(&c->processes, f->process);

                if (p) {
                        msg.pid = p->pid;
                        msg.start_time_ns = p->start_time_ns;
                }
        }
        ep_writer_init(&w, buf, sizeof(buf));
        ep_put_sym_request(&w, &msg);
        if (w.overflow)
                return -E2BIG;
        if (!ring_has_room(c->sym.req, w.size))
                return -ENOBUFS;
        r = ep_ring_push(c->sym.req, EP_MSG_SYM_REQUEST, buf, (uint32_t) w.size);
        if (r < 0)
                return r;
        f->sym_state = SYM_STATE_REQUESTED;
        return 0;
}

/* Sends queue entries from the front while the ring takes them; returns how many were sent. */
static size_t flush_queue(Collector *c, uint32_t *queue, size_t *n, bool files) {
        size_t i, sent = 0;

        for (i = 0; i < *n; i++) {
                uint8_t state = files ? c->files.items[queue[i]].sym_state
                                      : c->frames.items[queue[i]].sym_state;
                int r;

                if (state != SYM_STATE_QUEUED)
                        continue; /* answered meanwhile */
                r = files ? send_file_request(c, queue[i]) : send_frame_request(c, queue[i]);
                if (r == -E2BIG) {
                        log_once(LOG_WARNING, "A symbolization request does not fit a ring record; skipping it.");
                        continue;
                }
                if (r < 0)
                        break; /* ring full: the rest waits for the next flush */
                sent++;
        }
        if (i > 0 && i < *n)
                memmove(queue, queue + i, (*n - i) * sizeof(uint32_t));
        *n -= i;
        return sent;
}

void collector_sym_flush(Collector *c) {
        size_t sent;

        if (!collector_sym_attached(c))
                return;
        sent = flush_queue(c, c->sym.file_queue, &c->sym.n_file_queue, true);
        sent += flush_queue(c, c->sym.frame_queue, &c->sym.n_frame_queue, false);
        if (sent > 0) {
                c->sym.requests_sent += sent;
                (void) ep_ring_notify(c->sym.req);
        }
}

static int mark_dirty(uint32_t **list, size_t *n, size_t *cap, bool *flag, uint32_t idx) {
        int r;

        if (*flag)
                return 0;
        r = ARRAY_PUSH(*list, *n, *cap, idx);
        if (r < 0)
                return r;
        *flag = true;
        return 0;
}

/* A definite answer for a pending frame (names, NOT_FOUND, NO_FILE, BAD_FILE): kept, and
 * written over the stored row when one was written while it was pending. */
static int frame_answered(Collector *c, uint32_t idx, uint8_t status, uint64_t elf_addr, char *module,
                          SymLine *lines, uint32_t n_lines) {
        Frame *f = &c->frames.items[idx];

        frame_set_symbol(f, status, elf_addr, module, lines, n_lines);
        f->retries = 0;
        c->pending_symbols--;
        if (f->store_id != 0)
                return mark_dirty(&c->dirty_frames, &c->n_dirty_frames, &c->cap_dirty_frames,
                                  &f->store_dirty, idx);
        return 0;
}

static uint64_t retry_delay_ns(unsigned retries_before) {
        uint64_t d = COLLECTOR_SYM_RETRY_FIRST_NS;

        for (unsigned i = 0; i < retries_before && d < COLLECTOR_SYM_RETRY_MAX_NS; i++)
                d *= 2;
        return MIN(d, COLLECTOR_SYM_RETRY_MAX_NS);
}

/* An EP_SYM_RETRY answer: not an answer. The frame or file stays pending (counted in
 * pending_symbols, below FirstPendingFrame) and is asked again once its back-off is over,
 * whether or not a later trace uses it. */
static int schedule_retry(Collector *c, uint32_t idx, bool file, uint8_t *sym_state, uint8_t *retries) {
        SymRetry entry = {
                .due_ns = ep_now_ns(CLOCK_MONOTONIC) + retry_delay_ns(*retries),
                .idx = idx,
                .file = file,
        };
        int r;

        r = ARRAY_PUSH(c->sym.retries, c->sym.n_retries, c->sym.cap_retries, entry);
        if (r < 0)
                return r;
        *sym_state = SYM_STATE_RETRY;
        if (*retries < UINT8_MAX)
                (*retries)++;
        return 0;
}

size_t collector_sym_retrying(const Collector *c) {
        return c->sym.n_retries;
}

/* Whether a retry of frame idx still has something to ask: a per-process frame's process
 * must still run (its memory and perf map went with it). */
static bool frame_retry_possible(Collector *c, const Frame *f) {
        const Process *p;

        if (!ep_frame_kind_per_process(f->kind))
                return true;
        p = process_table_get(&c->processes, f->process);
        return p && !p->exited;
}

static int retry_one(Collector *c, const SymRetry *e) {
        if (e->file) {
                FileEntry *f = file_table_get(&c->files, e->idx);

                if (!f || f->sym_state != SYM_STATE_RETRY)
                        return 0;
                f->sym_state = SYM_STATE_NONE;
                return collector_sym_queue_file(c, e->idx);
        }

        Frame *f = frame_table_get(&c->frames, e->idx);
        if (!f || f->sym_state != SYM_STATE_RETRY)
                return 0;
        if (!frame_retry_possible(c, f))
                return frame_answered(c, e->idx, EP_SYM_NO_FILE, 0, NULL, NULL, 0);
        return collector_sym_queue_frame(c, e->idx);
}

void collector_sym_retry_due(Collector *c, uint64_t now_ns) {
        size_t kept = 0, queued = 0;

        for (size_t i = 0; i < c->sym.n_retries; i++) {
                SymRetry e = c->sym.retries[i];

                if (e.due_ns > now_ns || retry_one(c, &e) < 0) {
                        c->sym.retries[kept++] = e; /* not yet, or out of memory: later */
                        continue;
                }
                queued++;
        }
        c->sym.n_retries = kept;
        if (queued == 0)
                return;
        c->sym.retries_sent += queued;
        collector_sym_flush(c);
}

static int apply_frame_response(Collector *c, const void *payload, size_t len) {
        _cleanup_free_ char *module = NULL;
        SymLine *lines = NULL;
        uint64_t cookie, elf_addr;
        uint16_t n_lines;
        uint8_t status;
        EpReader rd;
        Frame *f;
        bool ok;

        ep_reader_init(&rd, payload, len);
        cookie = ep_get_u64(&rd);
        status = ep_get_u8(&rd);
        elf_addr = ep_get_u64(&rd);
        module = ep_get_str(&rd, SYM_MODULE_MAX);
        n_lines = ep_get_u16(&rd);
        ok = !rd.error && n_lines <= SYM_LINES_MAX && status < _EP_SYM_STATUS_MAX;
        if (ok && n_lines > 0) {
                lines = calloc(n_lines, sizeof(SymLine));
                if (!lines)
                        return -ENOMEM;
                for (size_t i = 0; i < n_lines; i++) {
                        lines[i].function = ep_get_str(&rd, SYM_FUNCTION_MAX);
                        lines[i].file = ep_get_str(&rd, PATH_MAX);
                        lines[i].line = ep_get_u32(&rd);
                }
        }
        ok = ok && ep_reader_done(&rd);

        f = cookie < c->frames.n ? frame_table_get(&c->frames, (uint32_t) cookie) : NULL;
        if (!f || !sym_state_in_flight(f->sym_state)) {
                /* Not something we asked for, or answered already (a replaced session). */
                sym_lines_free(lines, lines ? n_lines : 0);
                return ok ? 0 : DECODE_ERROR(c, "Dropping malformed symbol response (%zu bytes).", len);
        }
        if (!ok) {
                sym_lines_free(lines, lines ? n_lines : 0);
                /* Do not wait for it forever. */
                (void) frame_answered(c, (uint32_t) cookie, EP_SYM_NOT_FOUND, 0, NULL, NULL, 0);
                return DECODE_ERROR(c, "Dropping malformed symbol response (%zu bytes).", len);
        }

        if (status == EP_SYM_RETRY) {
                sym_lines_free(lines, lines ? n_lines : 0);
                return schedule_retry(c, (uint32_t) cookie, false, &f->sym_state, &f->retries);
        }
        return frame_answered(c, (uint32_t) cookie, status, elf_addr, TAKE_PTR(module), lines,
                              lines ? n_lines : 0);
}

static int apply_file_response(Collector *c, const void *payload, size_t len) {
        _cleanup_free_ char *go_build_id = NULL;
        const void *gnu;
        size_t gnu_len = 0;
        uint64_t cookie;
        uint8_t status;
        EpReader rd;
        FileEntry *f;

        ep_reader_init(&rd, payload, len);
        cookie = ep_get_u64(&rd);
        status = ep_get_u8(&rd);
        gnu = ep_get_blob(&rd, EP_BUILD_ID_MAX, &gnu_len);
        go_build_id = ep_get_str(&rd, SYM_GO_BUILD_ID_MAX);
        if (!ep_reader_done(&rd) || status >= _EP_SYM_STATUS_MAX)
                return DECODE_ERROR(c, "Dropping malformed file response (%zu bytes).", len);

        f = cookie > 0 && cookie < c->files.n ? file_table_get(&c->files, (uint32_t) cookie) : NULL;
        if (!f || !sym_state_in_flight(f->sym_state))
                return 0;
        if (status == EP_SYM_RETRY)
                return schedule_retry(c, (uint32_t) cookie, true, &f->sym_state, &f->retries);

        f->retries = 0;
        f->status = status;
        f->gnu_build_id_len = (uint8_t) MIN(gnu_len, sizeof(f->gnu_build_id));
        if (f->gnu_build_id_len > 0)
                memcpy(f->gnu_build_id, gnu, f->gnu_build_id_len);
        free(f->go_build_id);
        f->go_build_id = go_build_id && *go_build_id ? TAKE_PTR(go_build_id) : NULL;
        f->sym_state = SYM_STATE_DONE;
        if (f->store_id != 0)
                return mark_dirty(&c->dirty_files, &c->n_dirty_files, &c->cap_dirty_files,
                                  &f->store_dirty, (uint32_t) cookie);
        return 0;
}

/* EP_MSG_SYM_FILE_CHANGED: the answers for native frames of that file may be better now (its
 * debug file appeared). Every frame of it that was answered is queued again like a new frame;
 * the new answer is applied and stored like any other (a name replaces a name, a failure never
 * replaces one). Frames in flight or waiting for a retry get a new answer anyway. */
static int apply_file_changed(Collector *c, const void *payload, size_t len) {
        uint8_t file_id[EP_FILE_ID_SIZE];
        uint32_t file;
        EpReader rd;
        int r;

        ep_reader_init(&rd, payload, len);
        ep_get_bytes(&rd, file_id, sizeof file_id);
        if (!ep_reader_done(&rd))
                return DECODE_ERROR(c, "Dropping malformed file-changed message (%zu bytes).", len);
        c->sym.files_changed++;

        file = file_table_by_id(&c->files, file_id);
        if (file == 0)
                return 0; /* never heard of: none of our frames is in it */
        for (uint32_t i = 0; i < c->frames.n; i++) {
                const Frame *f = &c->frames.items[i];

                if (f->file != file || f->kind != EP_FRAME_NATIVE || f->sym_state != SYM_STATE_DONE)
                        continue;
                r = collector_sym_queue_frame(c, i);
                if (r < 0)
                        return r;
                c->sym.asked_again++;
        }
        return 0; /* the drain sends the queue */
}

int collector_sym_apply(Collector *c, uint16_t type, const void *payload, size_t len) {
        c->sym.responses++;
        switch (type) {
        case EP_MSG_SYM_RESPONSE:
                return apply_frame_response(c, payload, len);
        case EP_MSG_SYM_FILE_RESPONSE:
                return apply_file_response(c, payload, len);
        case EP_MSG_SYM_FILE_CHANGED:
                return apply_file_changed(c, payload, len);
        default:
                return DECODE_ERROR(c, "Dropping response-ring record of unknown type %u.", type);
        }
}

void collector_sym_drain(Collector *c) {
        unsigned n;
        bool oom;
        int r;

        if (!c->sym.resp)
                return;

        r = collector_drain_ring(c, c->sym.resp, collector_sym_apply, &n, &oom);
        if (oom)
                log_once(LOG_ERR, "Out of memory while applying symbols.");
        if (r < 0) {
                log_error_errno(r, "Symbol response ring is corrupt; opening a new session.");
                collector_set_error(c, "Symbol response ring is corrupt; opened a new session.");
                collector_sym_detach(c);
                if (c->sym.watch)
                        ep_peer_watch_retry(c->sym.watch);
        }
        if (n > 0) {
                c->sym.first_pending = collector_sym_first_pending(c);
                collector_sym_flush(c); /* the symbolizer made room in the request ring */
                collector_check_closing(c);
        }
}

int collector_sym_requeue(Collector *c) {
        int r;

        for (size_t i = 1; i < c->files.n; i++)
                if (c->files.items[i].sym_state == SYM_STATE_REQUESTED) {
                        c->files.items[i].sym_state = SYM_STATE_NONE;
                        r = collector_sym_queue_file(c, (uint32_t) i);
                        if (r < 0)
                                return r;
                }
        for (size_t i = 0; i < c->frames.n; i++)
                if (c->frames.items[i].sym_state == SYM_STATE_REQUESTED) {
                        r = collector_sym_queue_frame(c, (uint32_t) i);
                        if (r < 0)
                                return r;
                }
        return 0;
}

static int on_resp_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        collector_sym_drain(userdata);
        return 0;
}

void collector_sym_detach(Collector *c) {
        bool was = collector_sym_attached(c);

        c->sym.resp_io = sd_event_source_disable_unref(c->sym.resp_io);
        c->sym.req = collector_ring_release(c, c->sym.req);
        c->sym.resp = ep_ring_free(c->sym.resp);
        if (collector_sym_requeue(c) < 0)
                log_error("Out of memory re-queueing symbol requests.");
        if (was)
                log_info("Symbolizer session closed; %" PRIu32 " symbols pending.", c->pending_symbols);
}

int collector_sym_attach(Collector *c, int req_ring, int req_efd, int resp_ring, int resp_efd) {
        _cleanup_ring_ EpRing *req = NULL, *resp = NULL;
        int r;

        collector_sym_detach(c);

        r = ep_ring_attach(req_ring, req_efd, &req);
        if (r < 0)
                return log_error_errno(r, "Cannot map the symbol request ring: %m");
        r = ep_ring_attach(resp_ring, resp_efd, &resp);
        if (r < 0)
                return log_error_errno(r, "Cannot map the symbol response ring: %m");

        if (c->have_daemon) {
                r = sd_event_add_io(c->daemon.event, &c->sym.resp_io, ep_ring_eventfd(resp),
                                    EPOLLIN, on_resp_io, c);
                if (r < 0)
                        return log_error_errno(r, "Cannot watch the symbol response ring: %m");
        }
        c->sym.req = TAKE_PTR(req);
        c->sym.resp = TAKE_PTR(resp);
        log_info("Symbolizer session open; %" PRIu32 " symbols pending.", c->pending_symbols);

        collector_sym_flush(c);
        collector_sym_drain(c);
        return 0;
}
