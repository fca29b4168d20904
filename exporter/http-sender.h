/* SPDX-License-Identifier: MIT */
#pragma once

/* Non-blocking HTTP POSTs with libcurl's multi interface driven by sd-event: curl's sockets
 * become sd-event I/O sources and its timeout an sd-event timer, so the daemon's loop never
 * waits for the network. Each request ends in a callback with the outcome. */

#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "macro.h"

#define HTTP_MAX_RESPONSE (4u << 20) /* longer response bodies are cut (OTLP client limit) */

typedef struct HttpSender HttpSender;

typedef struct HttpResult {
        int error;           /* 0 when an HTTP response arrived, else a negative errno */
        long status;         /* HTTP status code, 0 without a response */
        const char *message; /* what went wrong (transport error text), NULL on success */
        const void *body;    /* response body (possibly cut at HTTP_MAX_RESPONSE) */
        size_t body_size;
        size_t request_size; /* bytes of the request body */
        int64_t retry_after_s; /* Retry-After in seconds, -1 when absent */
} HttpResult;

typedef void (*http_done_t)(HttpSender *s, const HttpResult *result, void *userdata);

typedef struct HttpSenderOptions {
        const char *url;
        const char *user_agent;
        uint64_t timeout_ms;   /* whole request */
        unsigned max_in_flight;
} HttpSenderOptions;

int http_sender_new(sd_event *event, const HttpSenderOptions *opts, HttpSender **ret);
HttpSender *http_sender_free(HttpSender *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(HttpSender *, http_sender_free);

/* Starts a POST of body (ownership passes to the sender, also on failure). done runs from the
 * event loop when it finishes, never from inside this call. -EBUSY when max_in_flight requests
 * are already running. */
int http_sender_post(HttpSender *s, void *body, size_t size, const char *content_type,
                     const char *content_encoding, http_done_t done, void *userdata);
unsigned http_sender_in_flight(const HttpSender *s);
