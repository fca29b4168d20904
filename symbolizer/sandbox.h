/* SPDX-License-Identifier: MIT */
#pragma once

/* Work on a file we have not seen, in a forked child with an address-space limit and a time
 * limit: libelf and libdw trust a file more than we may (a number in it can size an
 * allocation, a crafted table can make them loop or crash), and any user can map such a file.
 * Whatever the child does — allocate without bound, loop, crash — costs that child and one
 * error answer, never the symbolizer. Its time is bounded in CPU time, which is what a hostile
 * file costs: a cold disk or a loaded machine stretches the wall-clock time of any file (a
 * first table extraction took ~45 s on a fresh CI machine), and a wall-clock limit would kill
 * good files there, again at every retry. A far longer wall-clock limit only catches a child
 * stuck in I/O. Used by unwind-sandbox.c (tables) and runtime-detect.c (DetectRuntime). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct EpSandboxLimits {
        uint64_t memory_bytes; /* address space the child may add; 0 = 1 GiB */
        uint64_t cpu_usec;     /* CPU time, rounded up to whole seconds; 0 = 30 s */
        uint64_t timeout_usec; /* wall-clock time; 0 = 5 min */
} EpSandboxLimits;

/* Runs in the child: writes its result to out (ep_sandbox_write) and returns 0, or a
 * negative errno when it could not (the child then exits with a failure status). */
typedef int (*EpSandboxFn)(void *userdata, int out);

/* Runs fn(userdata, out) in a forked child under limits, holding no descriptor but the
 * standard ones, in (the file it examines) and out, and under sandbox-filter.h's filter. Returns a descriptor (ours, to close)
 * of the memfd the child wrote, to read with pread() from offset 0; or -E2BIG when the child
 * hit the memory limit, was killed by a signal or failed, -ETIME when it used up its CPU time
 * (the file is the problem), -ETIMEDOUT when it ran out of wall-clock time (the machine may
 * be), another negative errno when it could not be started. name (at most 15 bytes) names the
 * memfd and the child process (its comm). */
int ep_sandbox_run(const char *name, int in, EpSandboxFn fn, void *userdata, const EpSandboxLimits *limits);

/* Whether an error of examining a file in the sandbox (or of reading it) is the file's own: not
 * ELF or malformed, too big, crashed or used up the examination's limits, not the file the ID
 * names. Asked again, it would fail again (and as slowly): answered BadFile. The rest (out of
 * memory, out of wall-clock time, ...) are transient. */
bool ep_sandbox_error_is_file(int error);

/* write() of all n bytes, for fn. */
int ep_sandbox_write(int out, const void *p, size_t n);
