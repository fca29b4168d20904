/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "otlp-config.h"
#include "transport-util.h"

#define ENDPOINT_MAX 2048
#define HEADER_MAX 8192

extern char **environ;

typedef enum Key {
        KEY_ENDPOINT,
        KEY_PROTOCOL,
        KEY_COMPRESSION,
        KEY_TIMEOUT,
        KEY_HEADERS,
        KEY_CERTIFICATE,
        KEY_CLIENT_KEY,
        KEY_CLIENT_CERTIFICATE,
        KEY_INSECURE,
        _KEY_MAX,
} Key;

/* The names after OTEL_EXPORTER_OTLP_[PROFILES_]; in lower case, the config file's keys. */
static const char *const key_env[_KEY_MAX] = {
        [KEY_ENDPOINT] = "ENDPOINT",
        [KEY_PROTOCOL] = "PROTOCOL",
        [KEY_COMPRESSION] = "COMPRESSION",
        [KEY_TIMEOUT] = "TIMEOUT",
        [KEY_HEADERS] = "HEADERS",
        [KEY_CERTIFICATE] = "CERTIFICATE",
        [KEY_CLIENT_KEY] = "CLIENT_KEY",
        [KEY_CLIENT_CERTIFICATE] = "CLIENT_CERTIFICATE",
        [KEY_INSECURE] = "INSECURE",
};

/* Lowest precedence first: a later kind replaces an earlier one. */
typedef enum Source {
        SOURCE_NONE,
        SOURCE_FILE,
        SOURCE_ENV_GENERIC,
        SOURCE_ENV_PROFILES,
        SOURCE_OPTION,
} Source;

typedef struct Setting {
        Source source;
        char *value;
        char *origin;   /* for messages: "--endpoint", "OTEL_…", "FILE:LINE" */
} Setting;

typedef struct Layers {
        Setting s[_KEY_MAX];
        char **file_headers;    /* "Name: value", from header = / headers = lines */
        char *file_headers_origin;
} Layers;

static int fail(char **ret_error, const char *fmt, ...) _printf_(2, 3);
static int fail(char **ret_error, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = vasprintf(ret_error, fmt, ap);
        va_end(ap);
        if (r < 0) {
                *ret_error = NULL;
                return -ENOMEM;
        }
        return -EINVAL;
}

void otlp_strv_free(char **v) {
        for (char **p = v; p && *p; p++)
                free(*p);
        free(v);
}

static int strv_push(char ***v, char *s) {
        size_t n = 0;
        char **p;

        if (!s)
                return -ENOMEM;
        while (*v && (*v)[n])
                n++;
        p = realloc(*v, (n + 2) * sizeof *p);
        if (!p) {
                free(s);
                return -ENOMEM;
        }
        p[n] = s;
        p[n + 1] = NULL;
        *v = p;
        return 0;
}

static const char *env_get(char *const *env, const char *name) {
        size_t n = strlen(name);

        for (char *const *e = env ?: environ; e && *e; e++)
                if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
                        return *e + n + 1;
        return NULL;
}

static int setting_set(Setting *s, Source source, const char *value, const char *origin) {
        char *v, *o;

        if (source < s->source)
                return 0;
        v = strdup(value);
        o = strdup(origin);
        if (!v || !o) {
                free(v);
                free(o);
                return -ENOMEM;
        }
        free(s->value);
        free(s->origin);
        *s = (Setting) { .source = source, .value = v, .origin = o };
        return 0;
}

static void layers_done(Layers *l) {
        for (size_t i = 0; i < _KEY_MAX; i++) {
                free(l->s[i].value);
                free(l->s[i].origin);
        }
        otlp_strv_free(l->file_headers);
        free(l->file_headers_origin);
}

static char *trim(char *s) {
        size_t n;

        s += strspn(s, " \t");
        n = strlen(s);
        while (n > 0 && strchr(" \t\r\n", s[n - 1]))
                s[--n] = 0;
        return s;
}

