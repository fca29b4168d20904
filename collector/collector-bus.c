/* SPDX-License-Identifier: MIT */
/* The daemon side: org.ebpfprofiler.Collector1, the timers, and the peers (the loader's trace
 * ring, the symbolizer session, the exporter). Peers come and go; the collector re-attaches. */

#include <inttypes.h>
#include <sys/epoll.h>

#include "bus.h"
#include "collector.h"
#include "config.h"
#include "log.h"

/* Properties that change; PropertiesChanged is emitted for them every couple of seconds. */
enum {
        PROP_TRACES,
        PROP_DECODE_ERRORS,
        PROP_FRAMES,
        PROP_STACKS,
        PROP_INTERVALS,
        PROP_SAMPLES_WRITTEN,
        PROP_LOADER_ATTACHED,
        PROP_SYMBOLIZER_ATTACHED,
        PROP_EXPORTER_ATTACHED,
        PROP_EXPORT_DROPS,
        PROP_PENDING_SYMBOLS,
        PROP_FIRST_PENDING_FRAME,
        PROP_LAST_ERROR,
        PROP_STORE_BYTES,
        PROP_STORE_FIRST_NS,
        PROP_STORE_LAST_NS,
        PROP_STORE_INTERVALS,
        PROP_STORE_SAMPLES,
        PROP_RETENTION_DELETED_INTERVALS,
        PROP_RETENTION_DELETED_ROWS,
        PROP_RETENTION_BYTES_RECLAIMED,
        PROP_RETENTION_LAST_RUN_NS,
        PROP_RETENTION_RUNNING,
        PROP_TABLE_RESTARTS,
        PROP_EXPORTED_UNNAMED_FRAMES,
        PROP_TRACES_SEEN_BEFORE,
        PROP_RETRYING_SYMBOLS,
        PROP_SYMBOL_RETRIES,
        PROP_SYMBOLS_ASKED_AGAIN,
        PROP_FILES_CHANGED,
        PROP_RING_PEER_ERRORS,
        _PROP_MAX,
};

static const char *const prop_names[_PROP_MAX] = {
        [PROP_TRACES] = "Traces",
        [PROP_DECODE_ERRORS] = "DecodeErrors",
        [PROP_FRAMES] = "Frames",
        [PROP_STACKS] = "Stacks",
        [PROP_INTERVALS] = "Intervals",
        [PROP_SAMPLES_WRITTEN] = "SamplesWritten",
        [PROP_LOADER_ATTACHED] = "LoaderAttached",
        [PROP_SYMBOLIZER_ATTACHED] = "SymbolizerAttached",
        [PROP_EXPORTER_ATTACHED] = "ExporterAttached",
        [PROP_EXPORT_DROPS] = "ExportDrops",
        [PROP_PENDING_SYMBOLS] = "PendingSymbols",
        [PROP_FIRST_PENDING_FRAME] = "FirstPendingFrame",
        [PROP_LAST_ERROR] = "LastError",
        [PROP_STORE_BYTES] = "StoreBytes",
        [PROP_STORE_FIRST_NS] = "StoreFirstNs",
        [PROP_STORE_LAST_NS] = "StoreLastNs",
        [PROP_STORE_INTERVALS] = "StoreIntervals",
        [PROP_STORE_SAMPLES] = "StoreSamples",
        [PROP_RETENTION_DELETED_INTERVALS] = "RetentionDeletedIntervals",
        [PROP_RETENTION_DELETED_ROWS] = "RetentionDeletedRows",
        [PROP_RETENTION_BYTES_RECLAIMED] = "RetentionBytesReclaimed",
        [PROP_RETENTION_LAST_RUN_NS] = "RetentionLastRunNs",
        [PROP_RETENTION_RUNNING] = "RetentionRunning",
        [PROP_TABLE_RESTARTS] = "TableRestarts",
        [PROP_EXPORTED_UNNAMED_FRAMES] = "ExportedUnnamedFrames",
        [PROP_TRACES_SEEN_BEFORE] = "TracesSeenBefore",
        [PROP_RETRYING_SYMBOLS] = "RetryingSymbols",
        [PROP_SYMBOL_RETRIES] = "SymbolRetries",
        [PROP_SYMBOLS_ASKED_AGAIN] = "SymbolsAskedAgain",
        [PROP_FILES_CHANGED] = "FilesChanged",
        [PROP_RING_PEER_ERRORS] = "RingPeerErrors",
};

