/* SPDX-License-Identifier: MIT */
#pragma once

/* One finished interval as the exporter holds it in memory: what the collector sends as one
 * BEGIN..END group on the export ring (export-intake.c builds it), and what the OTLP encoder
 * (otlp-encode.c) turns into one request. Independent of D-Bus, rings and curl, so the CLI can
 * fill it from the store and reuse the encoder. Every string is owned by the model (malloc). */

#include <stddef.h>
#include <stdint.h>

#include "macro.h"
#include "wire.h"

typedef struct ExpLine {
        char *function; /* may be NULL or "" when unknown */
        char *file;     /* source file, may be NULL or "" */
        uint32_t line;  /* 1-based, 0 = unknown */
} ExpLine;

typedef struct ExpFrame {
        uint8_t kind;                      /* EP_FRAME_* */
        uint8_t file_id[EP_FILE_ID_SIZE];  /* all zero when there is no file (kernel, ...) */
        uint8_t htlhash[EP_FILE_ID_SIZE];  /* the file's, for backends (common/file-id.h) */
        uint8_t build_id_len;
        uint8_t build_id[EP_BUILD_ID_MAX]; /* GNU build ID bytes, when known */
        char *go_build_id;                 /* Go build ID, may be NULL */
        char *mapping_path;                /* path of the file, may be NULL */
        uint64_t addr;                     /* file offset (native) or kernel address */
        uint64_t elf_addr;                 /* native: ELF virtual address, 0 = unknown */
        ExpLine *lines;                    /* innermost first */
        size_t n_lines;
} ExpFrame;

typedef struct ExpStack {
        uint32_t *frames; /* indices into ExpInterval.frames, leaf first */
        size_t n_frames;
} ExpStack;

typedef struct ExpProcess {
        uint32_t pid;
        char *comm, *exe_path, *container_id; /* may be NULL */
} ExpProcess;

typedef struct ExpSample {
        uint32_t pid, tid, cpu;
        char *thread_name;      /* may be NULL */
        uint32_t stack;         /* index into ExpInterval.stacks */
        uint64_t count;         /* events, >= 1 */
        uint64_t *timestamps;   /* CLOCK_REALTIME ns, one per event when n_timestamps == count */
        size_t n_timestamps;    /* <= count */
} ExpSample;

typedef struct ExpInterval {
        uint64_t id, start_ns, end_ns, period_ns;

        ExpProcess *processes;
        size_t n_processes, cap_processes;
        ExpFrame *frames;
        size_t n_frames, cap_frames;
        ExpStack *stacks;
        size_t n_stacks, cap_stacks;
        ExpSample *samples;
        size_t n_samples, cap_samples;
} ExpInterval;

ExpInterval *exp_interval_new(uint64_t id, uint64_t start_ns, uint64_t end_ns, uint64_t period_ns);
ExpInterval *exp_interval_free(ExpInterval *iv);
DEFINE_TRIVIAL_CLEANUP_FUNC(ExpInterval *, exp_interval_free);

/* Append one zeroed element and return it (NULL on OOM). Its index is n_* - 1. What the
 * caller then stores in it (strings, arrays) belongs to the interval. */
ExpProcess *exp_interval_add_process(ExpInterval *iv);
ExpFrame *exp_interval_add_frame(ExpInterval *iv);
ExpStack *exp_interval_add_stack(ExpInterval *iv);
ExpSample *exp_interval_add_sample(ExpInterval *iv);

/* Total events in the interval (sum of sample counts). */
uint64_t exp_interval_events(const ExpInterval *iv);

/* Grows *p (an array of elem_size elements with capacity *cap) to hold at least need. */
int exp_grow(void **p, size_t *cap, size_t need, size_t elem_size);
