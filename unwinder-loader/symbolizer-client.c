/* SPDX-License-Identifier: MIT */
#include <inttypes.h>
#include <sys/stat.h>
#include <time.h>

#include "bus.h"
#include "log.h"
#include "runtime-facts.h"
#include "symbolizer-client.h"
#include "unwind-table.h"

#define MAX_IN_FLIGHT 4
#define MAX_DETECT_IN_FLIGHT 2
/* Extracting the table of a very large binary the first time takes a while. */
#define CALL_TIMEOUT_USEC (120 * USEC_PER_SEC)
/* DetectRuntime after a transient error: 1 s, doubling up to 60 s, 10 times. */
#define DETECT_RETRY_BASE_NS (1 * NSEC_PER_SEC)
#define DETECT_RETRY_MAX_NS (60 * NSEC_PER_SEC)
#define DETECT_RETRY_MAX_ATTEMPTS 10u

typedef enum RequestKind {
        REQUEST_TABLE,  /* GetUnwindTable: from and back to tables.c */
        REQUEST_DETECT, /* DetectRuntime: from ep_symclient_detect(), back to its callback */
} RequestKind;

typedef struct Request {
        EpSymClient *client;
        sd_bus_slot *slot;
        RequestKind kind;
        uint32_t key;
        uint8_t id[EP_FILE_ID_SIZE];
        uint64_t sent_ns; /* CLOCK_MONOTONIC */
        struct Request *next;

        /* REQUEST_DETECT */
        EpDetectDone done;
        void *userdata;
        unsigned attempts;      /* transient failures so far */
        uint64_t not_before_ns; /* CLOCK_MONOTONIC: sent again from then on */
        bool parked;            /* the symbolizer has no DetectRuntime: until another one comes */
} Request;

struct EpSymClient {
        EpDaemon *daemon;
        EpTables *tables;
        EpProcTable *procs;
        EpPeerWatch *watch;
        Request *in_flight; /* list, both kinds */
        unsigned n_in_flight, n_detect_in_flight;
        Request *detect_waiting; /* list: DetectRuntime calls not sent (yet, or again) */
        sd_event_source *detect_timer; /* the next DetectRuntime retry */
        bool unsupported_logged, detect_unsupported_logged;
};

int ep_read_table_fd(int fd, void **ret, size_t *ret_size) {
        const size_t max = ep_unwind_table_size(EP_UNWIND_TABLE_MAX_RULES, EP_UNWIND_TABLE_MAX_ENTRIES);
        _cleanup_free_ void *buf = NULL;
        struct stat st;
        size_t size, done = 0;

        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode) || st.st_size < (off_t) sizeof(EpUnwindTableHeader))
                return -EBADMSG;
        if ((uint64_t) st.st_size > max)
                return -EFBIG;
        size = (size_t) st.st_size;
        buf = aligned_alloc(8, ALIGN8(size));
        if (!buf)
                return -ENOMEM;
        while (done < size) {
                ssize_t k = pread(fd, (uint8_t *) buf + done, size - done, (off_t) done);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        return -EBADMSG; /* shrunk under us */
                done += (size_t) k;
        }
        *ret = TAKE_PTR(buf);
        *ret_size = size;
        return 0;
}

static void list_unlink(Request **list, Request *q) {
        for (Request **pp = list; *pp; pp = &(*pp)->next)
                if (*pp == q) {
                        *pp = q->next;
                        break;
                }
        q->next = NULL;
}

/* A request in flight gets its answer. */
static void request_landed(Request *q) {
        EpSymClient *c = q->client;

        list_unlink(&c->in_flight, q);
        if (q->kind == REQUEST_DETECT)
                c->n_detect_in_flight--;
        else
                c->n_in_flight--;
        q->slot = sd_bus_slot_unref(q->slot);
}

static void request_free(Request *q) {
        request_landed(q);
        free(q);
}

static int classify_error(EpSymClient *c, const sd_bus_error *e) {
        if (sd_bus_error_has_name(e, EP_ERROR_NO_UNWIND_INFO))
                return EP_TABLE_NO_CFI;
        if (sd_bus_error_has_name(e, EP_ERROR_BAD_FILE))
                return EP_TABLE_BAD_FILE;
        if (sd_bus_error_has_name(e, SD_BUS_ERROR_UNKNOWN_METHOD) ||
            sd_bus_error_has_name(e, SD_BUS_ERROR_UNKNOWN_INTERFACE) ||
            sd_bus_error_has_name(e, SD_BUS_ERROR_UNKNOWN_OBJECT)) {
                if (!c->unsupported_logged) {
                        c->unsupported_logged = true;
                        log_warning("The symbolizer does not serve unwind tables (%s); native frames take "
                                    "frame-pointer steps until a symbolizer that does is started.", e->message);
                }
                return EP_TABLE_UNSUPPORTED;
        }
        return EP_TABLE_RETRY; /* gone, timed out, out of memory, ... */
}

