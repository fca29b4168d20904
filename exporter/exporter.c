/* SPDX-License-Identifier: MIT */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>

#include "bus.h"
#include "config.h"
#include "exporter.h"
#include "log.h"
#include "otlp-encode.h"

#define DRAIN_BATCH 4096 /* records per loop iteration before yielding */
#define RETRY_MIN_USEC (1 * USEC_PER_SEC)
#define RETRY_MAX_USEC (30 * USEC_PER_SEC)

static void exporter_drain(Exporter *e, bool all);
static int open_ring(Exporter *e);

bool exporter_collector_attached(const Exporter *e) {
        return e->ring != NULL;
}

const char *exporter_last_error(const Exporter *e, uint64_t *ret_ns) {
        DeliveryStats st = delivery_stats(e->delivery);

        if (st.last_error && st.last_error_ns >= e->last_error_ns) {
                *ret_ns = st.last_error_ns;
                return st.last_error;
        }
        *ret_ns = e->last_error_ns;
        return e->last_error;
}

/* The exporter's own errors (ring, encoding): LastError with its time. */
_printf_(2, 3) static void set_error(Exporter *e, const char *format, ...) {
        struct timespec ts;
        va_list ap;

        va_start(ap, format);
        (void) ep_daemon_set_last_errorv(NULL, &e->last_error, format, ap);
        va_end(ap);
        (void) clock_gettime(CLOCK_REALTIME, &ts);
        e->last_error_ns = (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
        ep_daemon_properties_changed(&e->daemon, "LastError", "LastErrorNs", NULL);
}

/* ---- Flush() ---- */

static void reply_flush_waiters(Exporter *e) {
        _cleanup_free_ char *msg = NULL;
        uint64_t ns;
        size_t pending;

        if (e->n_flush_waiters == 0)
                return;
        pending = e->delivery ? delivery_pending(e->delivery) : 0;
        /* Wait while a request is out or more are queued behind a working backend. */
        if (pending > 0 && (delivery_in_flight(e->delivery) || !delivery_backing_off(e->delivery)))
                return;
        if (pending > 0 && asprintf(&msg, "%zu requests remain spooled: %s", pending,
                                    exporter_last_error(e, &ns) ?: "the OTLP endpoint fails") < 0)
                msg = NULL;
        for (size_t i = 0; i < e->n_flush_waiters; i++) {
                if (pending > 0)
                        (void) sd_bus_reply_method_errorf(e->flush_waiters[i], SD_BUS_ERROR_IO_ERROR, "%s",
                                                          msg ?: "requests remain spooled");
                else
                        (void) sd_bus_reply_method_return(e->flush_waiters[i], NULL);
                sd_bus_message_unref(e->flush_waiters[i]);
        }
        e->n_flush_waiters = 0;
}

/* ---- delivery ---- */

#define STAT_CHANGED(field, name)                               \
        do {                                                    \
                if (now.field != e->published.field)            \
                        names[n++] = (name);                    \
        } while (0)

/* Announces the delivery counters that changed since the last call. */
static void publish_delivery(Exporter *e) {
        DeliveryStats now = delivery_stats(e->delivery);
        const char *names[16];
        size_t n = 0;

        STAT_CHANGED(requests_sent, "RequestsSent");
        STAT_CHANGED(requests_failed, "RequestsFailed");
        STAT_CHANGED(requests_retried, "RequestsRetried");
        STAT_CHANGED(bytes_sent, "BytesSent");
        STAT_CHANGED(partial_rejected, "PartialSuccessRejected");
        STAT_CHANGED(spool_bytes, "SpoolBytes");
        STAT_CHANGED(spool_files, "SpoolFiles");
        STAT_CHANGED(spool_dropped, "SpoolDropped");
        STAT_CHANGED(backoff_until_ns, "BackoffUntilNs");
        if (now.last_error_ns != e->published.last_error_ns) {
                names[n++] = "LastError";
                names[n++] = "LastErrorNs";
        }
        names[n] = NULL;
        e->published = now;
        e->published.last_error = NULL; /* not owned; only the time is compared */
        if (n > 0 && e->daemon.bus && e->daemon.object_path)
                (void) sd_bus_emit_properties_changed_strv(e->daemon.bus, e->daemon.object_path,
                                                           e->daemon.interface, (char **) names);
        ep_daemon_status(&e->daemon, "Exporting to %s: %" PRIu64 " requests sent, %" PRIu64 " failed, %" PRIu32
                         " spooled%s", e->endpoint, now.requests_sent, now.requests_failed + e->encode_failures,
                         now.spool_files, now.backoff_until_ns ? " (backing off)" : "");
}

static void on_delivery_changed(Delivery *d, void *userdata) {
        Exporter *e = userdata;

        publish_delivery(e);
        reply_flush_waiters(e);
}

static void on_sent(OtlpTransport *t, const OtlpResult *res, void *userdata) {
        Exporter *e = userdata;

        delivery_complete(e->delivery, res);
}

static int delivery_send(Delivery *d, const void *body, size_t size, void *userdata) {
        Exporter *e = userdata;

        return otlp_transport_send(e->transport, body, size, on_sent, e);
}

/* An interval that cannot become a request: nothing to retry, counted in RequestsFailed. */
_printf_(2, 3) static void interval_lost(Exporter *e, const char *format, ...) {
        char buf[512];
        va_list ap;

        va_start(ap, format);
        (void) vsnprintf(buf, sizeof buf, format, ap);
        va_end(ap);
        set_error(e, "%s", buf);
        e->encode_failures++;
        log_warning("OTLP export: interval dropped: %s", buf);
        ep_daemon_properties_changed(&e->daemon, "RequestsFailed", NULL);
}

static int enqueue_part(const void *data, size_t size, void *userdata) {
        Exporter *e = userdata;

        /* A request the spool refuses is counted (SpoolDropped) and logged there; the other
         * parts of the interval still go. */
        (void) delivery_enqueue(e->delivery, data, size);
        return 0;
}

static void handle_interval(Exporter *e, ExpInterval *iv) {
        const OtlpEncodeOptions opts = {
                .host_name = e->host_name,
                .resource_attributes = e->resource_attributes,
        };
        OtlpEncodeStats st;
        uint64_t id = iv->id;
        int r;

        e->intervals++;
        ep_daemon_properties_changed(&e->daemon, "Intervals", NULL);
        r = otlp_encode_interval_split(iv, &opts, EXPORTER_SPLIT_SIZE, enqueue_part, e, &st);
        exp_interval_free(iv);
        if (r < 0) {
                interval_lost(e, "encoding interval %" PRIu64 " failed: %s", id, strerror(-r));
                return;
        }
        if (st.requests == 0) {
                log_debug("Interval %" PRIu64 " has no samples; nothing to send", id);
                return;
        }
        log_debug("Interval %" PRIu64 ": %zu processes, %zu samples (%" PRIu64 " events); %zu requests, %zu bytes",
                  id, st.resources, st.samples, st.events, st.requests, st.bytes);
}

/* ---- the export ring ---- */

static void detach_ring(Exporter *e) {
        bool was = e->ring != NULL;

        e->ring_source = sd_event_source_disable_unref(e->ring_source);
        if (e->drain_source)
                (void) sd_event_source_set_enabled(e->drain_source, SD_EVENT_OFF);
        e->ring = ep_ring_free(e->ring);
        if (e->intake)
                exp_intake_reset(e->intake);
        if (was)
                ep_daemon_properties_changed(&e->daemon, "CollectorAttached", NULL);
}

static int on_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        Exporter *e = userdata;

        e->retry_source = sd_event_source_disable_unref(e->retry_source);
        if (e->collector && ep_peer_watch_present(e->collector) && !e->ring && !e->open_call)
                (void) open_ring(e); /* on failure it schedules the next attempt */
        return 0;
}

