/* SPDX-License-Identifier: MIT */
#pragma once

/* The collector's state: de-duplication tables, the open and the closing interval, the
 * symbolizer session, the store, the peers' rings and the counters published on D-Bus.
 * collector_init()/collector_done() cover the data-only part so tests can drive intake and
 * interval writing without a bus; collector_bus_*() adds the daemon side. */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "daemon.h"
#include "files.h"
#include "frames.h"
#include "interval.h"
#include "log.h"
#include "processes.h"
#include "retention.h"
#include "shm-ring.h"
#include "stacks.h"
#include "store.h"

#define COLLECTOR_DEFAULT_INTERVAL_NS (5 * NSEC_PER_SEC)
#define COLLECTOR_DEFAULT_FREQUENCY_HZ 20
#define COLLECTOR_SYMBOL_WAIT_NS (1500 * NSEC_PER_MSEC)
/* The trace ring's eventfd wakes the collector; the drain timer is a safety net (a wake-up
 * missed, a request that found the symbolizer's ring full) and needs no haste. */
#define COLLECTOR_DRAIN_PERIOD_NS (1 * NSEC_PER_SEC)
#define COLLECTOR_PROPERTIES_PERIOD_NS (2 * NSEC_PER_SEC)
#define COLLECTOR_EXPORT_RING_SIZE (8u << 20)
/* Frames kept in memory (and the stacks made of them) before the tables start over, or four
 * times the frames the last interval used if that is more (collector_finish_closing). */
#define COLLECTOR_MAX_FRAMES 8192u

/* Everything one interval uses, collected when it closes; each list holds table indices. */
typedef struct IntervalRefs {
        uint32_t *files, *frames, *stacks, *processes;
        size_t n_files, n_frames, n_stacks, n_processes;
        size_t cap_files, cap_frames, cap_stacks, cap_processes;
} IntervalRefs;

/* A frame or file answered EP_SYM_RETRY, asked again at due_ns (CLOCK_MONOTONIC). */
typedef struct SymRetry {
        uint64_t due_ns;
        uint32_t idx;
        bool file;
} SymRetry;

/* The back-off of asking again after a passing failure: 1 s, doubling, at most 30 s. A retry
 * never gives up on its own: only a name, a definite answer or (per-process frames) the
 * process's exit end it. */
#define COLLECTOR_SYM_RETRY_FIRST_NS (1 * NSEC_PER_SEC)
#define COLLECTOR_SYM_RETRY_MAX_NS (30 * NSEC_PER_SEC)

typedef struct SymClient {
        EpRing *req, *resp;
        sd_event_source *resp_io;
        sd_bus_slot *call;
        EpPeerWatch *watch;
        /* Not yet written to the request ring (frame / file indices). */
        uint32_t *frame_queue, *file_queue;
        size_t n_frame_queue, cap_frame_queue, n_file_queue, cap_file_queue;
        /* Waiting for their retry, in the order answered (not sorted by due time). */
        SymRetry *retries;
        size_t n_retries, cap_retries;
        uint64_t requests_sent, responses;
        uint64_t retries_sent; /* requests sent again after an EP_SYM_RETRY answer */
        uint64_t asked_again;  /* answered frames queued again: their file's answers changed */
        uint64_t files_changed; /* EP_MSG_SYM_FILE_CHANGED messages taken in */
        uint32_t first_pending; /* no frame below this index waits for its symbol (moved on by drains) */
} SymClient;

typedef struct Collector {
        /* configuration */
        char *store_path;
        const char *exporter_user; /* --exporter-user */
        uid_t exporter_uid;        /* besides root, who may open the export ring; UID_INVALID: none */
        uint64_t interval_ns;
        uint32_t max_frames; /* COLLECTOR_MAX_FRAMES */

        /* de-duplication tables */
        FileTable files;
        FrameTable frames;
        StackTable stacks;
        ProcessTable processes;

        /* aggregation */
        Interval *current;
        Interval *closing; /* closed, waiting (briefly) for symbols before it is written */
        IntervalRefs closing_refs;
        uint64_t next_seq;
        sd_bus_message **waiters; /* Flush() calls answered when closing is written */
        size_t n_waiters, cap_waiters;

        /* rows written before their symbols/build IDs/names arrived: UPDATE with the next write */
        uint32_t *dirty_frames, *dirty_files;
        size_t n_dirty_frames, cap_dirty_frames, n_dirty_files, cap_dirty_files;

        Store *store;
        StoreStats store_stats; /* kept current after each write, recomputed after retention */
        Retention retention;
        RetentionDeleted retention_deleted;
        SymClient sym;

        /* daemon side (collector-bus.c); unused by unit tests */
        EpDaemon daemon;
        bool have_daemon;
        sd_event_source *interval_timer, *drain_timer, *wait_timer, *props_timer, *retention_timer;
        EpRing *trace_ring;
        sd_event_source *trace_io;
        sd_bus_slot *loader_call, *loader_freq_call, *loader_props_match;
        EpPeerWatch *loader_watch;
        uint32_t frequency_hz;
        EpRing *export_ring;
        EpPeerWatch *exporter_watch;
        uint64_t props_sent[32];
        uint64_t last_error_gen, props_error_gen;

        /* counters (D-Bus properties) */
        uint64_t traces;
        uint64_t traces_seen_before; /* found by the hash of their frames (stacks.h) */
        uint64_t decode_errors;
        uint64_t intervals;
        uint64_t table_restarts; /* the frame and stack tables started over */
        uint64_t samples_written;
        uint64_t export_drops;
        uint64_t ring_peer_errors; /* of the rings we produce into and let go of (RingPeerErrors) */
        uint64_t exported_unnamed_frames; /* handed over while their symbols were pending */
        uint64_t store_errors;
        uint32_t pending_symbols; /* frames queued, requested or waiting for a retry */
        char *last_error;
} Collector;