_Static_assert(_PROP_MAX <= ELEMENTSOF(((Collector *) 0)->props_sent), "props_sent too small");

/* A number that changes whenever the property does (LastError: its generation). */
static uint64_t prop_value(const Collector *c, int p) {
        switch (p) {
        case PROP_TRACES:
                return c->traces;
        case PROP_DECODE_ERRORS:
                return c->decode_errors;
        case PROP_FRAMES:
                return c->frames.n;
        case PROP_STACKS:
                return c->stacks.n;
        case PROP_INTERVALS:
                return c->intervals;
        case PROP_SAMPLES_WRITTEN:
                return c->samples_written;
        case PROP_LOADER_ATTACHED:
                return c->trace_ring != NULL;
        case PROP_SYMBOLIZER_ATTACHED:
                return collector_sym_attached(c);
        case PROP_EXPORTER_ATTACHED:
                return c->export_ring != NULL;
        case PROP_EXPORT_DROPS:
                return c->export_drops;
        case PROP_PENDING_SYMBOLS:
                return c->pending_symbols;
        case PROP_FIRST_PENDING_FRAME:
                return collector_sym_first_pending(c);
        case PROP_LAST_ERROR:
                return c->last_error_gen;
        case PROP_STORE_BYTES:
                return c->store_stats.bytes;
        case PROP_STORE_FIRST_NS:
                return c->store_stats.first_ns;
        case PROP_STORE_LAST_NS:
                return c->store_stats.last_ns;
        case PROP_STORE_INTERVALS:
                return c->store_stats.intervals;
        case PROP_STORE_SAMPLES:
                return c->store_stats.samples;
        case PROP_RETENTION_DELETED_INTERVALS:
                return c->retention.counters.intervals;
        case PROP_RETENTION_DELETED_ROWS: {
                const RetentionCounters *k = &c->retention.counters;
                return k->intervals + k->samples + k->stacks + k->frames + k->processes + k->files;
        }
        case PROP_RETENTION_BYTES_RECLAIMED:
                return c->retention.counters.bytes_reclaimed;
        case PROP_RETENTION_LAST_RUN_NS:
                return c->retention.counters.last_run_ns;
        case PROP_RETENTION_RUNNING: {
                /* The retention timer is armed from an interval's write until the run it started
                 * took its last step (see on_retention_timer()). */
                int enabled = SD_EVENT_OFF;

                if (c->retention_timer)
                        (void) sd_event_source_get_enabled(c->retention_timer, &enabled);
                return enabled != SD_EVENT_OFF;
        }
        case PROP_TABLE_RESTARTS:
                return c->table_restarts;
        case PROP_EXPORTED_UNNAMED_FRAMES:
                return c->exported_unnamed_frames;
        case PROP_TRACES_SEEN_BEFORE:
                return c->traces_seen_before;
        case PROP_RETRYING_SYMBOLS:
                return collector_sym_retrying(c);
        case PROP_SYMBOL_RETRIES:
                return c->sym.retries_sent;
        case PROP_SYMBOLS_ASKED_AGAIN:
                return c->sym.asked_again;
        case PROP_FILES_CHANGED:
                return c->sym.files_changed;
        case PROP_RING_PEER_ERRORS:
                return collector_ring_peer_errors(c);
        default:
                return 0;
        }
}

