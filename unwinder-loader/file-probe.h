/* SPDX-License-Identifier: MIT */
#pragma once

/* Opening and identifying the files processes map, without letting a process stop the loader.
 * A file is opened by a path that names the mapped inode itself (/proc/PID/map_files), and
 * only if it is a regular file; but a regular file can sit on a file system a user serves
 * (FUSE) or on a disk that stopped answering, and an open or a read of it can then wait
 * forever. The loader's event loop must not: its watchdog would kill it, and the user could
 * repeat that at will. So each probe runs on a thread of its own and the loop waits for its
 * answer at most EP_FILE_PROBE_WAIT_MS from the thread's start (and as long for the start: a
 * thread not started by then ends the probe with -EAGAIN). A probe that takes longer is a
 * passing failure (-ETIMEDOUT: the mapping is looked at again later), and its thread is left
 * to end by itself;
 * while a probe of a device is stuck, no other probe of that device starts (-ETIMEDOUT at
 * once), so one hostile mount costs one thread and one wait, not one per file. */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "file-id.h"
#include "macro.h"

#define EP_FILE_PROBE_WAIT_MS 200
#define EP_FILE_PROBE_STUCK_MAX 64 /* stuck probes at most; beyond, every probe is refused */

typedef struct EpFileProber EpFileProber;

/* What a probe does, on its thread. */
typedef enum EpFileProbeFlags {
        EP_FILE_PROBE_IDENTIFY = 1 << 0, /* the file's ID and size */
        /* The descriptor is an O_PATH one: no read, but the inode held (its number is the
         * file's while the descriptor is open), and no file system called when it is closed
         * (a readable descriptor of a FUSE file waits for its server in close()). */
        EP_FILE_PROBE_PIN = 1 << 1,
} EpFileProbeFlags;

/* A probe's answer: path opened (a descriptor, or a negative errno), and with
 * EP_FILE_PROBE_IDENTIFY, the file's identity. Replaceable for tests
 * (ep_file_prober_set_work()). */
typedef struct EpFileProbeResult {
        int fd;
        EpFileIdentity ident;
} EpFileProbeResult;
typedef int (*ep_file_probe_work_t)(const char *path, EpFileProbeFlags flags, EpFileProbeResult *ret);

int ep_file_prober_new(EpFileProber **ret);
/* Stuck probes keep what they need: freeing never waits for them. */
EpFileProber *ep_file_prober_free(EpFileProber *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpFileProber *, ep_file_prober_free);
void ep_file_prober_set_work(EpFileProber *p, ep_file_probe_work_t work);

/* The regular file at path (on device dev), opened read-only: its descriptor in *ret_fd when
 * ret_fd is given, its identity when ret_ident is given. -EBADFD: not a regular file;
 * -ETIMEDOUT: it did not answer in time (or its device has a probe stuck); else the errno. */
int ep_file_probe(EpFileProber *p, const char *path, dev_t dev, int *ret_fd, EpFileIdentity *ret_ident);
/* The same, identifying the file and holding it: *ret_pin is an O_PATH descriptor of the inode
 * identified (EP_FILE_PROBE_PIN). */
int ep_file_probe_pin(EpFileProber *p, const char *path, dev_t dev, int *ret_pin, EpFileIdentity *ret_ident);

/* Probes that did not answer in time, and those of them still running. */
uint64_t ep_file_prober_timeouts(const EpFileProber *p);
unsigned ep_file_prober_stuck(EpFileProber *p);
