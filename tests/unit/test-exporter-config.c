/* SPDX-License-Identifier: MIT */

/* The exporter's configuration: options over OTEL_EXPORTER_OTLP_PROFILES_* over
 * OTEL_EXPORTER_OTLP_* over the config file over the defaults; the endpoint suffix rule,
 * header lists, bad values with messages naming their source, resource attributes. */

#include <ctype.h>
#include <fcntl.h>
#include <stdarg.h>

#include "otlp-config.h"
#include "tests.h"

static char dir[] = "/tmp/test-exporter-config-XXXXXX";

static char *write_file(const char *name, const char *text) {
        char *path;
        FILE *f;

        ASSERT_TRUE(asprintf(&path, "%s/%s", dir, name) > 0);
        f = fopen(path, "we");
        ASSERT_TRUE(f);
        fputs(text, f);
        fclose(f);
        return path;
}

/* Loads with the given options and environment; returns the error (or NULL) and *c. */
static int load(const OtlpOptions *o_in, char *const *env, OtlpConfig *c, char **ret_error) {
        OtlpOptions o = *o_in;
        static char empty_conf[512];

        if (!empty_conf[0]) {
                _cleanup_free_ char *p = write_file("empty.conf", "# nothing\n");
                snprintf(empty_conf, sizeof empty_conf, "%s", p);
        }
        o.env = env;
        if (!o.config_file)
                o.config_file = empty_conf;
        *c = (OtlpConfig) {};
        return otlp_config_load(&o, c, NULL, ret_error);
}

static void expect_error(const OtlpOptions *o, char *const *env, const char *needle) {
        OtlpConfig c;
        char *error = NULL;

        ASSERT_EQ(load(o, env, &c, &error), -EINVAL);
        if (!error || !strstr(error, needle)) {
                fprintf(stderr, "expected an error with '%s', got '%s'\n", needle, error ?: "(null)");
                exit(EXIT_FAILURE);
        }
        free(error);
}

static void test_defaults(void) {
        char *env[] = { NULL };
        OtlpConfig c;
        char *error = NULL;

        ASSERT_OK(load(&(OtlpOptions) {}, env, &c, &error));
        ASSERT_TRUE(c.endpoint == NULL); /* exporting is off */
        ASSERT_EQ(c.protocol, OTLP_PROTOCOL_HTTP_PROTOBUF);
        ASSERT_EQ(c.compression, OTLP_COMPRESSION_GZIP);
        ASSERT_EQ(c.timeout_ms, 10000);
        ASSERT_TRUE(c.headers == NULL);
        ASSERT_TRUE(!c.insecure);
        otlp_config_done(&c);
}

