/* SPDX-License-Identifier: MIT */
#pragma once

/* Failures that say nothing about the thing asked for and may pass: a peer that timed out, is
 * away or restarting, a descriptor gone stale, resources short. Whoever meets one asks again
 * later instead of taking it for an answer (the loader's OpenFile, the symbolizer's RETRY). The
 * one list of them, read by both daemons. */

#include <errno.h>
#include <stdbool.h>

static inline bool ep_error_passing(int error) {
        switch (error) {
        case -ETIMEDOUT:
        case -ENXIO:
        case -EAGAIN:
        case -EINTR:
        case -EBUSY:
        case -EMFILE:
        case -ENFILE:
        case -ENOMEM:
        case -ENOBUFS:
        case -ECONNRESET:
        case -ENOTCONN:
        case -EBADMSG:
        case -ESTALE:
                return true;
        default:
                return false;
        }
}
