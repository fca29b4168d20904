/* SPDX-License-Identifier: MIT */
#pragma once

/* Small helpers for the processes `ebpf-profiler run` starts. */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* In a freshly forked child: default dispositions, nothing blocked. */
void ep_child_reset_signals(void);

/* SIGTERM, wait up to timeout_ns, then SIGKILL and wait. Returns 0 with the wait status, or a
 * negative errno (-ECHILD if pid was already reaped). */
int ep_kill_and_wait(pid_t pid, uint64_t timeout_ns, int *ret_status);

/* "exited with status 1", "was killed by signal TERM". */
const char *ep_wait_status_string(int code, int status, char *buf, size_t size);

/* Frees a NULL-terminated array of strings (an argv or environment) and the strings. */
void ep_strv_free(char **v);