static void test_endpoint_rules(void) {
        OtlpConfig c;
        char *error = NULL;

        /* The generic endpoint is a base for HTTP: the signal path is appended. */
        char *generic[] = { (char *) "OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318/", NULL };
        ASSERT_OK(load(&(OtlpOptions) {}, generic, &c, &error));
        ASSERT_STREQ(c.endpoint, "http://collector:4318/v1development/profiles");
        otlp_config_done(&c);

        /* The signal-specific one is used as is and wins. */
        char *both[] = { (char *) "OTEL_EXPORTER_OTLP_ENDPOINT=http://a:4318",
                         (char *) "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT=https://b/custom/path", NULL };
        ASSERT_OK(load(&(OtlpOptions) {}, both, &c, &error));
        ASSERT_STREQ(c.endpoint, "https://b/custom/path");
        otlp_config_done(&c);

        /* gRPC: the generic endpoint is the server, nothing appended. */
        char *grpc[] = { (char *) "OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4317",
                         (char *) "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", NULL };
        ASSERT_OK(load(&(OtlpOptions) {}, grpc, &c, &error));
        ASSERT_STREQ(c.endpoint, "http://collector:4317");
        ASSERT_EQ(c.protocol, OTLP_PROTOCOL_GRPC);
        otlp_config_done(&c);

        /* gRPC host:port: https unless insecure. */
        char *bare[] = { (char *) "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT=collector:4317",
                         (char *) "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", NULL };
        ASSERT_OK(load(&(OtlpOptions) {}, bare, &c, &error));
        ASSERT_STREQ(c.endpoint, "https://collector:4317");
        otlp_config_done(&c);
        ASSERT_OK(load(&(OtlpOptions) { .insecure = true }, bare, &c, &error));
        ASSERT_STREQ(c.endpoint, "http://collector:4317");
        ASSERT_TRUE(c.insecure);
        otlp_config_done(&c);

        /* --endpoint is as given; an empty one turns exporting off whatever the environment says. */
        ASSERT_OK(load(&(OtlpOptions) { .endpoint = "http://x:1/p" }, generic, &c, &error));
        ASSERT_STREQ(c.endpoint, "http://x:1/p");
        otlp_config_done(&c);
        ASSERT_OK(load(&(OtlpOptions) { .endpoint = "" }, generic, &c, &error));
        ASSERT_TRUE(c.endpoint == NULL);
        otlp_config_done(&c);

        char *none[] = { NULL };
        expect_error(&(OtlpOptions) { .endpoint = "collector:4318" }, none, "--endpoint");
        expect_error(&(OtlpOptions) { .endpoint = "ftp://x" }, none, "http:// or https://");
        expect_error(&(OtlpOptions) { .endpoint = "http:///path" }, none, "no host");
        expect_error(&(OtlpOptions) { .endpoint = "http://a b" }, none, "percent-encoded");
        char *bad[] = { (char *) "OTEL_EXPORTER_OTLP_ENDPOINT=localhost:4318", NULL };
        expect_error(&(OtlpOptions) {}, bad, "OTEL_EXPORTER_OTLP_ENDPOINT");
}

static void test_precedence(void) {
        _cleanup_free_ char *conf = write_file("prec.conf",
                                               "# the file: lowest\n"
                                               "endpoint = http://file:4318/v1development/profiles\n"
                                               "protocol = http/protobuf\n"
                                               "compression = none\n"
                                               "timeout = 3s\n"
                                               "\n"
                                               "header = Authorization: Bearer file\n"
                                               "   header = X-Scope : tenant-1  \n");
        char *no_env[] = { NULL };
        char *generic[] = { (char *) "OTEL_EXPORTER_OTLP_ENDPOINT=http://generic:4318",
                            (char *) "OTEL_EXPORTER_OTLP_TIMEOUT=4000",
                            (char *) "OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20generic", NULL };
        char *both[] = { (char *) "OTEL_EXPORTER_OTLP_ENDPOINT=http://generic:4318",
                         (char *) "OTEL_EXPORTER_OTLP_TIMEOUT=4000",
                         (char *) "OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT=5000",
                         (char *) "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT=http://profiles:4318/p",
                         (char *) "OTEL_EXPORTER_OTLP_PROFILES_HEADERS=a=1,b=x%3Dy%2Cz",
                         (char *) "OTEL_EXPORTER_OTLP_COMPRESSION=gzip",
                         (char *) "OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT_EXTRA=ignored",
                         (char *) "OTEL_EXPORTER_OTLP_PROTOCOL=", /* empty: unset */
                         NULL };
        const char *hdr[] = { "X-Option: 1", NULL };
        OtlpConfig c;
        char *error = NULL;

        ASSERT_OK(load(&(OtlpOptions) { .config_file = conf }, no_env, &c, &error));
        ASSERT_STREQ(c.endpoint, "http://file:4318/v1development/profiles");
        ASSERT_EQ(c.compression, OTLP_COMPRESSION_NONE);
        ASSERT_EQ(c.timeout_ms, 3000);
        ASSERT_STREQ(c.headers[0], "Authorization: Bearer file");
        ASSERT_STREQ(c.headers[1], "X-Scope: tenant-1");
        ASSERT_TRUE(c.headers[2] == NULL);
        otlp_config_done(&c);

        ASSERT_OK(load(&(OtlpOptions) { .config_file = conf }, generic, &c, &error));
        ASSERT_STREQ(c.endpoint, "http://generic:4318/v1development/profiles");
        ASSERT_EQ(c.compression, OTLP_COMPRESSION_NONE); /* still the file's */
        ASSERT_EQ(c.timeout_ms, 4000);
        ASSERT_STREQ(c.headers[0], "authorization: Bearer generic"); /* the list as a whole */
        ASSERT_TRUE(c.headers[1] == NULL);
        otlp_config_done(&c);

        ASSERT_OK(load(&(OtlpOptions) { .config_file = conf }, both, &c, &error));
        ASSERT_STREQ(c.endpoint, "http://profiles:4318/p");
        ASSERT_EQ(c.compression, OTLP_COMPRESSION_GZIP);
        ASSERT_EQ(c.timeout_ms, 5000);
        ASSERT_EQ(c.protocol, OTLP_PROTOCOL_HTTP_PROTOBUF);
        ASSERT_STREQ(c.headers[0], "a: 1");
        ASSERT_STREQ(c.headers[1], "b: x=y,z"); /* decoded after splitting */
        ASSERT_TRUE(c.headers[2] == NULL);
        otlp_config_done(&c);

        ASSERT_OK(load(&(OtlpOptions) { .config_file = conf, .timeout = "250ms", .compression = "none",
                                        .endpoint = "https://opt/x", .headers = hdr },
                       both, &c, &error));
        ASSERT_STREQ(c.endpoint, "https://opt/x");
        ASSERT_EQ(c.compression, OTLP_COMPRESSION_NONE);
        ASSERT_EQ(c.timeout_ms, 250);
        ASSERT_STREQ(c.headers[0], "X-Option: 1");
        ASSERT_TRUE(c.headers[1] == NULL);
        otlp_config_done(&c);
}

