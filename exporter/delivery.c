/* SPDX-License-Identifier: MIT */
#include <inttypes.h>
#include <stdarg.h>
#include <sys/random.h>
#include <time.h>

#include "delivery.h"
#include "log.h"
#include "otlp-pb.h"
#include "spool.h"

#define PARTIAL_MESSAGES_MAX 64 /* distinct partial-success messages remembered for log-once */

struct Delivery {
        sd_event *event;
        DeliveryOps ops;
        void *userdata;
        Spool *spool;
        char *endpoint;
        uint64_t backoff_initial_usec, backoff_max_usec, retry_after_max_usec;

        void *head; /* the oldest request, in memory while it is tried */
        size_t head_size;
        uint64_t head_seq;
        bool in_flight;
        unsigned attempt; /* failed attempts of the head so far */
        sd_event_source *timer;
        uint64_t backoff_until_ns;
        uint64_t rnd;

        uint64_t requests_sent, requests_failed, requests_retried, bytes_sent;
        uint64_t partial_rejected, spool_dropped, spool_corrupt;
        char *last_error;
        uint64_t last_error_ns;
        char *partial_messages[PARTIAL_MESSAGES_MAX];
        size_t n_partial_messages;
};

DeliveryClass delivery_classify(const OtlpResult *res) {
        /* No answer at all: refused connections, timeouts, TLS handshakes are transient. */
        if (res->error < 0)
                return DELIVERY_RETRY;
        if (res->grpc_status >= 0)
                switch (res->grpc_status) {
                case GRPC_OK:
                        return DELIVERY_ACCEPTED;
                case GRPC_CANCELLED:
                case GRPC_DEADLINE_EXCEEDED:
                case GRPC_ABORTED:
                case GRPC_OUT_OF_RANGE:
                case GRPC_UNAVAILABLE:
                case GRPC_DATA_LOSS:
                        return DELIVERY_RETRY;
                case GRPC_RESOURCE_EXHAUSTED:
                        /* OTLP: retryable only when the server says when to come back;
                         * otherwise it is a permanent quota. */
                        return res->retry_after_ms >= 0 ? DELIVERY_RETRY : DELIVERY_REJECTED;
                default:
                        return DELIVERY_REJECTED;
                }
        if (res->http_status >= 200 && res->http_status < 300)
                return DELIVERY_ACCEPTED;
        switch (res->http_status) {
        case 0:   /* no response */
        case 429:
        case 502:
        case 503:
        case 504:
                return DELIVERY_RETRY;
        default:
                return DELIVERY_REJECTED;
        }
}

uint64_t delivery_backoff_usec(unsigned attempt, int64_t retry_after_ms, uint64_t initial_usec,
                               uint64_t max_usec, uint64_t retry_after_max_usec, uint64_t rnd) {
        uint64_t cap = initial_usec;

        if (retry_after_ms >= 0)
                return (uint64_t) retry_after_ms > retry_after_max_usec / 1000 ? retry_after_max_usec
                                                                              : (uint64_t) retry_after_ms * 1000;
        for (unsigned i = 0; i < attempt && cap < max_usec; i++)
                cap *= 2;
        cap = MIN(cap, max_usec);
        /* Full jitter: many profilers behind one failing collector must not retry in step. */
        return rnd % (cap + 1);
}

int delivery_parse_partial_success(const void *data, size_t size, int64_t *ret_rejected, char **ret_message) {
        PbResponse *resp;
        int r = 0;

        if (size == 0)
                return 0;
        resp = pb_response_unpack(NULL, size, data);
        if (!resp)
                return -EBADMSG;
        if (resp->partial_success &&
            (resp->partial_success->rejected_profiles != 0 ||
             (resp->partial_success->error_message && *resp->partial_success->error_message))) {
                char *m = strdup(resp->partial_success->error_message ?: "");
                if (!m)
                        r = -ENOMEM;
                else {
                        *ret_rejected = resp->partial_success->rejected_profiles;
                        *ret_message = m;
                        r = 1;
                }
        }
        pb_response_free_unpacked(resp, NULL);
        return r;
}

