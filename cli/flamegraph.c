/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "daemon.h"
#include "flamegraph-html.h"
#include "flamegraph-svg.h"
#include "view-options.h"

typedef enum Format {
        FORMAT_AUTO,
        FORMAT_HTML,
        FORMAT_SVG,
} Format;

static void help(void) {
        printf("Usage: ebpf-profiler flamegraph [OPTIONS]\n"
               "\n"
               "Writes a flame graph of the samples in the profile store: processes at the bottom,\n"
               "callers below callees, each frame as wide as its share of the samples.\n"
               "\n"
               "HTML (the default) is one self-contained, offline page: click a frame to zoom,\n"
               "search by regex or text (/ focuses the box, Esc resets; the page address may\n"
               "end in #search=TEXT), hover for samples, self and shares. SVG is a static image.\n"
               "\n"
               "With --diff-since/--diff-until the graph compares two windows: frames are sized\n"
               "by the target window (--since/--until) and coloured by how their share of all\n"
               "samples changed from the baseline window: red grew, blue shrank, the stronger the\n"
               "more. Shares are of each window's own total, so windows of different length\n"
               "compare. Functions that ran only in the baseline have no width to draw: they are\n"
               "listed below the graph. Processes are merged by function in a diff (a restarted\n"
               "program still compares with itself); use --comm or --pid to pick one.\n"
               "\n"
               "Options:\n"
               "  -o, --output FILE     where to write (default flamegraph.html, or .svg with\n"
               "                        --format svg; - for stdout)\n"
               "      --format FORMAT   html or svg (default: from the extension of FILE, else html)\n"
               "      --icicle          root at the top, callees below their callers\n"
               "      --title TEXT      the title (default \"CPU flame graph\")\n"
               "      --width PIXELS    the SVG's width (default 1200; HTML fills the window)\n"
               "      --diff-since WHEN start of the baseline window (same forms as --since)\n"
               "      --diff-until WHEN end of the baseline window (default: now)\n"
               EP_VIEW_OPTIONS_HELP
               "  -h, --help            show this help\n");
}

/* .svg means SVG; anything else (.html, -, no extension) gets the interactive page. */
static Format format_from_path(const char *path) {
        const char *dot = strrchr(path, '.');
        if (dot && !strchr(dot, '/') && strcasecmp(dot, ".svg") == 0)
                return FORMAT_SVG;
        return FORMAT_HTML;
}

static int write_format(FILE *f, Format format, const EpCallTree *tree, const EpFlameOptions *fo) {
        return format == FORMAT_SVG ? ep_flamegraph_write_svg(f, tree, fo) : ep_flamegraph_write_html(f, tree, fo);
}

static int write_output(const char *path, Format format, const EpCallTree *tree, const EpFlameOptions *fo,
                        int *ret_drawn) {
        if (streq(path, "-")) {
                int r = write_format(stdout, format, tree, fo);
                if (r < 0)
                        return r;
                *ret_drawn = r;
                return fflush(stdout) == 0 ? 0 : -errno;
        }

        /* Write next to the target and rename: a reader never sees half a file. */
        _cleanup_free_ char *tmp = NULL;
        if (asprintf(&tmp, "%s.XXXXXX", path) < 0)
                return -ENOMEM;
        int fd = mkstemp(tmp);
        if (fd < 0)
                return -errno;
        mode_t um = umask(0);
        umask(um);
        (void) fchmod(fd, 0666 & ~um); /* mkstemp makes 0600; make it like any new file */
        FILE *f = fdopen(fd, "w");
        if (!f) {
                int r = -errno;
                close(fd);
                unlink(tmp);
                return r;
        }

        int r = write_format(f, format, tree, fo);
        if (fclose(f) != 0 && r >= 0)
                r = -errno;
        if (r >= 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0) {
                unlink(tmp);
                return r;
        }
        *ret_drawn = r;
        return 0;
}

/* ", pid 42, comm app, kernel frames hidden, with source lines": what the filters left out,
 * so a page shared later still says what it shows. */