static void on_table_reply(sd_bus_message *m, Request *q) {
        EpSymClient *c = q->client;
        _cleanup_free_ void *blob = NULL;
        size_t size = 0;
        int fd, r, result;

        if (sd_bus_message_is_method_error(m, NULL)) {
                const sd_bus_error *e = sd_bus_message_get_error(m);
                result = classify_error(c, e);
                log_debug("GetUnwindTable for file %u: %s: %s", q->key, e->name, e->message ?: "");
        } else {
                r = sd_bus_message_read(m, "h", &fd);
                if (r >= 0)
                        r = ep_read_table_fd(fd, &blob, &size); /* fd belongs to the message */
                if (r < 0) {
                        log_debug_errno(r, "Unusable GetUnwindTable answer for file %u: %m", q->key);
                        result = EP_TABLE_BAD_FILE;
                } else {
                        EpFile *f = ep_proc_table_file(c->procs, q->key);

                        result = EP_TABLE_OK;
                        log_debug("Unwind table of file %u (%s): %zu bytes after %" PRIu64 " ms.", q->key,
                                  f && f->path ? f->path : "?", size,
                                  (uint64_t) ((ep_now_ns(CLOCK_MONOTONIC) - q->sent_ns) / NSEC_PER_MSEC));
                }
        }
        ep_tables_request_done(c->tables, q->key, q->id, result, blob, size);
        request_free(q);
}

/* At the end: files are asked about in the order they were seen (the list holds the files not
 * answered yet, a few dozen at a start). */
static void detect_waiting_push(EpSymClient *c, Request *q) {
        Request **pp = &c->detect_waiting;

        while (*pp)
                pp = &(*pp)->next;
        q->next = NULL;
        *pp = q;
}

/* The final answer of a DetectRuntime request: to its caller, and the request is gone. */
static void detect_finish(Request *q, const EpDetectAnswer *a) {
        EpDetectDone done = q->done;
        void *userdata = q->userdata;
        uint32_t key = q->key;

        free(q);
        done(key, a, userdata);
}

/* A transient failure: asked again after a while, or given up. */
static void detect_retry_later(Request *q, const char *why) {
        EpSymClient *c = q->client;

        if (++q->attempts >= DETECT_RETRY_MAX_ATTEMPTS) {
                detect_finish(q, &(EpDetectAnswer) { .result = EP_DETECT_GAVE_UP, .error = why });
                return;
        }
        q->not_before_ns = ep_now_ns(CLOCK_MONOTONIC) +
                           MIN(DETECT_RETRY_BASE_NS << (q->attempts - 1), DETECT_RETRY_MAX_NS);
        detect_waiting_push(c, q);
}

static void on_detect_reply(sd_bus_message *m, Request *q) {
        EpSymClient *c = q->client;
        const void *facts = NULL;
        const char *runtime = NULL;
        size_t size = 0;
        int r;

        if (sd_bus_message_is_method_error(m, NULL)) {
                const sd_bus_error *e = sd_bus_message_get_error(m);
                _cleanup_free_ char *why = NULL;

                log_debug("DetectRuntime for file %u: %s: %s", q->key, e->name, e->message ?: "");
                if (asprintf(&why, "%s: %s", e->name, e->message ?: "") < 0)
                        why = NULL;
                if (sd_bus_error_has_name(e, EP_ERROR_BAD_FILE) || sd_bus_error_has_name(e, EP_ERROR_UNUSABLE_RUNTIME)) {
                        detect_finish(q, &(EpDetectAnswer) { .result = EP_DETECT_REFUSED, .error = why ?: e->name });
                        return;
                }
                if (sd_bus_error_has_name(e, SD_BUS_ERROR_UNKNOWN_METHOD) ||
                    sd_bus_error_has_name(e, SD_BUS_ERROR_UNKNOWN_INTERFACE) ||
                    sd_bus_error_has_name(e, SD_BUS_ERROR_UNKNOWN_OBJECT)) {
                        if (!c->detect_unsupported_logged) {
                                c->detect_unsupported_logged = true;
                                log_warning("The symbolizer does not detect interpreter runtimes (%s); no "
                                            "interpreter frames until a symbolizer that does is started.",
                                            e->message ?: e->name);
                        }
                        q->parked = true;
                        detect_waiting_push(c, q);
                        return;
                }
                detect_retry_later(q, why ?: e->name); /* gone, timed out, out of memory, ... */
                return;
        }

        r = sd_bus_message_read(m, "s", &runtime);
        if (r >= 0)
                r = sd_bus_message_read_array(m, 'y', &facts, &size);
        if (r < 0) {
                log_debug_errno(r, "Unusable DetectRuntime answer for file %u: %m", q->key);
                detect_finish(q, &(EpDetectAnswer) { .result = EP_DETECT_REFUSED, .error = "a malformed answer" });
                return;
        }
        detect_finish(q, &(EpDetectAnswer) {
                .result = EP_DETECT_ANSWERED,
                .runtime = runtime,
                .facts = facts, /* the message's: valid until we return */
                .size = size,
        });
}

