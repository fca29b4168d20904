/* SPDX-License-Identifier: MIT */
#pragma once

/* Asks the symbolizer for unwind tables: org.ebpfprofiler.Symbolizer1.GetUnwindTable(h file,
 * ay file_id) → (h table), a sealed memfd holding the blob of common/unwind-table.h; errors
 * org.ebpfprofiler.Error.NoUnwindInfo (no CFI) and org.ebpfprofiler.Error.BadFile. And what
 * runtime a file is: Symbolizer1.DetectRuntime(h file, ay file_id) → (s runtime, ay facts),
 * the blob of common/runtime-facts.h (the loader parses no ELF file itself); errors
 * org.ebpfprofiler.Error.BadFile and org.ebpfprofiler.Error.UnusableRuntime.
 *
 * Calls are asynchronous (sampling never waits for the symbolizer), at most a few at a time
 * (4 tables, 2 detections); table requests come from the queue of tables.c and answers go back
 * to it, detection requests from ep_symclient_detect() and answers to its callback. While the
 * symbolizer is not on the bus, requests wait; when it (re)appears, waiting requests are
 * sent. */

#include "daemon.h"
#include "macro.h"
#include "proc-maps.h"
#include "tables.h"

#define EP_ERROR_NO_UNWIND_INFO "org.ebpfprofiler.Error.NoUnwindInfo"
#define EP_ERROR_BAD_FILE "org.ebpfprofiler.Error.BadFile"

typedef struct EpSymClient EpSymClient;

/* tables may be NULL: detection requests only (tests). */
int ep_symclient_new(EpDaemon *d, EpTables *tables, EpProcTable *procs, EpSymClient **ret);
EpSymClient *ep_symclient_free(EpSymClient *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpSymClient *, ep_symclient_free);

/* What became of a DetectRuntime request. */
typedef enum EpDetectResult {
        EP_DETECT_ANSWERED,    /* runtime ("" for none) and its facts blob: not validated yet */
        EP_DETECT_REFUSED,     /* BadFile, UnusableRuntime or a malformed answer: about the file */
        EP_DETECT_UNAVAILABLE, /* no live process maps the file: to be asked again when one does */
        EP_DETECT_GAVE_UP,     /* a transient error (symbolizer gone, timeout, ...) 10 times */
} EpDetectResult;

typedef struct EpDetectAnswer {
        EpDetectResult result;
        const char *runtime;   /* EP_DETECT_ANSWERED: the symbolizer's, unchecked */
        const void *facts;     /* EP_DETECT_ANSWERED: valid during the callback only */
        size_t size;
        const char *error;     /* REFUSED, GAVE_UP: what the symbolizer said, for the log */
} EpDetectAnswer;

typedef void (*EpDetectDone)(uint32_t key, const EpDetectAnswer *answer, void *userdata);

/* Queues a DetectRuntime call for file key; done is called once, with the final answer (not
 * during this call, and never after ep_symclient_free()). Transient errors are retried with a
 * back-off (1 s doubling to 60 s); a symbolizer without the method keeps the request until
 * another one appears. The caller asks at most once per file at a time. */
int ep_symclient_detect(EpSymClient *c, uint32_t key, EpDetectDone done, void *userdata);

/* Sends queued requests while fewer than the maximum are in flight. */
void ep_symclient_kick(void *userdata);
unsigned ep_symclient_in_flight(const EpSymClient *c);

/* Reads a table blob from a descriptor into an 8-byte aligned buffer (a private copy: the
 * peer cannot change it after it was validated). -EFBIG beyond the largest valid table. */
int ep_read_table_fd(int fd, void **ret, size_t *ret_size);
