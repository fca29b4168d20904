/* SPDX-License-Identifier: MIT */
/* Trace-ring intake: decodes loader messages, de-duplicates frames and stacks, queues
 * symbolization for what is new and counts samples into the open interval. */

#include <inttypes.h>
#include <limits.h>
#include <string.h>

#include "collector.h"
#include "frame-kind.h"
#include "log.h"
#include "wire-buf.h"

#define PROCESS_NAME_MAX 4096
#define CONTAINER_ID_MAX 256

int trace_msg_validate(const void *payload, size_t len) {
        EpTraceMsg h;

        if (len < sizeof(EpTraceMsg))
                return -EBADMSG;
        memcpy(&h, payload, sizeof(h));
        if (h.n_frames > EP_MAX_FRAMES || h.n_kernel > h.n_frames)
                return -EBADMSG;
        if (len != sizeof(EpTraceMsg) + (size_t) h.n_frames * sizeof(EpFrame))
                return -EBADMSG;
        return 0;
}

/* A per-process frame the symbolizer could not name is asked again when a later trace uses
 * it, this many times at most, 1, 2, 4, then 8 intervals after the last request: a JIT writes
 * its perf map lazily and may create it after its first samples, and the symbolizer gives a
 * process without a map a while before it looks again (EP_JIT_MISSING_RETRY_NS). With 2 s
 * intervals the asks span 30 s. */
#define UNMAPPED_MAX_ASKS 5

static unsigned intervals_between_asks(unsigned asks_so_far) {
        return asks_so_far == 0 ? 0 : 1u << MIN(asks_so_far - 1, 15u);
}

static int queue_unmapped(Collector *c, uint32_t idx) {
        Frame *f = frame_table_get(&c->frames, idx);

        f->sym_asks++;
        f->asked_seq = (uint16_t) c->current->seq;
        return collector_sym_queue_frame(c, idx);
}

static int frame_is_new(Collector *c, uint32_t idx) {
        Frame *f = frame_table_get(&c->frames, idx);

        switch (ep_frame_kind(f->kind)->identity) {
        case EP_FRAME_ID_FILE_OFFSET:
        case EP_FRAME_ID_KERNEL_ADDR:
                return collector_sym_queue_frame(c, idx);
        case EP_FRAME_ID_PROCESS_ADDR:
                /* JIT code (named from the perf map), a runtime's code object: asked again
                 * later when not named yet (frame_seen_again). */
                return queue_unmapped(c, idx);
        case EP_FRAME_ID_NONE:
        default:
                /* Nothing a symbolizer could name (unwind stop markers). */
                f->sym_state = SYM_STATE_NONE;
                f->status = EP_SYM_NOT_FOUND;
                return 0;
        }
}

static int frame_seen_again(Collector *c, uint32_t idx) {
        Frame *f = frame_table_get(&c->frames, idx);

        if (!ep_frame_kind_per_process(f->kind) || f->sym_state != SYM_STATE_DONE || f->status == EP_SYM_OK ||
            f->sym_asks >= UNMAPPED_MAX_ASKS ||
            (uint16_t) ((uint16_t) c->current->seq - f->asked_seq) < intervals_between_asks(f->sym_asks))
                return 0;
        return queue_unmapped(c, idx);
}

/* The trace's process (a placeholder named after the thread when the loader never announced
 * it) and its thread's name, which for its main thread is the process's. */
static int trace_process(Collector *c, const EpTraceMsg *h, char thread_name[static EP_COMM_LEN + 1],
                         uint32_t *ret_process) {
        uint32_t process;
        int r;

        memcpy(thread_name, h->comm, EP_COMM_LEN);
        thread_name[EP_COMM_LEN] = 0;
        r = process_table_for_trace(&c->processes, h->pid, thread_name, &process);
        if (r < 0)
                return r;
        if (h->tid == h->pid) {
                r = process_table_main_thread_named(&c->processes, process, thread_name);
                if (r < 0)
                        return r;
        }
        *ret_process = process;
        return 0;
}

/* One sample of stack, counted in the current interval for its process and thread. */
static int intake_sample(Collector *c, const EpTraceMsg *h, uint32_t process, const char *thread_name,
                         uint32_t stack) {
        int r;

        process_table_get(&c->processes, process)->last_seq = c->current->seq;
        r = interval_add(c->current,
                         &(SampleKey) { .process = process, .tid = h->tid, .stack = stack, .cpu = h->cpu },
                         thread_name, h->time_ns, c->export_ring != NULL);
        if (r < 0)
                return r;
        c->traces++;
        return 0;
}

