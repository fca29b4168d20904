/* SPDX-License-Identifier: MIT */
#pragma once

/* `ebpf-profiler export`: the store's samples as pprof, folded stacks or OTLP (see
 * docs/ARCHITECTURE.md, CLI). */

#include <stdio.h>

#include "export-model.h"
#include "folded.h"

typedef enum EpExportFormat {
        EP_EXPORT_PPROF,
        EP_EXPORT_FOLDED,
        EP_EXPORT_OTLP,
} EpExportFormat;

/* "pprof", "folded", "otlp". -EINVAL for anything else. */
int ep_export_format_from_name(const char *name, EpExportFormat *ret);
/* From a file name's extension: .pb.gz/.pprof, .folded/.txt, .otlp/.binpb. -EINVAL otherwise. */
int ep_export_format_from_path(const char *path, EpExportFormat *ret);
const char *ep_export_format_name(EpExportFormat f);

/* Writes m to out in format (folded_flags for the folded format) and flushes out. */
int ep_export_write(const EpExportModel *m, EpExportFormat format, EpFoldedFlags folded_flags, FILE *out,
                    EpProgress *progress);
