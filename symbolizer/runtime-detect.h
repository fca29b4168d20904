/* SPDX-License-Identifier: MIT */
#pragma once

/* Symbolizer1.DetectRuntime(h file, ay file_id) → (s runtime, ay facts): is a mapped file an
 * interpreter runtime, and what the loader needs to walk it (common/runtime-facts.h). Only
 * CPython today (python-detect.c). The ELF parsing happens here, in the unprivileged
 * symbolizer, in the sandbox (sandbox.h), on the unwind service's worker thread, so that the
 * root loader never parses a file a user could have crafted. */

#include <stdint.h>
#include <systemd/sd-bus.h>

#include "runtime-facts.h"
#include "wire.h"

typedef struct EpRuntimeDetection {
        int32_t error;            /* 0, or a negative errno */
        uint32_t unusable;        /* error is about a runtime recognised (UnusableRuntime), not the file */
        char runtime[16];         /* with error 0: "" (not a runtime) or EP_RUNTIME_CPYTHON */
        char what[160];           /* with an error: what went wrong, for the answer's message */
        EpCPythonFacts facts;     /* for EP_RUNTIME_CPYTHON: validated (ep_cpython_facts_validate) */
} EpRuntimeDetection;

/* Examines the ELF file open at fd, in this process. name is the file's path or name (used for
 * the version when the file does not say; may be NULL). Returns ret->error. */
int ep_runtime_detect_fd(int fd, const char *name, EpRuntimeDetection *ret);

/* Checks that the descriptor is the file file_id names (-ESTALE otherwise), then runs
 * ep_runtime_detect_fd() in the sandbox with the path /proc/self/fd gives. A child that
 * crashed or used up its limits is an error of the file (-E2BIG, -ETIME); -ETIMEDOUT (wall
 * clock) is transient. Returns ret->error. */
int ep_runtime_detect_sandboxed(int fd, const uint8_t file_id[EP_FILE_ID_SIZE], EpRuntimeDetection *ret);

/* The D-Bus error name of a failed detection: EP_ERROR_UNUSABLE_RUNTIME,
 * org.ebpfprofiler.Error.BadFile, or NULL (a plain errno: transient). */
const char *ep_runtime_detect_error_name(const EpRuntimeDetection *d);

/* Answers the DetectRuntime call with d. */
int ep_runtime_detect_reply(sd_bus_message *call, const uint8_t file_id[EP_FILE_ID_SIZE], const EpRuntimeDetection *d);