static uint64_t now_ns(clockid_t clock) {
        struct timespec ts;

        (void) clock_gettime(clock, &ts);
        return (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
}

/* xorshift64*: jitter needs no cryptographic quality, only a per-process seed. */
static uint64_t next_random(Delivery *d) {
        d->rnd ^= d->rnd >> 12;
        d->rnd ^= d->rnd << 25;
        d->rnd ^= d->rnd >> 27;
        return d->rnd * 0x2545F4914F6CDD1DULL;
}

static void notify(Delivery *d) {
        if (d->ops.changed)
                d->ops.changed(d, d->userdata);
}

_printf_(2, 3) static void set_last_error(Delivery *d, const char *format, ...) {
        char *s = NULL;
        va_list ap;

        va_start(ap, format);
        if (vasprintf(&s, format, ap) < 0)
                s = NULL;
        va_end(ap);
        if (!s)
                return; /* keep the previous one rather than nothing */
        free(d->last_error);
        d->last_error = s;
        d->last_error_ns = now_ns(CLOCK_REALTIME);
}

/* "HTTP 503: overloaded", "gRPC status 14: unavailable", "connection refused". */
static void describe(const OtlpResult *res, char *buf, size_t size) {
        const char *m = res->message && *res->message ? res->message : NULL;

        if (res->error < 0)
                snprintf(buf, size, "%s", m ?: strerror(-res->error));
        else if (res->grpc_status >= 0)
                snprintf(buf, size, "gRPC status %d%s%s", res->grpc_status, m ? ": " : "", m ?: "");
        else
                snprintf(buf, size, "HTTP %ld%s%s", res->http_status, m ? ": " : "", m ?: "");
}

static void pump(Delivery *d);

static void drop_head(Delivery *d) {
        free(d->head);
        d->head = NULL;
        d->head_size = 0;
        d->attempt = 0;
}

static void finish_head(Delivery *d) {
        (void) spool_remove(d->spool, d->head_seq);
        drop_head(d);
}

static int on_backoff_done(sd_event_source *s, uint64_t usec, void *userdata) {
        Delivery *d = userdata;

        d->timer = sd_event_source_disable_unref(d->timer);
        d->backoff_until_ns = 0;
        pump(d);
        notify(d);
        return 0;
}

static void schedule_retry(Delivery *d, int64_t retry_after_ms) {
        uint64_t wait = delivery_backoff_usec(d->attempt, retry_after_ms, d->backoff_initial_usec,
                                              d->backoff_max_usec, d->retry_after_max_usec, next_random(d));
        int r;

        d->attempt++;
        d->requests_retried++;
        d->backoff_until_ns = now_ns(CLOCK_REALTIME) + wait * 1000;
        r = sd_event_add_time_relative(d->event, &d->timer, CLOCK_MONOTONIC, wait, 0, on_backoff_done, d);
        if (r < 0) {
                /* Without a timer nothing would ever retry: try again on the next enqueue. */
                log_warning_errno(r, "Cannot schedule the export retry: %m");
                d->backoff_until_ns = 0;
        }
}

static void count_partial_success(Delivery *d, const OtlpResult *res) {
        _cleanup_free_ char *msg = NULL;
        int64_t rejected = 0;
        int r;

        r = delivery_parse_partial_success(res->response, res->response_size, &rejected, &msg);
        if (r < 0) {
                log_once(LOG_NOTICE, "%s answered with a response that does not parse; counting the export as "
                         "accepted", d->endpoint);
                return;
        }
        if (r == 0)
                return;
        if (rejected > 0)
                d->partial_rejected += (uint64_t) rejected;
        set_last_error(d, "partial success: %" PRIi64 " profiles rejected%s%s", rejected, *msg ? ": " : "", msg);
        /* Log once per distinct message: a misconfigured backend says the same every time. */
        for (size_t i = 0; i < d->n_partial_messages; i++)
                if (streq(d->partial_messages[i], msg))
                        return;
        log_warning("%s accepted the export partially: %" PRIi64 " profiles rejected: %s", d->endpoint,
                    rejected, *msg ? msg : "(no message)");
        if (d->n_partial_messages < PARTIAL_MESSAGES_MAX)
                d->partial_messages[d->n_partial_messages++] = TAKE_PTR(msg);
}

void delivery_complete(Delivery *d, const OtlpResult *res) {
        char what[512];

        d->in_flight = false;
        switch (delivery_classify(res)) {
        case DELIVERY_ACCEPTED:
                d->requests_sent++;
                d->bytes_sent += res->request_size ?: d->head_size;
                if (d->attempt > 0)
                        log_info("OTLP export to %s works again", d->endpoint);
                count_partial_success(d, res);
                finish_head(d);
                break;
        case DELIVERY_REJECTED:
                describe(res, what, sizeof what);
                d->requests_failed++;
                set_last_error(d, "%s refused the export: %s", d->endpoint, what);
                /* The backend will refuse the same bytes again: dropping is all we can do. */
                log_warning("%s; request dropped", d->last_error);
                finish_head(d);
                break;
        case DELIVERY_RETRY:
                describe(res, what, sizeof what);
                set_last_error(d, "export to %s failed: %s", d->endpoint, what);
                log_full(d->attempt == 0 ? LOG_WARNING : LOG_DEBUG, "%s; will retry (%zu requests spooled)",
                         d->last_error, spool_files(d->spool));
                schedule_retry(d, res->retry_after_ms);
                break;
        }
        pump(d);
        notify(d);
}

/* Sends the head unless one request is in flight or the back-off runs. */
static void pump(Delivery *d) {
        int r;

        if (d->in_flight || d->timer)
                return;
        /* The bound may have pushed the head out of the spool meanwhile: it is lost (counted
         * in SpoolDropped), go on with what is still there. */
        if (d->head && !spool_contains(d->spool, d->head_seq))
                drop_head(d);
        if (!d->head) {
                unsigned corrupt = 0;

                r = spool_peek(d->spool, &d->head, &d->head_size, &d->head_seq, &corrupt);
                d->spool_corrupt += corrupt;
                d->spool_dropped += corrupt;
                if (r < 0) {
                        set_last_error(d, "Cannot read the spool: %s", strerror(-r));
                        log_error("%s", d->last_error);
                        return;
                }
                if (r == 0)
                        return;
        }
        r = d->ops.send(d, d->head, d->head_size, d->userdata);
        if (r < 0) {
                set_last_error(d, "Cannot send to %s: %s", d->endpoint, strerror(-r));
                log_full(d->attempt == 0 ? LOG_WARNING : LOG_DEBUG, "%s; will retry", d->last_error);
                schedule_retry(d, -1);
                return;
        }
        d->in_flight = true;
}

int delivery_enqueue(Delivery *d, const void *data, size_t size) {
        unsigned dropped = 0;
        int r;

        r = spool_append(d->spool, data, size, &dropped);
        if (dropped > 0) {
                d->spool_dropped += dropped;
                set_last_error(d, "spool full (%" PRIu64 " bytes max): dropped the %u oldest requests",
                               spool_bytes(d->spool), dropped);
                log_warning("%s", d->last_error);
        }
        if (r < 0) {
                d->spool_dropped++;
                set_last_error(d, "Cannot spool a %zu byte request: %s", size,
                               r == -EFBIG ? "larger than --spool-max-size" : strerror(-r));
                log_error("%s; request dropped", d->last_error);
        }
        pump(d);
        notify(d);
        return r;
}

void delivery_kick(Delivery *d) {
        if (d->in_flight)
                return;
        d->timer = sd_event_source_disable_unref(d->timer);
        d->backoff_until_ns = 0;
        pump(d);
        notify(d);
}

size_t delivery_pending(const Delivery *d) {
        /* The one in flight counts even when the bound already pushed its file out. */
        bool gone = d->in_flight && !spool_contains(d->spool, d->head_seq);
        return spool_files(d->spool) + gone;
}

bool delivery_in_flight(const Delivery *d) {
        return d->in_flight;
}

bool delivery_backing_off(const Delivery *d) {
        return d->timer != NULL;
}

DeliveryStats delivery_stats(const Delivery *d) {
        if (!d)
                return (DeliveryStats) {};
        return (DeliveryStats) {
                .requests_sent = d->requests_sent,
                .requests_failed = d->requests_failed,
                .requests_retried = d->requests_retried,
                .bytes_sent = d->bytes_sent,
                .partial_rejected = d->partial_rejected,
                .spool_dropped = d->spool_dropped,
                .spool_corrupt = d->spool_corrupt,
                .spool_bytes = spool_bytes(d->spool),
                .spool_files = (uint32_t) MIN(spool_files(d->spool), (size_t) UINT32_MAX),
                .backoff_until_ns = d->backoff_until_ns,
                .last_error_ns = d->last_error_ns,
                .last_error = d->last_error,
        };
}

int delivery_new(sd_event *event, const DeliveryOptions *opts, const DeliveryOps *ops, void *userdata,
                 Delivery **ret) {
        _cleanup_(delivery_freep) Delivery *d = NULL;
        int r;

        d = calloc(1, sizeof *d);
        if (!d)
                return -ENOMEM;
        d->event = sd_event_ref(event);
        d->ops = *ops;
        d->userdata = userdata;
        d->backoff_initial_usec = opts->backoff_initial_usec ?: DELIVERY_BACKOFF_INITIAL_USEC;
        d->backoff_max_usec = opts->backoff_max_usec ?: DELIVERY_BACKOFF_MAX_USEC;
        d->retry_after_max_usec = opts->retry_after_max_usec ?: DELIVERY_RETRY_AFTER_MAX_USEC;
        d->endpoint = strdup(opts->endpoint ?: "the OTLP endpoint");
        if (!d->endpoint)
                return -ENOMEM;
        if (getrandom(&d->rnd, sizeof d->rnd, GRND_NONBLOCK) != sizeof d->rnd || d->rnd == 0)
                d->rnd = now_ns(CLOCK_MONOTONIC) ^ ((uint64_t) getpid() << 32) ^ 1;

        r = spool_open(opts->spool_dir, opts->spool_max_bytes ?: DELIVERY_SPOOL_MAX_DEFAULT, &d->spool);
        if (r < 0)
                return r;
        if (spool_files(d->spool) > 0)
                log_info("Replaying %zu spooled requests (%" PRIu64 " bytes) from %s", spool_files(d->spool),
                         spool_bytes(d->spool), opts->spool_dir);
        *ret = TAKE_PTR(d);
        return 0;
}

Delivery *delivery_free(Delivery *d) {
        if (!d)
                return NULL;
        d->timer = sd_event_source_disable_unref(d->timer);
        free(d->head);
        spool_free(d->spool);
        for (size_t i = 0; i < d->n_partial_messages; i++)
                free(d->partial_messages[i]);
        free(d->last_error);
        free(d->endpoint);
        sd_event_unref(d->event);
        free(d);
        return NULL;
}
