/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "log.h"
#include "session.h"
#include "shm-ring.h"
#include "wire-buf.h"
#include "wire-sym.h"
#include "wire.h"

typedef struct Pending {
        struct Pending *next;
        uint16_t type;
        uint32_t len;
        uint8_t data[];
} Pending;

struct EpSession {
        sd_event *event;
        EpResolver *resolver;
        EpSymStats *stats;

        EpRing *req, *resp;
        sd_event_source *io, *defer, *retry;

        Pending *backlog_head, *backlog_tail;
        size_t backlog_n;

        EpWriter w;
        bool dead;
};

static void backlog_clear(EpSession *s) {
        while (s->backlog_head) {
                Pending *p = s->backlog_head;
                s->backlog_head = p->next;
                free(p);
        }
        s->backlog_tail = NULL;
        s->backlog_n = 0;
}

EpSession *ep_session_free(EpSession *s) {
        if (!s)
                return NULL;
        if (s->backlog_n > 0 && s->stats)
                s->stats->response_drops += s->backlog_n; /* the client that wanted them is gone */
        backlog_clear(s);
        sd_event_source_disable_unref(s->io);
        sd_event_source_disable_unref(s->defer);
        sd_event_source_disable_unref(s->retry);
        sd_event_unref(s->event);
        ep_ring_free(s->req);
        ep_ring_free(s->resp);
        ep_writer_done(&s->w);
        free(s);
        return NULL;
}

int ep_session_request_memfd(const EpSession *s) {
        return ep_ring_memfd(s->req);
}
int ep_session_request_eventfd(const EpSession *s) {
        return ep_ring_eventfd(s->req);
}
int ep_session_response_memfd(const EpSession *s) {
        return ep_ring_memfd(s->resp);
}
int ep_session_response_eventfd(const EpSession *s) {
        return ep_ring_eventfd(s->resp);
}
size_t ep_session_backlog(const EpSession *s) {
        return s->backlog_n;
}

static void drop(EpSession *s, const char *why) {
        if (s->stats) {
                s->stats->response_drops++;
                ep_sym_stats_error(s->stats, "response dropped: %s", why);
        }
        log_once(LOG_WARNING, "Dropping a symbolizer response: %s (counted in ResponseDrops)", why);
}

/* -ENOBUFS when the ring has no room now, -E2BIG when it never will. */
static int try_push(EpSession *s, uint16_t type, const void *data, uint32_t len) {
        if (len > ep_ring_max_record(s->resp))
                return -E2BIG;
        /* Look before reserving: a failed reserve counts as a drop in the shared header,
         * and this is only a delay. */
        if (ep_ring_bytes_used(s->resp) + sizeof(EpRingRecord) + ALIGN8((size_t) len) >
            ep_ring_data_size(s->resp))
                return -ENOBUFS;

        void *p = ep_ring_reserve(s->resp, type, len);
        if (!p)
                return -ENOBUFS;
        memcpy(p, data, len);
        ep_ring_commit(s->resp);
        return 0;
}

static void deliver(EpSession *s, uint16_t type, const void *data, size_t len, unsigned *pushed) {
        int k;

        if (len > UINT32_MAX) {
                drop(s, "too large");
                return;
        }
        if (!s->backlog_head) {
                k = try_push(s, type, data, (uint32_t) len);
                if (k == 0) {
                        (*pushed)++;
                        return;
                }
                if (k == -E2BIG) {
                        drop(s, "larger than a ring record");
                        return;
                }
        }

        Pending *p = malloc(sizeof(Pending) + len);
        if (!p) {
                drop(s, "out of memory");
                return;
        }
        p->next = NULL;
        p->type = type;
        p->len = (uint32_t) len;
        memcpy(p->data, data, len);
        if (s->backlog_tail)
                s->backlog_tail->next = p;
        else
                s->backlog_head = p;
        s->backlog_tail = p;
        s->backlog_n++;
}

static void flush_backlog(EpSession *s, unsigned *pushed) {
        while (s->backlog_head) {
                Pending *p = s->backlog_head;
                int k = try_push(s, p->type, p->data, p->len);

                if (k == -ENOBUFS)
                        return;
                if (k < 0)
                        drop(s, "larger than a ring record");
                else
                        (*pushed)++;
                s->backlog_head = p->next;
                if (!s->backlog_head)
                        s->backlog_tail = NULL;
                s->backlog_n--;
                free(p);
        }
}

