/* SPDX-License-Identifier: MIT */
#pragma once

/* ebpf-profiler-exporter: takes finished intervals from the collector's export ring, encodes
 * each as OTLP ExportProfilesServiceRequests (split above EXPORTER_SPLIT_SIZE) and hands them
 * to delivery (delivery.h): disk spool, one request in flight, retries with back-off, order
 * kept. Without an endpoint it stays idle and does not attach to the collector. */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-bus.h>

#include "daemon.h"
#include "delivery.h"
#include "export-intake.h"
#include "shm-ring.h"
#include "transport.h"

#define EXPORTER_MAX_IN_FLIGHT 1 /* delivery keeps order: one request at a time */
#define EXPORTER_SPLIT_SIZE (4u << 20) /* requests above this (encoded) are split */

typedef struct Exporter {
        EpDaemon daemon;
        char *endpoint; /* shown (otlp_endpoint_redacted()); NULL: idle */
        const OtlpConfig *config;       /* main()'s; NULL: idle */
        char *const *resource_attributes; /* main()'s: key, value, …, NULL */
        char *host_name;

        EpPeerWatch *collector;
        sd_bus_slot *open_call;         /* OpenExportRing() in flight */
        sd_event_source *retry_source;  /* re-open the ring after a failure */
        uint64_t retry_usec;
        EpRing *ring;
        sd_event_source *ring_source;   /* the ring's eventfd */
        sd_event_source *drain_source;  /* continues a long drain on the next iteration */
        ExpIntake *intake;
        OtlpTransport *transport;
        Delivery *delivery;
        char *spool_dir;                /* --spool-dir; NULL: DELIVERY_SPOOL_DIR_DEFAULT */
        uint64_t spool_max_bytes;       /* --spool-max-size; 0: DELIVERY_SPOOL_MAX_DEFAULT */

        /* D-Bus properties; the delivery counters live in the Delivery object */
        uint64_t intervals, decode_errors;
        uint64_t encode_failures;       /* intervals lost to encoding: part of RequestsFailed */
        char *last_error;               /* the exporter's own (ring, encoding) */
        uint64_t last_error_ns;         /* CLOCK_REALTIME */
        DeliveryStats published;        /* what PropertiesChanged last announced */

        sd_bus_message **flush_waiters; /* Flush() calls answered once nothing is in flight */
        size_t n_flush_waiters, cap_flush_waiters;
} Exporter;

extern const sd_bus_vtable exporter_vtable[];

/* After the object is published: with an endpoint, sets up the transport and delivery (which
 * replays the spool) and watches the collector; without, logs that it idles. */
int exporter_start(Exporter *e);
void exporter_done(Exporter *e);

/* Drains the ring completely now and tries the spool at once; replies to m when everything
 * is accepted, or with an error saying how many requests remain spooled when the backend
 * fails. */
int exporter_flush(Exporter *e, sd_bus_message *m);
bool exporter_collector_attached(const Exporter *e);
/* LastError and LastErrorNs: the newer of the exporter's and the delivery's. */
const char *exporter_last_error(const Exporter *e, uint64_t *ret_ns);
