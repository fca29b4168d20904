/* SPDX-License-Identifier: MIT */
#pragma once

/* The samples `export` writes, read from the store into the exporter's interval model
 * (exporter/profile-model.h): the OTLP encoder takes it as it is, the pprof and folded writers
 * read the same arrays. One ExpSample per (process, thread, stack) summed over every matching
 * interval, so memory grows with the distinct stacks, not with the samples or intervals.
 * Stacks and frames are loaded once, when a sample first uses them. */

#include <sqlite3.h>
#include <stdint.h>

#include "export-progress.h"
#include "profile-model.h"
#include "store-read.h"

typedef struct EpExportModel {
        /* processes: one per processes row used. Kernel frames are left out of the stacks
         * when the filter hides them (a stack may then be empty). The window is [start_ns, end_ns)
         * of the matching intervals; period_ns is the latest interval's. */
        ExpInterval *iv;
        uint64_t *cpu_ns;      /* per sample: count × its intervals' period, summed */
        uint32_t *sample_process; /* per sample: index into iv->processes */
        uint64_t events;       /* sum of the sample counts */
        uint64_t rows;         /* sample rows of the store read */
} EpExportModel;

/* Reads what f selects. Returns 0 (an empty model when nothing matches) or a negative errno as
 * ep_store_read() does (-ENOTUNIQ: the container prefix names several; SQLite errors logged). */
int ep_export_model_load(sqlite3 *db, const EpStoreFilter *f, EpProgress *progress,
                         EpExportModel **ret);
EpExportModel *ep_export_model_free(EpExportModel *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpExportModel *, ep_export_model_free);
#define _cleanup_export_model_ _cleanup_(ep_export_model_freep)

/* The frame of a model frame as the views name it (store-read.h). */
static inline EpStoredFrame ep_export_stored_frame(const ExpFrame *f) {
        return (EpStoredFrame) { .kind = f->kind, .addr = f->addr, .path = f->mapping_path };
}