/* ---- headers ---- */

static bool header_name_valid(const char *s, size_t n) {
        if (n == 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char) s[i]) && !strchr("!#$%&'*+-.^_`|~", s[i]))
                        return false;
        return true;
}

/* The transport sets these itself; a second copy would break the request. */
static bool header_reserved(const char *s, size_t n) {
        static const char *const reserved[] = {
                "content-type", "content-length", "content-encoding", "te", "host", "transfer-encoding",
        };
        if (n >= 5 && strncasecmp(s, "grpc-", 5) == 0)
                return true;
        for (size_t i = 0; i < ELEMENTSOF(reserved); i++)
                if (strlen(reserved[i]) == n && strncasecmp(s, reserved[i], n) == 0)
                        return true;
        return false;
}

/* Appends "Name: value" to *list after checking both. */
static int header_add(char ***list, const char *name, size_t name_len, const char *value, const char *origin,
                      char **ret_error) {
        char *h;

        if (!header_name_valid(name, name_len))
                return fail(ret_error, "invalid header name '%.*s' (from %s)", (int) MIN(name_len, (size_t) 200),
                            name, origin);
        if (header_reserved(name, name_len))
                return fail(ret_error, "header '%.*s' (from %s) is set by the exporter itself", (int) name_len, name,
                            origin);
        for (const char *p = value; *p; p++)
                if (*p == '\r' || *p == '\n')
                        return fail(ret_error, "header '%.*s' (from %s): the value contains a line break",
                                    (int) name_len, name, origin);
        if (name_len + strlen(value) > HEADER_MAX)
                return fail(ret_error, "header '%.*s' (from %s) is too long", (int) name_len, name, origin);
        if (asprintf(&h, "%.*s: %s", (int) name_len, name, value) < 0)
                return -ENOMEM;
        return strv_push(list, h);
}

/* "Name: value" (--header, header = …). */
static int header_line_add(char ***list, const char *line, const char *origin, char **ret_error) {
        const char *colon = strchr(line, ':');
        _cleanup_free_ char *value = NULL;
        size_t n;

        if (!colon)
                return fail(ret_error, "invalid header '%s' (from %s): expected 'Name: value'", line, origin);
        n = (size_t) (colon - line);
        while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t'))
                n--;
        value = strdup(colon + 1);
        if (!value)
                return -ENOMEM;
        return header_add(list, line, n, trim(value), origin, ret_error);
}

/* The OTel list form "k=v,k2=v2" (W3C baggage-like; keys and values percent-decoded). Calls
 * add for each pair; empty items are skipped. */
typedef int (*pair_add_t)(void *userdata, const char *key, const char *value, const char *origin,
                          char **ret_error);