static void test_bad_values(void) {
        char *none[] = { NULL };
        char *json[] = { (char *) "OTEL_EXPORTER_OTLP_PROTOCOL=http/json", NULL };
        char *env_timeout[] = { (char *) "OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT=10s", NULL };
        char *bad_insecure[] = { (char *) "OTEL_EXPORTER_OTLP_INSECURE=yes", NULL };
        char *bad_headers[] = { (char *) "OTEL_EXPORTER_OTLP_HEADERS=novalue", NULL };
        char *crlf_headers[] = { (char *) "OTEL_EXPORTER_OTLP_HEADERS=a=b%0D%0AEvil: 1", NULL };
        char *reserved_headers[] = { (char *) "OTEL_EXPORTER_OTLP_HEADERS=Content-Type=text/plain", NULL };
        _cleanup_free_ char *unknown = write_file("unknown.conf", "endpoint = http://a/b\nendpiont = x\n");
        _cleanup_free_ char *upper = write_file("upper.conf", "ENDPOINT = http://a/b\n");
        _cleanup_free_ char *noeq = write_file("noeq.conf", "\n\n# c\nprotocol grpc\n");
        _cleanup_free_ char *badval = write_file("badval.conf", "compression = br\n");
        _cleanup_free_ char *badtime = write_file("badtime.conf", "timeout = 2h\n");
        _cleanup_free_ char *badhdr = write_file("badhdr.conf", "header = no colon\n");
        _cleanup_free_ char *missing = NULL;
        _cleanup_free_ char *cert = write_file("cert.pem", "x");

        ASSERT_TRUE(asprintf(&missing, "%s/does-not-exist.conf", dir) > 0);

        expect_error(&(OtlpOptions) {}, json, "http/json (from OTEL_EXPORTER_OTLP_PROTOCOL) is not supported");
        expect_error(&(OtlpOptions) { .protocol = "grpcs" }, none, "invalid protocol 'grpcs' (from --protocol)");
        expect_error(&(OtlpOptions) { .compression = "zstd" }, none, "--compression");
        expect_error(&(OtlpOptions) { .timeout = "0" }, none, "--timeout");
        expect_error(&(OtlpOptions) { .timeout = "10 s" }, none, "--timeout");
        expect_error(&(OtlpOptions) { .timeout = "999999999999999999999" }, none, "--timeout");
        expect_error(&(OtlpOptions) {}, env_timeout, "OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT");
        expect_error(&(OtlpOptions) {}, bad_insecure, "expected true or false");
        expect_error(&(OtlpOptions) {}, bad_headers, "expected key=value");
        expect_error(&(OtlpOptions) {}, crlf_headers, "line break");
        expect_error(&(OtlpOptions) {}, reserved_headers, "set by the exporter");
        expect_error(&(OtlpOptions) { .headers = (const char *[]) { "Bad Name: x", NULL } }, none,
                     "invalid header name");
        expect_error(&(OtlpOptions) { .config_file = unknown }, none, "unknown.conf:2: unknown key 'endpiont'");
        expect_error(&(OtlpOptions) { .config_file = upper }, none, "upper.conf:1: unknown key");
        expect_error(&(OtlpOptions) { .config_file = noeq }, none, "noeq.conf:4: expected 'key = value'");
        expect_error(&(OtlpOptions) { .config_file = badval }, none, "badval.conf:1");
        expect_error(&(OtlpOptions) { .config_file = badtime }, none, "badtime.conf:1");
        expect_error(&(OtlpOptions) { .config_file = badhdr }, none, "badhdr.conf:1");
        expect_error(&(OtlpOptions) { .config_file = missing }, none, "cannot open the config file");
        expect_error(&(OtlpOptions) { .ca_file = missing }, none, "(from --ca-file)");
        expect_error(&(OtlpOptions) { .client_cert = cert }, none, "needs a client key");
}

