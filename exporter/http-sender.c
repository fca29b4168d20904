/* SPDX-License-Identifier: MIT */
#include <curl/curl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "http-sender.h"
#include "log.h"

typedef struct HttpRequest HttpRequest;
typedef struct HttpSocket HttpSocket;

struct HttpRequest {
        HttpSender *sender;
        HttpRequest *prev, *next;
        CURL *easy;
        struct curl_slist *headers;
        void *body;
        size_t body_size;
        char *response;
        size_t response_size;
        char errbuf[CURL_ERROR_SIZE];
        http_done_t done;
        void *userdata;
};

/* One socket curl asked us to watch. */
struct HttpSocket {
        HttpSender *sender;
        HttpSocket *prev, *next;
        curl_socket_t fd;
        sd_event_source *source;
};

struct HttpSender {
        sd_event *event;
        CURLM *multi;
        sd_event_source *timer;
        char *url, *user_agent;
        uint64_t timeout_ms;
        unsigned max_in_flight, in_flight;
        HttpRequest *requests;
        HttpSocket *sockets;
};

#define LIST_LINK(head, x)                      \
        do {                                    \
                (x)->prev = NULL;               \
                (x)->next = (head);             \
                if (head)                       \
                        (head)->prev = (x);     \
                (head) = (x);                   \
        } while (0)
#define LIST_UNLINK(head, x)                            \
        do {                                            \
                if ((x)->prev)                          \
                        (x)->prev->next = (x)->next;    \
                else                                    \
                        (head) = (x)->next;             \
                if ((x)->next)                          \
                        (x)->next->prev = (x)->prev;    \
                (x)->prev = (x)->next = NULL;           \
        } while (0)

static void check_done(HttpSender *s);

static void socket_free(HttpSocket *k) {
        LIST_UNLINK(k->sender->sockets, k);
        sd_event_source_disable_unref(k->source);
        free(k);
}

static int on_socket_io(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        HttpSocket *k = userdata;
        HttpSender *s = k->sender;
        int action = 0, running;

        if (revents & (EPOLLIN | EPOLLHUP))
                action |= CURL_CSELECT_IN;
        if (revents & EPOLLOUT)
                action |= CURL_CSELECT_OUT;
        if (revents & EPOLLERR)
                action |= CURL_CSELECT_ERR;
        /* k may be freed inside (CURL_POLL_REMOVE): use only s from here on. */
        (void) curl_multi_socket_action(s->multi, fd, action, &running);
        check_done(s);
        return 0;
}

static int curl_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
        HttpSender *s = userp;
        HttpSocket *k = socketp;
        uint32_t events = 0;
        int r;

        if (what == CURL_POLL_REMOVE) {
                if (k) {
                        (void) curl_multi_assign(s->multi, fd, NULL);
                        socket_free(k);
                }
                return 0;
        }
        if (what & CURL_POLL_IN)
                events |= EPOLLIN;
        if (what & CURL_POLL_OUT)
                events |= EPOLLOUT;

        if (!k) {
                k = calloc(1, sizeof *k);
                if (!k)
                        return -1;
                k->sender = s;
                k->fd = fd;
                r = sd_event_add_io(s->event, &k->source, fd, events, on_socket_io, k);
                if (r < 0) {
                        free(k);
                        log_debug_errno(r, "Cannot watch curl socket %d: %m", fd);
                        return -1;
                }
                LIST_LINK(s->sockets, k);
                (void) curl_multi_assign(s->multi, fd, k);
                return 0;
        }
        r = sd_event_source_set_io_events(k->source, events);
        return r < 0 ? -1 : 0;
}