static int parse_pairs(const char *s, const char *origin, pair_add_t add, void *userdata, char **ret_error) {
        _cleanup_free_ char *copy = strdup(s);
        char *save = NULL;
        int r;

        if (!copy)
                return -ENOMEM;
        for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
                _cleanup_free_ char *key = NULL, *value = NULL;
                char *eq;

                item = trim(item);
                if (!*item)
                        continue;
                eq = strchr(item, '=');
                if (!eq || eq == item)
                        return fail(ret_error, "invalid item '%s' in %s: expected key=value", item, origin);
                *eq = 0;
                if (percent_decode(trim(item), strlen(trim(item)), &key) < 0 ||
                    percent_decode(trim(eq + 1), strlen(trim(eq + 1)), &value) < 0)
                        return -ENOMEM;
                r = add(userdata, key, value, origin, ret_error);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int header_pair_add(void *userdata, const char *key, const char *value, const char *origin,
                           char **ret_error) {
        return header_add(userdata, key, strlen(key), value, origin, ret_error);
}

/* ---- the config file ---- */

static int file_key(const char *k, Key *ret) {
        for (Key i = 0; i < _KEY_MAX; i++)
                if (strcasecmp(k, key_env[i]) == 0) {
                        *ret = i;
                        return 0;
                }
        return -ENOENT;
}

static int file_line(Layers *l, char *line, const char *origin, char **ret_error) {
        char *eq, *key, *value;
        Key k;
        int r;

        eq = strchr(line, '=');
        if (!eq)
                return fail(ret_error, "%s: expected 'key = value'", origin);
        *eq = 0;
        key = trim(line);
        value = trim(eq + 1);
        if (!*value)
                return fail(ret_error, "%s: '%s' has no value", origin, key);
        if (streq(key, "header")) {
                r = header_line_add(&l->file_headers, value, origin, ret_error);
        } else if (file_key(key, &k) < 0 || strpbrk(key, "ABCDEFGHIJKLMNOPQRSTUVWXYZ")) {
                return fail(ret_error, "%s: unknown key '%s' (endpoint, protocol, compression, timeout, header, "
                            "headers, certificate, client_certificate, client_key, insecure)", origin, key);
        } else if (k == KEY_HEADERS) {
                r = parse_pairs(value, origin, header_pair_add, &l->file_headers, ret_error);
        } else
                return setting_set(&l->s[k], SOURCE_FILE, value, origin);
        if (r < 0)
                return r;
        /* Headers from the file count as one setting: remember where they started. */
        if (!l->file_headers_origin && l->file_headers) {
                l->file_headers_origin = strdup(origin);
                if (!l->file_headers_origin)
                        return -ENOMEM;
        }
        return 0;
}

static int file_read(Layers *l, const char *path, bool must_exist, char **ret_error) {
        _cleanup_fclose_ FILE *f = NULL;
        _cleanup_free_ char *line = NULL;
        size_t cap = 0;
        unsigned n = 0;
        int r;

        f = fopen(path, "re");
        if (!f) {
                if (errno == ENOENT && !must_exist)
                        return 0;
                return fail(ret_error, "cannot open the config file %s: %s", path, strerror(errno));
        }
        while (getline(&line, &cap, f) >= 0) {
                _cleanup_free_ char *origin = NULL;
                char *s = trim(line);

                n++;
                if (!*s || *s == '#')
                        continue;
                if (asprintf(&origin, "%s:%u", path, n) < 0)
                        return -ENOMEM;
                r = file_line(l, s, origin, ret_error);
                if (r < 0)
                        return r;
        }
        if (ferror(f))
                return fail(ret_error, "cannot read the config file %s", path);
        return 0;
}

/* ---- values ---- */

static int parse_protocol(const Setting *s, OtlpProtocol *ret, char **ret_error) {
        if (!s->value)
                *ret = OTLP_PROTOCOL_HTTP_PROTOBUF;
        else if (streq(s->value, "http/protobuf"))
                *ret = OTLP_PROTOCOL_HTTP_PROTOBUF;
        else if (streq(s->value, "grpc"))
                *ret = OTLP_PROTOCOL_GRPC;
        else if (streq(s->value, "http/json"))
                return fail(ret_error, "protocol http/json (from %s) is not supported: use http/protobuf or grpc",
                            s->origin);
        else
                return fail(ret_error, "invalid protocol '%s' (from %s): expected http/protobuf or grpc", s->value,
                            s->origin);
        return 0;
}

static int parse_compression(const Setting *s, OtlpCompression *ret, char **ret_error) {
        if (!s->value || streq(s->value, "gzip"))
                *ret = OTLP_COMPRESSION_GZIP;
        else if (streq(s->value, "none"))
                *ret = OTLP_COMPRESSION_NONE;
        else
                return fail(ret_error, "invalid compression '%s' (from %s): expected gzip or none", s->value,
                            s->origin);
        return 0;
}

static int parse_bool(const Setting *s, bool *ret, char **ret_error) {
        if (!s->value)
                *ret = false;
        else if (strcasecmp(s->value, "true") == 0)
                *ret = true;
        else if (strcasecmp(s->value, "false") == 0)
                *ret = false;
        else
                return fail(ret_error, "invalid value '%s' (from %s): expected true or false", s->value, s->origin);
        return 0;
}

/* Milliseconds; the environment has bare milliseconds only (the OTel spec), the options and
 * the file also take ms, s and min. */
static int parse_timeout(const Setting *s, uint64_t *ret, char **ret_error) {
        uint64_t v = 0, mult = 1;
        const char *p = s->value;

        if (!p) {
                *ret = OTLP_TIMEOUT_MS_DEFAULT;
                return 0;
        }
        if (!isdigit((unsigned char) *p))
                goto bad;
        for (; isdigit((unsigned char) *p); p++) {
                v = v * 10 + (uint64_t) (*p - '0');
                if (v > OTLP_TIMEOUT_MS_MAX)
                        goto bad;
        }
        if (*p && (s->source == SOURCE_ENV_GENERIC || s->source == SOURCE_ENV_PROFILES))
                goto bad;
        if (streq(p, "s"))
                mult = 1000;
        else if (streq(p, "min"))
                mult = 60000;
        else if (*p && !streq(p, "ms"))
                goto bad;
        v *= mult;
        if (v == 0 || v > OTLP_TIMEOUT_MS_MAX)
                goto bad;
        *ret = v;
        return 0;
bad:
        return fail(ret_error, "invalid timeout '%s' (from %s): expected %s between 1 ms and 1 h", s->value,
                    s->origin,
                    s->source == SOURCE_ENV_GENERIC || s->source == SOURCE_ENV_PROFILES
                            ? "milliseconds"
                            : "milliseconds or a duration like 10s, 500ms, 1min,");
}

static int parse_file(const Setting *s, char **ret, char **ret_error) {
        if (!s->value) {
                *ret = NULL;
                return 0;
        }
        if (access(s->value, R_OK) < 0)
                return fail(ret_error, "cannot read '%s' (from %s): %s", s->value, s->origin, strerror(errno));
        *ret = strdup(s->value);
        return *ret ? 0 : -ENOMEM;
}

/* The URL to use: http(s)://, a host, printable ASCII. The generic OTLP endpoint is a base
 * URL for HTTP (the signal path is appended) and for gRPC; gRPC also takes "host:port". */
static int parse_endpoint(const Setting *s, OtlpProtocol protocol, bool insecure, char **ret,
                          char **ret_error) {
        const char *v = s->value, *rest;
        size_t n;

        *ret = NULL;
        if (!v || !*v)
                return 0;
        if (startswith(v, "http://"))
                rest = v + strlen("http://");
        else if (startswith(v, "https://"))
                rest = v + strlen("https://");
        else if (protocol == OTLP_PROTOCOL_GRPC && !strstr(v, "://"))
                rest = v;
        else
                return fail(ret_error, "invalid endpoint '%s' (from %s): expected an http:// or https:// URL%s", v,
                            s->origin, protocol == OTLP_PROTOCOL_GRPC ? " or HOST:PORT" : "");
        if (!*rest || *rest == '/')
                return fail(ret_error, "invalid endpoint '%s' (from %s): no host", v, s->origin);
        if (strlen(v) > ENDPOINT_MAX)
                return fail(ret_error, "endpoint from %s is longer than %d characters", s->origin, ENDPOINT_MAX);
        for (const char *p = v; *p; p++)
                if (*p <= ' ' || *p >= 0x7f)
                        return fail(ret_error, "invalid endpoint '%s' (from %s): spaces or non-ASCII characters "
                                    "must be percent-encoded", v, s->origin);

        n = strlen(v);
        if (protocol == OTLP_PROTOCOL_GRPC) {
                if (rest == v) /* no scheme: OTEL_…_INSECURE picks it */
                        return asprintf(ret, "%s%s", insecure ? "http://" : "https://", v) < 0 ? -ENOMEM : 0;
        } else if (s->source == SOURCE_ENV_GENERIC) {
                while (n > 0 && v[n - 1] == '/')
                        n--;
                return asprintf(ret, "%.*s%s", (int) n, v, OTLP_PROFILES_PATH) < 0 ? -ENOMEM : 0;
        }
        *ret = strdup(v);
        return *ret ? 0 : -ENOMEM;
}

static int resolve_headers(const Layers *l, const OtlpOptions *o, char ***ret, char **ret_error) {
        const Setting *s = &l->s[KEY_HEADERS];
        int r;

        *ret = NULL;
        if (o->headers && o->headers[0]) {
                for (const char *const *h = o->headers; *h; h++) {
                        r = header_line_add(ret, *h, "--header", ret_error);
                        if (r < 0)
                                return r;
                }
                return 0;
        }
        if (s->source == SOURCE_ENV_GENERIC || s->source == SOURCE_ENV_PROFILES)
                return parse_pairs(s->value, s->origin, header_pair_add, ret, ret_error);
        for (char **h = l->file_headers; h && *h; h++) {
                r = strv_push(ret, strdup(*h));
                if (r < 0)
                        return r;
        }
        return 0;
}

static int layers_collect(Layers *l, const OtlpOptions *o, char **ret_error) {
        const char *options[_KEY_MAX] = {
                [KEY_ENDPOINT] = o->endpoint,
                [KEY_PROTOCOL] = o->protocol,
                [KEY_COMPRESSION] = o->compression,
                [KEY_TIMEOUT] = o->timeout,
                [KEY_CERTIFICATE] = o->ca_file,
                [KEY_CLIENT_KEY] = o->client_key,
                [KEY_CLIENT_CERTIFICATE] = o->client_cert,
                [KEY_INSECURE] = o->insecure ? "true" : NULL,
        };
        static const char *const option_names[_KEY_MAX] = {
                [KEY_ENDPOINT] = "--endpoint",
                [KEY_PROTOCOL] = "--protocol",
                [KEY_COMPRESSION] = "--compression",
                [KEY_TIMEOUT] = "--timeout",
                [KEY_CERTIFICATE] = "--ca-file",
                [KEY_CLIENT_KEY] = "--client-key",
                [KEY_CLIENT_CERTIFICATE] = "--client-cert",
                [KEY_INSECURE] = "--insecure",
        };
        int r;

        r = file_read(l, o->config_file ?: OTLP_CONFIG_FILE_DEFAULT, o->config_file != NULL, ret_error);
        if (r < 0)
                return r;
        if (l->file_headers) {
                r = setting_set(&l->s[KEY_HEADERS], SOURCE_FILE, "", l->file_headers_origin);
                if (r < 0)
                        return r;
        }
        for (Key k = 0; k < _KEY_MAX; k++) {
                char generic[64], profiles[64];
                const char *v;

                snprintf(generic, sizeof generic, "OTEL_EXPORTER_OTLP_%s", key_env[k]);
                snprintf(profiles, sizeof profiles, "OTEL_EXPORTER_OTLP_PROFILES_%s", key_env[k]);
                /* An empty variable counts as unset (as in the OTel SDKs). */
                if ((v = env_get(o->env, generic)) && *v && (r = setting_set(&l->s[k], SOURCE_ENV_GENERIC, v, generic)) < 0)
                        return r;
                if ((v = env_get(o->env, profiles)) && *v && (r = setting_set(&l->s[k], SOURCE_ENV_PROFILES, v, profiles)) < 0)
                        return r;
                if (options[k] && (r = setting_set(&l->s[k], SOURCE_OPTION, options[k], option_names[k])) < 0)
                        return r;
        }
        return 0;
}

void otlp_config_done(OtlpConfig *c) {
        free(c->endpoint);
        otlp_strv_free(c->headers);
        free(c->ca_file);
        free(c->client_cert);
        free(c->client_key);
        *c = (OtlpConfig) {};
}

static int config_resolve(const Layers *l, const OtlpOptions *o, OtlpConfig *c, char **ret_error) {
        const Setting *cert = &l->s[KEY_CLIENT_CERTIFICATE], *key = &l->s[KEY_CLIENT_KEY];
        int r;

        /* Protocol and insecure first: the endpoint's meaning depends on them. */
        r = parse_protocol(&l->s[KEY_PROTOCOL], &c->protocol, ret_error);
        if (r >= 0)
                r = parse_bool(&l->s[KEY_INSECURE], &c->insecure, ret_error);
        if (r >= 0)
                r = parse_endpoint(&l->s[KEY_ENDPOINT], c->protocol, c->insecure, &c->endpoint, ret_error);
        if (r >= 0)
                r = parse_compression(&l->s[KEY_COMPRESSION], &c->compression, ret_error);
        if (r >= 0)
                r = parse_timeout(&l->s[KEY_TIMEOUT], &c->timeout_ms, ret_error);
        if (r >= 0)
                r = resolve_headers(l, o, &c->headers, ret_error);
        if (r >= 0)
                r = parse_file(&l->s[KEY_CERTIFICATE], &c->ca_file, ret_error);
        if (r >= 0)
                r = parse_file(cert, &c->client_cert, ret_error);
        if (r >= 0)
                r = parse_file(key, &c->client_key, ret_error);
        if (r >= 0 && !cert->value != !key->value)
                r = fail(ret_error, "a client certificate (%s) needs a client key and the other way around",
                         cert->value ? cert->origin : key->origin);
        return r;
}

static int attribute_add(void *userdata, const char *key, const char *value, const char *origin,
                         char **ret_error) {
        char ***list = userdata;
        size_t n = 0;
        int r;

        if (!*key)
                return fail(ret_error, "empty attribute name in %s", origin);
        /* A later duplicate wins: replace the earlier value. */
        for (n = 0; *list && (*list)[n]; n += 2)
                if (streq((*list)[n], key)) {
                        char *v = strdup(value);
                        if (!v)
                                return -ENOMEM;
                        free((*list)[n + 1]);
                        (*list)[n + 1] = v;
                        return 0;
                }
        r = strv_push(list, strdup(key));
        if (r >= 0)
                r = strv_push(list, strdup(value));
        return r;
}

int otlp_resource_attributes(char *const *env, char ***ret, char **ret_error) {
        _cleanup_(otlp_strv_freep) char **list = NULL;
        const char *v;
        int r;

        *ret_error = NULL;
        v = env_get(env, "OTEL_RESOURCE_ATTRIBUTES");
        if (v && *v) {
                r = parse_pairs(v, "OTEL_RESOURCE_ATTRIBUTES", attribute_add, &list, ret_error);
                if (r < 0)
                        return r;
        }
        v = env_get(env, "OTEL_SERVICE_NAME");
        if (v && *v) {
                r = attribute_add(&list, "service.name", v, "OTEL_SERVICE_NAME", ret_error);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(list);
        return 0;
}

int otlp_config_load(const OtlpOptions *o, OtlpConfig *ret, char ***ret_resource_attributes,
                     char **ret_error) {
        Layers l = {};
        OtlpConfig c = {};
        int r;

        *ret_error = NULL;
        r = layers_collect(&l, o, ret_error);
        if (r >= 0)
                r = config_resolve(&l, o, &c, ret_error);
        if (r >= 0 && ret_resource_attributes)
                r = otlp_resource_attributes(o->env, ret_resource_attributes, ret_error);
        layers_done(&l);
        if (r < 0) {
                otlp_config_done(&c);
                return r;
        }
        *ret = c;
        return 0;
}

char *otlp_endpoint_redacted(const char *url) {
        const char *scheme_end = strstr(url, "://");
        const char *authority = scheme_end ? scheme_end + 3 : url;
        const char *at = memrchr(authority, '@', strcspn(authority, "/?#"));
        const char *host = at ? at + 1 : authority;
        char *ret;

        if (asprintf(&ret, "%.*s%.*s", (int) (authority - url), url, (int) strcspn(host, "?#"), host) < 0)
                return NULL;
        return ret;
}
