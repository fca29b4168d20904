/* SPDX-License-Identifier: MIT */
#pragma once

/* Line-by-line reading of kernel text files (/proc/kallsyms, /proc/modules). */

#include <stddef.h>
#include <stdio.h>

/* Called with a line without its line ending (not NUL-terminated at len: the buffer holds
 * the whole line). A negative return stops the reading and is returned. */
typedef int (*ep_line_fn)(void *userdata, const char *line, size_t len);

/* Calls fn for every line of f no longer than max_len (longer ones are skipped). Returns 0,
 * fn's error, or -errno when reading fails. */
int ep_for_each_line(FILE *f, size_t max_len, ep_line_fn fn, void *userdata);

/* A stream reading a duplicate of fd (from its current position; fd stays open and owned by
 * the caller). Returns 0 or a negative errno. */
int ep_fdopen_dup(int fd, FILE **ret);
