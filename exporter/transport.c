/* SPDX-License-Identifier: MIT */
#include <curl/curl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <time.h>

#include "gzip.h"
#include "log.h"
#include "transport-util.h"
#include "transport.h"

#define MAX_RESPONSE (4u << 20) /* OTLP: clients should not parse longer responses */
#define GRPC_EXPORT_PATH "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"
#define USER_AGENT "ebpf-profiler-exporter/" EP_VERSION

static void *mfree(void *p) {
        free(p);
        return NULL;
}

typedef struct OtlpRequest OtlpRequest;
typedef struct OtlpSocket OtlpSocket;

struct OtlpRequest {
        OtlpTransport *transport;
        OtlpRequest *prev, *next;
        CURL *easy;
        void *wire;              /* compressed and/or framed body; NULL: the caller's body */
        size_t wire_size;
        char *response;
        size_t response_size;

        /* What the response headers and trailers said; reset by each status line. */
        int64_t retry_after_ms;  /* Retry-After */
        int64_t pushback_ms;     /* grpc-retry-pushback-ms */
        int grpc_status;         /* -1: none */
        char *grpc_message;      /* percent-decoded */
        char *grpc_details;      /* grpc-status-details-bin, still base64 */
        bool grpc_gzip;          /* grpc-encoding: gzip */

        char *message;           /* OtlpResult.message when we built it */
        void *inflated;          /* decompressed gRPC response */
        char errbuf[CURL_ERROR_SIZE];
        otlp_done_t done;
        void *userdata;
};

/* One socket curl asked us to watch. */
struct OtlpSocket {
        OtlpTransport *transport;
        OtlpSocket *prev, *next;
        sd_event_source *source;
};

struct OtlpTransport {
        sd_event *event;
        CURLM *multi;
        sd_event_source *timer;
        OtlpProtocol protocol;
        OtlpCompression compression;
        uint64_t timeout_ms;
        char *url;
        char *ca_file, *client_cert, *client_key;
        bool h2c;                       /* gRPC over cleartext: HTTP/2 prior knowledge */
        struct curl_slist *headers;     /* shared by every request, built once */
        unsigned max_in_flight, in_flight;
        OtlpRequest *requests;
        OtlpSocket *sockets;
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

const char *otlp_protocol_name(OtlpProtocol p) {
        return p == OTLP_PROTOCOL_GRPC ? "grpc" : "http/protobuf";
}

/* ---- curl on sd-event ---- */

static void check_done(OtlpTransport *t);

static void socket_free(OtlpSocket *k) {
        LIST_UNLINK(k->transport->sockets, k);
        sd_event_source_disable_unref(k->source);
        free(k);
}

static int on_socket_io(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        OtlpSocket *k = userdata;
        OtlpTransport *t = k->transport;
        int action = 0, running;

        if (revents & (EPOLLIN | EPOLLHUP))
                action |= CURL_CSELECT_IN;
        if (revents & EPOLLOUT)
                action |= CURL_CSELECT_OUT;
        if (revents & EPOLLERR)
                action |= CURL_CSELECT_ERR;
        /* k may be freed inside (CURL_POLL_REMOVE): use only t from here on. */
        (void) curl_multi_socket_action(t->multi, fd, action, &running);
        check_done(t);
        return 0;
}

static int curl_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
        OtlpTransport *t = userp;
        OtlpSocket *k = socketp;
        uint32_t events = 0;
        int r;

        if (what == CURL_POLL_REMOVE) {
                if (k) {
                        (void) curl_multi_assign(t->multi, fd, NULL);
                        socket_free(k);
                }
                return 0;
        }
        if (what & CURL_POLL_IN)
                events |= EPOLLIN;
        if (what & CURL_POLL_OUT)
                events |= EPOLLOUT;
        if (k)
                return sd_event_source_set_io_events(k->source, events) < 0 ? -1 : 0;

