/* SPDX-License-Identifier: MIT */
#pragma once

/* Delivery: the queue between the OTLP encoder and the transport, built so that no accepted
 * interval is lost to a backend outage, a restart or a crash.
 *
 *  - Every request is first written to the spool (spool.h); it leaves the spool when the
 *    backend accepted it (2xx / gRPC OK, also a partial success) or refused it for good
 *    (other 4xx, INVALID_ARGUMENT, …: retrying would not help).
 *  - One request is in flight at a time, always the oldest: order is kept, also across
 *    restarts (the spool is replayed before new data).
 *  - Transient failures (429/502/503/504, gRPC UNAVAILABLE & co., connection errors,
 *    timeouts) are retried without limit, with exponential back-off and full jitter, or after
 *    the delay the server asked for. The spool bound, not a retry budget, limits what is lost.
 *
 * The transport is reached through DeliveryOps so tests can inject results. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "macro.h"
#include "transport.h"

#define DELIVERY_SPOOL_DIR_DEFAULT "/var/lib/ebpf-profiler/spool"
#define DELIVERY_SPOOL_MAX_DEFAULT (256ull << 20)
#define DELIVERY_BACKOFF_INITIAL_USEC (1 * USEC_PER_SEC)
#define DELIVERY_BACKOFF_MAX_USEC (60 * USEC_PER_SEC)
#define DELIVERY_RETRY_AFTER_MAX_USEC (300 * USEC_PER_SEC) /* cap on a server's Retry-After */

typedef enum DeliveryClass {
        DELIVERY_ACCEPTED, /* done (possibly a partial success) */
        DELIVERY_RETRY,    /* transient: keep it, try again later */
        DELIVERY_REJECTED, /* permanent: drop it */
} DeliveryClass;

/* What one transport result means. Pure; the table is in docs/ARCHITECTURE.md (Export). */
DeliveryClass delivery_classify(const OtlpResult *res);

/* The wait before retry number attempt (0 = the first retry): the server's delay when it gave
 * one (capped at retry_after_max_usec), else uniform in [0, min(max, initial · 2^attempt)]
 * ("full jitter"), drawn from rnd. */
uint64_t delivery_backoff_usec(unsigned attempt, int64_t retry_after_ms, uint64_t initial_usec,
                               uint64_t max_usec, uint64_t retry_after_max_usec, uint64_t rnd);

/* partial_success of an ExportProfilesServiceResponse: 1 and its fields (*ret_message
 * malloc'ed, possibly "") when the response carries a non-empty one, 0 when not, -EBADMSG
 * when the bytes do not parse. */
int delivery_parse_partial_success(const void *data, size_t size, int64_t *ret_rejected, char **ret_message);

typedef struct Delivery Delivery;

typedef struct DeliveryOps {
        /* Starts sending body (valid until delivery_complete()); the result must come back
         * through delivery_complete(), never from inside this call. < 0: could not start
         * (counted as a transient failure). */
        int (*send)(Delivery *d, const void *body, size_t size, void *userdata);
        /* Counters or state changed (properties, Flush() waiters). */
        void (*changed)(Delivery *d, void *userdata);
} DeliveryOps;

typedef struct DeliveryOptions {
        const char *spool_dir;   /* NULL: spool in memory only */
        uint64_t spool_max_bytes;
        uint64_t backoff_initial_usec, backoff_max_usec, retry_after_max_usec; /* 0: defaults */
        const char *endpoint;    /* for log messages */
} DeliveryOptions;

typedef struct DeliveryStats {
        uint64_t requests_sent, requests_failed, requests_retried, bytes_sent;
        uint64_t partial_rejected, spool_dropped, spool_corrupt;
        uint64_t spool_bytes;
        uint32_t spool_files;
        uint64_t backoff_until_ns; /* CLOCK_REALTIME; 0 when not backing off */
        uint64_t last_error_ns;    /* CLOCK_REALTIME */
        const char *last_error;    /* NULL when none */
} DeliveryStats;

int delivery_new(sd_event *event, const DeliveryOptions *opts, const DeliveryOps *ops, void *userdata,
                 Delivery **ret);
Delivery *delivery_free(Delivery *d);
DEFINE_TRIVIAL_CLEANUP_FUNC(Delivery *, delivery_free);

/* Spools a copy of one encoded request and sends it when its turn comes. */
int delivery_enqueue(Delivery *d, const void *data, size_t size);
/* The transport's answer to the request handed to ops->send. */
void delivery_complete(Delivery *d, const OtlpResult *res);
/* Tries the head now, instead of waiting out the back-off (Flush()); also starts replaying
 * the spool after delivery_new() (which sends nothing by itself). */
void delivery_kick(Delivery *d);

/* Requests not accepted yet (spooled, the one in flight included). */
size_t delivery_pending(const Delivery *d);
bool delivery_in_flight(const Delivery *d);
/* The last attempt failed and the head waits for its retry. */
bool delivery_backing_off(const Delivery *d);
DeliveryStats delivery_stats(const Delivery *d);
