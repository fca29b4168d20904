/* SPDX-License-Identifier: MIT */
#pragma once

/* The native worker: ELF symbol tables, DWARF lines and inline chains, demangling and Go's
 * .gopclntab of the files profiled processes map — parsers of files any user can craft — run
 * in a process of their own, where a crash or a takeover gains nothing. It is this program
 * exec'd anew (a clean address space: nothing of the symbolizer's memory), holding only its
 * end of one socket and the files it was handed, under the sandbox's system call filter
 * (sandbox-filter.h: no sockets, no process memory, no execve, nothing written), with no core
 * dumps. It keeps the opened files (the resolver's file LRU, in the worker) between requests.
 *
 * The symbolizer keeps what is worth something: its bus connection to the loader (through which
 * files and process memory are handed out), the rings, the result and persisted caches. When the
 * worker needs a file it asks; the symbolizer asks the loader and passes the descriptor on.
 *
 * A worker that dies, stops answering sensibly or spends more than its CPU budget on one request
 * is killed and started again at the next request. The file it was working on is answered RETRY
 * the first time (a passing failure: the machine may have been short of memory) and BAD_FILE from
 * the second on. */

#include <stdint.h>

#include "native-worker-wire.h"
#include "resolver.h"

#define EP_NATIVE_WORKER_CPU_USEC (30 * USEC_PER_SEC) /* per request: a crafted file's cost */
#define EP_NATIVE_WORKER_WALL_USEC (300 * USEC_PER_SEC) /* per request: a stuck worker */
#define EP_NATIVE_WORKER_CRASHES_BAD 2 /* crashes on a file that make it BAD_FILE */
#define EP_NATIVE_WORKER_FILES_TRACKED 1024 /* files with crashes remembered (LRU) */

typedef struct EpNativeWorker EpNativeWorker;

/* path, argv: the program a worker is (it must run ep_native_worker_main() on descriptor 3).
 * source: where files come from (the loader). stats may be NULL. Starts no process yet: the
 * first request does. */
int ep_native_worker_new(const char *path, char *const *argv, const EpFileSource *source, EpSymStats *stats,
                         EpNativeWorker **ret);
EpNativeWorker *ep_native_worker_free(EpNativeWorker *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpNativeWorker *, ep_native_worker_free);

/* For tests: the CPU time one request may take before the worker is killed. */
void ep_native_worker_set_cpu_limit(EpNativeWorker *w, uint64_t usec);

/* The answer to a native frame (*ret empty on entry; RETRY or BAD_FILE when the worker failed on
 * it). Only -ENOMEM is an error. */
int ep_native_worker_symbolize(EpNativeWorker *w, const EpSymRequest *req, EpNativeAnswer *ret);
/* The build IDs of a file, as ep_resolver_file_info(). Only -ENOMEM is an error. */
int ep_native_worker_file_info(EpNativeWorker *w, const uint8_t file_id[EP_FILE_ID_SIZE], EpFileInfo *ret);
/* The worker closes the file (its debug file changed) / forgets the files the source could not
 * open. A worker that is not running has nothing to forget. */
void ep_native_worker_forget_file(EpNativeWorker *w, const uint8_t file_id[EP_FILE_ID_SIZE]);
void ep_native_worker_source_changed(EpNativeWorker *w);

/* w as the resolver's native parser (ep_resolver_set_native_parser()). */
EpNativeParser ep_native_worker_parser(EpNativeWorker *w);

/* What the worker last reported (files it keeps open) and the Go tables found malformed by
 * every worker so far; the workers started (restarts are the rest); its pid (0: none runs). */
uint32_t ep_native_worker_files_open(const EpNativeWorker *w);
uint64_t ep_native_worker_go_malformed(const EpNativeWorker *w);
uint64_t ep_native_worker_started(const EpNativeWorker *w);
pid_t ep_native_worker_pid(const EpNativeWorker *w);

/* The worker's side (native-worker-serve.c), run by the exec'd program: limits itself, then
 * answers requests on sock until the symbolizer closes it. Returns an exit status. */
int ep_native_worker_main(int sock);

/* ... its parts, for tests that play a misbehaving worker: one worker's state, and the answer to
 * one request (a message already decoded). 0, or a negative errno when the socket failed. */
typedef struct EpNativeServe EpNativeServe;
int ep_native_serve_new(int sock, EpNativeServe **ret);
EpNativeServe *ep_native_serve_free(EpNativeServe *s);
int ep_native_serve_one(EpNativeServe *s, const EpNativeRequest *req);
