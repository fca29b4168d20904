/* SPDX-License-Identifier: MIT */
#pragma once

/* Parsers for the /proc and /sys text the loader reads. Pure functions over text, so they are
 * unit-tested without root (tests/unit/test-loader-proc-maps.c). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One line of /proc/PID/maps:
 *   START-END PERMS PGOFF MAJOR:MINOR INODE [PATH]
 * path points into the parsed line ("" for anonymous mappings); " (deleted)" is kept. */
typedef struct EpMapsLine {
        uint64_t start, end, pgoff;
        uint32_t dev_major, dev_minor;
        uint64_t inode;
        bool read, write, exec, shared;
        const char *path;
} EpMapsLine;

/* Parses one line; a trailing newline is removed (the line is modified). -EINVAL when the
 * line is malformed. */
int ep_parse_maps_line(char *line, EpMapsLine *ret);

/* True for mappings backed by a file (inode != 0 and a path that is not "[...]"). */
bool ep_maps_line_is_file(const EpMapsLine *m);

/* /proc/PID/stat: the start time (field 22, clock ticks since boot). The comm field may hold
 * spaces and parentheses, so fields are counted from the last ')'. */
int ep_parse_stat_starttime(const char *stat, uint64_t *ret_ticks);

/* What /proc/PID/status says of a task's identity. */
typedef struct EpStatusIds {
        int64_t tgid;         /* its process (thread group) */
        int64_t uid, euid;    /* real and effective user, as seen from our user namespace */
} EpStatusIds;

/* The value of the line "name:..." of /proc/PID/status text (after the colon), or NULL. A comm
 * cannot fake a line: the kernel escapes its newlines. */
const char *ep_status_field(const char *status, const char *name);

/* "NSpid:" of /proc/PID/status text: the innermost pid (the one the process writes into its
 * perf map's name). Returns -ENOENT when the field is missing. */
int ep_parse_status_nspid(const char *status, pid_t *ret);

/* Reads the first size - 1 bytes of "status" in the /proc/PID directory proc_dirfd, NUL-
 * terminated: the identity lines come first (the list of groups that can make it long comes
 * after them). -ESRCH when the process is gone. */
int ep_read_status(int proc_dirfd, char *buf, size_t size);

/* /proc/PID/status: the "Tgid:" and "Uid:" lines (-EINVAL when either is missing or
 * malformed). */
int ep_parse_status_ids(const char *status, EpStatusIds *ret);

/* /proc/PID/cgroup: the container ID, i.e. the last run of exactly 64 hex digits in a cgroup
 * path (docker-<id>.scope, /docker/<id>, cri-containerd-<id>.scope, /kubepods/.../<id>).
 * ret is "" when there is none. */
void ep_parse_container_id(const char *cgroup, char ret[65]);

/* A CPU list as in /sys/devices/system/cpu/online ("0-3,5,7-8"). Sets ret[i] for every listed
 * CPU below n and returns the number listed, or -EINVAL. */
int ep_parse_cpu_list(const char *s, bool *ret, size_t n);