static void test_tls_files(void) {
        _cleanup_free_ char *ca = write_file("ca.pem", "x");
        _cleanup_free_ char *conf = NULL;
        _cleanup_free_ char *text = NULL;
        char *env[] = { NULL };
        OtlpConfig c;
        char *error = NULL;

        ASSERT_TRUE(asprintf(&text, "certificate = %s\nclient_certificate = %s\nclient_key = %s\ninsecure = false\n",
                             ca, ca, ca) > 0);
        conf = write_file("tls.conf", text);
        ASSERT_OK(load(&(OtlpOptions) { .config_file = conf }, env, &c, &error));
        ASSERT_STREQ(c.ca_file, ca);
        ASSERT_STREQ(c.client_cert, ca);
        ASSERT_STREQ(c.client_key, ca);
        ASSERT_TRUE(!c.insecure);
        otlp_config_done(&c);
}

static void test_resource_attributes(void) {
        char *env[] = { (char *) "OTEL_RESOURCE_ATTRIBUTES=service.name=from-attrs, deployment.environment=prod%20eu,"
                                 "team=a%2Cb,,",
                        (char *) "OTEL_SERVICE_NAME=svc", NULL };
        char *bad[] = { (char *) "OTEL_RESOURCE_ATTRIBUTES==x", NULL };
        char *none[] = { NULL };
        _cleanup_(otlp_strv_freep) char **attrs = NULL;
        char **empty = NULL;
        char *error = NULL;

        ASSERT_OK(otlp_resource_attributes(env, &attrs, &error));
        ASSERT_STREQ(attrs[0], "service.name");
        ASSERT_STREQ(attrs[1], "svc"); /* OTEL_SERVICE_NAME wins */
        ASSERT_STREQ(attrs[2], "deployment.environment");
        ASSERT_STREQ(attrs[3], "prod eu");
        ASSERT_STREQ(attrs[4], "team");
        ASSERT_STREQ(attrs[5], "a,b");
        ASSERT_TRUE(attrs[6] == NULL);

        ASSERT_OK(otlp_resource_attributes(none, &empty, &error));
        ASSERT_TRUE(empty == NULL);
        ASSERT_EQ(otlp_resource_attributes(bad, &empty, &error), -EINVAL);
        ASSERT_TRUE(error && strstr(error, "OTEL_RESOURCE_ATTRIBUTES"));
        free(error);
}