        k = calloc(1, sizeof *k);
        if (!k)
                return -1;
        k->transport = t;
        r = sd_event_add_io(t->event, &k->source, fd, events, on_socket_io, k);
        if (r < 0) {
                free(k);
                log_debug_errno(r, "Cannot watch curl socket %d: %m", fd);
                return -1;
        }
        LIST_LINK(t->sockets, k);
        (void) curl_multi_assign(t->multi, fd, k);
        return 0;
}

static int on_timer(sd_event_source *src, uint64_t usec, void *userdata) {
        OtlpTransport *t = userdata;
        int running;

        (void) curl_multi_socket_action(t->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        check_done(t);
        return 0;
}

static int curl_timer_cb(CURLM *multi, long timeout_ms, void *userp) {
        OtlpTransport *t = userp;
        uint64_t now, when;
        int r;

        if (timeout_ms < 0) {
                if (t->timer)
                        (void) sd_event_source_set_enabled(t->timer, SD_EVENT_OFF);
                return 0;
        }
        r = sd_event_now(t->event, CLOCK_MONOTONIC, &now);
        if (r < 0)
                return -1;
        /* 0 means "as soon as possible", but never from inside this callback: the timer
         * fires on the next loop iteration (which is also why done never runs from send). */
        when = now + (uint64_t) timeout_ms * 1000;
        if (!t->timer) {
                r = sd_event_add_time(t->event, &t->timer, CLOCK_MONOTONIC, when, 0, on_timer, t);
                return r < 0 ? -1 : 0;
        }
        r = sd_event_source_set_time(t->timer, when);
        if (r >= 0)
                r = sd_event_source_set_enabled(t->timer, SD_EVENT_ONESHOT);
        return r < 0 ? -1 : 0;
}

/* ---- one request ---- */

static void request_reset_headers(OtlpRequest *req) {
        req->retry_after_ms = -1;
        req->pushback_ms = -1;
        req->grpc_status = -1;
        req->grpc_gzip = false;
        req->grpc_message = mfree(req->grpc_message);
        req->grpc_details = mfree(req->grpc_details);
}

static void request_free(OtlpRequest *req) {
        if (!req)
                return;
        if (req->easy)
                curl_easy_cleanup(req->easy);
        request_reset_headers(req);
        free(req->wire);
        free(req->response);
        free(req->message);
        free(req->inflated);
        free(req);
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *userdata) {
        OtlpRequest *req = userdata;
        size_t n = size * nmemb, take;
        char *p;

        take = MIN(n, (size_t) MAX_RESPONSE - req->response_size);
        if (take == 0)
                return n; /* keep reading (the trailers come after), but do not keep more */
        p = realloc(req->response, req->response_size + take + 1);
        if (!p)
                return 0; /* aborts the transfer */
        memcpy(p + req->response_size, data, take);
        req->response = p;
        req->response_size += take;
        p[req->response_size] = 0;
        return n;
}

static char *strndup_trimmed(const char *s, size_t n) {
        while (n > 0 && strchr(" \t\r\n", s[n - 1]))
                n--;
        while (n > 0 && (*s == ' ' || *s == '\t'))
                s++, n--;
        return strndup(s, n);
}

static bool header_is(const char *line, size_t n, const char *name, const char **ret_value, size_t *ret_n) {
        size_t k = strlen(name);

        if (n <= k || line[k] != ':' || strncasecmp(line, name, k) != 0)
                return false;
        *ret_value = line + k + 1;
        *ret_n = n - k - 1;
        return true;
}

/* Headers and, for HTTP/2, the trailers after the body: curl hands both over line by line. */
static size_t on_header(char *line, size_t size, size_t nmemb, void *userdata) {
        OtlpRequest *req = userdata;
        size_t n = size * nmemb, vn;
        _cleanup_free_ char *v = NULL;
        const char *value;

        if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) {
                request_reset_headers(req); /* a new response (after 100 Continue, say) */
                return n;
        }
        if (header_is(line, n, "retry-after", &value, &vn)) {
                v = strndup_trimmed(value, vn);
                if (v && parse_retry_after(v, time(NULL), &req->retry_after_ms) < 0)
                        req->retry_after_ms = -1;
        } else if (header_is(line, n, "grpc-status", &value, &vn)) {
                v = strndup_trimmed(value, vn);
                if (v && grpc_parse_status(v, &req->grpc_status) < 0)
                        req->grpc_status = GRPC_UNKNOWN; /* present but garbled: not a success */
        } else if (header_is(line, n, "grpc-message", &value, &vn)) {
                v = strndup_trimmed(value, vn);
                free(req->grpc_message);
                req->grpc_message = NULL;
                if (v)
                        (void) percent_decode(v, strlen(v), &req->grpc_message);
        } else if (header_is(line, n, "grpc-status-details-bin", &value, &vn)) {
                free(req->grpc_details);
                req->grpc_details = strndup_trimmed(value, vn);
        } else if (header_is(line, n, "grpc-retry-pushback-ms", &value, &vn)) {
                int ms;
                v = strndup_trimmed(value, vn);
                /* Negative means "do not retry": treat like absent, the code decides. */
                req->pushback_ms = v && grpc_parse_status(v, &ms) >= 0 ? ms : -1;
        } else if (header_is(line, n, "grpc-encoding", &value, &vn)) {
                v = strndup_trimmed(value, vn);
                req->grpc_gzip = v && strcasecmp(v, "gzip") == 0;
        }
        return n;
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
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CACERT_BADFILE:
                return -EPROTO;
        case CURLE_GOT_NOTHING:
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
                return -ECONNRESET;
        default:
                return -EIO;
        }
}