static int get_property(sd_bus *bus, const char *path, const char *interface, const char *property,
                        sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Collector *c = userdata;

        if (streq(property, "Version"))
                return sd_bus_message_append(reply, "s", EP_VERSION);
        if (streq(property, "StorePath"))
                return sd_bus_message_append(reply, "s", c->store_path ?: "");
        if (streq(property, "IntervalSeconds"))
                return sd_bus_message_append(reply, "u", (uint32_t) (c->interval_ns / NSEC_PER_SEC));
        if (streq(property, "StoreSchemaVersion"))
                return sd_bus_message_append(reply, "u", (uint32_t) (c->store ? store_schema_version(c->store) : 0));
        if (streq(property, "RetentionAge"))
                return sd_bus_message_append(reply, "t", c->retention.policy.max_age_ns / NSEC_PER_SEC);
        if (streq(property, "RetentionSize"))
                return sd_bus_message_append(reply, "t", c->retention.policy.max_bytes);

        for (int p = 0; p < _PROP_MAX; p++) {
                if (!streq(property, prop_names[p]))
                        continue;
                switch (p) {
                case PROP_LOADER_ATTACHED:
                case PROP_SYMBOLIZER_ATTACHED:
                case PROP_EXPORTER_ATTACHED:
                case PROP_RETENTION_RUNNING:
                        return sd_bus_message_append(reply, "b", (int) prop_value(c, p));
                case PROP_PENDING_SYMBOLS:
                case PROP_RETRYING_SYMBOLS:
                        return sd_bus_message_append(reply, "u", (uint32_t) prop_value(c, p));
                case PROP_LAST_ERROR:
                        return sd_bus_message_append(reply, "s", c->last_error ?: "");
                default:
                        return sd_bus_message_append(reply, "t", prop_value(c, p));
                }
        }
        return sd_bus_error_setf(error, SD_BUS_ERROR_UNKNOWN_PROPERTY, "Unknown property %s", property);
}

static int rearm(sd_event_source *s, uint64_t ns) {
        int r = sd_event_source_set_time_relative(s, ns / 1000);
        if (r < 0)
                return r;
        return sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
}

static int method_open_export_ring(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Collector *c = userdata;
        int memfd, efd, r;

        /* The bus policy restricts this too; the ring holds every profile, so check again. */
        r = ep_bus_check_caller_uid(m, error, c->exporter_uid, "open the export ring");
        if (r < 0)
                return r;
        r = collector_export_open(c, &memfd, &efd);
        if (r < 0)
                return sd_bus_error_set_errnof(error, r, "Cannot create the export ring: %m");
        return sd_bus_reply_method_return(m, "hh", memfd, efd);
}

/* Closes the interval for a Flush() call (answered once the interval is written). */
static int flush_now(Collector *c, sd_bus_message *m) {
        int r = collector_close_interval(c, m);

        if (r < 0)
                return sd_bus_reply_method_errnof(m, r, "Cannot close the interval: %m");
        if (c->interval_timer)
                (void) rearm(c->interval_timer, c->interval_ns);
        return 0;
}

/* A loader that takes longer to drain is busy or stuck: the interval closes with what the ring
 * holds, so that Flush() answers well within a caller's default D-Bus timeout (25 s), which
 * sd-bus would otherwise also wait for the loader. */
#define LOADER_DRAIN_TIMEOUT_USEC (5 * USEC_PER_SEC)

typedef struct FlushCall {
        Collector *c;
        sd_bus_message *m;
} FlushCall;

static void flush_call_free(void *userdata) {
        FlushCall *f = userdata;

        sd_bus_message_unref(f->m);
        free(f);
}

static int on_loader_drained(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        FlushCall *f = userdata;

        /* A loader that is gone or refuses leaves only what already is in the ring; what a slow
         * one holds goes into the next interval. */
        if (sd_bus_message_is_method_error(reply, SD_BUS_ERROR_NO_REPLY))
                log_once(LOG_WARNING, "Loader1.Drain() did not answer within %llu s; Flush() closed the "
                                      "interval with what the trace ring held.",
                         (unsigned long long) (LOADER_DRAIN_TIMEOUT_USEC / USEC_PER_SEC));
        else if (sd_bus_message_is_method_error(reply, NULL))
                log_debug("Loader1.Drain() failed: %s", sd_bus_message_get_error(reply)->message);
        (void) flush_now(f->c, f->m);
        return 0;
}

