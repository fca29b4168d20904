/* SPDX-License-Identifier: MIT */
#pragma once

/* Shared by the C benchmarks: a millisecond clock and the biggest libLLVM on the machine (the
 * largest shared library a profiler commonly meets). */

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define BENCH_LIBDIR "/usr/lib/x86_64-linux-gnu"

static inline double bench_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

/* A new string, or NULL when there is none. */
static inline char *bench_biggest_llvm(void) {
        DIR *d = opendir(BENCH_LIBDIR);
        struct dirent *de;
        off_t best = 0;
        char *path = NULL;

        if (!d)
                return NULL;
        while ((de = readdir(d))) {
                char p[512];
                struct stat st;

                if (strncmp(de->d_name, "libLLVM", 7) != 0)
                        continue;
                snprintf(p, sizeof p, "%s/%s", BENCH_LIBDIR, de->d_name);
                if (lstat(p, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > best) {
                        best = st.st_size;
                        free(path);
                        path = strdup(p);
                }
        }
        closedir(d);
        return path;
}