static int on_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Request *q = userdata;
        EpSymClient *c = q->client;

        if (q->kind == REQUEST_DETECT) {
                request_landed(q);
                on_detect_reply(m, q);
        } else
                on_table_reply(m, q);
        ep_symclient_kick(c);
        return 0;
}

/* Sends q (its kind, key and id set) with the file's descriptor. */
static int send_request(EpSymClient *c, Request *q) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_close_ int fd = -EBADF;
        EpFile *f = ep_proc_table_file(c->procs, q->key);
        int r;

        if (!f)
                return -ENOENT;
        fd = ep_proc_table_open_file(c->procs, q->key);
        if (fd < 0)
                return fd;
        q->client = c;
        q->sent_ns = ep_now_ns(CLOCK_MONOTONIC);
        memcpy(q->id, f->id, EP_FILE_ID_SIZE);

        r = sd_bus_message_new_method_call(c->daemon->bus, &m, EP_BUS_SYMBOLIZER, EP_PATH_SYMBOLIZER,
                                           EP_IFACE_SYMBOLIZER,
                                           q->kind == REQUEST_DETECT ? "DetectRuntime" : "GetUnwindTable");
        if (r >= 0)
                r = sd_bus_message_append(m, "h", fd);
        if (r >= 0)
                r = sd_bus_message_append_array(m, 'y', f->id, EP_FILE_ID_SIZE);
        if (r >= 0)
                r = sd_bus_call_async(c->daemon->bus, &q->slot, m, on_reply, q, CALL_TIMEOUT_USEC);
        if (r < 0)
                return r;
        q->next = c->in_flight;
        c->in_flight = q;
        if (q->kind == REQUEST_DETECT)
                c->n_detect_in_flight++;
        else
                c->n_in_flight++;
        return 0;
}

static int send_table_request(EpSymClient *c, uint32_t key) {
        Request *q = calloc(1, sizeof *q);
        int r;

        if (!q)
                return -ENOMEM;
        q->kind = REQUEST_TABLE;
        q->key = key;
        r = send_request(c, q);
        if (r < 0)
                free(q);
        return r;
}

static int on_detect_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        ep_symclient_kick(userdata);
        return 0;
}

/* Wakes kick_detect() at CLOCK_MONOTONIC at_ns (UINT64_MAX: not at all). */
static void detect_timer_arm(EpSymClient *c, uint64_t at_ns) {
        uint64_t usec = at_ns / 1000; /* sd-event's unit */

        if (at_ns == UINT64_MAX) {
                (void) sd_event_source_set_enabled(c->detect_timer, SD_EVENT_OFF);
                return;
        }
        if (!c->detect_timer) {
                if (sd_event_add_time(c->daemon->event, &c->detect_timer, CLOCK_MONOTONIC, usec, 0, on_detect_timer,
                                      c) < 0)
                        return; /* sent at the next answer or appearance of the symbolizer */
        } else
                (void) sd_event_source_set_time(c->detect_timer, usec);
        (void) sd_event_source_set_enabled(c->detect_timer, SD_EVENT_ONESHOT);
}

/* Sends the DetectRuntime requests that are due, while fewer than the maximum are in flight;
 * wakes up again for the next one that is not due yet. */
