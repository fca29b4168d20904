/* SPDX-License-Identifier: MIT */
#pragma once

/* The replay harness: a process rebuilt from a core dump (memory, threads, mapped files), the
 * unwind table of every mapped file (extracted with the symbolizer's ep_unwind_extract, the
 * very code the daemon runs), and the BPF unwinder's step function (bpf/native-unwind.h) and
 * CPython frame walk (bpf/cpython-walk.h) compiled as ordinary C and run over them. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core-file.h"
#include "elf-symbols.h"
#include "wire.h"

#define REPLAY_MAX_FRAMES 4096

/* One file mapped by the process (or the vDSO, copied out of the core into a memfd). */
typedef struct ReplayModule {
        char *path;     /* as mapped; "[vdso]" for the vDSO */
        char *basename; /* for "[unknown] NAME" */
        int fd;         /* read-only descriptor (a memfd for the vDSO) */
        uint8_t file_id[EP_FILE_ID_SIZE];
        EpElfFile *elf;   /* symbols; NULL when the file is not a usable ELF */
        EpElfFile *debug; /* separate debug file found by build ID, or NULL */
        void *table;      /* unwind table blob (common/unwind-table.h), or NULL */
        size_t table_size;
        uint32_t table_flags;
        int table_error; /* what ep_unwind_extract returned when it failed */
} ReplayModule;

/* One mapping: [start, end) of the address space shows module at file offset `offset`. */
typedef struct ReplayRegion {
        uint64_t start, end, offset;
        ReplayModule *module;
} ReplayRegion;

/* How rules are found (replay-unwind.c): the loader's pages of every table. */
typedef struct ReplayLookup ReplayLookup;
void replay_lookup_free(ReplayLookup *l);

/* The CPython walk (replay-python.c). */
typedef struct ReplayPython ReplayPython;

typedef struct ReplayProcess {
        EpCore *core;
        ReplayLookup *lookup; /* built on the first unwind */
        ReplayPython *python; /* NULL when the process maps no usable CPython runtime */
        ReplayModule **modules;
        size_t n_modules;
        ReplayRegion *regions; /* sorted by start, not overlapping */
        size_t n_regions;
} ReplayProcess;

typedef struct ReplayFrame {
        uint64_t pc;         /* a Python frame's: the address of its code object */
        bool return_address; /* a call's return address (symbolize pc - 1), not an exact PC */
        bool python;         /* a CPython frame of the BPF walk */
        int64_t offset;      /* Python frames: the instruction's byte offset in the bytecode */
        bool activation;     /* an unplaced Python frame that starts an eval-loop activation */
} ReplayFrame;

const ReplayRegion *replay_region_at(const ReplayProcess *p, uint64_t addr);

/* Runs the unwinder over one thread of the core: frames[0] is the interrupted PC. *ret_stop
 * is the unwinder's stop reason as a word ("ok" when the root frame was reached). With
 * p->python, the Python frames of each eval-loop activation come right before (leaf-side of)
 * its native frame, as in the BPF sampler. */
int replay_unwind_thread(ReplayProcess *p, const EpCoreThread *t, ReplayFrame *frames, size_t max,
                         size_t *ret_n, const char **ret_stop);

/* replay-python.c: the py_procs entry made from the mapped files by the loader's code
 * (unwinder-loader/python-entry.c); p->python stays NULL when no runtime is mapped. */
int replay_python_load(ReplayProcess *p);
void replay_python_free(ReplayPython *py);
void replay_python_print(const ReplayPython *py);          /* "# cpython …" */
void replay_python_print_counters(const ReplayPython *py); /* EP_BPF_PY_* so far */
/* Arms the walk for thread t (its fs_base is the thread pointer BPF reads): false when the
 * thread has none. */
bool replay_python_start(ReplayPython *py, const EpCoreThread *t);
/* When lookup (a native frame's pc, pc - 1 for a return address) is in the eval loop: the
 * Python frames of that activation, innermost first, into frames (at most max); their number. */
size_t replay_python_frames(ReplayPython *py, uint64_t lookup, ReplayFrame *frames, size_t max);
/* The Python frames of thread t as BPF sends them when the native walk stopped before any
 * eval loop (EP_BPF_FRAME_F_UNPLACED, .activation for EP_BPF_FRAME_F_ACTIVATION); their
 * number. */
size_t replay_python_unplaced(ReplayPython *py, const EpCoreThread *t, ReplayFrame *frames, size_t max);
