/* SPDX-License-Identifier: MIT */
#pragma once

/* Where the exporter sends to, from (highest precedence first) command-line options, the OTel
 * environment (OTEL_EXPORTER_OTLP_PROFILES_* over OTEL_EXPORTER_OTLP_*) and the config file
 * (key = value, the environment's names in lower case). Headers are taken as a whole from the
 * highest source that has any. Also the resource attributes from OTEL_RESOURCE_ATTRIBUTES and
 * OTEL_SERVICE_NAME, which the encoder adds to every Resource. */

#include "transport.h"

#define OTLP_CONFIG_FILE_DEFAULT "/etc/ebpf-profiler/exporter.conf"
#define OTLP_PROFILES_PATH "/v1development/profiles"
#define OTLP_TIMEOUT_MS_DEFAULT 10000
#define OTLP_TIMEOUT_MS_MAX 3600000

/* The command line, as given (validated here). NULL: not given. */
typedef struct OtlpOptions {
        const char *config_file;        /* --config; NULL: the default file, may be missing */
        const char *endpoint;
        const char *protocol;
        const char *compression;
        const char *timeout;            /* 10s, 500ms, 1min, or bare milliseconds */
        const char *const *headers;     /* --header "Name: value", NULL-terminated or NULL */
        const char *ca_file;
        const char *client_cert;
        const char *client_key;
        bool insecure;                  /* --insecure */
        char *const *env;               /* NULL: environ (tests pass their own) */
} OtlpOptions;

/* Fills *ret (free with otlp_config_done()) and, if wanted, the resource attributes as a
 * NULL-terminated key, value, key, value… list (free with otlp_strv_free()). -EINVAL with a
 * message naming the source (option, variable, file:line) in *ret_error (free()), -ENOMEM. A
 * missing endpoint is no error: ret->endpoint stays NULL (exporting is off). */
int otlp_config_load(const OtlpOptions *o, OtlpConfig *ret, char ***ret_resource_attributes,
                     char **ret_error);
void otlp_config_done(OtlpConfig *c);

/* OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME from env (NULL: environ); see above. */
int otlp_resource_attributes(char *const *env, char ***ret, char **ret_error);

/* The endpoint as the logs and Exporter1.Endpoint show it: without the user information
 * (user:password@) and the query and fragment (?api_key=...), where URLs carry credentials
 * (headers and files are the places for those: docs/systemd.md). NULL when out of memory. */
char *otlp_endpoint_redacted(const char *url);

void otlp_strv_free(char **v);
DEFINE_TRIVIAL_CLEANUP_FUNC(char **, otlp_strv_free);
