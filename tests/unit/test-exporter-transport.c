/* SPDX-License-Identifier: MIT */

/* The transports' byte-level parts: gRPC framing, trailer values, google.rpc.Status with
 * RetryInfo (also garbage), Retry-After forms, gzip round trips.
 *
 * With arguments it is a manual probe of the real transport on sd-event:
 *   test-exporter-transport --send URL grpc|http/protobuf [gzip|none] [REQUEST_FILE]
 * sends one request (the file's bytes, else an empty request) and prints the result;
 * $PROBE_CA_FILE is the CA bundle for https. */

#include <curl/curl.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "gzip.h"
#include "tests.h"
#include "transport-util.h"
#include "transport.h"

typedef struct Buf {
        uint8_t data[512];
        size_t n;
} Buf;

static void put_varint(Buf *b, uint64_t v) {
        do {
                b->data[b->n++] = (uint8_t) ((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
                v >>= 7;
        } while (v);
}

static void put_len(Buf *b, uint32_t field, const void *data, size_t n) {
        put_varint(b, (uint64_t) field << 3 | 2);
        put_varint(b, n);
        memcpy(b->data + b->n, data, n);
        b->n += n;
}

/* google.rpc.Status{code, message, details: [Any{RetryInfo{retry_delay}}]} */
static Buf status_with_retry(int64_t seconds, int32_t nanos, const char *type_url) {
        Buf duration = {}, retry = {}, any = {}, status = {};

        put_varint(&duration, 1 << 3);
        put_varint(&duration, (uint64_t) seconds);
        put_varint(&duration, 2 << 3);
        put_varint(&duration, (uint64_t) (int64_t) nanos);
        put_len(&retry, 1, duration.data, duration.n);
        put_len(&any, 1, type_url, strlen(type_url));
        put_len(&any, 2, retry.data, retry.n);
        put_varint(&status, 1 << 3);
        put_varint(&status, 14);
        put_len(&status, 2, "try later", 9);
        put_len(&status, 3, any.data, any.n);
        return status;
}

static char *base64(const uint8_t *p, size_t n, bool pad) {
        static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        char *out = malloc(n / 3 * 4 + 5), *o = out;

        for (size_t i = 0; i < n; i += 3) {
                uint32_t v = (uint32_t) p[i] << 16 | (i + 1 < n ? (uint32_t) p[i + 1] << 8 : 0) |
                             (i + 2 < n ? p[i + 2] : 0);
                *o++ = a[v >> 18 & 63];
                *o++ = a[v >> 12 & 63];
                if (i + 1 < n)
                        *o++ = a[v >> 6 & 63];
                else if (pad)
                        *o++ = '=';
                if (i + 2 < n)
                        *o++ = a[v & 63];
                else if (pad)
                        *o++ = '=';
        }
        *o = 0;
        return out;
}

static void test_framing(void) {
        _cleanup_free_ void *framed = NULL;
        const void *msg;
        size_t n, size;
        bool compressed;
        const uint8_t *f;

        ASSERT_OK(grpc_frame("hello", 5, true, &framed, &n));
        f = framed;
        ASSERT_EQ(n, 10);
        ASSERT_EQ(f[0], 1);
        ASSERT_EQ(f[4], 5);
        ASSERT_OK(grpc_deframe(framed, n, &msg, &size, &compressed));
        ASSERT_EQ(size, 5);
        ASSERT_TRUE(compressed);
        ASSERT_TRUE(memcmp(msg, "hello", 5) == 0);

        /* An empty message: the usual ExportProfilesServiceResponse on success. */
        ASSERT_OK(grpc_deframe("\0\0\0\0\0", 5, &msg, &size, &compressed));
        ASSERT_EQ(size, 0);
        ASSERT_TRUE(!compressed);

        ASSERT_EQ(grpc_deframe("", 0, &msg, &size, &compressed), -ENODATA);
        ASSERT_EQ(grpc_deframe("\0\0\0", 3, &msg, &size, &compressed), -EBADMSG);
        ASSERT_EQ(grpc_deframe("\0\0\0\0\x09" "abc", 8, &msg, &size, &compressed), -EBADMSG);
        ASSERT_EQ(grpc_deframe("\x07\0\0\0\0", 5, &msg, &size, &compressed), -EBADMSG);
        ASSERT_EQ(grpc_deframe("\0\xff\xff\xff\xff", 5, &msg, &size, &compressed), -EBADMSG);
}

static void test_status_codes(void) {
        int s;

        ASSERT_EQ(grpc_status_from_http(503), GRPC_UNAVAILABLE);
        ASSERT_EQ(grpc_status_from_http(429), GRPC_UNAVAILABLE);
        ASSERT_EQ(grpc_status_from_http(502), GRPC_UNAVAILABLE);
        ASSERT_EQ(grpc_status_from_http(504), GRPC_UNAVAILABLE);
        ASSERT_EQ(grpc_status_from_http(400), GRPC_INTERNAL);
        ASSERT_EQ(grpc_status_from_http(401), GRPC_UNAUTHENTICATED);
        ASSERT_EQ(grpc_status_from_http(403), GRPC_PERMISSION_DENIED);
        ASSERT_EQ(grpc_status_from_http(404), GRPC_UNIMPLEMENTED);
        ASSERT_EQ(grpc_status_from_http(500), GRPC_UNKNOWN);

        ASSERT_OK(grpc_parse_status("0", &s));
        ASSERT_EQ(s, 0);
        ASSERT_OK(grpc_parse_status("14", &s));
        ASSERT_EQ(s, 14);
        ASSERT_EQ(grpc_parse_status("", &s), -EINVAL);
        ASSERT_EQ(grpc_parse_status("-1", &s), -EINVAL);
        ASSERT_EQ(grpc_parse_status("1x", &s), -EINVAL);
        ASSERT_EQ(grpc_parse_status("99999999999", &s), -EINVAL);
}

static void test_percent_decode(void) {
        static const struct {
                const char *in, *out;
        } cases[] = {
                { "plain", "plain" },
                { "no%20space%3A%20here", "no space: here" },
                { "%E2%9C%93 ok", "\xe2\x9c\x93 ok" },
                { "100%", "100%" },          /* malformed escapes stay as they are */
                { "%4", "%4" },
                { "%zz%41", "%zzA" },
                { "", "" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *s = NULL;
                ASSERT_OK(percent_decode(cases[i].in, strlen(cases[i].in), &s));
                ASSERT_STREQ(s, cases[i].out);
        }
}

static void test_base64(void) {
        static const char *const inputs[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
        void *out;
        size_t n;

        for (size_t i = 0; i < ELEMENTSOF(inputs); i++)
                for (int pad = 0; pad <= 1; pad++) {
                        _cleanup_free_ char *enc = base64((const uint8_t *) inputs[i], strlen(inputs[i]), pad);
                        ASSERT_OK(base64_decode(enc, strlen(enc), &out, &n));
                        ASSERT_EQ(n, strlen(inputs[i]));
                        ASSERT_TRUE(memcmp(out, inputs[i], n) == 0);
                        free(out);
                }
        ASSERT_EQ(base64_decode("Zm9v!", 5, &out, &n), -EINVAL);
        ASSERT_EQ(base64_decode("Zm9vY", 5, &out, &n), -EINVAL);
}

static void test_rpc_status(void) {
        Buf b = status_with_retry(2, 500000000, "type.googleapis.com/google.rpc.RetryInfo");
        _cleanup_free_ char *enc = base64(b.data, b.n, false);
        _cleanup_free_ void *bin = NULL;
        char *message = NULL;
        int64_t ms;
        size_t n;

        /* The whole trailer path: base64 without padding, Status, Any, RetryInfo, Duration. */
        ASSERT_OK(base64_decode(enc, strlen(enc), &bin, &n));
        ASSERT_OK(rpc_status_decode(bin, n, &message, &ms));
        ASSERT_STREQ(message, "try later");
        ASSERT_EQ(ms, 2500);
        free(message);

        /* Another detail type: no delay. */
        b = status_with_retry(2, 0, "type.googleapis.com/google.rpc.DebugInfo");
        ASSERT_OK(rpc_status_decode(b.data, b.n, NULL, &ms));
        ASSERT_EQ(ms, -1);

        /* Negative and huge delays are clamped. */
        b = status_with_retry(-5, 0, "type.googleapis.com/google.rpc.RetryInfo");
        ASSERT_OK(rpc_status_decode(b.data, b.n, NULL, &ms));
        ASSERT_EQ(ms, 0);
        b = status_with_retry(INT64_MAX, 0, "type.googleapis.com/google.rpc.RetryInfo");
        ASSERT_OK(rpc_status_decode(b.data, b.n, NULL, &ms));
        ASSERT_EQ(ms, 86400 * 1000LL);

        /* An empty Status is valid: no message, no delay. */
        message = (char *) "unchanged";
        ASSERT_OK(rpc_status_decode("", 0, &message, &ms));
        ASSERT_TRUE(message == NULL);
        ASSERT_EQ(ms, -1);

        /* Garbage: every truncation of a valid Status and some noise fail cleanly or decode a
         * prefix; nothing reads out of bounds (run under ASan/valgrind to see). */
        b = status_with_retry(3, 0, "type.googleapis.com/google.rpc.RetryInfo");
        for (size_t cut = 0; cut < b.n; cut++) {
                _cleanup_free_ uint8_t *copy = malloc(cut ?: 1);
                memcpy(copy, b.data, cut);
                message = NULL;
                int r = rpc_status_decode(copy, cut, &message, &ms);
                ASSERT_TRUE(r == 0 || r == -EBADMSG);
                free(message);
        }
        ASSERT_EQ(rpc_status_decode("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11, NULL, NULL), -EBADMSG);
        ASSERT_EQ(rpc_status_decode("\x12\x7f" "abc", 5, NULL, NULL), -EBADMSG);
        ASSERT_EQ(rpc_status_decode("\x0b", 1, NULL, NULL), -EBADMSG); /* group */
        ASSERT_EQ(rpc_status_decode("\x00\x01", 2, NULL, NULL), -EBADMSG); /* field 0 */
        /* HTML from a proxy is not a Status either ('<' is an end-group tag). */
        ASSERT_EQ(rpc_status_decode("<html>", 6, NULL, NULL), -EBADMSG);
}

static void test_retry_after(void) {
        time_t now = 784111777; /* Sun, 06 Nov 1994 08:49:37 GMT */
        int64_t ms;

        ASSERT_OK(parse_retry_after("120", now, &ms));
        ASSERT_EQ(ms, 120000);
        ASSERT_OK(parse_retry_after("  0 ", now, &ms));
        ASSERT_EQ(ms, 0);
        ASSERT_OK(parse_retry_after("99999999999999999999999", now, &ms));
        ASSERT_EQ(ms, 86400 * 1000LL);
        /* The three HTTP-date forms, 30 s ahead. */
        ASSERT_OK(parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now, &ms));
        ASSERT_EQ(ms, 30000);
        ASSERT_OK(parse_retry_after("Sunday, 06-Nov-94 08:50:07 GMT", now, &ms));
        ASSERT_EQ(ms, 30000);
        ASSERT_OK(parse_retry_after("Sun Nov  6 08:50:07 1994", now, &ms));
        ASSERT_EQ(ms, 30000);
        /* A date in the past: now. */
        ASSERT_OK(parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now, &ms));
        ASSERT_EQ(ms, 0);
        ASSERT_EQ(parse_retry_after("", now, &ms), -EINVAL);
        ASSERT_EQ(parse_retry_after("soon", now, &ms), -EINVAL);
        ASSERT_EQ(parse_retry_after("-5", now, &ms), -EINVAL);
}

static void test_timeout_format(void) {
        char buf[12];

        grpc_timeout_format(10000, buf);
        ASSERT_STREQ(buf, "10000m");
        grpc_timeout_format(99999999, buf);
        ASSERT_STREQ(buf, "99999999m");
        grpc_timeout_format(100000000, buf);
        ASSERT_STREQ(buf, "100000S");
        grpc_timeout_format(UINT64_MAX, buf);
        ASSERT_STREQ(buf, "99999999H");
}

static void test_gzip(void) {
        _cleanup_free_ void *gz = NULL, *out = NULL;
        char data[10000];
        size_t gz_size, n;
        void *tmp;

        for (size_t i = 0; i < sizeof data; i++)
                data[i] = (char) ('a' + i % 7);
        ASSERT_OK(exp_gzip(data, sizeof data, &gz, &gz_size));
        ASSERT_OK(exp_gunzip(gz, gz_size, 1 << 20, &out, &n));
        ASSERT_EQ(n, sizeof data);
        ASSERT_TRUE(memcmp(out, data, n) == 0);
        /* The response limit holds. */
        ASSERT_EQ(exp_gunzip(gz, gz_size, 9999, &tmp, &n), -EFBIG);
        ASSERT_OK(exp_gunzip(gz, gz_size, 10000, &tmp, &n));
        free(tmp);
        /* Truncated and garbage. */
        ASSERT_TRUE(exp_gunzip(gz, gz_size / 2, 1 << 20, &tmp, &n) < 0);
        ASSERT_TRUE(exp_gunzip("not gzip at all", 15, 1 << 20, &tmp, &n) < 0);
}

/* ---- the manual probe ---- */

static void on_done(OtlpTransport *t, const OtlpResult *res, void *userdata) {
        sd_event *e = userdata;

        printf("error=%d http_status=%ld grpc_status=%d retry_after_ms=%" PRIi64 " request_size=%zu "
               "response_size=%zu message=%s\n",
               res->error, res->http_status, res->grpc_status, res->retry_after_ms, res->request_size,
               res->response_size, res->message ?: "(null)");
        (void) sd_event_exit(e, res->error == 0 ? 0 : 1);
}

static int probe(int argc, char **argv) {
        OtlpConfig c = {
                .endpoint = argv[2],
                .protocol = streq(argv[3], "grpc") ? OTLP_PROTOCOL_GRPC : OTLP_PROTOCOL_HTTP_PROTOBUF,
                .compression = argc > 4 && streq(argv[4], "none") ? OTLP_COMPRESSION_NONE : OTLP_COMPRESSION_GZIP,
                .timeout_ms = 5000,
                .insecure = true,
                .ca_file = getenv("PROBE_CA_FILE"),
        };
        _cleanup_(otlp_transport_freep) OtlpTransport *t = NULL;
        _cleanup_free_ char *body = NULL;
        size_t size = 0;
        sd_event *e = NULL;
        int r;

        if (argc > 5) {
                FILE *f = fopen(argv[5], "re");
                ASSERT_TRUE(f);
                body = malloc(64u << 20);
                size = fread(body, 1, 64u << 20, f);
                fclose(f);
        }
        ASSERT_TRUE(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK);
        ASSERT_OK(sd_event_default(&e));
        ASSERT_OK(otlp_transport_new(e, &c, 1, &t));
        ASSERT_OK(otlp_transport_send(t, body ?: "", size, on_done, e));
        ASSERT_EQ(otlp_transport_in_flight(t), 1);
        r = sd_event_loop(e);
        t = otlp_transport_free(t);
        sd_event_unref(e);
        curl_global_cleanup();
        return r;
}

int main(int argc, char **argv) {
        if (argc >= 4 && streq(argv[1], "--send"))
                return probe(argc, argv) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;

        test_framing();
        test_status_codes();
        test_percent_decode();
        test_base64();
        test_rpc_status();
        test_retry_after();
        test_timeout_format();
        test_gzip();
        return tests_summary("test-exporter-transport");
}