/* What the loader still holds in the BPF ring buffer is sampled too: it drains first. */
static int method_flush(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *call = NULL;
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        Collector *c = userdata;
        FlushCall *f = NULL;
        int r = -ENOTCONN;

        if (c->trace_ring)
                f = calloc(1, sizeof *f);
        if (f) {
                *f = (FlushCall) { .c = c, .m = sd_bus_message_ref(m) };
                r = sd_bus_message_new_method_call(c->daemon.bus, &call, EP_BUS_LOADER, EP_PATH_LOADER,
                                                   EP_IFACE_LOADER, "Drain");
                if (r >= 0)
                        r = sd_bus_call_async(c->daemon.bus, &slot, call, on_loader_drained, f,
                                              LOADER_DRAIN_TIMEOUT_USEC);
                if (r >= 0)
                        r = sd_bus_slot_set_destroy_callback(slot, flush_call_free);
                if (r < 0)
                        flush_call_free(f); /* no slot, or one that does not free it */
                else
                        r = sd_bus_slot_set_floating(slot, true); /* on failure, the unref frees f */
        }
        if (r < 0)
                (void) flush_now(c, m); /* without the loader's drain */
        return 1; /* answered once the interval is written */
}

#define COUNTER(name) \
        SD_BUS_PROPERTY(name, "t", get_property, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE)

