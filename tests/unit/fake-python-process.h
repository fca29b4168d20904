/* SPDX-License-Identifier: MIT */
#pragma once

/* A stand-in for the loader in the CPython symbolization tests and benchmark: the memory of
 * one child process, known to run CPython of a given version (what Loader1.OpenProcessMemory
 * answers). */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/types.h>

#include "wire.h"

typedef struct FakePythonProcess {
        pid_t pid;
        uint32_t version; /* major << 8 | minor; 0: it runs no runtime (answered "") */
} FakePythonProcess;

static inline int fake_python_open_memory(void *userdata, uint32_t pid, char *runtime, size_t size,
                                          uint32_t *ret_version) {
        const FakePythonProcess *f = userdata;
        char path[64];
        int fd;

        if ((pid_t) pid != f->pid)
                return -ENOENT;
        snprintf(path, sizeof path, "/proc/%" PRIu32 "/mem", pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -ENOENT;
        snprintf(runtime, size, "%s", f->version ? "cpython" : "");
        *ret_version = f->version;
        return fd;
}

static inline int fake_python_no_file(void *userdata, const uint8_t file_id[EP_FILE_ID_SIZE]) {
        return -ENOENT;
}