static void schedule_retry(Exporter *e) {
        if (e->retry_source)
                return;
        e->retry_usec = e->retry_usec ? MIN(e->retry_usec * 2, RETRY_MAX_USEC) : RETRY_MIN_USEC;
        if (sd_event_add_time_relative(e->daemon.event, &e->retry_source, CLOCK_MONOTONIC, e->retry_usec, 0,
                                       on_retry, e) < 0)
                log_warning("Cannot schedule re-opening the export ring");
}

static void exporter_drain(Exporter *e, bool all) {
        bool got = false;

        if (!e->ring)
                return;
        ep_ring_clear_wakeup(e->ring);
        for (unsigned n = 0; all || n < DRAIN_BATCH; n++) {
                ExpInterval *iv = NULL;
                EpRingRecord h;
                const void *p;
                int r;

                r = ep_ring_peek(e->ring, &h, &p);
                if (r < 0) {
                        set_error(e, "The export ring is corrupt; re-opening it");
                        log_error("%s", e->last_error);
                        detach_ring(e);
                        schedule_retry(e);
                        return;
                }
                if (r == 0)
                        return;
                r = exp_intake_feed(e->intake, h.type, p, h.len, &iv);
                ep_ring_consume(e->ring);
                got = true;
                if (r < 0) {
                        e->decode_errors++;
                        set_error(e, "Dropped an export-ring group: %s", e->intake->last_error);
                        ep_daemon_properties_changed(&e->daemon, "DecodeErrors", NULL);
                } else if (r > 0)
                        handle_interval(e, iv);
                if (!e->ring)
                        return;
        }
        /* More may be waiting: continue on the next loop iteration so bus calls are served. */
        if (got && e->drain_source)
                (void) sd_event_source_set_enabled(e->drain_source, SD_EVENT_ONESHOT);
}

