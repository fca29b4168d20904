/* SPDX-License-Identifier: MIT */
#pragma once

/* Options every view of the store shares (top, flamegraph, and later exports): where the store
 * is, and which samples to show. */

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "store-read.h"

typedef struct EpViewOptions {
        const char *store;
        EpStoreFilter filter;
        bool lines; /* --lines: EP_STORE_READ_LINES */
} EpViewOptions;

#define EP_VIEW_OPTIONS_INIT \
        ((EpViewOptions) { .store = EP_STORE_DEFAULT_PATH, .filter = EP_STORE_FILTER_INIT })

enum {
        EP_VIEW_ARG_STORE = 0x100,
        EP_VIEW_ARG_PID,
        EP_VIEW_ARG_COMM,
        EP_VIEW_ARG_SINCE,
        EP_VIEW_ARG_UNTIL,
        EP_VIEW_ARG_KERNEL,
        EP_VIEW_ARG_NO_KERNEL,
        EP_VIEW_ARG_LINES,
        _EP_VIEW_ARG_MAX,
};

#define EP_VIEW_LONG_OPTIONS                                               \
        { "store", required_argument, NULL, EP_VIEW_ARG_STORE },           \
        { "pid", required_argument, NULL, EP_VIEW_ARG_PID },               \
        { "comm", required_argument, NULL, EP_VIEW_ARG_COMM },             \
        { "since", required_argument, NULL, EP_VIEW_ARG_SINCE },           \
        { "until", required_argument, NULL, EP_VIEW_ARG_UNTIL },           \
        { "kernel", no_argument, NULL, EP_VIEW_ARG_KERNEL },               \
        { "no-kernel", no_argument, NULL, EP_VIEW_ARG_NO_KERNEL },         \
        { "lines", no_argument, NULL, EP_VIEW_ARG_LINES }

#define EP_VIEW_OPTIONS_HELP                                                                 \
        "      --store PATH      the profile store (default " EP_STORE_DEFAULT_PATH ")\n"     \
        "      --pid PID         only this process\n"                                        \
        "      --comm NAME       only processes with this command name (exactly)\n"          \
        "      --since WHEN      only samples after WHEN: a time ago (10m, 1h, 2d),\n"       \
        "                        unix seconds, or \"YYYY-MM-DD HH:MM[:SS]\" (local time)\n"  \
        "      --until WHEN      only samples before WHEN (same forms)\n"                    \
        "      --kernel          show kernel frames (the default)\n"                         \
        "      --no-kernel       hide kernel frames\n"                                       \
        "      --lines           name functions with their source file and line\n"

/* Handles one of the EP_VIEW_ARG_* options. Returns 1 if c was one, 0 if not, -EINVAL after
 * printing what is wrong with the value. */
int ep_view_option(EpViewOptions *o, const char *verb, int c, const char *arg);

/* Parses WHEN relative to now_ns (CLOCK_REALTIME). */
int ep_parse_when(const char *s, uint64_t now_ns, uint64_t *ret_ns);

/* Opens the store. Returns 0, or a negative errno after printing a clear message. */
int ep_view_open_store(const EpViewOptions *o, const char *verb, sqlite3 **ret);

/* Reads the samples o selects from its store into a new call tree. Returns 1 with *ret_tree and
 * *ret_summary set; 0 after saying on stdout that no samples match (nothing to show, not an
 * error); a negative errno after saying on stderr what went wrong. */
int ep_view_load(const EpViewOptions *o, const char *verb, EpStoreReadFlags flags, EpCallTree **ret_tree,
                 EpStoreSummary *ret_summary);

/* Prints that nothing matched (not an error: exit 0). */
void ep_view_print_no_samples(const EpViewOptions *o);

/* Writes "2024-05-01 10:00:00" (local time) to buf. */
void ep_format_time(uint64_t ns, char *buf, size_t size);
/* Writes a short duration, "1h 5min", "42s", "350ms". */
void ep_format_span(uint64_t ns, char *buf, size_t size);

/* When the samples of a summary were taken, as the views print it: first and last time, the last
 * without its date when it is the same day (last_shown), and how long that is. */
typedef struct EpViewTimes {
        char first[32], last[32], span[32];
        const char *last_shown;
} EpViewTimes;
void ep_view_times(const EpStoreSummary *summary, EpViewTimes *ret);

/* Prints the usual message for a bad command line and returns the exit code for it (2). */
int ep_usage_error(const char *verb, const char *format, ...) _printf_(2, 3);
/* For getopt's '?' and ':' results (c), with the optstring starting with ':'. */
int ep_getopt_error(const char *verb, int c, char **argv);

#define EXIT_USAGE 2
