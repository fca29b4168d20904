/* SPDX-License-Identifier: MIT */

/* ebpf-profiler-exporter: sends the collector's finished intervals to an OTLP endpoint
 * (profiles signal, OTLP/HTTP with protobuf and gzip) and serves org.ebpfprofiler.Exporter1. */

#include <curl/curl.h>
#include <getopt.h>
#include <limits.h>

#include "bus.h"
#include "config.h"
#include "exporter.h"
#include "log.h"

#define OTLP_PROFILES_PATH "/v1development/profiles"
#define ENDPOINT_MAX 2048

static int arg_log_level = -1;

static void help(void) {
        printf("Usage: ebpf-profiler-exporter [OPTIONS]\n"
               "\n"
               "Sends the collector's finished intervals to an OpenTelemetry (OTLP/HTTP) profiles\n"
               "endpoint (D-Bus name " EP_BUS_EXPORTER "). Without an endpoint it stays idle.\n"
               "\n"
               "  --endpoint URL       full URL to POST to, e.g.\n"
               "                       http://collector:4318" OTLP_PROFILES_PATH "\n"
               "                       (default: $OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT, else\n"
               "                       $OTEL_EXPORTER_OTLP_ENDPOINT + \"" OTLP_PROFILES_PATH "\")\n"
               "  --log-level LEVEL    err, warning, notice, info (default) or debug\n"
               "  --help               show this help\n"
               "  --version            show the version\n");
}

/* http:// or https://, a host, printable ASCII without spaces. */
static int check_endpoint(const char *url, const char *origin) {
        const char *rest;

        if (startswith(url, "http://"))
                rest = url + strlen("http://");
        else if (startswith(url, "https://"))
                rest = url + strlen("https://");
        else {
                fprintf(stderr, "ebpf-profiler-exporter: invalid endpoint '%s' (from %s): expected an "
                                "http:// or https:// URL.\n", url, origin);
                return -EINVAL;
        }
        if (!*rest || *rest == '/') {
                fprintf(stderr, "ebpf-profiler-exporter: invalid endpoint '%s' (from %s): no host.\n", url, origin);
                return -EINVAL;
        }
        if (strlen(url) > ENDPOINT_MAX) {
                fprintf(stderr, "ebpf-profiler-exporter: endpoint from %s is longer than %d characters.\n",
                        origin, ENDPOINT_MAX);
                return -EINVAL;
        }
        for (const char *p = url; *p; p++)
                if (*p <= ' ' || *p >= 0x7f) {
                        fprintf(stderr, "ebpf-profiler-exporter: invalid endpoint '%s' (from %s): spaces or "
                                        "non-ASCII characters must be percent-encoded.\n", url, origin);
                        return -EINVAL;
                }
        return 0;
}

/* The URL to POST to, or NULL (idle). */
static int resolve_endpoint(const char *arg, char **ret) {
        const char *v, *origin;
        char *url = NULL;
        int r;

        if (arg) {
                origin = "--endpoint";
                url = *arg ? strdup(arg) : NULL;
                if (*arg && !url)
                        return -ENOMEM;
        } else if ((v = getenv("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT")) && *v) {
                origin = "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT";
                url = strdup(v);
                if (!url)
                        return -ENOMEM;
        } else if ((v = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) && *v) {
                size_t n = strlen(v);
                origin = "OTEL_EXPORTER_OTLP_ENDPOINT";
                while (n > 0 && v[n - 1] == '/')
                        n--;
                if (asprintf(&url, "%.*s%s", (int) MIN(n, (size_t) INT_MAX), v, OTLP_PROFILES_PATH) < 0)
                        return -ENOMEM;
        } else
                origin = NULL;

        if (url) {
                r = check_endpoint(url, origin);
                if (r < 0) {
                        free(url);
                        return r;
                }
        }
        *ret = url;
        return 0;
}

/* Returns 1 to run, 0 to exit successfully, -EINVAL after a usage message. */
static int parse_args(int argc, char **argv, Exporter *e) {
        enum { ARG_ENDPOINT = 0x100, ARG_LOG_LEVEL, ARG_VERSION };
        static const struct option options[] = {
                { "endpoint", required_argument, NULL, ARG_ENDPOINT },
                { "log-level", required_argument, NULL, ARG_LOG_LEVEL },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                {},
        };
        const char *endpoint = NULL;
        int c, level, r;

        opterr = 0;
        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0)
                switch (c) {
                case ARG_ENDPOINT:
                        endpoint = optarg;
                        break;
                case ARG_LOG_LEVEL:
                        level = log_parse_level(optarg);
                        if (level < 0) {
                                fprintf(stderr, "ebpf-profiler-exporter: invalid --log-level '%s': expected err, "
                                                "warning, notice, info or debug.\n", optarg);
                                return -EINVAL;
                        }
                        arg_log_level = level;
                        break;
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("ebpf-profiler-exporter %s\n", EP_VERSION);
                        return 0;
                default:
                        return ep_daemon_getopt_error("ebpf-profiler-exporter", c, argv);
                }
        r = ep_daemon_no_arguments("ebpf-profiler-exporter", argc, argv);
        if (r < 0)
                return r;
        r = resolve_endpoint(endpoint, &e->endpoint);
        if (r == -ENOMEM) {
                fprintf(stderr, "ebpf-profiler-exporter: out of memory\n");
                return -ENOMEM;
        }
        return r < 0 ? r : 1;
}

int main(int argc, char **argv) {
        Exporter e = {};
        char host[HOST_NAME_MAX + 1] = "";
        int r;

        r = parse_args(argc, argv, &e);
        if (r <= 0) {
                free(e.endpoint);
                return r == 0 ? EXIT_SUCCESS : r == -EINVAL ? 2 : EXIT_FAILURE;
        }
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
                fprintf(stderr, "ebpf-profiler-exporter: cannot initialize libcurl\n");
                free(e.endpoint);
                return EXIT_FAILURE;
        }

        r = ep_daemon_setup(&e.daemon, "ebpf-profiler-exporter");
        if (r >= 0) {
                /* --log-level wins over $EBPF_PROFILER_LOG_LEVEL, which log_setup() reads. */
                if (arg_log_level >= 0)
                        log_set_max_level(arg_log_level);
                if (gethostname(host, sizeof host - 1) >= 0 && host[0])
                        e.host_name = strdup(host);
                r = ep_daemon_publish(&e.daemon, EP_BUS_EXPORTER, EP_PATH_EXPORTER, EP_IFACE_EXPORTER,
                                      exporter_vtable, &e);
        }
        if (r >= 0)
                r = exporter_start(&e);
        if (r >= 0)
                r = ep_daemon_run(&e.daemon);

        exporter_done(&e);
        ep_daemon_done(&e.daemon);
        curl_global_cleanup();
        return r < 0 ? EXIT_FAILURE : r;
}
