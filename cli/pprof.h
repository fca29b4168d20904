/* SPDX-License-Identifier: MIT */
#pragma once

/* The export model as a gzipped pprof profile (proto/pprof/profile.proto), the file
 * `go tool pprof` and the tools built on its format read:
 *  - sample types samples/count and cpu/nanoseconds (count × the interval's period), period
 *    type cpu/nanoseconds, period = the latest interval's, time and duration from the window;
 *  - one Sample per (process, thread, stack) with the labels pid, tid (numbers), comm and
 *    thread (strings);
 *  - one Location per stored frame, its inline lines as Line entries innermost first (the
 *    last Line is the caller); a native frame keeps its ELF address (the file offset while the
 *    symbolizer gave none) and, unsymbolized, has no Line so pprof can symbolize it from the
 *    binary; frames pprof cannot symbolize (kernel addresses without a name, JIT code without
 *    one, unwinding stops) get a Function named as the views name them;
 *  - one Mapping per file (path, GNU build ID in hex; has_functions etc. when every frame in
 *    it is symbolized), one "[kernel.kallsyms]" Mapping for kernel frames;
 *  - Functions de-duplicated by (name, source file). */

#include <stdio.h>

#include "export-model.h"

/* Writes the profile to out (gzip). */
int ep_pprof_write(const EpExportModel *m, FILE *out, EpProgress *progress);
