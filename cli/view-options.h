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
        EP_VIEW_ARG_CONTAINER,
        EP_VIEW_ARG_THREAD,
        _EP_VIEW_ARG_MAX,
};

#define EP_VIEW_LONG_OPTIONS                                               \
        { "store", required_argument, NULL, EP_VIEW_ARG_STORE },           \
        { "pid", required_argument, NULL, EP_VIEW_ARG_PID },               \
        { "comm", required_argument, NULL, EP_VIEW_ARG_COMM },             \
        { "container", required_argument, NULL, EP_VIEW_ARG_CONTAINER },   \
        { "thread", required_argument, NULL, EP_VIEW_ARG_THREAD },         \
        { "since", required_argument, NULL, EP_VIEW_ARG_SINCE },           \
        { "until", required_argument, NULL, EP_VIEW_ARG_UNTIL },           \
        { "kernel", no_argument, NULL, EP_VIEW_ARG_KERNEL },               \
        { "no-kernel", no_argument, NULL, EP_VIEW_ARG_NO_KERNEL },         \
        { "lines", no_argument, NULL, EP_VIEW_ARG_LINES }

#define EP_VIEW_OPTIONS_HELP                                                                 \
        "      --store PATH      the profile store (default " EP_STORE_DEFAULT_PATH ")\n"     \
        "      --pid PID         only this process; repeat for any of several\n"             \
        "      --comm NAME       only processes with this command name (exactly); repeat\n"  \
        "                        for any of several. Different filters must all match.\n"   \
        "      --container ID    only processes in this container: its ID or a unique\n"     \
        "                        prefix of at least 4 characters\n"                          \
        "      --thread TID|NAME only this thread: a thread ID, or a thread name (exactly)\n" \
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

/* The same from a store already open, with filter f in place of o's (views that read more than
 * once, top --live): 0 with a new tree, empty when nothing matches; a negative errno after saying
 * on stderr what went wrong. */
int ep_view_read(const EpViewOptions *o, const char *verb, sqlite3 *db, const EpStoreFilter *f,
                 EpStoreReadFlags flags, EpCallTree **ret_tree, EpStoreSummary *ret_summary);

/* Says on stderr why reading o's store failed with error (from ep_store_read*()): a container
 * prefix that names several containers lists them. */
void ep_view_read_error(const EpViewOptions *o, const char *verb, sqlite3 *db, int error);

/* Writes which samples o's filter selects, for titles: ", pid 42 or 43, comm app, container
 * 3f2a, thread 1234"; nothing when it selects every process and thread (times and kernel
 * frames are left to the caller). */
void ep_view_describe_filter(const EpViewOptions *o, FILE *f);

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