static int on_ring_event(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        exporter_drain(userdata, false);
        return 0;
}

static int on_drain_defer(sd_event_source *s, void *userdata) {
        exporter_drain(userdata, false);
        return 0;
}

static int on_open_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Exporter *e = userdata;
        int memfd, evfd, r;

        e->open_call = sd_bus_slot_unref(e->open_call);
        if (sd_bus_message_is_method_error(m, NULL)) {
                const sd_bus_error *err = sd_bus_message_get_error(m);
                set_error(e, "Collector1.OpenExportRing() failed: %s", err && err->message ? err->message : "error");
                log_full(e->retry_usec ? LOG_DEBUG : LOG_WARNING, "%s; retrying", e->last_error);
                schedule_retry(e);
                return 0;
        }
        r = sd_bus_message_read(m, "hh", &memfd, &evfd);
        if (r >= 0)
                r = ep_ring_attach(memfd, evfd, &e->ring);
        if (r >= 0)
                r = sd_event_add_io(e->daemon.event, &e->ring_source, ep_ring_eventfd(e->ring), EPOLLIN,
                                    on_ring_event, e);
        if (r < 0) {
                set_error(e, "Cannot attach to the export ring: %s", strerror(-r));
                log_warning("%s; retrying", e->last_error);
                detach_ring(e);
                schedule_retry(e);
                return 0;
        }
        e->retry_usec = 0;
        log_info("Attached to the collector's export ring (%zu bytes); exporting to %s",
                 ep_ring_data_size(e->ring), e->endpoint);
        ep_daemon_properties_changed(&e->daemon, "CollectorAttached", NULL);
        exporter_drain(e, false);
        return 0;
}

static int open_ring(Exporter *e) {
        int r;

        r = sd_bus_call_method_async(e->daemon.bus, &e->open_call, EP_BUS_COLLECTOR, EP_PATH_COLLECTOR,
                                     EP_IFACE_COLLECTOR, "OpenExportRing", on_open_reply, e, "");
        if (r < 0) {
                log_debug_errno(r, "Cannot call OpenExportRing(): %m");
                schedule_retry(e);
        }
        return r;
}

static int on_collector(EpPeerWatch *w, bool present, void *userdata) {
        Exporter *e = userdata;

        if (!present) {
                e->open_call = sd_bus_slot_unref(e->open_call);
                e->retry_source = sd_event_source_disable_unref(e->retry_source);
                e->retry_usec = 0;
                detach_ring(e);
                return 0;
        }
        if (e->ring || e->open_call)
                return 0;
        /* A new collector owns a new ring. */
        detach_ring(e);
        (void) open_ring(e); /* failures retry on our own timer, with back-off */
        return 0;
}

/* ---- life cycle ---- */

