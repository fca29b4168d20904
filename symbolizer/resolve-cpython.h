/* SPDX-License-Identifier: MIT */
#pragma once

/* CPython frames (EP_FRAME_CPYTHON): the code object's qualified name, file name and the line
 * of the instruction, read from the process's memory (Loader1.OpenProcessMemory) with the
 * layout of its CPython version (common/python-layout.h). See resolve-cpython.c. */

#include <stddef.h>
#include <stdint.h>

#include "python-layout.h"
#include "python-lines.h"
#include "resolver.h"

/* Bounds. */
#define EP_PY_MAX_PROCESSES 64u                  /* processes with an open memory descriptor (LRU) */
#define EP_PY_MAX_CODES 16384u                   /* decoded code objects kept (LRU) */
#define EP_PY_CODE_BUDGET (8ull << 20)           /* bytes over all kept code objects */
#define EP_PY_STR_MAX 1024u                      /* bytes of a name or file name (UTF-8) */
#define EP_PY_LINETABLE_MAX (256u << 10)         /* bytes of a line table read */
#define EP_PY_MISSING_RETRY_NS (10 * NSEC_PER_SEC) /* a process that was not (yet) CPython */

typedef struct EpPyStats {
        uint32_t processes;      /* processes kept now */
        uint32_t code_objects;   /* code objects kept now */
        uint64_t processes_opened; /* memory descriptors the source handed us */
        uint64_t not_python;     /* ... for processes the loader did not see CPython in, or gone */
        uint64_t unsupported;    /* CPython versions without a layout */
        uint64_t images_gone;    /* descriptors whose image went (exit, exec): the loader asked again */
        uint64_t lookups;        /* frames looked up (result-cache misses) */
        uint64_t code_hits;      /* ... whose code object was decoded before (and still is it) */
        uint64_t code_decoded;   /* code objects read and decoded */
        uint64_t invalid_code;   /* addresses that held no (valid) code object: NOT_FOUND */
        uint64_t read_errors;    /* reads that failed in a live process */
        uint64_t bad_line_tables; /* line tables that did not decode (named, line 0) */
        uint64_t evictions;      /* code objects dropped for the count or byte bounds */
        uint64_t code_bytes;     /* bytes they hold */
} EpPyStats;

void ep_resolver_python_stats(EpResolver *r, EpPyStats *ret);

