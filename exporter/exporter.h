/* SPDX-License-Identifier: MIT */
#pragma once

/* ebpf-profiler-exporter: takes finished intervals from the collector's export ring, encodes
 * each as one OTLP ExportProfilesServiceRequest and POSTs it (gzip) to the configured
 * OTLP/HTTP endpoint. Without an endpoint it stays idle and does not attach to the collector.
 *
 * Delivery in this version: one attempt per interval; a failure is counted (RequestsFailed,
 * LastError) and logged, and the interval is dropped. Retries and the disk spool come later
 * and slot in at exporter_send(). */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-bus.h>

#include "daemon.h"
#include "export-intake.h"
#include "http-sender.h"
#include "shm-ring.h"

#define EXPORTER_PROTOCOL "http/protobuf"
#define EXPORTER_TIMEOUT_MS 10000
#define EXPORTER_MAX_IN_FLIGHT 4
#define EXPORTER_MAX_REQUEST (64u << 20) /* OTLP: do not send bodies over 64 MiB uncompressed */

typedef struct Exporter {
        EpDaemon daemon;
        char *endpoint; /* NULL: idle */
        char *host_name;

        EpPeerWatch *collector;
        sd_bus_slot *open_call;         /* OpenExportRing() in flight */
        sd_event_source *retry_source;  /* re-open the ring after a failure */
        uint64_t retry_usec;
        EpRing *ring;
        sd_event_source *ring_source;   /* the ring's eventfd */
        sd_event_source *drain_source;  /* continues a long drain on the next iteration */
        ExpIntake *intake;
        HttpSender *sender;
        bool failing;                   /* the last request failed (log the next one quietly) */

        /* D-Bus properties */
        uint64_t intervals, requests_sent, requests_failed, bytes_sent, decode_errors;
        char *last_error;

        sd_bus_message **flush_waiters; /* Flush() calls answered once nothing is in flight */
        size_t n_flush_waiters, cap_flush_waiters;
} Exporter;

extern const sd_bus_vtable exporter_vtable[];

/* After the object is published: with an endpoint, sets up the sender and watches the
 * collector; without, logs that it idles. */
int exporter_start(Exporter *e);
void exporter_done(Exporter *e);

/* Drains the ring completely now; replies to m when no request is in flight any more. */
int exporter_flush(Exporter *e, sd_bus_message *m);
bool exporter_collector_attached(const Exporter *e);
