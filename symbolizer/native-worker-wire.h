/* SPDX-License-Identifier: MIT */
#pragma once

/* The messages between the symbolizer and its native worker (native-worker.h), on a stream
 * socket: each is a u32 length, then that many bytes, the first of them the type. A descriptor
 * travels as SCM_RIGHTS with the message that announces it. Both ends are this program, but
 * the symbolizer reads what the worker writes as it would read any hostile input: every
 * decoder is bounded and checks the whole message (fuzz-native-worker). */

#include <stdbool.h>
#include <stdint.h>

#include "resolver.h"
#include "symbol-cache.h"
#include "wire-buf.h"
#include "wire.h"

#define EP_NATIVE_MSG_MAX (16u << 20)   /* a message's bytes, its length excluded */
#define EP_NATIVE_STR_MAX (64u << 10)   /* a name, a source file, a path */
#define EP_NATIVE_LINES_MAX 256u        /* lines of one answer (inline depth) */

typedef enum EpNativeMsg {
        /* symbolizer → worker */
        EP_NATIVE_SYMBOLIZE = 1, /* file ID, offset, flags, path hint */
        EP_NATIVE_FILE_INFO,     /* file ID */
        EP_NATIVE_FORGET,        /* file ID: its debug file changed */
        EP_NATIVE_SOURCE_CHANGED,
        EP_NATIVE_FILE,          /* the answer to NEED_FILE: an errno (0: the descriptor is attached) */
        /* worker → symbolizer */
        EP_NATIVE_NEED_FILE = 64, /* file ID */
        EP_NATIVE_ANSWER,         /* to SYMBOLIZE */
        EP_NATIVE_INFO,           /* to FILE_INFO */
        EP_NATIVE_DONE,           /* to FORGET, SOURCE_CHANGED */
} EpNativeMsg;

/* What the worker reports with every answer: its state, for the symbolizer's properties. */
typedef struct EpNativeWorkerState {
        uint32_t files_open;
        uint64_t go_malformed;
        char *last_error; /* a file it found bad since the last answer ("" none) */
} EpNativeWorkerState;

typedef struct EpNativeAnswer {
        EpSymResult result;
        bool cacheable;
        bool has_record;           /* the answer came from an opened file ... */
        EpSymbolFileRecord record; /* ... with what it was computed with */
        EpNativeWorkerState state;
} EpNativeAnswer;

typedef struct EpNativeInfo {
        EpFileInfo info;
        EpNativeWorkerState state;
} EpNativeInfo;

void ep_native_answer_done(EpNativeAnswer *a);
void ep_native_info_done(EpNativeInfo *i);

/* A request for one file (SYMBOLIZE, FILE_INFO, FORGET, NEED_FILE), or none (SOURCE_CHANGED,
 * DONE). path is only SYMBOLIZE's. */
typedef struct EpNativeRequest {
        uint8_t type;
        uint8_t file_id[EP_FILE_ID_SIZE];
        uint64_t addr;
        uint8_t flags;
        char *path; /* decoded: owned, NULL when empty */
} EpNativeRequest;

void ep_native_put_request(EpWriter *w, const EpNativeRequest *req);
void ep_native_put_file(EpWriter *w, int error);
void ep_native_put_answer(EpWriter *w, const EpNativeAnswer *a);
void ep_native_put_info(EpWriter *w, const EpNativeInfo *i);

/* Each decodes one whole message (its type byte included). 0, or -EBADMSG when it is not
 * exactly such a message, -ENOMEM. *ret is filled only on success. */
int ep_native_get_request(const void *msg, size_t size, EpNativeRequest *ret);
int ep_native_get_file(const void *msg, size_t size, int *ret_error);
int ep_native_get_answer(const void *msg, size_t size, EpNativeAnswer *ret);
int ep_native_get_info(const void *msg, size_t size, EpNativeInfo *ret);

/* Sends one message (w's bytes, with fd attached when fd >= 0). 0 or a negative errno. */
int ep_native_send(int sock, const EpWriter *w, int fd);
/* Receives one message into *buf (grown as needed, at most EP_NATIVE_MSG_MAX), and the
 * descriptor that came with it into *ret_fd (-EBADF: none). Waits at most timeout_ms (-1: for
 * ever) for it to start: -ETIMEDOUT then, with nothing read. Once started, a pause of more
 * than EP_NATIVE_STALL_MS, a length over the bound or a second descriptor is -EBADMSG (the
 * stream is lost). 0 and *ret_size; -ECONNRESET at the other end's close; another negative
 * errno. */
#define EP_NATIVE_STALL_MS 30000
int ep_native_recv(int sock, uint8_t **buf, size_t *ret_size, int *ret_fd, int timeout_ms);
