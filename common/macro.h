/* SPDX-License-Identifier: MIT */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "config.h"
#define EP_VERSION_STRING EP_VERSION

#define _unused_ __attribute__((unused))
#define UID_INVALID ((uid_t) -1)
/* A name unique in its translation unit, for variables a macro declares. */
#define UNIQ_T_CAT(a, b) a##b
#define UNIQ_T(prefix, n) UNIQ_T_CAT(prefix, n)
#define _pure_ __attribute__((pure))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _likely_(x) __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))
#define ALIGN8(x) (((x) + 7) & ~(size_t) 7)
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

#define NSEC_PER_SEC 1000000000ULL
#define NSEC_PER_MSEC 1000000ULL
#define NSEC_PER_USEC 1000ULL
#define USEC_PER_SEC 1000000ULL

/* Cleanup helpers: every early return releases what the scope owns. */
static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(freep)

static inline int close_nointr(int fd) {
        if (fd < 0)
                return 0;
        return close(fd) < 0 ? -errno : 0;
}
static inline void closep(int *fd) {
        (void) close_nointr(*fd);
        *fd = -EBADF;
}
#define _cleanup_close_ _cleanup_(closep)

static inline void fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}
#define _cleanup_fclose_ _cleanup_(fclosep)

/* Hands ownership out of a cleanup-managed variable. */
#define TAKE_PTR(p)                       \
        ({                                \
                __typeof__(p) _p_ = (p);  \
                (p) = NULL;               \
                _p_;                      \
        })
#define TAKE_FD(fd)                       \
        ({                                \
                int _fd_ = (fd);          \
                (fd) = -EBADF;            \
                _fd_;                     \
        })

#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)     \
        static inline void func##p(type *p) {       \
                if (*p)                             \
                        func(*p);                   \
        }

#define streq(a, b) (strcmp((a), (b)) == 0)
#define startswith(s, prefix) (strncmp((s), (prefix), strlen(prefix)) == 0)

static inline bool endswith(const char *s, const char *suffix) {
        size_t n = strlen(s), k = strlen(suffix);
        return n >= k && streq(s + n - k, suffix);
}