/* OTLP/HTTP: the body is the response; a failure's body may be a google.rpc.Status. */
static void http_result(OtlpRequest *req, OtlpResult *res) {
        res->response = req->response;
        res->response_size = req->response_size;
        res->retry_after_ms = req->retry_after_ms;
        if (res->http_status >= 200 && res->http_status < 300)
                return;
        if (req->response_size > 0)
                (void) rpc_status_decode(req->response, req->response_size, &req->message, NULL);
        if (req->message && !*req->message)
                req->message = mfree(req->message);
        res->message = req->message;
}

/* The ExportProfilesServiceResponse inside a gRPC body. */
static void grpc_response(OtlpRequest *req, OtlpResult *res) {
        const void *msg;
        size_t size;
        bool compressed;
        int r;

        r = grpc_deframe(req->response, req->response_size, &msg, &size, &compressed);
        if (r < 0) {
                if (r != -ENODATA)
                        log_debug("gRPC response is not a length-prefixed message, ignored");
                return;
        }
        if (compressed) {
                if (!req->grpc_gzip) {
                        log_debug("gRPC response compressed with an encoding we did not accept, ignored");
                        return;
                }
                r = exp_gunzip(msg, size, MAX_RESPONSE, &req->inflated, &size);
                if (r < 0) {
                        log_debug_errno(r, "Cannot decompress the gRPC response, ignored: %m");
                        return;
                }
                msg = req->inflated;
        }
        res->response = msg;
        res->response_size = size;
}

static void grpc_result(OtlpRequest *req, OtlpResult *res) {
        int64_t retry_ms = -1;
        long version = 0;

        /* Over TLS the server may pick HTTP/1.1 through ALPN: gRPC cannot work then. */
        (void) curl_easy_getinfo(req->easy, CURLINFO_HTTP_VERSION, &version);
        if (version != CURL_HTTP_VERSION_2_0) {
                res->error = -EPROTONOSUPPORT;
                res->message = "the server did not speak HTTP/2 (needed for gRPC)";
                return;
        }
        if (res->http_status != 200) {
                /* Not a gRPC answer (a proxy, say): the gRPC HTTP status mapping. */
                res->grpc_status = grpc_status_from_http(res->http_status);
                res->retry_after_ms = req->retry_after_ms;
                res->message = req->grpc_message;
                return;
        }
        if (req->grpc_status < 0) {
                res->error = -EPROTO;
                res->message = "the gRPC response has no grpc-status";
                return;
        }
        res->grpc_status = req->grpc_status;
        if (req->grpc_status == GRPC_OK) {
                grpc_response(req, res);
                return;
        }
        if (req->grpc_details) {
                _cleanup_free_ void *bin = NULL;
                size_t n;
                if (base64_decode(req->grpc_details, strlen(req->grpc_details), &bin, &n) >= 0)
                        (void) rpc_status_decode(bin, n, req->grpc_message ? NULL : &req->message, &retry_ms);
        }
        res->retry_after_ms = retry_ms >= 0 ? retry_ms : req->pushback_ms;
        res->message = req->grpc_message ?: req->message;
}

