/* SPDX-License-Identifier: MIT */
/* Collector state, and closing intervals: an interval closes on the timer or Flush(), waits
 * briefly for the symbols of its frames, then goes to the store and the export ring. */

#include <inttypes.h>
#include <stdarg.h>
#include <time.h>

#include "array.h"
#include "collector.h"
#include "log.h"

int collector_init(Collector *c) {
        int r;

        *c = (Collector) {
                .interval_ns = COLLECTOR_DEFAULT_INTERVAL_NS,
                .max_frames = COLLECTOR_MAX_FRAMES,
                .frequency_hz = COLLECTOR_DEFAULT_FREQUENCY_HZ,
                .next_seq = 1,
                .exporter_user = EP_EXPORTER_USER,
                .exporter_uid = UID_INVALID,
        };
        retention_init(&c->retention, &RETENTION_POLICY_DEFAULT);
        r = file_table_init(&c->files);
        if (r < 0)
                return r;
        r = frame_table_init(&c->frames);
        if (r < 0)
                return r;
        r = stack_table_init(&c->stacks);
        if (r < 0)
                return r;
        r = process_table_init(&c->processes);
        if (r < 0)
                return r;
        return interval_new(c->next_seq++, ep_now_ns(CLOCK_REALTIME), &c->current);
}

void collector_done(Collector *c) {
        for (size_t i = 0; i < c->n_waiters; i++)
                sd_bus_message_unref(c->waiters[i]);
        free(c->waiters);
        interval_free(c->current);
        interval_free(c->closing);
        interval_refs_done(&c->closing_refs);
        free(c->dirty_frames);
        free(c->dirty_files);
        free(c->sym.frame_queue);
        free(c->sym.file_queue);
        free(c->sym.retries);
        ep_ring_free(c->sym.req);
        ep_ring_free(c->sym.resp);
        ep_ring_free(c->trace_ring);
        ep_ring_free(c->export_ring);
        store_free(c->store);
        retention_deleted_done(&c->retention_deleted);
        file_table_done(&c->files);
        frame_table_done(&c->frames);
        stack_table_done(&c->stacks);
        process_table_done(&c->processes);
        free(c->last_error);
        free(c->store_path);
        *c = (Collector) {};
}

void collector_set_error(Collector *c, const char *format, ...) {
        va_list ap;
        int r;

        /* No signal here: the properties timer publishes LastError (by its generation). */
        va_start(ap, format);
        r = ep_daemon_set_last_errorv(NULL, &c->last_error, format, ap);
        va_end(ap);
        if (r >= 0)
                c->last_error_gen++;
}

EpRing *collector_ring_release(Collector *c, EpRing *ring) {
        if (ring)
                c->ring_peer_errors += ep_ring_peer_errors(ring);
        return ep_ring_free(ring);
}

uint64_t collector_ring_peer_errors(const Collector *c) {
        return c->ring_peer_errors + (c->export_ring ? ep_ring_peer_errors(c->export_ring) : 0) +
               (c->sym.req ? ep_ring_peer_errors(c->sym.req) : 0);
}

int collector_drain_ring(Collector *c, EpRing *ring, collector_apply_t apply, unsigned *ret_n,
                         bool *ret_oom) {
        *ret_n = 0;
        *ret_oom = false;
        ep_ring_clear_wakeup(ring);
        for (;;) {
                EpRingRecord h;
                const void *p;
                int r;

                r = ep_ring_peek(ring, &h, &p);
                if (r == 0)
                        return 0;
                if (r < 0) {
                        c->decode_errors++;
                        return r;
                }
                r = apply(c, h.type, p, h.len);
                ep_ring_consume(ring);
                if (r == -ENOMEM)
                        *ret_oom = true;
                (*ret_n)++;
        }
}

void interval_refs_done(IntervalRefs *refs) {
        free(refs->files);
        free(refs->frames);
        free(refs->stacks);
        free(refs->processes);
        *refs = (IntervalRefs) {};
}