static int on_timer(sd_event_source *src, uint64_t usec, void *userdata) {
        HttpSender *s = userdata;
        int running;

        (void) curl_multi_socket_action(s->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        check_done(s);
        return 0;
}

static int curl_timer_cb(CURLM *multi, long timeout_ms, void *userp) {
        HttpSender *s = userp;
        uint64_t now, when;
        int r;

        if (timeout_ms < 0) {
                if (s->timer)
                        (void) sd_event_source_set_enabled(s->timer, SD_EVENT_OFF);
                return 0;
        }
        r = sd_event_now(s->event, CLOCK_MONOTONIC, &now);
        if (r < 0)
                return -1;
        /* 0 means "as soon as possible", but never from inside this callback: the timer
         * fires on the next loop iteration. */
        when = now + (uint64_t) timeout_ms * 1000;
        if (!s->timer) {
                r = sd_event_add_time(s->event, &s->timer, CLOCK_MONOTONIC, when, 0, on_timer, s);
                return r < 0 ? -1 : 0;
        }
        r = sd_event_source_set_time(s->timer, when);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->timer, SD_EVENT_ONESHOT);
        return r < 0 ? -1 : 0;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *userdata) {
        HttpRequest *req = userdata;
        size_t n = size * nmemb, take;
        char *p;

        take = MIN(n, (size_t) HTTP_MAX_RESPONSE - req->response_size);
        if (take == 0)
                return n; /* keep reading, but do not keep more */
        p = realloc(req->response, req->response_size + take + 1);
        if (!p)
                return 0; /* aborts the transfer */
        memcpy(p + req->response_size, data, take);
        req->response = p;
        req->response_size += take;
        p[req->response_size] = 0;
        return n;
}

static void request_free(HttpRequest *req) {
        if (!req)
                return;
        if (req->easy)
                curl_easy_cleanup(req->easy);
        curl_slist_free_all(req->headers);
        free(req->body);
        free(req->response);
        free(req);
}

static int curl_error_to_errno(CURLcode code) {
        switch (code) {
        case CURLE_OPERATION_TIMEDOUT:
                return -ETIMEDOUT;
        case CURLE_COULDNT_CONNECT:
                return -ECONNREFUSED;
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
                return -EHOSTUNREACH;
        case CURLE_OUT_OF_MEMORY:
                return -ENOMEM;
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_URL_MALFORMAT:
                return -EINVAL;
        default:
                return -EIO;
        }
}

static void finish(HttpSender *s, HttpRequest *req, CURLcode code) {
        HttpResult res = { .request_size = req->body_size, .retry_after_s = -1 };
        curl_off_t retry_after = -1;

        if (code == CURLE_OK) {
                (void) curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &res.status);
                /* curl 7.88 can report a past HTTP-date as negative: clamp. */
                if (curl_easy_getinfo(req->easy, CURLINFO_RETRY_AFTER, &retry_after) == CURLE_OK &&
                    retry_after >= 0 && (res.status == 429 || res.status == 503))
                        res.retry_after_s = retry_after;
                res.body = req->response;
                res.body_size = req->response_size;
        } else {
                res.error = curl_error_to_errno(code);
                res.message = req->errbuf[0] ? req->errbuf : curl_easy_strerror(code);
        }
        (void) curl_multi_remove_handle(s->multi, req->easy);
        LIST_UNLINK(s->requests, req);
        s->in_flight--;
        if (req->done)
                req->done(s, &res, req->userdata);
        request_free(req);
}

static void check_done(HttpSender *s) {
        CURLMsg *msg;
        int left;

        while ((msg = curl_multi_info_read(s->multi, &left))) {
                HttpRequest *req = NULL;
                CURLcode code;

                if (msg->msg != CURLMSG_DONE)
                        continue;
                code = msg->data.result;
                (void) curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &req);
                if (req)
                        finish(s, req, code);
        }
}

