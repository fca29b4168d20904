/* SPDX-License-Identifier: MIT */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/epoll.h>

#include "bus.h"
#include "config.h"
#include "exporter.h"
#include "gzip.h"
#include "log.h"
#include "otlp-encode.h"
#include "otlp-pb.h"

#define DRAIN_BATCH 4096 /* records per loop iteration before yielding */
#define RETRY_MIN_USEC (1 * USEC_PER_SEC)
#define RETRY_MAX_USEC (30 * USEC_PER_SEC)

static void exporter_drain(Exporter *e, bool all);
static int open_ring(Exporter *e);

bool exporter_collector_attached(const Exporter *e) {
        return e->ring != NULL;
}

static void reply_flush_waiters(Exporter *e) {
        if (e->sender && http_sender_in_flight(e->sender) > 0)
                return;
        for (size_t i = 0; i < e->n_flush_waiters; i++) {
                (void) sd_bus_reply_method_return(e->flush_waiters[i], NULL);
                sd_bus_message_unref(e->flush_waiters[i]);
        }
        e->n_flush_waiters = 0;
}

/* ---- sending ---- */

/* Reads the error_message of a google.rpc.Status body (field 2, a string) without the proto
 * file: OTLP servers put the reason for a 4xx/5xx there. */
static void rpc_status_message(const uint8_t *p, size_t n, char *ret, size_t ret_size) {
        size_t i = 0;

        ret[0] = 0;
        while (i < n) {
                uint64_t tag = 0, len = 0;
                unsigned shift = 0;

                for (; i < n && shift < 64; shift += 7) {
                        tag |= (uint64_t) (p[i] & 0x7f) << shift;
                        if (!(p[i++] & 0x80))
                                break;
                }
                switch (tag & 7) {
                case 0: /* varint */
                        while (i < n && (p[i++] & 0x80))
                                ;
                        continue;
                case 2: /* length-delimited */
                        for (shift = 0; i < n && shift < 64; shift += 7) {
                                len |= (uint64_t) (p[i] & 0x7f) << shift;
                                if (!(p[i++] & 0x80))
                                        break;
                        }
                        if (len > n - i)
                                return;
                        if ((tag >> 3) == 2) {
                                size_t k = MIN((size_t) len, ret_size - 1);
                                for (size_t j = 0; j < k; j++)
                                        ret[j] = p[i + j] >= 0x20 && p[i + j] < 0x7f ? (char) p[i + j] : '?';
                                ret[k] = 0;
                                return;
                        }
                        i += len;
                        continue;
                default:
                        return;
                }
        }
}

/* Counts a request that did not get through and says why; the first failure of a streak is a
 * warning, the rest are logged at debug level (they are in RequestsFailed and LastError). */
_printf_(2, 3) static void request_failed(Exporter *e, const char *format, ...) {
        va_list ap;

        /* Announced below together with RequestsFailed. */
        va_start(ap, format);
        (void) ep_daemon_set_last_errorv(NULL, &e->last_error, format, ap);
        va_end(ap);
        e->requests_failed++;
        log_full(e->failing ? LOG_DEBUG : LOG_WARNING, "OTLP export failed, interval dropped: %s",
                 e->last_error ?: "out of memory");
        e->failing = true;
        ep_daemon_properties_changed(&e->daemon, "RequestsFailed", "LastError", NULL);
}

static void on_sent(HttpSender *s, const HttpResult *res, void *userdata) {
        Exporter *e = userdata;
        char detail[256] = "";

        if (res->error == 0 && res->status >= 200 && res->status < 300) {
                PbResponse *resp;

                e->requests_sent++;
                e->bytes_sent += res->request_size;
                if (e->failing)
                        log_info("OTLP export to %s works again (HTTP %ld)", e->endpoint, res->status);
                e->failing = false;
                /* A partial success must not be retried; report it. */
                resp = res->body_size ? pb_response_unpack(NULL, res->body_size, res->body) : NULL;
                if (resp && resp->partial_success &&
                    (resp->partial_success->rejected_profiles > 0 ||
                     (resp->partial_success->error_message && *resp->partial_success->error_message))) {
                        log_warning("%s accepted the export partially: %" PRIi64 " profiles rejected: %s",
                                    e->endpoint, resp->partial_success->rejected_profiles,
                                    resp->partial_success->error_message ?: "");
                        (void) ep_daemon_set_last_error(&e->daemon, &e->last_error,
                                                        "partial success: %" PRIi64 " profiles rejected: %s",
                                                        resp->partial_success->rejected_profiles,
                                                        resp->partial_success->error_message ?: "");
                }
                if (resp)
                        pb_response_free_unpacked(resp, NULL);
                ep_daemon_properties_changed(&e->daemon, "RequestsSent", "BytesSent", NULL);
        } else if (res->error < 0)
                request_failed(e, "POST %s failed: %s", e->endpoint, res->message ?: "error");
        else {
                rpc_status_message(res->body, res->body_size, detail, sizeof detail);
                request_failed(e, "POST %s: HTTP %ld%s%s", e->endpoint, res->status, detail[0] ? ": " : "", detail);
        }
        ep_daemon_status(&e->daemon, "Exporting to %s: %" PRIu64 " requests sent, %" PRIu64 " failed",
                         e->endpoint, e->requests_sent, e->requests_failed);
        reply_flush_waiters(e);
}