static void kick_detect(EpSymClient *c) {
        uint64_t now = ep_now_ns(CLOCK_MONOTONIC), next = UINT64_MAX;
        Request *q, *later = NULL;

        while (c->n_detect_in_flight < MAX_DETECT_IN_FLIGHT) {
                Request **pp;
                int r;

                for (pp = &c->detect_waiting; *pp; pp = &(*pp)->next)
                        if (!(*pp)->parked && (*pp)->not_before_ns <= now)
                                break;
                q = *pp;
                if (!q)
                        break;
                *pp = q->next;
                q->next = NULL;

                r = send_request(c, q);
                if (r == -ENOENT) {
                        /* No live process maps it any more: asked again when one does. */
                        detect_finish(q, &(EpDetectAnswer) { .result = EP_DETECT_UNAVAILABLE });
                        continue;
                }
                if (r < 0) {
                        log_debug_errno(r, "Cannot ask what runtime file %u is: %m", q->key);
                        /* Not now: sent again on the next turn, not in this loop. */
                        q->next = later;
                        later = q;
                }
        }
        while ((q = later)) {
                later = q->next;
                detect_retry_later(q, "the request could not be sent");
        }

        for (q = c->detect_waiting; q; q = q->next)
                if (!q->parked)
                        next = MIN(next, q->not_before_ns);
        if (c->n_detect_in_flight >= MAX_DETECT_IN_FLIGHT)
                next = UINT64_MAX; /* an answer will kick again */
        detect_timer_arm(c, next);
}

int ep_symclient_detect(EpSymClient *c, uint32_t key, EpDetectDone done, void *userdata) {
        Request *q;

        if (!c || !done)
                return -EINVAL;
        q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        q->client = c;
        q->kind = REQUEST_DETECT;
        q->key = key;
        q->done = done;
        q->userdata = userdata;
        detect_waiting_push(c, q);
        /* Sent from the event loop: done must not run inside this call. */
        detect_timer_arm(c, ep_now_ns(CLOCK_MONOTONIC));
        return 0;
}

void ep_symclient_kick(void *userdata) {
        EpSymClient *c = userdata;
        uint32_t key;

        if (!c || !c->watch || !ep_peer_watch_present(c->watch))
                return;
        kick_detect(c);
        while (c->tables && c->n_in_flight < MAX_IN_FLIGHT && ep_tables_next_request(c->tables, &key)) {
                int r = send_table_request(c, key);
                if (r < 0) {
                        /* No live process maps it any more (asked again when one does), or the
                         * bus refused (try again later). */
                        log_debug_errno(r, "Cannot ask for the unwind table of file %u: %m", key);
                        ep_tables_request_done(c->tables, key, NULL,
                                               r == -ENOENT ? EP_TABLE_UNAVAILABLE : EP_TABLE_RETRY, NULL, 0);
                }
        }
}

unsigned ep_symclient_in_flight(const EpSymClient *c) {
        return c->n_in_flight;
}

static int on_peer(EpPeerWatch *w, bool present, void *userdata) {
        EpSymClient *c = userdata;

        if (!present)
                return 0; /* calls in flight fail on their own and are retried */
        c->unsupported_logged = false;
        c->detect_unsupported_logged = false;
        for (Request *q = c->detect_waiting; q; q = q->next) {
                q->parked = false;
                q->not_before_ns = 0;
        }
        if (c->tables)
                ep_tables_retry_now(c->tables); /* also re-queues files the old one could not serve */
        ep_symclient_kick(c);
        return 0;
}

EpSymClient *ep_symclient_free(EpSymClient *c) {
        if (!c)
                return NULL;
        while (c->in_flight)
                request_free(c->in_flight);
        while (c->detect_waiting) {
                Request *q = c->detect_waiting;
                c->detect_waiting = q->next;
                free(q);
        }
        sd_event_source_disable_unref(c->detect_timer);
        if (c->tables)
                ep_tables_set_kick(c->tables, NULL, NULL);
        ep_peer_watch_free(c->watch);
        free(c);
        return NULL;
}

int ep_symclient_new(EpDaemon *d, EpTables *tables, EpProcTable *procs, EpSymClient **ret) {
        _cleanup_(ep_symclient_freep) EpSymClient *c = NULL;
        int r;

        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->daemon = d;
        c->tables = tables;
        c->procs = procs;
        if (tables)
                ep_tables_set_kick(tables, ep_symclient_kick, c);
        r = ep_peer_watch(d, EP_BUS_SYMBOLIZER, on_peer, c, &c->watch);
        if (r < 0) {
                if (tables)
                        ep_tables_set_kick(tables, NULL, NULL);
                return r;
        }
        *ret = TAKE_PTR(c);
        return 0;
}
