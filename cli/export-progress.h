/* SPDX-License-Identifier: MIT */
#pragma once

/* Progress of a long export on stderr: one line rewritten in place (\r), at most ~10 times a
 * second, only when stderr is a terminal and the user did not ask for --quiet. */

#include <stdbool.h>
#include <stdint.h>

typedef struct EpProgress {
        bool enabled;
        bool shown;       /* a line is on the terminal and must be cleared */
        uint64_t last_ns; /* CLOCK_MONOTONIC of the last update */
        uint64_t rows, stacks;
} EpProgress;

/* Enabled unless quiet or stderr is not a terminal. */
void ep_progress_init(EpProgress *p, bool quiet);
/* Adds to the counters and redraws when the last update is old enough. p may be NULL. */
void ep_progress_add(EpProgress *p, uint64_t rows, uint64_t stacks);
/* Erases the line (before the final message, or an error). */
void ep_progress_done(EpProgress *p);
