/* SPDX-License-Identifier: MIT */
#pragma once

/* Kernel settings and limits of the calling process, as the daemons and the CLI read them. */

#include <stdint.h>

/* The integer in /proc/sys/<name> ("kernel/perf_event_paranoid"): 0 and *ret, or a negative
 * errno (-EBADMSG when it holds no integer). */
int ep_sysctl_int(const char *name, long *ret);

/* Leaves only the capabilities in keep (bit N: capability N) in the bounding set, so that none
 * other can be regained by an exec. Dropping needs CAP_SETPCAP. 0, or the negative errno of the
 * first drop the kernel refused. */
int ep_bounding_set_limit(uint64_t keep);
