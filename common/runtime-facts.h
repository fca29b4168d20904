/* SPDX-License-Identifier: MIT */
#pragma once

/* What the symbolizer found out about a mapped file for the loader:
 * Symbolizer1.DetectRuntime(h file, ay file_id) → (s runtime, ay facts). runtime is "" for a
 * file that is no interpreter runtime (facts empty) or a runtime's name with its facts blob:
 * for "cpython", EpCPythonFacts.
 *
 * The loader runs as root, the symbolizer parses files any user can map, so the loader trusts
 * none of it: ep_cpython_facts_validate() checks the size, the header, every count against its
 * bound, every range and that every address lies in the file's segments, and the layout the
 * BPF walk reads comes from the loader's own table (common/python-layout.c), never from the
 * blob. The symbolizer runs the same check on what it sends.
 *
 * Fixed layout, host byte order (both ends run on one machine), no pointers. A change of the
 * layout bumps EP_RUNTIME_FACTS_VERSION; a loader refuses every other version. */

#include <stddef.h>
#include <stdint.h>

#include "python-layout.h"

/* DetectRuntime's error for a file that is a runtime we recognise but cannot walk (version
 * unknown, symbols missing, a layout that differs from the table). */
#define EP_ERROR_UNUSABLE_RUNTIME "org.ebpfprofiler.Error.UnusableRuntime"

#define EP_RUNTIME_CPYTHON "cpython"

#define EP_RUNTIME_FACTS_MAGIC UINT32_C(0x52465045) /* "EPFR" */
#define EP_RUNTIME_FACTS_VERSION 1u

typedef enum EpRuntimeFactsKind {
        EP_RUNTIME_FACTS_CPYTHON = 1,
} EpRuntimeFactsKind;

typedef struct EpRuntimeFactsHeader {
        uint32_t magic;    /* EP_RUNTIME_FACTS_MAGIC */
        uint16_t version;  /* EP_RUNTIME_FACTS_VERSION */
        uint16_t kind;     /* EpRuntimeFactsKind */
        uint32_t size;     /* of the whole blob */
        uint32_t reserved; /* 0 */
} EpRuntimeFactsHeader;

#define EP_CPYTHON_FACTS_MAX_EVAL 4u
#define EP_CPYTHON_FACTS_MAX_SEGMENTS 16u
/* No eval loop part is this large (_PyEval_EvalFrameDefault is ~100 KiB). */
#define EP_CPYTHON_FACTS_MAX_EVAL_SIZE (16ull << 20)
#define EP_CPYTHON_MICRO_UNKNOWN UINT32_MAX

/* Where ep_py_detect_layout() took the layout from; either way it equals the table's entry. */
typedef enum EpCPythonLayoutSource {
        EP_CPYTHON_LAYOUT_TABLE = 1,         /* the built-in table (3.6–3.12, 3.13 without the block) */
        EP_CPYTHON_LAYOUT_DEBUG_OFFSETS = 2, /* 3.13's _Py_DebugOffsets, checked against the table */
} EpCPythonLayoutSource;

/* A PT_LOAD segment: with the mapping's start and pgoff it gives the load bias. */
typedef struct EpFactsSegment {
        uint64_t offset, vaddr, filesz, memsz;
} EpFactsSegment;

typedef struct EpFactsRange {
        uint64_t start, end; /* [start, end), ELF virtual addresses */
} EpFactsRange;

/* All addresses are ELF virtual addresses, before the load bias. Unused array entries are 0. */
typedef struct EpCPythonFacts {
        EpRuntimeFactsHeader header;
        uint32_t major, minor;      /* 3, 6…13 */
        uint32_t micro;             /* EP_CPYTHON_MICRO_UNKNOWN when nothing says */
        uint32_t layout_source;     /* EpCPythonLayoutSource */
        uint32_t n_eval;            /* 1…EP_CPYTHON_FACTS_MAX_EVAL */
        uint32_t n_segments;        /* 1…EP_CPYTHON_FACTS_MAX_SEGMENTS */
        uint64_t runtime_addr;      /* _PyRuntime (3.7+), else 0 */
        uint64_t runtime_size;      /* its size (3.7+), else 0 */
        uint64_t interp_head_addr;  /* 3.6: the static interp_head, else 0 */
        EpFactsRange eval[EP_CPYTHON_FACTS_MAX_EVAL]; /* _PyEval_EvalFrameDefault, then its cold parts */
        EpFactsSegment segments[EP_CPYTHON_FACTS_MAX_SEGMENTS]; /* by ascending vaddr */
} EpCPythonFacts;
_Static_assert(sizeof(EpCPythonFacts) == 640, "the DetectRuntime blob has a fixed size");

/* An empty blob: the header filled in, everything else 0. */
void ep_cpython_facts_init(EpCPythonFacts *ret);

/* Checks a blob (any alignment) and copies it to *ret (untouched on failure):
 *   -EBADMSG          wrong size, magic, kind, size field, reserved bits or layout source;
 *   -EPROTONOSUPPORT  another format version, or a CPython version without a built-in layout;
 *   -ERANGE           a count over its bound, an inverted, empty, oversized or overlapping
 *                     range, an address outside the segments, or unused entries not 0. */
int ep_cpython_facts_validate(const void *buf, size_t size, EpCPythonFacts *ret);

/* The address of the interpreter list's head (&_PyRuntime.interpreters.head, 3.6:
 * &interp_head) of validated facts, with the layout the loader walks them with. */
uint64_t ep_cpython_facts_interp_head(const EpCPythonFacts *f, const EpPyLayout *layout);