static void finish(OtlpTransport *t, OtlpRequest *req, CURLcode code) {
        OtlpResult res = {
                .grpc_status = -1,
                .retry_after_ms = -1,
                .request_size = req->wire_size,
        };

        if (code != CURLE_OK) {
                res.error = curl_error_to_errno(code);
                res.message = req->errbuf[0] ? req->errbuf : curl_easy_strerror(code);
        } else {
                (void) curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &res.http_status);
                if (t->protocol == OTLP_PROTOCOL_GRPC)
                        grpc_result(req, &res);
                else
                        http_result(req, &res);
        }
        (void) curl_multi_remove_handle(t->multi, req->easy);
        LIST_UNLINK(t->requests, req);
        t->in_flight--;
        if (req->done)
                req->done(t, &res, req->userdata);
        request_free(req);
}

static void check_done(OtlpTransport *t) {
        CURLMsg *msg;
        int left;

        while ((msg = curl_multi_info_read(t->multi, &left))) {
                OtlpRequest *req = NULL;

                if (msg->msg != CURLMSG_DONE)
                        continue;
                CURLcode code = msg->data.result;
                (void) curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &req);
                if (req)
                        finish(t, req, code);
        }
}

/* ---- setup ---- */

static int append_header(struct curl_slist **list, const char *fmt, ...) _printf_(2, 3);
static int append_header(struct curl_slist **list, const char *fmt, ...) {
        _cleanup_free_ char *s = NULL;
        struct curl_slist *l;
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        l = curl_slist_append(*list, s);
        if (!l)
                return -ENOMEM;
        *list = l;
        return 0;
}

static int build_headers(OtlpTransport *t, char *const *user) {
        bool gzip = t->compression == OTLP_COMPRESSION_GZIP;
        char timeout[12];
        int r = 0;

        if (t->protocol == OTLP_PROTOCOL_GRPC) {
                grpc_timeout_format(t->timeout_ms, timeout);
                r = append_header(&t->headers, "Content-Type: application/grpc");
                if (r >= 0)
                        r = append_header(&t->headers, "TE: trailers");
                if (r >= 0 && gzip)
                        r = append_header(&t->headers, "grpc-encoding: gzip");
                if (r >= 0)
                        r = append_header(&t->headers, "grpc-accept-encoding: gzip");
                if (r >= 0)
                        r = append_header(&t->headers, "grpc-timeout: %s", timeout);
        } else {
                r = append_header(&t->headers, "Content-Type: application/x-protobuf");
                if (r >= 0 && gzip)
                        r = append_header(&t->headers, "Content-Encoding: gzip");
        }
        if (r >= 0)
                r = append_header(&t->headers, "Expect:"); /* no 100-continue round trip */
        for (char *const *h = user; r >= 0 && h && *h; h++)
                r = append_header(&t->headers, "%s", *h);
        return r;
}

/* gRPC: the service path below the endpoint; an endpoint without a scheme is https unless
 * insecure (the OTel convention for gRPC endpoints like "collector:4317"). */
