/* SPDX-License-Identifier: MIT */
/* ebpf-profiler-collector: trace intake, de-duplication, per-interval aggregation, the local
 * store and the export ring. See docs/ARCHITECTURE.md. */

#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "collector.h"
#include "config.h"
#include "log.h"

#define INTERVAL_MIN_NS NSEC_PER_SEC
#define INTERVAL_MAX_NS (24 * 3600 * NSEC_PER_SEC)

static void help(void) {
        printf("Usage: ebpf-profiler-collector [OPTIONS]\n"
               "\n"
               "Receives traces from the ebpf-profiler loader, aggregates them per interval and\n"
               "writes them to the local profile store and, when an exporter is attached, to it.\n"
               "\n"
               "  --store PATH          profile store (default: %s)\n"
               "  --interval DURATION   aggregation interval, e.g. 5s, 10s, 1min (default: 5s)\n"
               "  --retention-age DURATION\n"
               "                        delete intervals older than this, e.g. 12h, 3d; 0: keep\n"
               "                        (default: 3d)\n"
               "  --retention-size SIZE delete the oldest intervals while the store is larger,\n"
               "                        e.g. 500M, 2G; 0: no limit (default: 1G)\n"
               "  --exporter-user NAME  the exporter's user: only it and root may open the\n"
               "                        export ring (default: " EP_EXPORTER_USER ")\n"
               "  --log-level LEVEL     debug, info, notice, warning, err, ...\n"
               "  -h --help             show this help\n"
               "  --version             show the version\n",
               EP_STATE_DIR "/profiles.db");
}

static int usage_error(const char *format, ...) _printf_(1, 2);
static int usage_error(const char *format, ...) {
        va_list ap;

        fprintf(stderr, "ebpf-profiler-collector: ");
        va_start(ap, format);
        vfprintf(stderr, format, ap);
        va_end(ap);
        fprintf(stderr, "\nTry 'ebpf-profiler-collector --help'.\n");
        return -EINVAL;
}

