/* SPDX-License-Identifier: MIT */
#pragma once

/* One client session (the collector): a request ring we consume and a response ring we
 * produce, both created here and handed out by OpenSession(). Requests are drained when the
 * request eventfd fires, in batches; every answered batch wakes the client once. The loop
 * never waits on a full response ring: answers wait in a bounded backlog, retried on a timer,
 * and while the backlog is full no further requests are taken (they wait in the request ring,
 * so nothing is lost). */

#include <stdint.h>
#include <systemd/sd-event.h>

#include "macro.h"
#include "resolver.h"
#include "stats.h"

#define EP_SESSION_RING_SIZE (1u << 20)
#define EP_SESSION_BATCH 512          /* requests per loop iteration before yielding */
#define EP_SESSION_BACKLOG 1024       /* answers held while the response ring is full */
#define EP_SESSION_RETRY_USEC 10000   /* backlog retry period */
#define EP_SESSION_PATH_MAX 4096

typedef struct EpSession EpSession;

/* event may be NULL (tests): then nothing is watched, call ep_session_process() directly. */
int ep_session_new(sd_event *event, EpResolver *resolver, EpSymStats *stats, EpSession **ret);
EpSession *ep_session_free(EpSession *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpSession *, ep_session_free);

int ep_session_request_memfd(const EpSession *s);
int ep_session_request_eventfd(const EpSession *s);
int ep_session_response_memfd(const EpSession *s);
int ep_session_response_eventfd(const EpSession *s);

/* Answers what is queued, up to one batch. Returns the number of requests taken, or
 * -EBADMSG when the request ring is corrupt (the session is then dead). */
int ep_session_process(EpSession *s);
size_t ep_session_backlog(const EpSession *s);