static int build_url(OtlpTransport *t, const OtlpConfig *c) {
        const char *e = c->endpoint;
        size_t n = strlen(e);
        bool scheme = startswith(e, "http://") || startswith(e, "https://");

        if (c->protocol != OTLP_PROTOCOL_GRPC) {
                t->url = strdup(e);
                return t->url ? 0 : -ENOMEM;
        }
        while (n > 0 && e[n - 1] == '/')
                n--;
        if (asprintf(&t->url, "%s%.*s%s", scheme ? "" : c->insecure ? "http://" : "https://", (int) n, e,
                     GRPC_EXPORT_PATH) < 0) {
                t->url = NULL;
                return -ENOMEM;
        }
        t->h2c = startswith(t->url, "http://");
        return 0;
}

static int strdup_or_null(const char *s, char **ret) {
        *ret = s ? strdup(s) : NULL;
        return s && !*ret ? -ENOMEM : 0;
}

int otlp_transport_new(sd_event *event, const OtlpConfig *config, unsigned max_in_flight,
                       OtlpTransport **ret) {
        _cleanup_(otlp_transport_freep) OtlpTransport *t = NULL;
        int r;

        if (!config->endpoint || !*config->endpoint)
                return -EINVAL;
        t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        t->event = sd_event_ref(event);
        t->protocol = config->protocol;
        t->compression = config->compression;
        t->timeout_ms = config->timeout_ms ?: 10000;
        t->max_in_flight = max_in_flight ?: 4;
        r = build_url(t, config);
        if (r >= 0)
                r = strdup_or_null(config->ca_file, &t->ca_file);
        if (r >= 0)
                r = strdup_or_null(config->client_cert, &t->client_cert);
        if (r >= 0)
                r = strdup_or_null(config->client_key, &t->client_key);
        if (r >= 0)
                r = build_headers(t, config->headers);
        if (r < 0)
                return r;
        t->multi = curl_multi_init();
        if (!t->multi)
                return -ENOMEM;
        if (curl_multi_setopt(t->multi, CURLMOPT_SOCKETFUNCTION, curl_socket_cb) != CURLM_OK ||
            curl_multi_setopt(t->multi, CURLMOPT_SOCKETDATA, t) != CURLM_OK ||
            curl_multi_setopt(t->multi, CURLMOPT_TIMERFUNCTION, curl_timer_cb) != CURLM_OK ||
            curl_multi_setopt(t->multi, CURLMOPT_TIMERDATA, t) != CURLM_OK ||
            curl_multi_setopt(t->multi, CURLMOPT_PIPELINING, (long) CURLPIPE_MULTIPLEX) != CURLM_OK)
                return -EIO;
        *ret = TAKE_PTR(t);
        return 0;
}

OtlpTransport *otlp_transport_free(OtlpTransport *t) {
        if (!t)
                return NULL;
        while (t->requests) {
                OtlpRequest *req = t->requests;
                (void) curl_multi_remove_handle(t->multi, req->easy);
                LIST_UNLINK(t->requests, req);
                request_free(req);
        }
        if (t->multi)
                curl_multi_cleanup(t->multi);
        while (t->sockets)
                socket_free(t->sockets);
        sd_event_source_disable_unref(t->timer);
        sd_event_unref(t->event);
        curl_slist_free_all(t->headers);
        free(t->url);
        free(t->ca_file);
        free(t->client_cert);
        free(t->client_key);
        free(t);
        return NULL;
}

unsigned otlp_transport_in_flight(const OtlpTransport *t) {
        return t->in_flight;
}

/* The bytes to send: gzip if configured, then the gRPC frame. NULL wire: the body as is. */
static int encode_body(OtlpTransport *t, const void *body, size_t size, OtlpRequest *req) {
        _cleanup_free_ void *gz = NULL;
        size_t gz_size = 0;
        int r;

        if (t->compression == OTLP_COMPRESSION_GZIP) {
                r = exp_gzip(body, size, &gz, &gz_size);
                if (r < 0)
                        return r;
                body = gz;
                size = gz_size;
        }
        if (t->protocol == OTLP_PROTOCOL_GRPC)
                return grpc_frame(body, size, gz != NULL, &req->wire, &req->wire_size);
        req->wire = TAKE_PTR(gz);
        req->wire_size = size;
        return 0;
}