static void bad_request(EpSession *s, uint16_t type, const char *why) {
        if (s->stats) {
                s->stats->bad_requests++;
                ep_sym_stats_error(s->stats, "bad request (type %u): %s", type, why);
        }
        log_once(LOG_WARNING, "Ignoring a malformed request (type %u): %s (counted in BadRequests)", type, why);
}

static void put_result(EpWriter *w, uint64_t cookie, const EpSymResult *res) {
        uint16_t n = res->n_lines;

        ep_put_u64(w, cookie);
        ep_put_u8(w, res->status);
        ep_put_u64(w, res->elf_addr);
        ep_put_str(w, res->module);
        ep_put_u16(w, n);
        for (uint16_t i = 0; i < n; i++) {
                ep_put_str(w, res->lines[i].function);
                ep_put_str(w, res->lines[i].file);
                ep_put_u32(w, res->lines[i].line);
        }
}

/* Serializes the answer to one request into s->w; returns its message type, 0 for none. */
static uint16_t handle_sym_request(EpSession *s, const void *payload, size_t len) {
        _cleanup_free_ char *path = NULL;
        const EpSymResult *res;
        EpSymRequestMsg msg;
        EpReader rd;
        int k;

        ep_reader_init(&rd, payload, len);
        if (!ep_get_sym_request(&rd, EP_SESSION_PATH_MAX, &msg)) {
                bad_request(s, EP_MSG_SYM_REQUEST, "bad layout");
                return 0;
        }
        if (s->stats)
                s->stats->requests++;
        uint64_t cookie = msg.cookie;

        if (msg.path_len > 0 && !memchr(msg.path, 0, msg.path_len))
                path = strndup(msg.path, msg.path_len);

        EpSymRequest req = {
                .kind = msg.kind,
                .flags = msg.flags,
                .addr = msg.addr,
                .pid = msg.pid,
                .start_time_ns = msg.start_time_ns,
                .path = path,
        };
        memcpy(req.file_id, msg.file_id, EP_FILE_ID_SIZE);

        k = ep_resolver_symbolize(s->resolver, &req, &res);
        if (k < 0) {
                /* Out of memory: still answer, so the client does not wait forever. */
                EpSymResult none = { .status = EP_SYM_NO_FILE, .module = (char *) "" };
                if (s->stats) {
                        s->stats->file_errors++;
                        ep_sym_stats_error(s->stats, "symbolize: %s", strerror(-k));
                }
                put_result(&s->w, cookie, &none);
        } else
                put_result(&s->w, cookie, res);
        return EP_MSG_SYM_RESPONSE;
}

static uint16_t handle_file_request(EpSession *s, const void *payload, size_t len) {
        uint8_t file_id[EP_FILE_ID_SIZE];
        EpFileInfo info;
        EpReader rd;
        size_t path_len;
        int k;

        ep_reader_init(&rd, payload, len);
        uint64_t cookie = ep_get_u64(&rd);
        ep_get_bytes(&rd, file_id, sizeof file_id);
        (void) ep_get_blob(&rd, EP_SESSION_PATH_MAX, &path_len);
        if (!ep_reader_done(&rd)) {
                bad_request(s, EP_MSG_SYM_FILE_REQUEST, "bad layout");
                return 0;
        }
        if (s->stats)
                s->stats->requests++;

        k = ep_resolver_file_info(s->resolver, file_id, &info);
        if (k < 0) {
                info = (EpFileInfo) { .status = EP_SYM_NO_FILE };
                if (s->stats) {
                        s->stats->file_errors++;
                        ep_sym_stats_error(s->stats, "file info: %s", strerror(-k));
                }
        }

        ep_put_u64(&s->w, cookie);
        ep_put_u8(&s->w, info.status);
        ep_put_blob(&s->w, info.ids.gnu, info.ids.gnu_len);
        ep_put_str(&s->w, info.ids.go);
        return EP_MSG_SYM_FILE_RESPONSE;
}