static int describe_filters(const EpViewOptions *o, char **ret) {
        _cleanup_free_ char *s = NULL;
        size_t size = 0;
        FILE *m = open_memstream(&s, &size);
        if (!m)
                return -ENOMEM;
        ep_view_describe_filter(o, m);
        if (!o->filter.kernel)
                fputs(", kernel frames hidden", m);
        if (o->lines)
                fputs(", with source lines", m);
        if (fclose(m) != 0)
                return -ENOMEM;
        *ret = TAKE_PTR(s);
        return 0;
}

/* "31 samples, 2 processes, 2024-05-01 10:00:00 to 10:05:00 (5min)" */
static int describe_window(const EpStoreSummary *summary, bool processes, char **ret) {
        EpViewTimes t;
        ep_view_times(summary, &t);
        _cleanup_free_ char *procs = NULL;
        if (processes && asprintf(&procs, ", %" PRIu64 " process%s", summary->processes,
                                  summary->processes == 1 ? "" : "es") < 0)
                return -ENOMEM;
        if (asprintf(ret, "%" PRIu64 " samples%s, %s to %s (%s)", summary->samples, procs ?: "", t.first,
                     t.last_shown, t.span) < 0)
                return -ENOMEM;
        return 0;
}

static int subtitle_for(const EpViewOptions *o, const EpStoreSummary *target, const EpStoreSummary *baseline,
                        char **ret) {
        _cleanup_free_ char *filters = NULL, *tw = NULL, *bw = NULL;
        int r = describe_filters(o, &filters);
        if (r < 0)
                return r;
        r = describe_window(target, !baseline, &tw);
        if (r < 0)
                return r;
        if (!baseline)
                return asprintf(ret, "%s%s", tw, filters) < 0 ? -ENOMEM : 0;
        r = describe_window(baseline, false, &bw);
        if (r < 0)
                return r;
        return asprintf(ret, "target: %s; baseline: %s%s", tw, bw, filters) < 0 ? -ENOMEM : 0;
}

/* Reads the baseline window (the same filters, other times) and compares the target with it. */
static int load_diff(const EpViewOptions *o, uint64_t since, uint64_t until, const EpCallTree *target,
                     EpStoreSummary *ret_summary, EpFlameDiff **ret) {
        EpStoreFilter f = o->filter;
        f.since_ns = since;
        f.until_ns = until;
        _cleanup_sqlite_ sqlite3 *db = NULL;
        _cleanup_calltree_ EpCallTree *baseline = NULL;

        int r = ep_view_open_store(o, "flamegraph", &db);
        if (r < 0)
                return r;
        r = ep_view_read(o, "flamegraph", db, &f, 0, &baseline, ret_summary);
        if (r < 0)
                return r;
        if (ret_summary->samples == 0) {
                fprintf(stderr, "ebpf-profiler flamegraph: the baseline window (--diff-since/--diff-until) has no samples to compare with.\n");
                return -ENODATA;
        }
        r = ep_flame_diff_new(target, baseline, ret);
        if (r < 0)
                fprintf(stderr, "ebpf-profiler flamegraph: comparing the windows failed: %s\n", strerror(-r));
        return r;
}

