/* SPDX-License-Identifier: MIT */
#pragma once

/* A clock read in nanoseconds, for code that may not link the daemon helpers (daemon.h's
 * ep_now_ns(), which tests can override, is built on this). */

#include <stdint.h>
#include <time.h>

#include "macro.h"

static inline uint64_t ep_clock_ns(clockid_t clock) {
        struct timespec ts;

        (void) clock_gettime(clock, &ts);
        return (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
}