int collector_init(Collector *c);
void collector_done(Collector *c);
/* Sets LastError; the properties timer announces it with the counters. */
void collector_set_error(Collector *c, const char *format, ...) _printf_(2, 3);

/* Counts a malformed record in decode_errors; logs it and sets LastError the first time this
 * call site sees one only. Evaluates to -EBADMSG. */
#define DECODE_ERROR(c, ...)                                      \
        ({                                                        \
                static bool _logged_ = false;                     \
                (c)->decode_errors++;                             \
                if (!_logged_) {                                  \
                        _logged_ = true;                          \
                        log_warning(__VA_ARGS__);                 \
                        collector_set_error((c), __VA_ARGS__);    \
                }                                                 \
                -EBADMSG;                                         \
        })

typedef int (*collector_apply_t)(Collector *c, uint16_t type, const void *payload, size_t len);
/* Hands each record waiting in ring to apply() and consumes it; a record apply() fails on is
 * dropped. ret_n: how many records were read; ret_oom: whether apply() ran out of memory.
 * Returns 0, or the ring's error when it is corrupt (counted in decode_errors; the caller
 * replaces the ring). */
/* Frees a ring we produce into (the export ring, the symbolizer's request ring), keeping its
 * count of impossible positions its consumer wrote; returns NULL. */
EpRing *collector_ring_release(Collector *c, EpRing *ring);
/* RingPeerErrors: those counts, of the rings let go of and of the current ones. */
uint64_t collector_ring_peer_errors(const Collector *c);
int collector_drain_ring(Collector *c, EpRing *ring, collector_apply_t apply, unsigned *ret_n,
                         bool *ret_oom);

/* intake.c: one trace-ring record. Bad records are counted in decode_errors and return
 * -EBADMSG; only allocation failures are otherwise fatal. */
int collector_intake(Collector *c, uint16_t type, const void *payload, size_t len);
/* Checks an EP_MSG_TRACE record's counts against its length. */
int trace_msg_validate(const void *payload, size_t len);
/* Reads everything in the trace ring. */
void collector_drain_traces(Collector *c);
void collector_detach_loader(Collector *c);

/* symbolize-client.c */
int collector_sym_queue_frame(Collector *c, uint32_t idx);
int collector_sym_queue_file(Collector *c, uint32_t idx);
/* Writes queued requests while the request ring has room, then wakes the symbolizer. */
void collector_sym_flush(Collector *c);
/* Applies one response-ring record. */
int collector_sym_apply(Collector *c, uint16_t type, const void *payload, size_t len);
void collector_sym_drain(Collector *c);
/* Queues the frames and files whose retry is due at now_ns (CLOCK_MONOTONIC) and sends them;
 * a per-process frame whose process exited is answered NO_FILE instead. Called from the
 * drain timer; tests pass the time they want. */
void collector_sym_retry_due(Collector *c, uint64_t now_ns);
/* Frames waiting for a retry now (a subset of pending_symbols). */
size_t collector_sym_retrying(const Collector *c);
/* Puts every unanswered request back in the queue (the session went away or was replaced). */
int collector_sym_requeue(Collector *c);
int collector_sym_attach(Collector *c, int req_ring, int req_efd, int resp_ring, int resp_efd);
void collector_sym_detach(Collector *c);
/* The index of the oldest frame still waiting for its symbol; frames.n when none is. Requests
 * are answered in order, so this climbs through a backlog even while new frames keep coming. */
uint32_t collector_sym_first_pending(const Collector *c);
static inline bool collector_sym_attached(const Collector *c) {
        return c->sym.req && c->sym.resp;
}

/* collector.c: closing intervals */
/* Closes the current interval; waiter (a Flush() call, may be NULL) is answered once it is
 * written. Writes at once when nothing is pending or no symbolizer is there to answer. */
int collector_close_interval(Collector *c, sd_bus_message *waiter);
/* Writes the closing interval now (store, export ring) and answers waiters. */
void collector_finish_closing(Collector *c);
/* Called after responses were applied: finishes the closing interval when it waits no more. */
void collector_check_closing(Collector *c);
int interval_collect_refs(Collector *c, Interval *iv, IntervalRefs *refs);
void interval_refs_done(IntervalRefs *refs);
bool interval_refs_pending(Collector *c, const IntervalRefs *refs);

/* persist.c: one transaction for the interval (iv may be NULL: only pending updates). */
int collector_persist(Collector *c, Interval *iv, const IntervalRefs *refs, int64_t *ret_id);

/* collector.c: retention of the store */
/* Sets up what the store's retention and status need once c->store is open: the policy's WAL
 * size, the totals. */
int collector_store_opened(Collector *c);
/* One retention step (retention.h); forgets the store ids of the rows it deleted so they are
 * written again when used. Returns 1 when there is more to do, 0 when done, < 0 on error. */
int collector_retention_step(Collector *c);
/* Runs retention to the end (tests, benchmarks; the daemon spreads steps over its loop). */
int collector_retention_run(Collector *c);
/* Asks the daemon to run retention soon (no-op without the daemon side). */
void collector_bus_retention_kick(Collector *c);

/* export-ring.c */
int collector_export_open(Collector *c, int *ret_memfd, int *ret_eventfd);
void collector_export_close(Collector *c);
/* Writes the interval as one BEGIN..END group; a full ring counts an export drop. */
int collector_export(Collector *c, Interval *iv, const IntervalRefs *refs, uint64_t interval_id);

/* collector-bus.c */
int collector_bus_setup(Collector *c);
void collector_bus_done(Collector *c);
uint64_t collector_period_ns(const Collector *c);