/* Collects each used process, stack, frame and file once (marking them with the interval's
 * seq) and numbers frames and stacks for the export group. */
int interval_collect_refs(Collector *c, Interval *iv, IntervalRefs *refs) {
        uint64_t mark = iv->seq;
        size_t state = 0;
        const void *k;
        void *v;
        int r;

        interval_refs_done(refs);
        while (ep_hashmap_iterate(iv->samples, &state, &k, &v)) {
                const SampleKey *key = k;
                Process *p = process_table_get(&c->processes, key->process);
                Stack *s = &c->stacks.items[key->stack];

                if (p && p->mark != mark) {
                        p->mark = mark;
                        r = ARRAY_PUSH(refs->processes, refs->n_processes, refs->cap_processes, key->process);
                        if (r < 0)
                                return r;
                }
                if (s->mark == mark)
                        continue;
                s->mark = mark;
                s->ref = (uint32_t) refs->n_stacks;
                r = ARRAY_PUSH(refs->stacks, refs->n_stacks, refs->cap_stacks, key->stack);
                if (r < 0)
                        return r;

                const uint32_t *frames = stack_table_frames(&c->stacks, key->stack);
                for (uint32_t i = 0; i < s->n; i++) {
                        Frame *f = &c->frames.items[frames[i]];

                        if (f->mark == mark)
                                continue;
                        f->mark = mark;
                        f->ref = (uint32_t) refs->n_frames;
                        r = ARRAY_PUSH(refs->frames, refs->n_frames, refs->cap_frames, frames[i]);
                        if (r < 0)
                                return r;
                        if (f->file == 0)
                                continue;
                        FileEntry *file = &c->files.items[f->file];
                        if (file->mark == mark)
                                continue;
                        file->mark = mark;
                        r = ARRAY_PUSH(refs->files, refs->n_files, refs->cap_files, f->file);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

bool interval_refs_pending(Collector *c, const IntervalRefs *refs) {
        for (size_t i = 0; i < refs->n_frames; i++)
                if (sym_state_in_flight(c->frames.items[refs->frames[i]].sym_state))
                        return true;
        for (size_t i = 0; i < refs->n_files; i++)
                if (sym_state_in_flight(c->files.items[refs->files[i]].sym_state))
                        return true;
        return false;
}

static void answer_waiters(Collector *c, int error) {
        for (size_t i = 0; i < c->n_waiters; i++) {
                sd_bus_message *m = c->waiters[i];

                if (error < 0)
                        (void) sd_bus_reply_method_errorf(m, SD_BUS_ERROR_FAILED,
                                                          "Writing the interval failed: %s",
                                                          c->last_error ?: strerror(-error));
                else
                        (void) sd_bus_reply_method_return(m, NULL);
                sd_bus_message_unref(m);
        }
        c->n_waiters = 0;
}

/* Frames and stacks are interned for the collector's life, so new code (compilers, churn
 * of executables, JIT) made the tables grow without end. Past the limit they start over, at
 * the one moment nothing refers to their indices: right after an interval was written, with
 * the new one still empty and no symbol asked or queued. Everything is in the store; what is
 * seen again is interned again, found in the store by its identity and answered from the
 * symbolizer's caches. Files and processes stay (processes are freed by process_table_gc). */
static void restart_tables(Collector *c, size_t frames_used) {
        FrameTable frames;
        StackTable stacks;

        if (c->frames.n <= MAX((size_t) c->max_frames, 4 * frames_used) || c->closing ||
            c->current->n_samples > 0 || c->pending_symbols > 0 || c->n_dirty_frames > 0)
                return;
        if (frame_table_init(&frames) < 0)
                return;
        if (stack_table_init(&stacks) < 0) {
                frame_table_done(&frames);
                return;
        }
        log_debug("Starting the frame and stack tables over (%zu frames, %zu stacks).", c->frames.n,
                  c->stacks.n);
        frame_table_done(&c->frames);
        stack_table_done(&c->stacks);
        c->frames = frames;
        c->stacks = stacks;
        c->sym.first_pending = 0;
        for (size_t i = 0; i < c->processes.n; i++)
                c->processes.items[i].pinned = false; /* no frame refers to them any more */
        c->table_restarts++;
}

void collector_finish_closing(Collector *c) {
        _cleanup_(interval_freep) Interval *iv = TAKE_PTR(c->closing);
        int64_t id = 0;
        int r = 0;

        c->wait_timer = sd_event_source_disable_unref(c->wait_timer);
        if (!iv) {
                answer_waiters(c, 0);
                return;
        }

        if (c->store) {
                r = collector_persist(c, iv, &c->closing_refs, &id);
                if (r < 0) {
                        c->store_errors++;
                        collector_set_error(c, "Writing interval to %s failed: %s",
                                            store_path(c->store), store_last_error(c->store));
                }
        }
        if (iv->n_samples > 0) {
                /* The store's interval id names it everywhere; without a store, our number. */
                uint64_t exported_id = id > 0 ? (uint64_t) id : iv->seq;

                if (r >= 0)
                        c->intervals++;
                if (c->export_ring)
                        (void) collector_export(c, iv, &c->closing_refs, exported_id);
                log_struct_id(c->intervals <= 1 ? LOG_INFO : LOG_DEBUG, MESSAGE_ID_INTERVAL_WRITTEN,
                              "Interval %" PRIu64 ": %" PRIu64 " samples, %zu stacks, %zu frames.",
                              exported_id, iv->n_samples, c->closing_refs.n_stacks, c->closing_refs.n_frames);
        }
        if (c->have_daemon)
                ep_daemon_status(&c->daemon, "%" PRIu64 " intervals, %" PRIu64 " samples written, "
                                 "%zu stacks, %zu frames", c->intervals, c->samples_written,
                                 c->stacks.n, c->frames.n);

        restart_tables(c, c->closing_refs.n_frames);
        process_table_gc(&c->processes, iv->seq);
        interval_refs_done(&c->closing_refs);
        answer_waiters(c, r);
        collector_bus_retention_kick(c);
}

void collector_check_closing(Collector *c) {
        if (c->closing && !interval_refs_pending(c, &c->closing_refs))
                collector_finish_closing(c);
}

static int on_wait_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        Collector *c = userdata;

        log_debug("Symbols still pending after %llu ms; writing the interval anyway.",
                  (unsigned long long) (COLLECTOR_SYMBOL_WAIT_NS / NSEC_PER_MSEC));
        collector_finish_closing(c);
        return 0;
}

int collector_close_interval(Collector *c, sd_bus_message *waiter) {
        uint64_t now;
        int r;

        /* Take in what is already in the ring so the interval is complete. */
        collector_drain_traces(c);
        if (c->closing)
                collector_finish_closing(c);

        now = ep_now_ns(CLOCK_REALTIME);
        Interval *next;
        r = interval_new(c->next_seq++, now, &next);
        if (r < 0)
                return r;
        c->current->end_ns = now;
        c->closing = c->current;
        c->current = next;

        if (waiter) {
                r = ARRAY_PUSH(c->waiters, c->n_waiters, c->cap_waiters, sd_bus_message_ref(waiter));
                if (r < 0) {
                        sd_bus_message_unref(waiter);
                        return r;
                }
        }

        r = interval_collect_refs(c, c->closing, &c->closing_refs);
        if (r < 0) {
                interval_refs_done(&c->closing_refs);
                log_error_errno(r, "Cannot collect what the interval uses: %m");
                c->closing = interval_free(c->closing);
                answer_waiters(c, r);
                return 0; /* reported to the waiters */
        }

        collector_sym_flush(c);
        collector_sym_drain(c);
        if (!c->closing)
                return 0; /* drained responses completed it */
        if (!c->have_daemon || !collector_sym_attached(c) || !interval_refs_pending(c, &c->closing_refs)) {
                collector_finish_closing(c);
                return 0;
        }

        r = sd_event_add_time_relative(c->daemon.event, &c->wait_timer, CLOCK_MONOTONIC,
                                       COLLECTOR_SYMBOL_WAIT_NS / 1000, 10 * 1000,
                                       on_wait_timeout, c);
        if (r < 0) {
                log_warning_errno(r, "Cannot wait for symbols: %m");
                collector_finish_closing(c);
        }
        return 0;
}

uint64_t collector_period_ns(const Collector *c) {
        return NSEC_PER_SEC / (c->frequency_hz ?: COLLECTOR_DEFAULT_FREQUENCY_HZ);
}

int collector_store_opened(Collector *c) {
        uint64_t max = c->retention.policy.max_bytes;

        /* Retention runs after every interval and does the checkpoints: the database file
         * grows only once retention made room, so it stays within the size limit. The WAL
         * is kept to an eighth of that, at least 1 MiB (one busy interval and its retention
         * fit) and at most 8 MiB. */
        c->retention.policy.max_wal_bytes = MIN(MAX(max / 8, 1ULL << 20), 8ULL << 20);
        store_set_manual_checkpoints(c->store, c->retention.policy.max_wal_bytes);
        return store_read_stats(c->store, &c->store_stats);
}

/* The rows retention deleted may have been ours: forget their ids, so the next interval that
 * uses one of them writes the row again (INSERT OR IGNORE finds or makes it) instead of
 * pointing at nothing. Rows we never held cannot be in our tables, and a row we hold that is
 * still used is not deleted, so nothing else changes. */
static void forget_deleted(Collector *c, const RetentionDeleted *d) {
        if (d->n_stacks > 0)
                for (size_t i = 0; i < c->stacks.n; i++) {
                        Stack *st = &c->stacks.items[i];

                        if (st->store_id != 0 && retention_deleted_contains(d->stacks, d->n_stacks, st->store_id))
                                st->store_id = 0;
                }
        if (d->n_frames > 0)
                for (size_t i = 0; i < c->frames.n; i++) {
                        Frame *f = &c->frames.items[i];

                        if (f->store_id != 0 && retention_deleted_contains(d->frames, d->n_frames, f->store_id))
                                f->store_id = 0;
                }
        if (d->n_processes > 0)
                for (size_t i = 0; i < c->processes.n; i++) {
                        Process *p = &c->processes.items[i];

                        if (p->store_id != 0 &&
                            retention_deleted_contains(d->processes, d->n_processes, p->store_id))
                                p->store_id = 0;
                }
        if (d->n_files > 0)
                for (size_t i = 0; i < c->files.n; i++) {
                        FileEntry *f = &c->files.items[i];

                        if (f->store_id != 0 && retention_deleted_contains(d->files, d->n_files, f->store_id))
                                f->store_id = 0;
                }
}

int collector_retention_step(Collector *c) {
        int r;

        if (!c->store)
                return 0;
        r = retention_step(&c->retention, c->store, ep_now_ns(CLOCK_REALTIME), ep_now_ns(CLOCK_MONOTONIC),
                           &c->retention_deleted);
        if (r < 0) {
                c->store_errors++;
                collector_set_error(c, "Retention in %s failed: %s", store_path(c->store),
                                    store_last_error(c->store));
                return r;
        }
        forget_deleted(c, &c->retention_deleted);
        if (r == 0 && c->retention.did_work) {
                c->retention.did_work = false;
                (void) store_read_stats(c->store, &c->store_stats);
                log_debug("Retention: %" PRIu64 " intervals, %" PRIu64 " samples, %" PRIu64 " stacks, %"
                          PRIu64 " frames deleted so far; %" PRIu64 " bytes reclaimed.",
                          c->retention.counters.intervals, c->retention.counters.samples,
                          c->retention.counters.stacks, c->retention.counters.frames,
                          c->retention.counters.bytes_reclaimed);
        }
        c->store_stats.bytes = store_file_bytes(c->store);
        return r;
}

int collector_retention_run(Collector *c) {
        int r;

        while ((r = collector_retention_step(c)) > 0)
                ;
        return r;
}
