/* SPDX-License-Identifier: MIT */
#pragma once

/* A process's py_procs entry (struct ep_bpf_py_proc, bpf/cpython.h) from a CPython file it maps:
 * what the loader writes to BPF (runtime-cpython.c) and the replay tests rebuild from a core dump
 * (tests/replay/replay-python.c). Detection is python-detect.c's, layouts are
 * common/python-layout.c's; nothing here keeps state or reads anything but the file given. */

#include <stdbool.h>
#include <stdint.h>

#include "cpython.h"
#include "python-detect.h"

#define EP_PY_MAX_SEGMENTS 16

typedef struct EpPySegment {
        uint64_t offset, vaddr, filesz;
} EpPySegment;

/* What one file is, once examined. */
typedef struct EpPyFile {
        EpPyRuntime rt;
        EpPyLayout layout;
        EpPySegment seg[EP_PY_MAX_SEGMENTS]; /* PT_LOAD segments, to find the load bias */
        unsigned n_seg;
} EpPyFile;

/* Which step of ep_py_file_examine() failed. */
typedef enum EpPyFileStep {
        EP_PY_FILE_DETECT = 1,       /* looks like CPython, but detection failed */
        EP_PY_FILE_LAYOUT = 2,       /* no usable layout, or no program headers */
        EP_PY_FILE_NO_EVAL_LOOP = 3, /* no _PyEval_EvalFrameDefault range */
} EpPyFileStep;

/* Only files whose name contains "python" are examined (an interpreter linked statically into
 * a program of another name is not recognised). */
bool ep_py_file_name_says_python(const char *path);

/* Examines the ELF file open at fd (path: as the process maps it). 1: a CPython runtime the
 * BPF walk can use, *ret filled; 0: not a runtime; < 0: a runtime (or what looks like one) that
 * cannot be used, *ret_failed says at which step (*ret->rt is filled from EP_PY_FILE_LAYOUT). */
int ep_py_file_examine(int fd, const char *path, EpPyFile *ret, EpPyFileStep *ret_failed);

/* ELF virtual address → process address for the file mapped at [start, …) from file offset
 * pgoff (bytes): the load bias, the same for all segments, found from the segment mapped there. */
bool ep_py_file_load_bias(const EpPyFile *pf, uint64_t start, uint64_t pgoff, uint64_t *ret);

/* The py_procs entry of a process that maps pf at start from file offset pgoff: false when the
 * mapping is not one of the file's segments or an offset the walk reads is unknown. */
bool ep_py_file_entry(const EpPyFile *pf, uint64_t start, uint64_t pgoff, struct ep_bpf_py_proc *ret);