static const sd_bus_vtable collector_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", get_property, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        COUNTER("Traces"),
        COUNTER("TracesSeenBefore"),
        COUNTER("DecodeErrors"),
        COUNTER("Frames"),
        COUNTER("Stacks"),
        COUNTER("Intervals"),
        COUNTER("SamplesWritten"),
        SD_BUS_PROPERTY("StorePath", "s", get_property, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("IntervalSeconds", "u", get_property, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("LoaderAttached", "b", get_property, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("SymbolizerAttached", "b", get_property, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("ExporterAttached", "b", get_property, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        COUNTER("ExportDrops"),
        COUNTER("ExportedUnnamedFrames"),
        SD_BUS_PROPERTY("PendingSymbols", "u", get_property, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        COUNTER("FirstPendingFrame"),
        SD_BUS_PROPERTY("RetryingSymbols", "u", get_property, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        COUNTER("SymbolRetries"),
        COUNTER("SymbolsAskedAgain"),
        COUNTER("FilesChanged"),
        COUNTER("RingPeerErrors"),
        SD_BUS_PROPERTY("LastError", "s", get_property, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("StoreSchemaVersion", "u", get_property, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        COUNTER("StoreBytes"),
        COUNTER("StoreFirstNs"),
        COUNTER("StoreLastNs"),
        COUNTER("StoreIntervals"),
        COUNTER("StoreSamples"),
        SD_BUS_PROPERTY("RetentionAge", "t", get_property, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("RetentionSize", "t", get_property, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        COUNTER("RetentionDeletedIntervals"),
        COUNTER("RetentionDeletedRows"),
        COUNTER("RetentionBytesReclaimed"),
        COUNTER("RetentionLastRunNs"),
        SD_BUS_PROPERTY("RetentionRunning", "b", get_property, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        COUNTER("TableRestarts"),
        /* Access is restricted by the bus policy (units/org.ebpfprofiler.conf): OpenExportRing to
         * root and the exporter's user. Flush is root's by the policy and not unprivileged here:
         * sd-bus also refuses callers that have neither our UID nor root's (or CAP_SYS_ADMIN). */
        SD_BUS_METHOD_WITH_NAMES("OpenExportRing", "", "", "hh", SD_BUS_PARAM(ring) SD_BUS_PARAM(eventfd),
                                 method_open_export_ring, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD("Flush", "", "", method_flush, 0),
        SD_BUS_VTABLE_END,
};

/* ---- timers ---- */

static int on_interval_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Collector *c = userdata;

        (void) collector_close_interval(c, NULL);
        return rearm(s, c->interval_ns);
}

static int on_drain_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Collector *c = userdata;

        /* Safety net for missed wake-ups, retries of requests that found the ring full, and
         * frames asked again after a passing failure. */
        collector_drain_traces(c);
        collector_sym_drain(c);
        collector_sym_retry_due(c, ep_now_ns(CLOCK_MONOTONIC));
        collector_sym_flush(c);
        return rearm(s, COLLECTOR_DRAIN_PERIOD_NS);
}

static int on_props_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Collector *c = userdata;
        char *changed[_PROP_MAX + 1];
        size_t n = 0;

        for (int p = 0; p < _PROP_MAX; p++) {
                uint64_t v = prop_value(c, p);

                if (v == c->props_sent[p])
                        continue;
                c->props_sent[p] = v;
                changed[n++] = (char *) prop_names[p];
        }
        changed[n] = NULL;
        if (n > 0) {
                int r = sd_bus_emit_properties_changed_strv(c->daemon.bus, EP_PATH_COLLECTOR,
                                                            EP_IFACE_COLLECTOR, changed);
                if (r < 0)
                        log_debug_errno(r, "Cannot emit PropertiesChanged: %m");
        }
        return rearm(s, COLLECTOR_PROPERTIES_PERIOD_NS);
}

/* Retention runs in steps of one short transaction each; between steps the loop takes in
 * traces and writes intervals. */
#define RETENTION_STEP_GAP_NS (2 * NSEC_PER_MSEC)

static int on_retention_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Collector *c = userdata;

        if (collector_retention_step(c) > 0)
                return rearm(s, RETENTION_STEP_GAP_NS);
        return 0; /* until the next interval is written */
}

void collector_bus_retention_kick(Collector *c) {
        int enabled = SD_EVENT_OFF;

        if (!c->have_daemon || !c->retention_timer)
                return;
        (void) sd_event_source_get_enabled(c->retention_timer, &enabled);
        if (enabled == SD_EVENT_OFF)
                (void) rearm(c->retention_timer, 0);
}

/* ---- peers ---- */

/* When m is the error reply of a peer's method: says so (log, LastError) and returns true. */
static bool call_refused(Collector *c, sd_bus_message *m, const char *peer, const char *method) {
        const sd_bus_error *e;
        const char *why;

        if (!sd_bus_message_is_method_error(m, NULL))
                return false;
        e = sd_bus_message_get_error(m);
        why = e && e->message ? e->message : "?";
        log_warning("%s refused %s(): %s", peer, method, why);
        collector_set_error(c, "%s refused %s(): %s", peer, method, why);
        return true;
}

/* ---- the loader ---- */

static int on_trace_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        collector_drain_traces(userdata);
        return 0;
}

void collector_detach_loader(Collector *c) {
        c->loader_call = sd_bus_slot_unref(c->loader_call);
        c->loader_freq_call = sd_bus_slot_unref(c->loader_freq_call);
        c->trace_io = sd_event_source_disable_unref(c->trace_io);
        if (!c->trace_ring)
                return;
        c->trace_ring = ep_ring_free(c->trace_ring);
        /* file keys are only valid within one trace-ring session */
        file_table_reset_keys(&c->files);
        stack_table_forget_traces(&c->stacks);
        log_info("Detached from the loader's trace ring.");
}

static void set_frequency(Collector *c, uint32_t hz) {
        if (hz < 1 || hz > 100000 || hz == c->frequency_hz)
                return;
        log_debug("Loader samples at %" PRIu32 " Hz.", hz);
        c->frequency_hz = hz;
}

static int on_frequency_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Collector *c = userdata;
        uint32_t hz;

        c->loader_freq_call = sd_bus_slot_unref(c->loader_freq_call);
        if (sd_bus_message_is_method_error(m, NULL) ||
            sd_bus_message_read(m, "v", "u", &hz) < 0) {
                log_debug("Cannot read the loader's Frequency; assuming %" PRIu32 " Hz.", c->frequency_hz);
                return 0;
        }
        set_frequency(c, hz);
        return 0;
}

static int on_loader_properties(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Collector *c = userdata;
        const char *iface, *name;
        int r;

        if (sd_bus_message_read(m, "s", &iface) < 0 || !streq(iface, EP_IFACE_LOADER))
                return 0;
        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        if (r < 0)
                return 0;
        while (sd_bus_message_enter_container(m, 'e', "sv") > 0) {
                uint32_t hz;

                if (sd_bus_message_read(m, "s", &name) < 0)
                        return 0;
                if (streq(name, "Frequency")) {
                        if (sd_bus_message_read(m, "v", "u", &hz) < 0)
                                return 0;
                        set_frequency(c, hz);
                } else if (sd_bus_message_skip(m, "v") < 0)
                        return 0;
                if (sd_bus_message_exit_container(m) < 0)
                        return 0;
        }
        return 0;
}

static int on_trace_ring_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        _cleanup_ring_ EpRing *ring = NULL;
        Collector *c = userdata;
        int ring_fd, efd, r;

        c->loader_call = sd_bus_slot_unref(c->loader_call);
        if (call_refused(c, m, "Loader", "OpenTraceRing"))
                goto retry;
        r = sd_bus_message_read(m, "hh", &ring_fd, &efd);
        if (r < 0) {
                log_warning_errno(r, "Bad OpenTraceRing() reply: %m");
                goto retry;
        }
        r = ep_ring_attach(ring_fd, efd, &ring);
        if (r < 0) {
                log_warning_errno(r, "Cannot map the trace ring: %m");
                collector_set_error(c, "Cannot map the trace ring: %s", strerror(-r));
                goto retry;
        }

        /* What is left of an old session belongs to it. */
        collector_drain_traces(c);
        collector_detach_loader(c);
        r = sd_event_add_io(c->daemon.event, &c->trace_io, ep_ring_eventfd(ring), EPOLLIN,
                            on_trace_io, c);
        if (r < 0) {
                log_warning_errno(r, "Cannot watch the trace ring: %m");
                goto retry;
        }
        c->trace_ring = TAKE_PTR(ring);
        log_info("Reading the loader's trace ring.");

        r = sd_bus_call_method_async(c->daemon.bus, &c->loader_freq_call, EP_BUS_LOADER,
                                     EP_PATH_LOADER, "org.freedesktop.DBus.Properties", "Get",
                                     on_frequency_reply, c, "ss", EP_IFACE_LOADER, "Frequency");
        if (r < 0)
                log_debug_errno(r, "Cannot ask for the loader's Frequency: %m");

        collector_drain_traces(c);
        return 0;

retry:
        if (c->loader_watch)
                ep_peer_watch_retry(c->loader_watch);
        return 0;
}

static int on_loader(EpPeerWatch *w, bool present, void *userdata) {
        Collector *c = userdata;
        int r;

        if (!present) {
                collector_drain_traces(c);
                collector_detach_loader(c);
                return 0;
        }

        c->loader_call = sd_bus_slot_unref(c->loader_call);
        r = sd_bus_call_method_async(c->daemon.bus, &c->loader_call, EP_BUS_LOADER, EP_PATH_LOADER,
                                     EP_IFACE_LOADER, "OpenTraceRing", on_trace_ring_reply, c, "");
        if (r < 0)
                return log_warning_errno(r, "Cannot call the loader's OpenTraceRing(): %m");
        return 0;
}

/* ---- the symbolizer ---- */

static int on_session_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Collector *c = userdata;
        int req_ring, req_efd, resp_ring, resp_efd, r;

        c->sym.call = sd_bus_slot_unref(c->sym.call);
        if (call_refused(c, m, "Symbolizer", "OpenSession"))
                goto retry;
        r = sd_bus_message_read(m, "hhhh", &req_ring, &req_efd, &resp_ring, &resp_efd);
        if (r < 0) {
                log_warning_errno(r, "Bad OpenSession() reply: %m");
                goto retry;
        }
        r = collector_sym_attach(c, req_ring, req_efd, resp_ring, resp_efd);
        if (r < 0) {
                collector_set_error(c, "Cannot use the symbolizer session: %s", strerror(-r));
                goto retry;
        }
        return 0;

retry:
        if (c->sym.watch)
                ep_peer_watch_retry(c->sym.watch);
        return 0;
}

static int on_symbolizer(EpPeerWatch *w, bool present, void *userdata) {
        Collector *c = userdata;
        int r;

        c->sym.call = sd_bus_slot_unref(c->sym.call);
        if (!present) {
                collector_sym_drain(c);
                collector_sym_detach(c);
                return 0;
        }
        r = sd_bus_call_method_async(c->daemon.bus, &c->sym.call, EP_BUS_SYMBOLIZER,
                                     EP_PATH_SYMBOLIZER, EP_IFACE_SYMBOLIZER, "OpenSession",
                                     on_session_reply, c, "");
        if (r < 0)
                return log_warning_errno(r, "Cannot call the symbolizer's OpenSession(): %m");
        return 0;
}

/* ---- the exporter ---- */

static int on_exporter(EpPeerWatch *w, bool present, void *userdata) {
        /* The exporter calls OpenExportRing() itself; when it goes, stop writing for it. */
        if (!present)
                collector_export_close(userdata);
        return 0;
}

/* ---- set-up ---- */

static int add_timer(Collector *c, sd_event_source **ret, uint64_t ns, uint64_t accuracy_ns,
                     sd_event_time_handler_t handler) {
        return sd_event_add_time_relative(c->daemon.event, ret, CLOCK_MONOTONIC, ns / 1000,
                                          accuracy_ns / 1000, handler, c);
}

int collector_bus_setup(Collector *c) {
        int r;

        r = ep_daemon_publish(&c->daemon, EP_BUS_COLLECTOR, EP_PATH_COLLECTOR, EP_IFACE_COLLECTOR,
                              collector_vtable, c);
        if (r < 0)
                return r;

        r = add_timer(c, &c->interval_timer, c->interval_ns, 10 * NSEC_PER_MSEC, on_interval_timer);
        if (r >= 0)
                r = add_timer(c, &c->drain_timer, COLLECTOR_DRAIN_PERIOD_NS, COLLECTOR_DRAIN_PERIOD_NS / 4,
                              on_drain_timer);
        if (r >= 0)
                r = add_timer(c, &c->props_timer, COLLECTOR_PROPERTIES_PERIOD_NS, COLLECTOR_PROPERTIES_PERIOD_NS / 4,
                              on_props_timer);
        /* The first run (at start) applies the limits to what an earlier run left. */
        if (r >= 0)
                r = add_timer(c, &c->retention_timer, 0, NSEC_PER_MSEC, on_retention_timer);
        if (r < 0)
                return log_error_errno(r, "Cannot set up timers: %m");

        r = sd_bus_match_signal_async(c->daemon.bus, &c->loader_props_match, NULL, EP_PATH_LOADER,
                                      "org.freedesktop.DBus.Properties", "PropertiesChanged",
                                      on_loader_properties, NULL, c);
        if (r < 0)
                return log_error_errno(r, "Cannot watch the loader's properties: %m");

        r = ep_peer_watch(&c->daemon, EP_BUS_LOADER, on_loader, c, &c->loader_watch);
        if (r >= 0)
                r = ep_peer_watch(&c->daemon, EP_BUS_SYMBOLIZER, on_symbolizer, c, &c->sym.watch);
        if (r >= 0)
                r = ep_peer_watch(&c->daemon, EP_BUS_EXPORTER, on_exporter, c, &c->exporter_watch);
        if (r < 0)
                return log_error_errno(r, "Cannot watch peers: %m");
        return 0;
}

void collector_bus_done(Collector *c) {
        c->loader_watch = ep_peer_watch_free(c->loader_watch);
        c->sym.watch = ep_peer_watch_free(c->sym.watch);
        c->exporter_watch = ep_peer_watch_free(c->exporter_watch);
        c->loader_call = sd_bus_slot_unref(c->loader_call);
        c->loader_freq_call = sd_bus_slot_unref(c->loader_freq_call);
        c->loader_props_match = sd_bus_slot_unref(c->loader_props_match);
        c->sym.call = sd_bus_slot_unref(c->sym.call);
        c->trace_io = sd_event_source_disable_unref(c->trace_io);
        c->sym.resp_io = sd_event_source_disable_unref(c->sym.resp_io);
        c->interval_timer = sd_event_source_disable_unref(c->interval_timer);
        c->drain_timer = sd_event_source_disable_unref(c->drain_timer);
        c->wait_timer = sd_event_source_disable_unref(c->wait_timer);
        c->props_timer = sd_event_source_disable_unref(c->props_timer);
        c->retention_timer = sd_event_source_disable_unref(c->retention_timer);
}