static int request_setup(OtlpTransport *t, const void *body, OtlpRequest *req) {
        bool ok = true;

#define SET(opt, val) ok = ok && curl_easy_setopt(req->easy, (opt), (val)) == CURLE_OK
        SET(CURLOPT_URL, t->url);
        SET(CURLOPT_PROTOCOLS_STR, "http,https");
        SET(CURLOPT_POST, 1L);
        SET(CURLOPT_POSTFIELDS, req->wire ?: body);
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) req->wire_size);
        SET(CURLOPT_HTTPHEADER, t->headers);
        SET(CURLOPT_USERAGENT, USER_AGENT);
        SET(CURLOPT_TIMEOUT_MS, (long) t->timeout_ms);
        SET(CURLOPT_CONNECTTIMEOUT_MS, (long) MIN(t->timeout_ms, (uint64_t) 5000));
        SET(CURLOPT_NOSIGNAL, 1L);
        SET(CURLOPT_TCP_KEEPALIVE, 1L);
        SET(CURLOPT_PIPEWAIT, 1L); /* share one HTTP/2 connection rather than open more */
        SET(CURLOPT_WRITEFUNCTION, on_write);
        SET(CURLOPT_WRITEDATA, req);
        SET(CURLOPT_HEADERFUNCTION, on_header);
        SET(CURLOPT_HEADERDATA, req);
        SET(CURLOPT_ERRORBUFFER, req->errbuf);
        SET(CURLOPT_PRIVATE, req);
        /* Verification stays on whatever else is configured. */
        SET(CURLOPT_SSL_VERIFYPEER, 1L);
        SET(CURLOPT_SSL_VERIFYHOST, 2L);
        if (t->ca_file)
                SET(CURLOPT_CAINFO, t->ca_file);
        if (t->client_cert)
                SET(CURLOPT_SSLCERT, t->client_cert);
        if (t->client_key)
                SET(CURLOPT_SSLKEY, t->client_key);
        if (t->protocol == OTLP_PROTOCOL_GRPC) {
                /* h2c without an Upgrade round trip; over TLS, ALPN offers h2. */
                SET(CURLOPT_HTTP_VERSION, t->h2c ? (long) CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE
                                                 : (long) CURL_HTTP_VERSION_2TLS);
                /* libcurl before 8.0 puts a second HTTP/2 layer on a reused prior-knowledge
                 * connection and every request after the first fails in the framing layer
                 * (curl issue 10634): one connection per request there. */
                if (t->h2c && curl_version_info(CURLVERSION_NOW)->version_num < 0x080000)
                        SET(CURLOPT_FORBID_REUSE, 1L);
        } else
                SET(CURLOPT_ACCEPT_ENCODING, ""); /* curl decodes a compressed response */
#undef SET
        return ok ? 0 : -ENOMEM;
}

int otlp_transport_send(OtlpTransport *t, const void *body, size_t size, otlp_done_t done, void *userdata) {
        OtlpRequest *req;
        int r;

        if (t->in_flight >= t->max_in_flight)
                return -EBUSY;
        req = calloc(1, sizeof *req);
        if (!req)
                return -ENOMEM;
        req->transport = t;
        req->done = done;
        req->userdata = userdata;
        req->wire_size = size;
        request_reset_headers(req);
        r = encode_body(t, body, size, req);
        if (r >= 0) {
                req->easy = curl_easy_init();
                r = req->easy ? request_setup(t, body, req) : -ENOMEM;
        }
        if (r >= 0 && curl_multi_add_handle(t->multi, req->easy) != CURLM_OK)
                r = -EIO;
        if (r < 0) {
                request_free(req);
                return r;
        }
        LIST_LINK(t->requests, req);
        t->in_flight++;
        return 0;
}
