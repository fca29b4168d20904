/* SPDX-License-Identifier: MIT */
#include <assert.h>
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "clock.h"
#include "daemon.h"
#include "dwarf-lines.h"
#include "log.h"
#include "session.h"
#include "shm-ring.h"
#include "wire-buf.h"
#include "wire-sym.h"
#include "wire.h"

/* A request taken out of the ring, to be answered with the others of its file (fill_batch). */
typedef struct Request {
        uint8_t file_id[EP_FILE_ID_SIZE];
        uint32_t seq; /* order of arrival: kept within a file */
        uint16_t type;
        uint32_t len;
        uint8_t *data;
} Request;

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
        sd_event_source *io, *defer, *retry, *trim;

        Pending *backlog_head, *backlog_tail;
        size_t backlog_n;

        Request *batch; /* EP_SESSION_BATCH slots */
        size_t batch_n, batch_next;

        EpWriter w;
        uint64_t budget_usec;
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

static void batch_clear(EpSession *s) {
        for (size_t i = s->batch_next; i < s->batch_n; i++)
                free(s->batch[i].data);
        s->batch_n = s->batch_next = 0;
}

EpSession *ep_session_free(EpSession *s) {
        if (!s)
                return NULL;
        if (s->backlog_n > 0 && s->stats)
                s->stats->response_drops += s->backlog_n; /* the client that wanted them is gone */
        backlog_clear(s);
        batch_clear(s);
        free(s->batch);
        sd_event_source_disable_unref(s->io);
        sd_event_source_disable_unref(s->defer);
        sd_event_source_disable_unref(s->retry);
        sd_event_source_disable_unref(s->trim);
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
        if (sizeof(EpRingRecord) + ALIGN8((size_t) len) > ep_ring_room(s->resp))
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
                /* Out of memory: still answer (a passing failure, asked again later), so the
                 * client does not wait forever. */
                EpSymResult none = { .status = EP_SYM_RETRY, .module = (char *) "" };
                if (s->stats) {
                        s->stats->retry_answers++;
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
                info = (EpFileInfo) { .status = EP_SYM_RETRY };
                if (s->stats) {
                        s->stats->retry_answers++;
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

/* Once all is answered, EP_SESSION_TRIM_USEC later (at most that often while requests keep
 * coming): the open DWARF handles keep what they read of their files mapped, a few MB for each
 * large unit, which would otherwise count in the symbolizer's memory until the handle closes.
 * An idle check that is due later is brought forward. */
static void schedule_trim(EpSession *s) {
        uint64_t due, now;
        int enabled = SD_EVENT_OFF;

        if (!s->trim)
                return;
        if (sd_event_source_get_enabled(s->trim, &enabled) >= 0 && enabled != SD_EVENT_OFF &&
            sd_event_source_get_time(s->trim, &due) >= 0 &&
            sd_event_now(sd_event_source_get_event(s->trim), CLOCK_MONOTONIC, &now) >= 0 &&
            due <= now + EP_SESSION_TRIM_USEC)
                return;
        schedule(s->trim, EP_SESSION_TRIM_USEC);
}

/* Drops the handles' pages, then closes the handles no lookup needed for a while: a burst of
 * new code (a deploy, a build) opens the DWARF of many files, inflated sections and unit
 * indexes, megabytes each, which a steady state does not use again. While handles stay open
 * this comes back every EP_SESSION_IDLE_CHECK_USEC. */
static int on_trim(sd_event_source *src, uint64_t usec, void *userdata) {
        EpSession *s = userdata;
        unsigned before = ep_dwarf_open_handles(), open;

        ep_dwarf_drop_pages();
        open = ep_dwarf_close_idle(ep_clock_ns(CLOCK_MONOTONIC), EP_SESSION_DWARF_IDLE_USEC * NSEC_PER_USEC);
        if (open < before)
                (void) malloc_trim(0); /* what they freed in the middle of the heap */
        if (open > 0)
                schedule(s->trim, EP_SESSION_IDLE_CHECK_USEC);
        return 0;
}

void ep_session_set_budget(EpSession *s, uint64_t usec) {
        s->budget_usec = usec;
}

/* The file a request is about (zeros: none, or not a request we can read; handle_*() says
 * which when it answers). */
static void request_file_id(uint16_t type, const void *payload, size_t len, uint8_t ret[EP_FILE_ID_SIZE]) {
        EpSymRequestMsg msg;
        EpReader rd;

        memset(ret, 0, EP_FILE_ID_SIZE);
        ep_reader_init(&rd, payload, len);
        if (type == EP_MSG_SYM_REQUEST) {
                if (ep_get_sym_request(&rd, EP_SESSION_PATH_MAX, &msg))
                        memcpy(ret, msg.file_id, EP_FILE_ID_SIZE);
        } else if (type == EP_MSG_SYM_FILE_REQUEST) {
                (void) ep_get_u64(&rd); /* cookie, then the file id: handle_file_request() */
                ep_get_bytes(&rd, ret, EP_FILE_ID_SIZE);
        }
}

static int request_compare(const void *a, const void *b) {
        const Request *x = a, *y = b;
        int c = memcmp(x->file_id, y->file_id, EP_FILE_ID_SIZE);

        return c != 0 ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

/* Takes up to EP_SESSION_BATCH requests out of the ring, ordered by file. The resolver keeps
 * few files open (resolver.h): answered in arrival order, the requests of a stack alternate
 * between libc, the interpreter and the program, and each alternation can close and reopen a
 * file (its symbol table sorted again, its compressed DWARF inflated again). In file order a
 * batch opens each file once, so the more requests wait, the less each costs. Returns the
 * number taken, 0 when the ring is empty, -EBADMSG when it is corrupt. */
static int fill_batch(EpSession *s) {
        size_t n = 0;

        assert(s->batch_next == s->batch_n);
        s->batch_n = s->batch_next = 0;
        while (n < EP_SESSION_BATCH) {
                EpRingRecord h;
                const void *payload;
                int k = ep_ring_peek(s->req, &h, &payload);

                if (k == 0)
                        break;
                if (k < 0) {
                        session_kill(s, k);
                        break;
                }
                Request *q = &s->batch[n];
                q->data = malloc(MAX(h.len, 1u));
                if (!q->data)
                        break; /* out of memory: the record stays in the ring for the next turn */
                memcpy(q->data, payload, h.len);
                q->type = h.type;
                q->len = h.len;
                q->seq = (uint32_t) n;
                request_file_id(h.type, payload, h.len, q->file_id);
                ep_ring_consume(s->req);
                n++;
        }
        if (n > 1)
                qsort(s->batch, n, sizeof(Request), request_compare);
        s->batch_n = n;
        return n > 0 || !s->dead ? (int) n : -EBADMSG;
}

static void answer(EpSession *s, const Request *q, unsigned *pushed) {
        uint16_t type = 0;

        ep_writer_reset(&s->w);
        switch (q->type) {
        case EP_MSG_SYM_REQUEST:
                type = handle_sym_request(s, q->data, q->len);
                break;
        case EP_MSG_SYM_FILE_REQUEST:
                type = handle_file_request(s, q->data, q->len);
                break;
        default:
                bad_request(s, q->type, "unknown message type");
                break;
        }
        if (type == 0)
                return;
        if (s->w.overflow)
                drop(s, "out of memory");
        else
                deliver(s, type, s->w.data, s->w.size, pushed);
}

int ep_session_process(EpSession *s) {
        uint64_t deadline = ep_now_ns(CLOCK_MONOTONIC) + s->budget_usec * NSEC_PER_USEC;
        unsigned pushed = 0;
        bool more = true;
        int n = 0;

        if (s->dead)
                return -EBADMSG;

        flush_backlog(s, &pushed);

        while (n < EP_SESSION_BATCH && s->backlog_n < EP_SESSION_BACKLOG) {
                if (s->batch_next == s->batch_n && fill_batch(s) <= 0) {
                        more = false;
                        break;
                }
                Request *q = &s->batch[s->batch_next++];
                answer(s, q, &pushed);
                free(q->data);
                q->data = NULL;
                n++;
                if (ep_now_ns(CLOCK_MONOTONIC) >= deadline)
                        break; /* the rest wait in the batch (and the ring) for the next turn */
        }

        if (pushed > 0)
                (void) ep_ring_notify(s->resp);
        if (s->backlog_n > 0)
                schedule(s->retry, EP_SESSION_RETRY_USEC);
        else if (more)
                schedule(s->defer, 0); /* more may be queued: continue after other events */
        else
                schedule_trim(s);

        return s->dead ? -EBADMSG : n;
}

void ep_session_file_changed(EpSession *s, const uint8_t file_id[EP_FILE_ID_SIZE]) {
        unsigned pushed = 0;

        if (s->dead)
                return;
        /* Behind the answers still in the backlog: those were computed before the change, and
         * the client asks again once it has applied them. */
        deliver(s, EP_MSG_SYM_FILE_CHANGED, file_id, EP_FILE_ID_SIZE, &pushed);
        if (pushed > 0)
                (void) ep_ring_notify(s->resp);
        if (s->backlog_n > 0)
                schedule(s->retry, EP_SESSION_RETRY_USEC);
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

/* A timer of the session's rank, off until schedule()d. */
static int add_timer(EpSession *s, sd_event_source **ret, uint64_t usec, sd_event_time_handler_t handler) {
        int r = sd_event_add_time_relative(s->event, ret, CLOCK_MONOTONIC, usec, 0, handler, s);

        if (r >= 0)
                r = sd_event_source_set_priority(*ret, EP_SESSION_PRIORITY);
        if (r >= 0)
                r = sd_event_source_set_enabled(*ret, SD_EVENT_OFF);
        return r;
}

int ep_session_new(sd_event *event, EpResolver *resolver, EpSymStats *stats, EpSession **ret) {
        _cleanup_(ep_session_freep) EpSession *s = NULL;
        int r;

        s = calloc(1, sizeof(EpSession));
        if (!s)
                return -ENOMEM;
        s->resolver = resolver;
        s->stats = stats;
        s->budget_usec = EP_SESSION_BUDGET_USEC;
        ep_writer_init_dynamic(&s->w);
        s->batch = calloc(EP_SESSION_BATCH, sizeof(Request));
        if (!s->batch)
                return -ENOMEM;

        r = ep_ring_create("ep-sym-requests", EP_SESSION_RING_SIZE, &s->req);
        if (r < 0)
                return r;
        r = ep_ring_create("ep-sym-responses", EP_SESSION_RING_SIZE, &s->resp);
        if (r < 0)
                return r;

        if (event) {
                s->event = sd_event_ref(event);
                r = sd_event_add_io(event, &s->io, ep_ring_eventfd(s->req), EPOLLIN, on_request, s);
                if (r >= 0)
                        r = sd_event_source_set_priority(s->io, EP_SESSION_PRIORITY);
                if (r < 0)
                        return r;
                r = sd_event_add_defer(event, &s->defer, on_defer, s);
                if (r >= 0)
                        r = sd_event_source_set_priority(s->defer, EP_SESSION_PRIORITY);
                if (r >= 0)
                        r = sd_event_source_set_enabled(s->defer, SD_EVENT_OFF);
                if (r < 0)
                        return r;
                r = add_timer(s, &s->retry, EP_SESSION_RETRY_USEC, on_retry);
                if (r < 0)
                        return r;
                r = add_timer(s, &s->trim, EP_SESSION_TRIM_USEC, on_trim);
                if (r < 0)
                        return r;
        }

        *ret = TAKE_PTR(s);
        return 0;
}