static int intake_trace(Collector *c, const void *payload, size_t len) {
        EpFrame frames[EP_MAX_FRAMES];
        uint32_t ids[EP_MAX_FRAMES];
        char thread_name[EP_COMM_LEN + 1];
        uint32_t stack, process;
        bool per_process = false;
        const uint8_t *raw;
        TraceHash trace;
        size_t raw_len;
        EpTraceMsg h;
        Process *p;
        int r;

        if (trace_msg_validate(payload, len) < 0)
                return DECODE_ERROR(c, "Dropping trace record of %zu bytes: frame counts do not "
                                    "match its length.", len);
        memcpy(&h, payload, sizeof(h));
        raw = (const uint8_t *) payload + sizeof(EpTraceMsg);
        raw_len = (size_t) h.n_frames * sizeof(EpFrame);

        /* A trace seen before: its stack by one hash of its frames, none of them interned. */
        trace = stack_trace_hash(raw, raw_len);
        stack = stack_table_by_trace(&c->stacks, &trace);
        if (stack != STACK_NONE) {
                r = trace_process(c, &h, thread_name, &process);
                if (r < 0)
                        return r;
                c->traces_seen_before++;
                return intake_sample(c, &h, process, thread_name, stack);
        }

        memcpy(frames, raw, raw_len);
        for (size_t i = 0; i < h.n_frames; i++) {
                if (!ep_frame_kind(frames[i].kind))
                        return DECODE_ERROR(c, "Dropping trace with unknown frame kind %u.",
                                            frames[i].kind);
                if (ep_frame_kind_has_file(frames[i].kind) &&
                    file_table_by_key(&c->files, frames[i].file_key) == 0)
                        return DECODE_ERROR(c, "Dropping trace referring to file key %" PRIu32
                                            " that was never announced.", frames[i].file_key);
        }

        /* The process first: UNMAPPED frames belong to it. */
        r = trace_process(c, &h, thread_name, &process);
        if (r < 0)
                return r;
        p = process_table_get(&c->processes, process);

        for (size_t i = 0; i < h.n_frames; i++) {
                const EpFrame *f = &frames[i];
                uint32_t file = ep_frame_kind_has_file(f->kind) ? file_table_by_key(&c->files, f->file_key) : 0;

                r = frame_table_intern(&c->frames, f->kind, f->flags, file, process, f->addr, &ids[i]);
                if (r < 0)
                        return r;
                per_process = per_process || ep_frame_kind_per_process(f->kind);
                if (r > 0) {
                        if (ep_frame_kind_per_process(f->kind))
                                p->pinned = true;
                        r = frame_is_new(c, ids[i]);
                } else
                        r = frame_seen_again(c, ids[i]);
                if (r < 0)
                        return r;
        }

        r = stack_table_intern(&c->stacks, ids, h.n_frames, &stack);
        if (r < 0)
                return r;
        if (!per_process) {
                r = stack_table_remember_trace(&c->stacks, &trace, stack);
                if (r < 0)
                        return r;
        }
        return intake_sample(c, &h, process, thread_name, stack);
}

static int intake_file(Collector *c, const void *payload, size_t len) {
        uint8_t file_id[EP_FILE_ID_SIZE], htlhash[EP_FILE_ID_SIZE];
        _cleanup_free_ char *path = NULL;
        uint32_t key, idx, old;
        uint64_t size;
        EpReader rd;
        int r;

        ep_reader_init(&rd, payload, len);
        key = ep_get_u32(&rd);
        ep_get_bytes(&rd, file_id, sizeof(file_id));
        ep_get_bytes(&rd, htlhash, sizeof(htlhash));
        size = ep_get_u64(&rd);
        path = ep_get_str(&rd, PATH_MAX);
        if (!ep_reader_done(&rd))
                return DECODE_ERROR(c, "Dropping malformed file announcement (%zu bytes).", len);

        r = file_table_intern(&c->files, file_id, htlhash, path, size, &idx);
        if (r < 0)
                return r;
        if (r > 0) {
                r = collector_sym_queue_file(c, idx);
                if (r < 0)
                        return r;
        }
        old = file_table_by_key(&c->files, key);
        if (old != 0 && old != idx)
                stack_table_forget_traces(&c->stacks); /* the key means another file now */
        return file_table_bind_key(&c->files, key, idx);
}

static int intake_process(Collector *c, const void *payload, size_t len) {
        char *comm, *exe, *container_id;
        uint64_t start_time_ns;
        uint32_t pid, idx;
        EpReader rd;

        ep_reader_init(&rd, payload, len);
        pid = ep_get_u32(&rd);
        start_time_ns = ep_get_u64(&rd);
        comm = ep_get_str(&rd, PROCESS_NAME_MAX);
        exe = ep_get_str(&rd, PATH_MAX);
        container_id = ep_get_str(&rd, CONTAINER_ID_MAX);
        if (!ep_reader_done(&rd)) {
                free(comm);
                free(exe);
                free(container_id);
                return DECODE_ERROR(c, "Dropping malformed process announcement (%zu bytes).", len);
        }

        return process_table_announce(&c->processes, pid, start_time_ns, comm, exe, container_id,
                                      &idx);
}

static int intake_process_exit(Collector *c, const void *payload, size_t len) {
        EpReader rd;
        uint32_t pid;

        ep_reader_init(&rd, payload, len);
        pid = ep_get_u32(&rd);
        if (!ep_reader_done(&rd))
                return DECODE_ERROR(c, "Dropping malformed process exit (%zu bytes).", len);
        process_table_exit(&c->processes, pid);
        return 0;
}

int collector_intake(Collector *c, uint16_t type, const void *payload, size_t len) {
        switch (type) {
        case EP_MSG_TRACE:
                return intake_trace(c, payload, len);
        case EP_MSG_FILE:
                return intake_file(c, payload, len);
        case EP_MSG_PROCESS:
                return intake_process(c, payload, len);
        case EP_MSG_PROCESS_EXIT:
                return intake_process_exit(c, payload, len);
        default:
                return DECODE_ERROR(c, "Dropping trace-ring record of unknown type %u.", type);
        }
}

void collector_drain_traces(Collector *c) {
        unsigned n;
        bool oom;
        int r;

        if (!c->trace_ring)
                return;

        r = collector_drain_ring(c, c->trace_ring, collector_intake, &n, &oom);
        if (oom)
                log_once(LOG_ERR, "Out of memory while reading traces; dropping them.");
        if (r < 0) {
                log_error_errno(r, "Trace ring is corrupt; re-opening it.");
                collector_set_error(c, "Trace ring is corrupt; re-opened it.");
                collector_detach_loader(c);
                if (c->loader_watch)
                        ep_peer_watch_retry(c->loader_watch);
        }
        if (n > 0)
                collector_sym_flush(c);
}
