/* SPDX-License-Identifier: MIT */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "export-progress.h"

#define PROGRESS_EVERY_NS (100 * NSEC_PER_MSEC)

void ep_progress_init(EpProgress *p, bool quiet) {
        /* The clock starts now: an export shorter than one period never draws anything. */
        *p = (EpProgress) { .enabled = !quiet && isatty(STDERR_FILENO), .last_ns = ep_now_ns(CLOCK_MONOTONIC) };
}

void ep_progress_add(EpProgress *p, uint64_t rows, uint64_t stacks) {
        if (!p)
                return;
        p->rows += rows;
        p->stacks += stacks;
        if (!p->enabled)
                return;
        uint64_t now = ep_now_ns(CLOCK_MONOTONIC);
        if (now - p->last_ns < PROGRESS_EVERY_NS)
                return;
        p->last_ns = now;
        p->shown = true;
        /* \033[K clears what a longer previous line left behind. */
        fprintf(stderr, "\r%" PRIu64 " rows read, %" PRIu64 " stacks written\033[K", p->rows, p->stacks);
        fflush(stderr);
}

void ep_progress_done(EpProgress *p) {
        if (!p || !p->shown)
                return;
        fputs("\r\033[K", stderr);
        fflush(stderr);
        p->shown = false;
}
