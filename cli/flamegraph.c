/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "daemon.h"
#include "flamegraph-svg.h"
#include "view-options.h"

static void help(void) {
        printf("Usage: ebpf-profiler flamegraph [OPTIONS]\n"
               "\n"
               "Writes an SVG flame graph of the samples in the profile store: processes at the\n"
               "bottom, callers below callees, each frame as wide as its share of the samples.\n"
               "Hover a frame for its name, samples and percentage.\n"
               "\n"
               "Options:\n"
               "  -o, --output FILE     where to write (default flamegraph.svg; - for stdout)\n"
               "      --title TEXT      the title (default \"CPU flame graph\")\n"
               "      --width PIXELS    the image width (default 1200)\n"
               EP_VIEW_OPTIONS_HELP
               "  -h, --help            show this help\n");
}

static int write_svg(const char *path, const EpCallTree *tree, const EpFlameOptions *fo, int *ret_drawn) {
        if (streq(path, "-")) {
                int r = ep_flamegraph_write_svg(stdout, tree, fo);
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

        int r = ep_flamegraph_write_svg(f, tree, fo);
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

int verb_flamegraph(int argc, char **argv) {
        enum { ARG_TITLE = _EP_VIEW_ARG_MAX, ARG_WIDTH };
        static const struct option options[] = {
                EP_VIEW_LONG_OPTIONS,
                { "output", required_argument, NULL, 'o' },
                { "title", required_argument, NULL, ARG_TITLE },
                { "width", required_argument, NULL, ARG_WIDTH },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        EpViewOptions o = EP_VIEW_OPTIONS_INIT;
        const char *output = "flamegraph.svg", *title = "CPU flame graph";
        uint64_t width = 1200;
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
                case ARG_TITLE:
                        title = optarg;
                        break;
                case ARG_WIDTH:
                        if (ep_parse_uint(optarg, 200, 100000, &width) < 0)
                                return ep_usage_error("flamegraph", "invalid --width '%s' (200 to 100000)", optarg);
                        break;
                default:
                        return ep_getopt_error("flamegraph", c, argv);
                }
        }
        if (optind < argc)
                return ep_usage_error("flamegraph", "unexpected argument '%s'", argv[optind]);

        _cleanup_calltree_ EpCallTree *tree = NULL;
        EpStoreSummary summary;
        r = ep_view_load(&o, "flamegraph", EP_STORE_READ_BY_PROCESS, &tree, &summary);
        if (r <= 0)
                return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;

        EpViewTimes t;
        ep_view_times(&summary, &t);
        _cleanup_free_ char *subtitle = NULL;
        if (asprintf(&subtitle, "%" PRIu64 " samples, %" PRIu64 " process%s, %s to %s (%s)%s",
                     summary.samples, summary.processes, summary.processes == 1 ? "" : "es", t.first,
                     t.last_shown, t.span, o.filter.kernel ? "" : ", kernel frames hidden") < 0) {
                fprintf(stderr, "ebpf-profiler flamegraph: out of memory\n");
                return 1;
        }

        EpFlameOptions fo = { .title = title, .subtitle = subtitle, .width = (unsigned) width };
        int drawn = 0;
        r = write_svg(output, tree, &fo, &drawn);
        if (r < 0) {
                fprintf(stderr, "ebpf-profiler flamegraph: cannot write %s: %s\n",
                        streq(output, "-") ? "to stdout" : output, strerror(-r));
                return 1;
        }
        if (!streq(output, "-"))
                fprintf(stderr, "Wrote %s: %" PRIu64 " samples, %d frames drawn.\n", output, summary.samples, drawn);
        return 0;
}
