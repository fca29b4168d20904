/* SPDX-License-Identifier: MIT */
#pragma once

/* One client session (the collector): a request ring we consume and a response ring we
 * produce, both created here and handed out by OpenSession(). Requests are drained when the
 * request eventfd fires, in batches; every answered batch wakes the client once. A batch is
 * bounded in time as well as in count, and the session's event sources rank below the bus:
 * a request can read DWARF of a large file through page faults, which on a cold, busy disk
 * takes seconds, and the bus (properties, GetUnwindTable and its answers) must still be
 * served in between. The loop
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
#define EP_SESSION_BUDGET_USEC 20000  /* time per loop iteration before yielding */
#define EP_SESSION_BACKLOG 1024       /* answers held while the response ring is full */
#define EP_SESSION_RETRY_USEC 10000   /* backlog retry period */
#define EP_SESSION_TRIM_USEC 1000000  /* after answering, DWARF pages are unmapped this much later */
#define EP_SESSION_DWARF_IDLE_USEC (120 * 1000000ull) /* a DWARF handle unused this long is closed */
#define EP_SESSION_IDLE_CHECK_USEC (10 * 1000000ull) /* ... checked this often while any is open */
#define EP_SESSION_PRIORITY (SD_EVENT_PRIORITY_NORMAL + 10) /* after the bus and the unwind answers */
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

/* Answers what is queued, up to one batch: EP_SESSION_BATCH requests or the time budget,
 * whichever ends first (the request that crosses the budget is finished). Returns the number
 * of requests taken, or -EBADMSG when the request ring is corrupt (the session is then dead). */
int ep_session_process(EpSession *s);
/* Tells the client that the answers for native frames of file_id may differ now
 * (EP_MSG_SYM_FILE_CHANGED): after every answer already given, held in the backlog while the
 * response ring is full. */
void ep_session_file_changed(EpSession *s, const uint8_t file_id[EP_FILE_ID_SIZE]);
/* The budget above (tests: 0 takes one request per call). */
void ep_session_set_budget(EpSession *s, uint64_t usec);
size_t ep_session_backlog(const EpSession *s);