int exporter_flush(Exporter *e, sd_bus_message *m) {
        int r;

        exporter_drain(e, true);
        if (!e->delivery || (delivery_pending(e->delivery) == 0 && !delivery_in_flight(e->delivery)))
                return sd_bus_reply_method_return(m, NULL);
        r = exp_grow((void **) &e->flush_waiters, &e->cap_flush_waiters, e->n_flush_waiters + 1,
                     sizeof *e->flush_waiters);
        if (r < 0)
                return r;
        e->flush_waiters[e->n_flush_waiters++] = sd_bus_message_ref(m);
        /* Do not wait out a back-off: the caller wants to know now whether the backend takes
         * the data. The answer comes through on_delivery_changed(). */
        delivery_kick(e->delivery);
        return 1;
}

/* The spool directory, or memory when it cannot be used (a test, a read-only system): export
 * works, only a restart loses what is queued. */
static int start_delivery(Exporter *e) {
        static const DeliveryOps ops = {
                .send = delivery_send,
                .changed = on_delivery_changed,
        };
        DeliveryOptions opts = {
                .spool_dir = e->spool_dir ?: DELIVERY_SPOOL_DIR_DEFAULT,
                .spool_max_bytes = e->spool_max_bytes,
                .endpoint = e->endpoint,
        };
        int r;

        r = delivery_new(e->daemon.event, &opts, &ops, e, &e->delivery);
        if (r == -ENOMEM)
                return log_error_errno(r, "Cannot set up delivery: %m");
        if (r < 0) {
                log_warning_errno(r, "Cannot use the spool directory %s: %m; unsent requests are kept in memory "
                                  "only and lost on restart", opts.spool_dir);
                opts.spool_dir = NULL;
                r = delivery_new(e->daemon.event, &opts, &ops, e, &e->delivery);
                if (r < 0)
                        return log_error_errno(r, "Cannot set up delivery: %m");
        }
        /* What an earlier run left goes first, before anything new from the ring. */
        delivery_kick(e->delivery);
        return 0;
}

int exporter_start(Exporter *e) {
        int r;

        if (!e->endpoint || !e->config) {
                log_info("No OTLP endpoint configured (--endpoint, OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT or "
                         "OTEL_EXPORTER_OTLP_ENDPOINT); idle, profiles stay in the local store only");
                ep_daemon_status(&e->daemon, "Idle: no OTLP endpoint configured");
                return 0;
        }
        r = exp_intake_new(&e->intake);
        if (r < 0)
                return log_error_errno(r, "Cannot allocate the ring decoder: %m");
        r = otlp_transport_new(e->daemon.event, e->config, EXPORTER_MAX_IN_FLIGHT, &e->transport);
        if (r < 0)
                return log_error_errno(r, "Cannot set up the OTLP transport: %m");
        r = start_delivery(e);
        if (r < 0)
                return r;
        r = sd_event_add_defer(e->daemon.event, &e->drain_source, on_drain_defer, e);
        if (r < 0)
                return log_error_errno(r, "Cannot allocate an event source: %m");
        (void) sd_event_source_set_enabled(e->drain_source, SD_EVENT_OFF);
        r = ep_peer_watch(&e->daemon, EP_BUS_COLLECTOR, on_collector, e, &e->collector);
        if (r < 0)
                return r;
        log_info("Exporting profiles to %s (OTLP %s, %s); spool %s", e->endpoint,
                 otlp_protocol_name(e->config->protocol),
                 e->config->compression == OTLP_COMPRESSION_GZIP ? "gzip" : "uncompressed",
                 e->spool_dir ?: DELIVERY_SPOOL_DIR_DEFAULT);
        publish_delivery(e);
        return 0;
}

void exporter_done(Exporter *e) {
        for (size_t i = 0; i < e->n_flush_waiters; i++)
                sd_bus_message_unref(e->flush_waiters[i]);
        free(e->flush_waiters);
        e->collector = ep_peer_watch_free(e->collector);
        e->open_call = sd_bus_slot_unref(e->open_call);
        e->retry_source = sd_event_source_disable_unref(e->retry_source);
        e->ring_source = sd_event_source_disable_unref(e->ring_source);
        e->drain_source = sd_event_source_disable_unref(e->drain_source);
        e->ring = ep_ring_free(e->ring);
        e->intake = exp_intake_free(e->intake);
        /* The transport first: the request in flight points into delivery's memory. */
        e->transport = otlp_transport_free(e->transport);
        e->delivery = delivery_free(e->delivery);
        free(e->endpoint);
        free(e->host_name);
        free(e->spool_dir);
        free(e->last_error);
}