int verb_flamegraph(int argc, char **argv) {
        enum { ARG_TITLE = _EP_VIEW_ARG_MAX, ARG_WIDTH, ARG_FORMAT, ARG_ICICLE, ARG_DIFF_SINCE, ARG_DIFF_UNTIL };
        static const struct option options[] = {
                EP_VIEW_LONG_OPTIONS,
                { "output", required_argument, NULL, 'o' },
                { "format", required_argument, NULL, ARG_FORMAT },
                { "icicle", no_argument, NULL, ARG_ICICLE },
                { "title", required_argument, NULL, ARG_TITLE },
                { "width", required_argument, NULL, ARG_WIDTH },
                { "diff-since", required_argument, NULL, ARG_DIFF_SINCE },
                { "diff-until", required_argument, NULL, ARG_DIFF_UNTIL },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        EpViewOptions o = EP_VIEW_OPTIONS_INIT;
        const char *output = NULL, *title = "CPU flame graph";
        uint64_t width = 1200, diff_since = 0, diff_until = UINT64_MAX;
        bool icicle = false, diff = false;
        Format format = FORMAT_AUTO;
        int c, r;

        opterr = 0;
        while ((c = getopt_long(argc, argv, ":ho:", options, NULL)) >= 0) {
                r = ep_view_option(&o, "flamegraph", c, optarg);
                if (r < 0)
                        return EXIT_USAGE;
                if (r > 0)
                        continue;
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case 'o':
                        if (!*optarg)
                                return ep_usage_error("flamegraph", "--output needs a file name");
                        output = optarg;
                        break;
                case ARG_FORMAT:
                        if (streq(optarg, "html"))
                                format = FORMAT_HTML;
                        else if (streq(optarg, "svg"))
                                format = FORMAT_SVG;
                        else
                                return ep_usage_error("flamegraph", "invalid --format '%s' (html or svg)", optarg);
                        break;
                case ARG_ICICLE:
                        icicle = true;
                        break;
                case ARG_TITLE:
                        title = optarg;
                        break;
                case ARG_WIDTH:
                        if (ep_parse_uint(optarg, 200, 100000, &width) < 0)
                                return ep_usage_error("flamegraph", "invalid --width '%s' (200 to 100000)", optarg);
                        break;
                case ARG_DIFF_SINCE:
                case ARG_DIFF_UNTIL: {
                        uint64_t when;
                        if (ep_parse_when(optarg, ep_now_ns(CLOCK_REALTIME), &when) < 0)
                                return ep_usage_error("flamegraph", "invalid time '%s' for --%s", optarg,
                                                      c == ARG_DIFF_SINCE ? "diff-since" : "diff-until");
                        *(c == ARG_DIFF_SINCE ? &diff_since : &diff_until) = when;
                        diff = true;
                        break;
                }
                default:
                        return ep_getopt_error("flamegraph", c, argv);
                }
        }
        if (optind < argc)
                return ep_usage_error("flamegraph", "unexpected argument '%s'", argv[optind]);
        if (format == FORMAT_AUTO)
                format = output ? format_from_path(output) : FORMAT_HTML;
        if (!output)
                output = format == FORMAT_SVG ? "flamegraph.svg" : "flamegraph.html";

        /* A diff compares stacks by function: the per-process level would keep a restarted
         * program (a new pid) from matching itself. */
        _cleanup_calltree_ EpCallTree *tree = NULL;
        EpStoreSummary summary, base_summary;
        r = ep_view_load(&o, "flamegraph", diff ? 0 : EP_STORE_READ_BY_PROCESS, &tree, &summary);
        if (r <= 0)
                return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;

        _cleanup_flame_diff_ EpFlameDiff *d = NULL;
        if (diff && load_diff(&o, diff_since, diff_until, tree, &base_summary, &d) < 0)
                return EXIT_FAILURE;

        _cleanup_free_ char *subtitle = NULL;
        if (subtitle_for(&o, &summary, diff ? &base_summary : NULL, &subtitle) < 0) {
                fprintf(stderr, "ebpf-profiler flamegraph: out of memory\n");
                return EXIT_FAILURE;
        }

        EpFlameOptions fo = {
                .title = title,
                .subtitle = subtitle,
                .width = (unsigned) width,
                .icicle = icicle,
                .lines = o.lines,
                .diff = d,
        };
        int drawn = 0;
        r = write_output(output, format, tree, &fo, &drawn);
        if (r < 0) {
                fprintf(stderr, "ebpf-profiler flamegraph: cannot write %s: %s\n",
                        streq(output, "-") ? "to stdout" : output, strerror(-r));
                return EXIT_FAILURE;
        }
        if (!streq(output, "-"))
                fprintf(stderr, "Wrote %s: %" PRIu64 " samples, %d frames %s%s.\n", output, summary.samples, drawn,
                        format == FORMAT_SVG ? "drawn" : "embedded",
                        d && d->n_removed > 0 ? ", functions only in the baseline listed below the graph" : "");
        return EXIT_SUCCESS;
}