static void session_kill(EpSession *s, int error) {
        s->dead = true;
        if (s->stats)
                ep_sym_stats_error(s->stats, "request ring corrupt; waiting for a new session");
        log_error_errno(error, "The request ring holds an impossible record; ignoring this session "
                               "until the client opens a new one: %m");
        if (s->io)
                (void) sd_event_source_set_enabled(s->io, SD_EVENT_OFF);
}

static void schedule(sd_event_source *src, uint64_t usec) {
        if (!src)
                return;
        if (usec > 0)
                (void) sd_event_source_set_time_relative(src, usec);
        (void) sd_event_source_set_enabled(src, SD_EVENT_ONESHOT);
}

int ep_session_process(EpSession *s) {
        unsigned pushed = 0;
        int n = 0;

        if (s->dead)
                return -EBADMSG;

        flush_backlog(s, &pushed);

        while (n < EP_SESSION_BATCH && s->backlog_n < EP_SESSION_BACKLOG) {
                EpRingRecord h;
                const void *payload;
                uint16_t type = 0;
                int k;

                k = ep_ring_peek(s->req, &h, &payload);
                if (k == 0)
                        break;
                if (k < 0) {
                        session_kill(s, k);
                        break;
                }

                ep_writer_reset(&s->w);
                switch (h.type) {
                case EP_MSG_SYM_REQUEST:
                        type = handle_sym_request(s, payload, h.len);
                        break;
                case EP_MSG_SYM_FILE_REQUEST:
                        type = handle_file_request(s, payload, h.len);
                        break;
                default:
                        bad_request(s, h.type, "unknown message type");
                        break;
                }
                /* The answer is serialized (nothing points into the record any more). */
                ep_ring_consume(s->req);
                n++;

                if (type != 0) {
                        if (s->w.overflow)
                                drop(s, "out of memory");
                        else
                                deliver(s, type, s->w.data, s->w.size, &pushed);
                }
        }

        if (pushed > 0)
                (void) ep_ring_notify(s->resp);
        if (s->backlog_n > 0)
                schedule(s->retry, EP_SESSION_RETRY_USEC);
        else if (n == EP_SESSION_BATCH)
                schedule(s->defer, 0); /* more may be queued: continue after other events */

        return s->dead ? -EBADMSG : n;
}

static int on_request(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        EpSession *s = userdata;

        ep_ring_clear_wakeup(s->req);
        (void) ep_session_process(s);
        return 0;
}

static int on_defer(sd_event_source *src, void *userdata) {
        (void) ep_session_process(userdata);
        return 0;
}

static int on_retry(sd_event_source *src, uint64_t usec, void *userdata) {
        (void) ep_session_process(userdata);
        return 0;
}

int ep_session_new(sd_event *event, EpResolver *resolver, EpSymStats *stats, EpSession **ret) {
        _cleanup_(ep_session_freep) EpSession *s = NULL;
        int r;

        s = calloc(1, sizeof(EpSession));
        if (!s)
                return -ENOMEM;
        s->resolver = resolver;
        s->stats = stats;
        ep_writer_init_dynamic(&s->w);

        r = ep_ring_create("ep-sym-requests", EP_SESSION_RING_SIZE, &s->req);
        if (r < 0)
                return r;
        r = ep_ring_create("ep-sym-responses", EP_SESSION_RING_SIZE, &s->resp);
        if (r < 0)
                return r;

        if (event) {
                s->event = sd_event_ref(event);
                r = sd_event_add_io(event, &s->io, ep_ring_eventfd(s->req), EPOLLIN, on_request, s);
                if (r < 0)
                        return r;
                r = sd_event_add_defer(event, &s->defer, on_defer, s);
                if (r >= 0)
                        r = sd_event_source_set_enabled(s->defer, SD_EVENT_OFF);
                if (r < 0)
                        return r;
                r = sd_event_add_time_relative(event, &s->retry, CLOCK_MONOTONIC, EP_SESSION_RETRY_USEC, 0,
                                               on_retry, s);
                if (r >= 0)
                        r = sd_event_source_set_enabled(s->retry, SD_EVENT_OFF);
                if (r < 0)
                        return r;
        }

        *ret = TAKE_PTR(s);
        return 0;
}