/* The seam for retries and the spool: for now one attempt. Takes ownership of body. */
static void exporter_send(Exporter *e, void *body, size_t size) {
        int r;

        r = http_sender_post(e->sender, body, size, "application/x-protobuf", "gzip", on_sent, e);
        if (r < 0)
                request_failed(e, "Cannot send to %s: %s", e->endpoint,
                               r == -EBUSY ? "too many requests in flight" : strerror(-r));
}

static void handle_interval(Exporter *e, ExpInterval *iv) {
        const OtlpEncodeOptions opts = { .host_name = e->host_name };
        _cleanup_free_ void *data = NULL;
        void *gz = NULL;
        OtlpEncodeStats st;
        size_t size = 0, gz_size = 0;
        uint64_t id = iv->id;
        int r;

        e->intervals++;
        ep_daemon_properties_changed(&e->daemon, "Intervals", NULL);
        r = otlp_encode_interval(iv, &opts, &data, &size, &st);
        exp_interval_free(iv);
        if (r < 0) {
                request_failed(e, "encoding interval %" PRIu64 " failed: %s", id, strerror(-r));
                return;
        }
        if (size == 0) {
                log_debug("Interval %" PRIu64 " has no samples; nothing to send", id);
                return;
        }
        if (size > EXPORTER_MAX_REQUEST) {
                request_failed(e, "interval %" PRIu64 " encodes to %zu bytes, over the %u byte limit",
                               id, size, EXPORTER_MAX_REQUEST);
                return;
        }
        r = exp_gzip(data, size, &gz, &gz_size);
        if (r < 0) {
                request_failed(e, "compressing interval %" PRIu64 " failed: %s", id, strerror(-r));
                return;
        }
        log_debug("Interval %" PRIu64 ": %zu processes, %zu samples (%" PRIu64 " events), %zu stacks, "
                  "%zu locations, %zu functions, %zu mappings, %zu strings; %zu bytes, %zu gzipped",
                  id, st.resources, st.samples, st.events, st.stacks, st.locations, st.functions,
                  st.mappings, st.strings, size, gz_size);
        exporter_send(e, gz, gz_size);
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
                        (void) ep_daemon_set_last_error(&e->daemon, &e->last_error,
                                                        "The export ring is corrupt; re-opening it");
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
                        (void) ep_daemon_set_last_error(&e->daemon, &e->last_error, "Dropped an export-ring group: %s",
                                                        e->intake->last_error);
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
                (void) ep_daemon_set_last_error(&e->daemon, &e->last_error, "Collector1.OpenExportRing() failed: %s",
                                                err && err->message ? err->message : "error");
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
                (void) ep_daemon_set_last_error(&e->daemon, &e->last_error, "Cannot attach to the export ring: %s",
                                                strerror(-r));
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
        if (!e->sender || http_sender_in_flight(e->sender) == 0)
                return sd_bus_reply_method_return(m, NULL);
        r = exp_grow((void **) &e->flush_waiters, &e->cap_flush_waiters, e->n_flush_waiters + 1,
                     sizeof *e->flush_waiters);
        if (r < 0)
                return r;
        e->flush_waiters[e->n_flush_waiters++] = sd_bus_message_ref(m);
        return 1; /* answered by reply_flush_waiters() */
}

int exporter_start(Exporter *e) {
        const HttpSenderOptions opts = {
                .url = e->endpoint,
                .user_agent = "ebpf-profiler-exporter/" EP_VERSION,
                .timeout_ms = EXPORTER_TIMEOUT_MS,
                .max_in_flight = EXPORTER_MAX_IN_FLIGHT,
        };
        int r;

        if (!e->endpoint) {
                log_info("No OTLP endpoint configured (--endpoint, OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT or "
                         "OTEL_EXPORTER_OTLP_ENDPOINT); idle, profiles stay in the local store only");
                ep_daemon_status(&e->daemon, "Idle: no OTLP endpoint configured");
                return 0;
        }
        r = exp_intake_new(&e->intake);
        if (r < 0)
                return log_error_errno(r, "Cannot allocate the ring decoder: %m");
        r = http_sender_new(e->daemon.event, &opts, &e->sender);
        if (r < 0)
                return log_error_errno(r, "Cannot set up the HTTP client: %m");
        r = sd_event_add_defer(e->daemon.event, &e->drain_source, on_drain_defer, e);
        if (r < 0)
                return log_error_errno(r, "Cannot allocate an event source: %m");
        (void) sd_event_source_set_enabled(e->drain_source, SD_EVENT_OFF);
        r = ep_peer_watch(&e->daemon, EP_BUS_COLLECTOR, on_collector, e, &e->collector);
        if (r < 0)
                return r;
        log_info("Exporting profiles to %s (OTLP/HTTP, protobuf, gzip)", e->endpoint);
        ep_daemon_status(&e->daemon, "Exporting to %s", e->endpoint);
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
        e->sender = http_sender_free(e->sender);
        free(e->endpoint);
        free(e->host_name);
        free(e->last_error);
}
