/* SPDX-License-Identifier: MIT */
#pragma once

/* The collapsed-stack text format of flamegraph.pl (and speedscope, inferno, ...): one line
 * per distinct stack, frames root first separated by ';', then a space and the sample count.
 * Lines are sorted, so the output of one store is always the same. */

#include <stdio.h>

#include "export-model.h"

typedef enum EpFoldedFlags {
        /* The first frame is the process, "comm (pid)", as in the flame graph; without it the
         * same stack in two processes is one line. */
        EP_FOLDED_PROCESS = 1 << 0,
        /* Frames with a source position are named "f (file.c:12)", as with --lines. */
        EP_FOLDED_LINES = 1 << 1,
} EpFoldedFlags;

int ep_folded_write(const EpExportModel *m, EpFoldedFlags flags, FILE *out, EpProgress *progress);

/* Makes a frame name safe for the format, in place: ';' (the separator) becomes ':', control
 * characters (a newline would end the line) become spaces. */
void ep_folded_sanitize(char *name);
