/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "jit-map-open.h"
#include "macro.h"
#include "proc-parse.h"

int ep_open_perf_map(pid_t pid) {
        char buf[4096], path[64];
        _cleanup_close_ int proc = -EBADF, root = -EBADF, fd = -EBADF;
        struct stat proc_st, st;
        pid_t nspid;
        int r;

        if (pid <= 0)
                return -EINVAL;
        snprintf(path, sizeof(path), "/proc/%d", (int) pid);
        proc = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (proc < 0)
                return errno == ENOENT ? -ESRCH : -errno;
        r = ep_read_status(proc, buf, sizeof(buf));
        if (r < 0)
                return r;
        r = ep_parse_status_nspid(buf, &nspid);
        if (r == -ENOENT)
                nspid = pid; /* kernels without NSpid: no pid namespaces to translate */
        else if (r < 0)
                return r;

        snprintf(path, sizeof(path), "/proc/%d/root", (int) pid);
        root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
                return errno == ENOENT ? -ESRCH : -errno;
        if (fstat(proc, &proc_st) < 0)
                return -ESRCH;

        struct open_how how = {
                .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW,
                .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        snprintf(path, sizeof(path), "tmp/perf-%d.map", (int) nspid);
        fd = (int) syscall(SYS_openat2, root, path, &how, sizeof(how));
        if (fd < 0)
                return errno == ELOOP ? -EPERM : -errno;

        if (fstat(fd, &st) < 0)
                return -errno;
        /* /proc/PID is owned by the process's effective user. */
        if (!S_ISREG(st.st_mode) || (st.st_uid != proc_st.st_uid && st.st_uid != 0))
                return -EPERM;
        if ((uint64_t) st.st_size > EP_PERF_MAP_MAX_SIZE)
                return -EFBIG;
        return TAKE_FD(fd);
}
