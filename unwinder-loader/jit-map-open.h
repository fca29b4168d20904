/* SPDX-License-Identifier: MIT */
#pragma once

/* Opening files a process writes for profilers, on behalf of the unprivileged symbolizer
 * (Loader1.OpenPerfMap, OpenKernelModules). The loader runs as root and hands the descriptor
 * to another user, so a path a process controls must never lead elsewhere: the perf map is
 * resolved inside the process's own root with no symlinks at all, must be a regular file
 * owned by the process's user (or root), and is opened non-blocking (a FIFO cannot hang us). */

#include <sys/types.h>

#define EP_PERF_MAP_MAX_SIZE (256ull << 20) /* bigger maps are refused (-EFBIG) */

/* /tmp/perf-<nspid>.map as the process sees it. -ENOENT no map, -EPERM owner mismatch or not
 * a regular file, -EFBIG too big, -ESRCH no such process. */
int ep_open_perf_map(pid_t pid);