/* The commented example the package ships as /etc/ebpf-profiler/exporter.conf: as shipped it
 * configures nothing (the exporter idles); with its examples uncommented (the TLS files aside,
 * which must exist) every line is accepted and means what its comment says. */
static void test_shipped_example(void) {
        _cleanup_fclose_ FILE *f = fopen(EP_EXAMPLE_EXPORTER_CONF, "re");
        _cleanup_free_ char *text = NULL, *line = NULL, *uncommented = NULL, *error = NULL;
        size_t cap = 0, size = 0;
        FILE *out;
        char *env[] = { NULL };
        OtlpConfig c;

        ASSERT_TRUE(f);
        ASSERT_OK(load(&(OtlpOptions) { .config_file = EP_EXAMPLE_EXPORTER_CONF }, env, &c, &error));
        ASSERT_TRUE(c.endpoint == NULL && c.headers == NULL);
        otlp_config_done(&c);

        out = open_memstream(&text, &size);
        ASSERT_TRUE(out);
        while (getline(&line, &cap, f) >= 0) {
                bool example = line[0] == '#' && islower((unsigned char) line[1]) && strstr(line, " = ");
                bool tls_file = strstr(line, "certificate") || strstr(line, "client_key");
                fputs(example && !tls_file ? line + 1 : line, out);
        }
        fclose(out);
        uncommented = write_file("example.conf", text);
        ASSERT_OK(load(&(OtlpOptions) { .config_file = uncommented }, env, &c, &error));
        ASSERT_STREQ(c.endpoint, "https://otel.example.com:4318/v1development/profiles");
        ASSERT_EQ(c.protocol, OTLP_PROTOCOL_HTTP_PROTOBUF);
        ASSERT_EQ(c.compression, OTLP_COMPRESSION_GZIP);
        ASSERT_EQ(c.timeout_ms, 10000);
        ASSERT_TRUE(c.headers && c.headers[0] && c.headers[1] && !c.headers[2]);
        ASSERT_STREQ(c.headers[0], "Authorization: Bearer TOKEN");
        ASSERT_TRUE(!c.insecure);
        otlp_config_done(&c);
}

static void check_redacted(const char *url, const char *want) {
        _cleanup_free_ char *got = otlp_endpoint_redacted(url);

        ASSERT_STREQ(got, want);
}

/* What logs and Exporter1.Endpoint show of an endpoint never carries its credentials. */
static void test_endpoint_redacted(void) {
        check_redacted("https://collector.example:4318/v1development/profiles",
                       "https://collector.example:4318/v1development/profiles");
        check_redacted("https://user:s3cret@collector.example:4318/v1development/profiles?api_key=s3cret#x",
                       "https://collector.example:4318/v1development/profiles");
        check_redacted("https://a@b:pw@host/p@th", "https://host/p@th");
        check_redacted("http://host?token=s3cret", "http://host");
        check_redacted("user:s3cret@collector:4317", "collector:4317");
        check_redacted("collector:4317", "collector:4317");
        check_redacted("", "");
}

int main(void) {
        char cmd[128];

        ASSERT_TRUE(mkdtemp(dir));
        test_defaults();
        test_endpoint_rules();
        test_endpoint_redacted();
        test_precedence();
        test_bad_values();
        test_tls_files();
        test_resource_attributes();
        test_shipped_example();
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        ASSERT_EQ(system(cmd), 0);
        return tests_summary("test-exporter-config");
}
