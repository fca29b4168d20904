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
#include "otlp-config.h"

static int arg_log_level = -1;
static OtlpConfig arg_config;
static char **arg_resource_attributes;
static const char *arg_spool_dir;
static uint64_t arg_spool_max_size;

static void help(void) {
        printf("Usage: ebpf-profiler-exporter [OPTIONS]\n"
               "\n"
               "Sends the collector's finished intervals to an OpenTelemetry (OTLP) profiles endpoint\n"
               "(D-Bus name " EP_BUS_EXPORTER "). Without an endpoint it stays idle. Options override\n"
               "$OTEL_EXPORTER_OTLP_PROFILES_*, then $OTEL_EXPORTER_OTLP_*, then the config file.\n"
               "\n"
               "  --endpoint URL       http/protobuf: the full URL to POST to, e.g.\n"
               "                       http://collector:4318" OTLP_PROFILES_PATH "\n"
               "                       grpc: the server, e.g. http://collector:4317\n"
               "  --protocol PROTO     http/protobuf (default) or grpc\n"
               "  --compression ALG    gzip (default) or none\n"
               "  --timeout DURATION   per request, e.g. 10s (default), 500ms\n"
               "  --header 'NAME: VALUE'\n"
               "                       an extra request header (repeatable)\n"
               "  --ca-file FILE       CA bundle to verify the server with (TLS)\n"
               "  --client-cert FILE   TLS client certificate (PEM), with --client-key FILE\n"
               "  --insecure           grpc: cleartext for an endpoint without http(s)://\n"
               "  --config FILE        the config file (default " OTLP_CONFIG_FILE_DEFAULT ")\n"
               "  --spool-dir DIR      unsent requests (default " DELIVERY_SPOOL_DIR_DEFAULT ")\n"
               "  --spool-max-size SIZE  bound of the spool, oldest dropped first (default 256M)\n"
               "  --log-level LEVEL    err, warning, notice, info (default) or debug\n"
               "  --help               show this help\n"
               "  --version            show the version\n");
}

static int push_header(const char ***headers, size_t *n, const char *h) {
        const char **p = realloc(*headers, (*n + 2) * sizeof *p);

        if (!p)
                return -ENOMEM;
        p[(*n)++] = h;
        p[*n] = NULL;
        *headers = p;
        return 0;
}

/* Returns 1 to run, 0 to exit successfully, -EINVAL after a usage message. */
static int parse_args(int argc, char **argv) {
        enum {
                ARG_ENDPOINT = 0x100,
                ARG_PROTOCOL,
                ARG_COMPRESSION,
                ARG_TIMEOUT,
                ARG_HEADER,
                ARG_CA_FILE,
                ARG_CLIENT_CERT,
                ARG_CLIENT_KEY,
                ARG_INSECURE,
                ARG_CONFIG,
                ARG_SPOOL_DIR,
                ARG_SPOOL_MAX_SIZE,
                ARG_LOG_LEVEL,
                ARG_VERSION,
        };
        static const struct option options[] = {
                { "endpoint", required_argument, NULL, ARG_ENDPOINT },
                { "protocol", required_argument, NULL, ARG_PROTOCOL },
                { "compression", required_argument, NULL, ARG_COMPRESSION },
                { "timeout", required_argument, NULL, ARG_TIMEOUT },
                { "header", required_argument, NULL, ARG_HEADER },
                { "ca-file", required_argument, NULL, ARG_CA_FILE },
                { "client-cert", required_argument, NULL, ARG_CLIENT_CERT },
                { "client-key", required_argument, NULL, ARG_CLIENT_KEY },
                { "insecure", no_argument, NULL, ARG_INSECURE },
                { "config", required_argument, NULL, ARG_CONFIG },
                { "spool-dir", required_argument, NULL, ARG_SPOOL_DIR },
                { "spool-max-size", required_argument, NULL, ARG_SPOOL_MAX_SIZE },
                { "log-level", required_argument, NULL, ARG_LOG_LEVEL },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                {},
        };
        _cleanup_free_ const char **headers = NULL;
        _cleanup_free_ char *error = NULL;
        OtlpOptions o = {};
        size_t n_headers = 0;
        int c, level, r;

        opterr = 0;
        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0)
                switch (c) {
                case ARG_ENDPOINT:
                        o.endpoint = optarg;
                        break;
                case ARG_PROTOCOL:
                        o.protocol = optarg;
                        break;
                case ARG_COMPRESSION:
                        o.compression = optarg;
                        break;
                case ARG_TIMEOUT:
                        o.timeout = optarg;
                        break;
                case ARG_HEADER:
                        if (push_header(&headers, &n_headers, optarg) < 0) {
                                fprintf(stderr, "ebpf-profiler-exporter: out of memory\n");
                                return -ENOMEM;
                        }
                        o.headers = headers;
                        break;
                case ARG_CA_FILE:
                        o.ca_file = optarg;
                        break;
                case ARG_CLIENT_CERT:
                        o.client_cert = optarg;
                        break;
                case ARG_CLIENT_KEY:
                        o.client_key = optarg;
                        break;
                case ARG_INSECURE:
                        o.insecure = true;
                        break;
                case ARG_CONFIG:
                        o.config_file = optarg;
                        break;
                case ARG_SPOOL_DIR:
                        if (!*optarg) {
                                fprintf(stderr, "ebpf-profiler-exporter: --spool-dir needs a directory.\n");
                                return -EINVAL;
                        }
                        arg_spool_dir = optarg;
                        break;
                case ARG_SPOOL_MAX_SIZE:
                        if (ep_parse_size(optarg, &arg_spool_max_size) < 0 || arg_spool_max_size < (1u << 20)) {
                                fprintf(stderr, "ebpf-profiler-exporter: invalid --spool-max-size '%s': expected a "
                                                "size of at least 1M, e.g. 256M or 2G.\n", optarg);
                                return -EINVAL;
                        }
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
        r = otlp_config_load(&o, &arg_config, &arg_resource_attributes, &error);
        if (r == -ENOMEM) {
                fprintf(stderr, "ebpf-profiler-exporter: out of memory\n");
                return -ENOMEM;
        }
        if (r < 0) {
                fprintf(stderr, "ebpf-profiler-exporter: %s.\n", error ?: "invalid configuration");
                return r;
        }
        return 1;
}

static void config_free(void) {
        otlp_config_done(&arg_config);
        arg_resource_attributes = (otlp_strv_free(arg_resource_attributes), NULL);
}

int main(int argc, char **argv) {
        Exporter e = {};
        char host[HOST_NAME_MAX + 1] = "";
        int r;

        r = parse_args(argc, argv);
        if (r <= 0) {
                config_free();
                return r == 0 ? EXIT_SUCCESS : r == -EINVAL ? 2 : EXIT_FAILURE;
        }
        e.config = &arg_config;
        e.resource_attributes = arg_resource_attributes;
        e.spool_max_bytes = arg_spool_max_size;
        /* e.endpoint is what logs and Endpoint show; the transport takes e.config's. */
        if ((arg_config.endpoint && !(e.endpoint = otlp_endpoint_redacted(arg_config.endpoint))) ||
            (arg_spool_dir && !(e.spool_dir = strdup(arg_spool_dir)))) {
                free(e.endpoint);
                config_free();
                return EXIT_FAILURE;
        }
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
                fprintf(stderr, "ebpf-profiler-exporter: cannot initialize libcurl\n");
                free(e.endpoint);
                free(e.spool_dir);
                config_free();
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
        config_free();
        return r < 0 ? EXIT_FAILURE : r;
}