/* Returns 1 to run, 0 to exit successfully (--help, --version), < 0 on a usage error. */
static int parse_argv(int argc, char *argv[], Collector *c, int *ret_log_level) {
        enum { ARG_STORE = 0x100, ARG_INTERVAL, ARG_RETENTION_AGE, ARG_RETENTION_SIZE, ARG_EXPORTER_USER,
               ARG_LOG_LEVEL, ARG_VERSION };
        static const struct option options[] = {
                { "store", required_argument, NULL, ARG_STORE },
                { "interval", required_argument, NULL, ARG_INTERVAL },
                { "retention-age", required_argument, NULL, ARG_RETENTION_AGE },
                { "retention-size", required_argument, NULL, ARG_RETENTION_SIZE },
                { "exporter-user", required_argument, NULL, ARG_EXPORTER_USER },
                { "log-level", required_argument, NULL, ARG_LOG_LEVEL },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                {}
        };
        int opt;

        opterr = 0;
        while ((opt = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                switch (opt) {
                case ARG_STORE:
                        if (!*optarg)
                                return usage_error("--store needs a path.");
                        free(c->store_path);
                        c->store_path = strdup(optarg);
                        if (!c->store_path)
                                return -ENOMEM;
                        break;
                case ARG_INTERVAL: {
                        uint64_t ns;

                        if (ep_parse_duration(optarg, &ns) < 0)
                                return usage_error("Invalid --interval '%s' (examples: 5s, 10s, 1min).", optarg);
                        if (ns < INTERVAL_MIN_NS || ns > INTERVAL_MAX_NS)
                                return usage_error("--interval '%s' is out of range (1s to 24h).", optarg);
                        c->interval_ns = ns;
                        break;
                }
                case ARG_RETENTION_AGE: {
                        uint64_t ns;

                        if (ep_parse_duration(optarg, &ns) < 0)
                                return usage_error("Invalid --retention-age '%s' (examples: 12h, 3d; 0 keeps everything).", optarg);
                        if (ns > 0 && ns < EP_RETENTION_AGE_MIN_NS)
                                return usage_error("--retention-age '%s' is too short (at least 1min, or 0).", optarg);
                        c->retention.policy.max_age_ns = ns;
                        break;
                }
                case ARG_RETENTION_SIZE: {
                        uint64_t bytes;

                        if (ep_parse_size(optarg, &bytes) < 0)
                                return usage_error("Invalid --retention-size '%s' (examples: 500M, 2G; 0 for no limit).", optarg);
                        if (bytes > 0 && bytes < EP_RETENTION_SIZE_MIN)
                                return usage_error("--retention-size '%s' is too small (at least 256K, or 0).", optarg);
                        c->retention.policy.max_bytes = bytes;
                        break;
                }
                case ARG_EXPORTER_USER:
                        c->exporter_user = optarg;
                        break;
                case ARG_LOG_LEVEL:
                        *ret_log_level = log_parse_level(optarg);
                        if (*ret_log_level < 0)
                                return usage_error("Invalid --log-level '%s'.", optarg);
                        break;
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("ebpf-profiler-collector %s\n", EP_VERSION);
                        return 0;
                case ':':
                        return usage_error("Option '%s' needs a value.", argv[optind - 1]);
                default:
                        return usage_error("Unknown option '%s'.", argv[optind - 1]);
                }
        }
        if (optind < argc)
                return usage_error("Unexpected argument '%s'.", argv[optind]);
        return 1;
}

int main(int argc, char *argv[]) {
        Collector c;
        int r, log_level = -1, ret;

        r = collector_init(&c);
        if (r < 0) {
                fprintf(stderr, "ebpf-profiler-collector: out of memory\n");
                return EXIT_FAILURE;
        }
        r = parse_argv(argc, argv, &c, &log_level);
        if (r <= 0) {
                collector_done(&c);
                return r < 0 ? 2 : EXIT_SUCCESS;
        }
        if (!c.store_path) {
                c.store_path = strdup(EP_STATE_DIR "/profiles.db");
                if (!c.store_path)
                        return EXIT_FAILURE;
        }

        r = ep_daemon_setup(&c.daemon, "ebpf-profiler-collector");
        if (r < 0) {
                collector_done(&c);
                return EXIT_FAILURE;
        }
        ep_daemon_drop_exporter_environment(&c.daemon);
        c.exporter_uid = ep_peer_user_uid(c.exporter_user, "--exporter-user");
        if (log_level >= 0)
                log_set_max_level(log_level);

        r = store_open(c.store_path, &c.store);
        if (r < 0) {
                log_error_errno(r, "Cannot use the profile store %s; exiting.", c.store_path);
                ep_daemon_done(&c.daemon);
                collector_done(&c);
                return EXIT_FAILURE;
        }
        r = collector_store_opened(&c);
        if (r < 0)
                log_warning_errno(r, "Cannot read the totals of %s: %m", c.store_path);

        c.have_daemon = true;
        r = collector_bus_setup(&c);
        if (r < 0) {
                collector_bus_done(&c);
                ep_daemon_done(&c.daemon);
                collector_done(&c);
                return EXIT_FAILURE;
        }
        ep_daemon_status(&c.daemon, "Writing to %s every %" PRIu64 " ms", c.store_path,
                         (uint64_t) (c.interval_ns / NSEC_PER_MSEC));

        ret = ep_daemon_run(&c.daemon);

        /* Keep what was collected: write the open interval without waiting for symbols. */
        c.have_daemon = false;
        collector_drain_traces(&c);
        collector_sym_drain(&c);
        (void) collector_close_interval(&c, NULL);
        collector_finish_closing(&c);

        collector_bus_done(&c);
        ep_daemon_done(&c.daemon);
        collector_done(&c);
        return ret;
}
