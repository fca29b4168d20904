/* SPDX-License-Identifier: MIT */

/* Whose memory the symbolizer may read (Loader1.OpenProcessMemory). The symbolizer is the
 * least trusted daemon (it parses every binary on the host), so a descriptor of a process's
 * memory goes to it only where a frame needs one: a process the loader tracks, that runs a
 * runtime the loader walks, and that is neither the loader nor one that made its memory
 * private (not dumpable: gpg-agent, ssh-agent, anything after a set-user-ID exec); the bus
 * layer also refuses the other daemons of the profiler (the exporter holds a backend's
 * credentials), which it asks the bus about. The descriptor reads the
 * whole address space: docs/ARCHITECTURE.md ("Process memory") says why not less.
 *
 * Everything is looked at through one directory descriptor of /proc/PID, opened first: the
 * status, the memory and the owner all belong to that one process, not to a later one that
 * got its pid. */

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loader.h"
#include "proc-parse.h"

/* The identity of dirfd's task. */
static int read_ids(int dirfd, EpStatusIds *ret) {
        char buf[4096];
        int r = ep_read_status(dirfd, buf, sizeof buf);

        if (r < 0)
                return r;
        return ep_parse_status_ids(buf, ret) < 0 ? -ESRCH : 0;
}

/* The loader's entry of pid with its mappings read now, or NULL when it has exited: an exec
 * keeps the pid, so what it runs is judged from mappings read after the memory was opened.
 * A process no sample brought yet is looked at now. */
static EpProcess *current_process(Loader *l, pid_t pid) {
        EpProcess *p = ep_proc_table_get(l->procs, pid);

        if (p && p->exit_boot_ns)
                return NULL;
        if (p) {
                if (ep_process_refresh(l->procs, p) > 0)
                        p->announced_gen = 0;
        } else if (ep_proc_table_add(l->procs, pid, &p) < 0)
                return NULL;
        else if (p->n_mappings == 0) {
                ep_proc_table_remove(l->procs, pid);
                return NULL;
        }
        loader_track_process(l, p);
        return p;
}

int loader_open_process_memory(Loader *l, pid_t pid, LoaderProcessMemory *ret) {
        _cleanup_close_ int dirfd = -EBADF, fd = -EBADF;
        EpStatusIds ids;
        char path[32];
        struct stat st;
        EpProcess *p;
        int r;

        if (pid <= 0)
                return -ESRCH;
        snprintf(path, sizeof path, "/proc/%d", (int) pid);
        dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0)
                return errno == ENOENT ? -ESRCH : -errno;
        /* /proc/TID of a thread is there too and reads its process's memory: only a process's
         * own id is answered (a thread of the exporter is the exporter). */
        r = read_ids(dirfd, &ids);
        if (r < 0)
                return r;
        if (ids.tgid != pid)
                return -ESRCH;
        fd = openat(dirfd, "mem", O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return errno == ENOENT || errno == ESRCH ? -ESRCH : -errno;

        p = current_process(l, pid);
        if (!p)
                return -ESRCH;
        if (!p->runtime)
                return loader_runtimes_detecting(l, p) ? -EAGAIN : -ENOMEDIUM;
        if (pid == getpid())
                return -EPERM;
        /* Not dumpable: the kernel gives the files in /proc/PID of such a process (not the
         * directory) to root of its user namespace instead of its effective user, as of the
         * last lookup of them. Looked at after the open, so it is the image the descriptor
         * reads (after an exec it reads nothing). A non-dumpable process whose effective user
         * is that root cannot be told: docs/ARCHITECTURE.md. */
        r = read_ids(dirfd, &ids);
        if (r < 0)
                return r;
        if (fstatat(dirfd, "status", &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? -ESRCH : -errno;
        if ((int64_t) st.st_uid != ids.euid)
                return -EPERM;

        *ret = (LoaderProcessMemory) {
                .fd = TAKE_FD(fd),
                .runtime = p->runtime,
                .runtime_version = p->runtime_version,
        };
        return 0;
}