int http_sender_new(sd_event *event, const HttpSenderOptions *opts, HttpSender **ret) {
        _cleanup_(http_sender_freep) HttpSender *s = NULL;

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->event = sd_event_ref(event);
        s->url = strdup(opts->url);
        s->user_agent = strdup(opts->user_agent ?: "ebpf-profiler");
        s->timeout_ms = opts->timeout_ms ?: 10000;
        s->max_in_flight = opts->max_in_flight ?: 4;
        if (!s->url || !s->user_agent)
                return -ENOMEM;
        s->multi = curl_multi_init();
        if (!s->multi)
                return -ENOMEM;
        if (curl_multi_setopt(s->multi, CURLMOPT_SOCKETFUNCTION, curl_socket_cb) != CURLM_OK ||
            curl_multi_setopt(s->multi, CURLMOPT_SOCKETDATA, s) != CURLM_OK ||
            curl_multi_setopt(s->multi, CURLMOPT_TIMERFUNCTION, curl_timer_cb) != CURLM_OK ||
            curl_multi_setopt(s->multi, CURLMOPT_TIMERDATA, s) != CURLM_OK)
                return -EIO;
        *ret = TAKE_PTR(s);
        return 0;
}

HttpSender *http_sender_free(HttpSender *s) {
        if (!s)
                return NULL;
        while (s->requests) {
                HttpRequest *req = s->requests;
                (void) curl_multi_remove_handle(s->multi, req->easy);
                LIST_UNLINK(s->requests, req);
                request_free(req);
        }
        if (s->multi)
                curl_multi_cleanup(s->multi);
        while (s->sockets)
                socket_free(s->sockets);
        sd_event_source_disable_unref(s->timer);
        sd_event_unref(s->event);
        free(s->url);
        free(s->user_agent);
        free(s);
        return NULL;
}

unsigned http_sender_in_flight(const HttpSender *s) {
        return s->in_flight;
}

int http_sender_post(HttpSender *s, void *body, size_t size, const char *content_type,
                     const char *content_encoding, http_done_t done, void *userdata) {
        HttpRequest *req;
        char header[256];
        bool ok = true;

        if (s->in_flight >= s->max_in_flight) {
                free(body);
                return -EBUSY;
        }
        req = calloc(1, sizeof *req);
        if (!req) {
                free(body);
                return -ENOMEM;
        }
        req->sender = s;
        req->body = body;
        req->body_size = size;
        req->done = done;
        req->userdata = userdata;
        req->easy = curl_easy_init();
        if (!req->easy) {
                request_free(req);
                return -ENOMEM;
        }

#define H(...)                                                                          \
        do {                                                                            \
                struct curl_slist *_l;                                                  \
                snprintf(header, sizeof header, __VA_ARGS__);                           \
                _l = curl_slist_append(req->headers, header);                           \
                if (_l)                                                                 \
                        req->headers = _l;                                              \
                else                                                                    \
                        ok = false;                                                     \
        } while (0)
        H("Content-Type: %s", content_type);
        if (content_encoding)
                H("Content-Encoding: %s", content_encoding);
        H("Expect:"); /* no 100-continue round trip */
#undef H

#define SET(opt, val) ok = ok && curl_easy_setopt(req->easy, (opt), (val)) == CURLE_OK
        SET(CURLOPT_URL, s->url);
        SET(CURLOPT_PROTOCOLS_STR, "http,https");
        SET(CURLOPT_POST, 1L);
        SET(CURLOPT_POSTFIELDS, req->body);
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) size);
        SET(CURLOPT_HTTPHEADER, req->headers);
        SET(CURLOPT_USERAGENT, s->user_agent);
        SET(CURLOPT_ACCEPT_ENCODING, ""); /* curl decodes a compressed response */
        SET(CURLOPT_TIMEOUT_MS, (long) s->timeout_ms);
        SET(CURLOPT_CONNECTTIMEOUT_MS, (long) MIN(s->timeout_ms, (uint64_t) 5000));
        SET(CURLOPT_NOSIGNAL, 1L);
        SET(CURLOPT_WRITEFUNCTION, on_write);
        SET(CURLOPT_WRITEDATA, req);
        SET(CURLOPT_ERRORBUFFER, req->errbuf);
        SET(CURLOPT_PRIVATE, req);
#undef SET
        if (!ok) {
                request_free(req);
                return -ENOMEM;
        }
        if (curl_multi_add_handle(s->multi, req->easy) != CURLM_OK) {
                request_free(req);
                return -EIO;
        }
        LIST_LINK(s->requests, req);
        s->in_flight++;
        return 0;
}
