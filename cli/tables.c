/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus-util.h"
#include "bus.h"
#include "cli.h"
#include "daemon.h"
#include "grow-array.h"
#include "terminal-text.h"
#include "view-options.h"

typedef struct TableRow {
        const char *path, *state; /* point into the reply */
        uint64_t state_usec, bytes;
        uint32_t attempts;
        int waited_for;
} TableRow;

static void help(void) {
        printf("Usage: ebpf-profiler tables [--pid PID] [--pending]\n"
               "\n"
               "Lists the unwind table of each file a process maps (of every file the loader\n"
               "tracks without --pid): whether it is loaded, still on its way, or why not.\n"
               "This is where to look when a process's stacks stop short. Tables that samples\n"
               "still wait for come first, the longest waiting first. Needs root: it shows which\n"
               "files every process maps.\n"
               "\n"
               "Options:\n"
               "      --pid PID   only the files this process maps\n"
               "      --pending   only the tables samples still wait for\n"
               "  -h, --help      show this help\n");
}

/* Waited for first, longest first; then by state, then path. */
static int row_compare(const void *a, const void *b) {
        const TableRow *x = a, *y = b;
        int r;

        if (x->waited_for != y->waited_for)
                return x->waited_for ? -1 : 1;
        if (x->waited_for && x->state_usec != y->state_usec)
                return x->state_usec > y->state_usec ? -1 : 1;
        r = strcmp(x->state, y->state);
        return r ? r : strcmp(x->path, y->path);
}

static int read_rows(sd_bus_message *reply, TableRow **ret, size_t *ret_n) {
        _cleanup_free_ TableRow *rows = NULL;
        size_t n = 0, cap = 0;
        int r;

        r = sd_bus_message_enter_container(reply, 'a', "(sstbtu)");
        if (r < 0)
                return r;
        for (;;) {
                TableRow row;

                r = sd_bus_message_read(reply, "(sstbtu)", &row.path, &row.state, &row.state_usec, &row.waited_for,
                                        &row.bytes, &row.attempts);
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                if (ARRAY_PUSH(rows, n, cap, row) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(rows);
        *ret_n = n;
        return sd_bus_message_exit_container(reply);
}

/* The rows as text into f (paths are the processes' own: ep_utf8_sanitize_text()). */
static void print_rows(FILE *f, const TableRow *rows, size_t n, bool pending_only) {
        size_t waited = 0;

        fprintf(f, "%-14s %-6s %9s %9s %5s  %s\n", "STATE", "WAITED", "FOR", "BYTES", "TRIES", "PATH");
        for (size_t i = 0; i < n; i++) {
                const TableRow *t = &rows[i];
                char bytes[32] = "-";

                waited += t->waited_for;
                if (pending_only && !t->waited_for)
                        continue;
                if (t->bytes > 0)
                        snprintf(bytes, sizeof bytes, "%.1fK", (double) t->bytes / 1024.0);
                fprintf(f, "%-14s %-6s %8.1fs %9s %5" PRIu32 "  %s\n", t->state, t->waited_for ? "yes" : "no",
                        (double) t->state_usec / 1e6, bytes, t->attempts, *t->path ? t->path : "?");
        }
        fprintf(f, "%zu file%s, %zu table%s still waited for.\n", n, n == 1 ? "" : "s", waited,
                waited == 1 ? "" : "s");
}

int verb_tables(int argc, char **argv) {
        enum { ARG_PID = 0x100, ARG_PENDING };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "pid", required_argument, NULL, ARG_PID },
                { "pending", no_argument, NULL, ARG_PENDING },
                {},
        };
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        _cleanup_free_ char *address = NULL;
        _cleanup_free_ TableRow *rows = NULL;
        const char *source = NULL;
        bool pending_only = false;
        uint64_t pid_arg = 0;
        size_t n = 0;
        int c, r;

        opterr = 0;
        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_PID:
                        if (ep_parse_uint(optarg, 1, INT32_MAX, &pid_arg) < 0)
                                return ep_usage_error("tables", "invalid PID '%s'", optarg);
                        break;
                case ARG_PENDING:
                        pending_only = true;
                        break;
                default:
                        return ep_getopt_error("tables", c, argv);
                }
        if (optind < argc)
                return ep_usage_error("tables", "unexpected argument '%s'", argv[optind]);

        r = ep_bus_open_for_views(&bus, &address, &source);
        if (r < 0) {
                fprintf(stderr, "No D-Bus system bus answers (%s): ebpf-profiler is not running.\n", strerror(-r));
                return EXIT_NOT_RUNNING;
        }
        r = sd_bus_call_method(bus, EP_BUS_LOADER, EP_PATH_LOADER, EP_IFACE_LOADER, "ListTables", &error, &reply,
                               "u", (uint32_t) pid_arg);
        if (r < 0) {
                fprintf(stderr, "Cannot list the unwind tables: %s\n", error.message ?: strerror(-r));
                return sd_bus_error_has_name(&error, SD_BUS_ERROR_SERVICE_UNKNOWN) ||
                                       sd_bus_error_has_name(&error, SD_BUS_ERROR_NAME_HAS_NO_OWNER)
                               ? EXIT_NOT_RUNNING
                               : 1;
        }
        r = read_rows(reply, &rows, &n);
        if (r < 0) {
                fprintf(stderr, "Cannot read the loader's answer: %s\n", strerror(-r));
                return 1;
        }
        if (n > 1)
                qsort(rows, n, sizeof *rows, row_compare);
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);
        if (!f)
                return 1;
        print_rows(f, rows, n, pending_only);
        if (fclose(f) != 0 || ep_terminal_text_write(stdout, text, size) < 0)
                return 1;
        return fflush(stdout) == 0 ? 0 : 1;
}
