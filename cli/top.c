/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "daemon.h"
#include "log.h"
#include "top.h"
#include "view-options.h"

#define MODULE_WIDTH 24

static double percent(uint64_t part, uint64_t whole) {
        return whole ? 100.0 * (double) part / (double) whole : 0.0;
}

int ep_top_print(FILE *f, const EpCallTree *tree, const EpStoreSummary *summary, size_t limit) {
        _cleanup_free_ EpFunctionStat *stats = NULL;
        size_t n;
        int r;

        r = ep_calltree_functions(tree, &stats, &n);
        if (r < 0)
                return r;

        EpViewTimes t;
        ep_view_times(summary, &t);
        fprintf(f, "%" PRIu64 " samples, %" PRIu64 " process%s, %s → %s (%s, %" PRIu64 " interval%s)\n",
                summary->samples, summary->processes, summary->processes == 1 ? "" : "es", t.first,
                t.last_shown, t.span, summary->intervals, summary->intervals == 1 ? "" : "s");

        uint64_t total = ep_calltree_node(tree, 0)->total;
        size_t shown = limit > 0 ? MIN(limit, n) : n;

        int mw = 6;
        for (size_t i = 0; i < shown; i++)
                mw = MAX(mw, (int) MIN(strlen(ep_calltree_string(tree, stats[i].frame.module)),
                                       (size_t) MODULE_WIDTH));

        fprintf(f, "\n%6s %7s %9s %9s  %-*s  %s\n", "SELF%", "TOTAL%", "SELF", "TOTAL", mw, "MODULE",
                "FUNCTION");
        for (size_t i = 0; i < shown; i++) {
                const EpFunctionStat *s = &stats[i];
                const char *module = ep_calltree_string(tree, s->frame.module);
                fprintf(f, "%5.1f%% %6.1f%% %9" PRIu64 " %9" PRIu64 "  %-*.*s  %s\n",
                        percent(s->self, total), percent(s->total, total), s->self, s->total, mw,
                        MODULE_WIDTH, module, ep_calltree_string(tree, s->frame.name));
        }
        if (shown < n)
                fprintf(f, "(%zu more function%s; --limit 0 shows all)\n", n - shown,
                        n - shown == 1 ? "" : "s");
        return 0;
}

static void help(void) {
        printf("Usage: ebpf-profiler top [OPTIONS]\n"
               "\n"
               "Lists the hottest functions in the profile store: SELF%% is the share of samples\n"
               "in which the function was running (the leaf frame), TOTAL%% the share in which it\n"
               "was anywhere on the stack (counted once per stack).\n"
               "\n"
               "Options:\n"
               EP_VIEW_OPTIONS_HELP
               "  -n, --limit N         show N functions (default 20, 0 = all)\n"
               "  -h, --help            show this help\n");
}

int verb_top(int argc, char **argv) {
        static const struct option options[] = {
                EP_VIEW_LONG_OPTIONS,
                { "limit", required_argument, NULL, 'n' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        EpViewOptions o = EP_VIEW_OPTIONS_INIT;
        uint64_t limit = 20;
        int c, r;

        opterr = 0;
        while ((c = getopt_long(argc, argv, ":hn:", options, NULL)) >= 0) {
                r = ep_view_option(&o, "top", c, optarg);
                if (r < 0)
                        return EXIT_USAGE;
                if (r > 0)
                        continue;
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case 'n':
                        if (ep_parse_uint(optarg, 0, SIZE_MAX, &limit) < 0)
                                return ep_usage_error("top", "invalid --limit '%s'", optarg);
                        break;
                default:
                        return ep_getopt_error("top", c, argv);
                }
        }
        if (optind < argc)
                return ep_usage_error("top", "unexpected argument '%s'", argv[optind]);

        _cleanup_calltree_ EpCallTree *tree = NULL;
        EpStoreSummary summary;
        r = ep_view_load(&o, "top", 0, &tree, &summary);
        if (r <= 0)
                return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;

        r = ep_top_print(stdout, tree, &summary, (size_t) limit);
        if (r < 0) {
                fprintf(stderr, "ebpf-profiler top: %s\n", strerror(-r));
                return 1;
        }
        return fflush(stdout) == 0 ? 0 : 1;
}
