/* SPDX-License-Identifier: MIT */

/* Delivery without a network: the classification table, the back-off, the spool across a
 * "restart" and a crash, the size bound, partial_success parsing, and the queue driven by a
 * fake transport that answers with scripted results. */

#include <fcntl.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "delivery.h"
#include "log.h"
#include "otlp-encode.h"
#include "otlp-pb.h"
#include "spool.h"
#include "tests.h"

typedef Opentelemetry__Proto__Collector__Profiles__V1development__ExportProfilesPartialSuccess PbPartial;

static OtlpResult http(long status) {
        return (OtlpResult) { .http_status = status, .grpc_status = -1, .retry_after_ms = -1 };
}

static OtlpResult grpc(int code, int64_t retry_after_ms) {
        return (OtlpResult) { .http_status = 200, .grpc_status = code, .retry_after_ms = retry_after_ms };
}

static void test_classify(void) {
        static const struct {
                long status;
                DeliveryClass want;
        } http_table[] = {
                { 200, DELIVERY_ACCEPTED }, { 202, DELIVERY_ACCEPTED }, { 204, DELIVERY_ACCEPTED },
                { 429, DELIVERY_RETRY },    { 502, DELIVERY_RETRY },    { 503, DELIVERY_RETRY },
                { 504, DELIVERY_RETRY },    { 400, DELIVERY_REJECTED }, { 401, DELIVERY_REJECTED },
                { 403, DELIVERY_REJECTED }, { 404, DELIVERY_REJECTED }, { 413, DELIVERY_REJECTED },
                { 415, DELIVERY_REJECTED }, { 500, DELIVERY_REJECTED }, { 501, DELIVERY_REJECTED },
                { 301, DELIVERY_REJECTED },
        };
        /* gRPC codes 0..16 without and with a server retry delay. */
        static const DeliveryClass grpc_table[17][2] = {
                [0] = { DELIVERY_ACCEPTED, DELIVERY_ACCEPTED },  /* OK */
                [1] = { DELIVERY_RETRY, DELIVERY_RETRY },        /* CANCELLED */
                [2] = { DELIVERY_REJECTED, DELIVERY_REJECTED },  /* UNKNOWN */
                [3] = { DELIVERY_REJECTED, DELIVERY_REJECTED },  /* INVALID_ARGUMENT */
                [4] = { DELIVERY_RETRY, DELIVERY_RETRY },        /* DEADLINE_EXCEEDED */
                [5] = { DELIVERY_REJECTED, DELIVERY_REJECTED },  /* NOT_FOUND */
                [6] = { DELIVERY_REJECTED, DELIVERY_REJECTED },  /* ALREADY_EXISTS */
                [7] = { DELIVERY_REJECTED, DELIVERY_REJECTED },  /* PERMISSION_DENIED */
                [8] = { DELIVERY_REJECTED, DELIVERY_RETRY },     /* RESOURCE_EXHAUSTED */
                [9] = { DELIVERY_REJECTED, DELIVERY_REJECTED },  /* FAILED_PRECONDITION */
                [10] = { DELIVERY_RETRY, DELIVERY_RETRY },       /* ABORTED */
                [11] = { DELIVERY_RETRY, DELIVERY_RETRY },       /* OUT_OF_RANGE */
                [12] = { DELIVERY_REJECTED, DELIVERY_REJECTED }, /* UNIMPLEMENTED */
                [13] = { DELIVERY_REJECTED, DELIVERY_REJECTED }, /* INTERNAL */
                [14] = { DELIVERY_RETRY, DELIVERY_RETRY },       /* UNAVAILABLE */
                [15] = { DELIVERY_RETRY, DELIVERY_RETRY },       /* DATA_LOSS */
                [16] = { DELIVERY_REJECTED, DELIVERY_REJECTED }, /* UNAUTHENTICATED */
        };
        static const int transport_errors[] = { ECONNREFUSED, ETIMEDOUT, EPROTO, ECONNRESET, EHOSTUNREACH };

        for (size_t i = 0; i < ELEMENTSOF(http_table); i++) {
                OtlpResult r = http(http_table[i].status);
                ASSERT_EQ(delivery_classify(&r), http_table[i].want);
        }
        for (int code = 0; code <= 16; code++) {
                OtlpResult a = grpc(code, -1), b = grpc(code, 1500);
                ASSERT_EQ(delivery_classify(&a), grpc_table[code][0]);
                ASSERT_EQ(delivery_classify(&b), grpc_table[code][1]);
        }
        for (size_t i = 0; i < ELEMENTSOF(transport_errors); i++) {
                OtlpResult r = { .error = -transport_errors[i], .grpc_status = -1, .retry_after_ms = -1 };
                ASSERT_EQ(delivery_classify(&r), DELIVERY_RETRY);
        }
        /* A proxy's 503 in front of a gRPC server: no trailers, HTTP decides. */
        OtlpResult proxy = { .http_status = 503, .grpc_status = -1, .retry_after_ms = -1 };
        ASSERT_EQ(delivery_classify(&proxy), DELIVERY_RETRY);
}

static void test_backoff(void) {
        const uint64_t initial = DELIVERY_BACKOFF_INITIAL_USEC, max = DELIVERY_BACKOFF_MAX_USEC;
        const uint64_t caps[] = { 1, 2, 4, 8, 16, 32, 60, 60, 60 };

        for (unsigned a = 0; a < ELEMENTSOF(caps); a++) {
                uint64_t cap = caps[a] * USEC_PER_SEC;
                /* The draw is uniform in [0, cap]: both ends are reachable, nothing beyond. */
                ASSERT_EQ(delivery_backoff_usec(a, -1, initial, max, DELIVERY_RETRY_AFTER_MAX_USEC, 0), 0);
                ASSERT_EQ(delivery_backoff_usec(a, -1, initial, max, DELIVERY_RETRY_AFTER_MAX_USEC, cap), cap);
                for (uint64_t rnd = 1; rnd < 1000000; rnd = rnd * 7919 + 13)
                        ASSERT_TRUE(delivery_backoff_usec(a, -1, initial, max, DELIVERY_RETRY_AFTER_MAX_USEC,
                                                          rnd * 0x9E3779B97F4A7C15ULL) <= cap);
        }
        /* Large attempt counts must not overflow. */
        ASSERT_TRUE(delivery_backoff_usec(1000, -1, initial, max, DELIVERY_RETRY_AFTER_MAX_USEC, UINT64_MAX) <= max);
        /* The server's delay wins over the jitter, whatever the attempt, and is capped. */
        ASSERT_EQ(delivery_backoff_usec(0, 2500, initial, max, DELIVERY_RETRY_AFTER_MAX_USEC, 12345), 2500000);
        ASSERT_EQ(delivery_backoff_usec(9, 0, initial, max, DELIVERY_RETRY_AFTER_MAX_USEC, 12345), 0);
        ASSERT_EQ(delivery_backoff_usec(0, 90000, initial, max, DELIVERY_RETRY_AFTER_MAX_USEC, 1), 90 * USEC_PER_SEC);
        ASSERT_EQ(delivery_backoff_usec(0, INT64_MAX, initial, max, DELIVERY_RETRY_AFTER_MAX_USEC, 1),
                  DELIVERY_RETRY_AFTER_MAX_USEC);
}

static char *make_tmpdir(void) {
        char *d = strdup("/tmp/test-exporter-delivery.XXXXXX");
        ASSERT_TRUE(d && mkdtemp(d));
        return d;
}

static void rm_rf(const char *dir) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        ASSERT_EQ(system(cmd), 0);
}

static void write_raw(const char *dir, const char *name, const void *data, size_t size) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, data, size), (ssize_t) size);
        close(fd);
}

static bool exists(const char *dir, const char *name) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        return access(path, F_OK) == 0;
}

static void expect_head(Spool *s, const char *want, uint64_t *ret_seq) {
        _cleanup_free_ void *data = NULL;
        size_t size = 0;
        uint64_t seq = 0;

        ASSERT_EQ(spool_peek(s, &data, &size, &seq, NULL), 1);
        ASSERT_EQ(size, strlen(want));
        ASSERT_TRUE(memcmp(data, want, size) == 0);
        if (ret_seq)
                *ret_seq = seq;
}

static void test_spool_restart_and_crash(void) {
        _cleanup_free_ char *dir = make_tmpdir();
        Spool *s = NULL;
        unsigned corrupt = 0, dropped = 9;
        uint64_t seq;
        void *data;
        size_t size;

        ASSERT_OK(spool_open(dir, 1 << 20, &s));
        ASSERT_OK(spool_append(s, "first", 5, &dropped));
        ASSERT_EQ(dropped, 0);
        ASSERT_OK(spool_append(s, "second", 6, NULL));
        ASSERT_OK(spool_append(s, "third", 5, NULL));
        ASSERT_EQ(spool_files(s), 3);
        ASSERT_EQ(spool_bytes(s), 3 * SPOOL_HEADER_SIZE + 16);
        spool_free(s);

        /* A crash mid-write leaves a temp file: not a request, removed on open. Another run
         * died after writing half a request under its final name: skipped and counted. */
        write_raw(dir, ".tmp-0000000000000010", "garbage", 7);
        write_raw(dir, "0000000000000002.req", "EPSPOOL1\x06\0\0", 11);

        ASSERT_OK(spool_open(dir, 1 << 20, &s));
        ASSERT_TRUE(!exists(dir, ".tmp-0000000000000010"));
        ASSERT_EQ(spool_files(s), 3);
        expect_head(s, "first", &seq);
        ASSERT_OK(spool_remove(s, seq));
        ASSERT_EQ(spool_peek(s, &data, &size, &seq, &corrupt), 1);
        ASSERT_EQ(corrupt, 1);
        ASSERT_TRUE(!exists(dir, "0000000000000002.req"));
        ASSERT_EQ(size, 5);
        ASSERT_TRUE(memcmp(data, "third", 5) == 0);
        free(data);
        /* New requests continue the sequence after the replayed ones. */
        ASSERT_OK(spool_append(s, "fourth", 6, NULL));
        ASSERT_TRUE(exists(dir, "0000000000000004.req"));
        ASSERT_OK(spool_remove(s, seq));
        ASSERT_OK(spool_remove(s, seq)); /* already gone: fine */
        expect_head(s, "fourth", NULL);
        spool_free(s);

        /* A flipped payload byte is caught by the CRC. */
        ASSERT_OK(spool_open(dir, 1 << 20, &s));
        spool_free(s);
        {
                char path[256];
                snprintf(path, sizeof path, "%s/0000000000000004.req", dir);
                int fd = open(path, O_WRONLY | O_CLOEXEC);
                ASSERT_TRUE(fd >= 0);
                ASSERT_EQ(pwrite(fd, "F", 1, SPOOL_HEADER_SIZE), 1);
                close(fd);
        }
        corrupt = 0;
        ASSERT_OK(spool_open(dir, 1 << 20, &s));
        ASSERT_EQ(spool_peek(s, &data, &size, &seq, &corrupt), 0);
        ASSERT_EQ(corrupt, 1);
        ASSERT_EQ(spool_files(s), 0);
        ASSERT_EQ(spool_bytes(s), 0);
        spool_free(s);
        rm_rf(dir);
}

static void test_spool_bound(bool on_disk) {
        _cleanup_free_ char *dir = on_disk ? make_tmpdir() : NULL;
        char buf[100];
        Spool *s = NULL;
        unsigned dropped = 0;

        memset(buf, 'x', sizeof buf);
        ASSERT_OK(spool_open(dir, 3 * (SPOOL_HEADER_SIZE + sizeof buf), &s));
        for (char c = 'a'; c <= 'c'; c++) {
                buf[0] = c;
                ASSERT_OK(spool_append(s, buf, sizeof buf, &dropped));
                ASSERT_EQ(dropped, 0);
        }
        buf[0] = 'd';
        ASSERT_OK(spool_append(s, buf, sizeof buf, &dropped));
        ASSERT_EQ(dropped, 1);
        ASSERT_EQ(spool_files(s), 3);
        if (on_disk)
                ASSERT_TRUE(!exists(dir, "0000000000000001.req"));
        {
                _cleanup_free_ char *data = NULL;
                size_t size;
                uint64_t seq;
                ASSERT_EQ(spool_peek(s, (void **) &data, &size, &seq, NULL), 1);
                ASSERT_EQ(data[0], 'b');
                ASSERT_EQ(seq, 2);
        }
        /* Larger than the whole bound: refused, nothing else dropped for it. */
        ASSERT_EQ(spool_append(s, buf, 4 * sizeof buf, &dropped), -EFBIG);
        ASSERT_EQ(spool_files(s), 3);
        spool_free(s);
        if (dir)
                rm_rf(dir);
}

static void test_partial_success(void) {
        Opentelemetry__Proto__Collector__Profiles__V1development__ExportProfilesServiceResponse resp;
        PbPartial ps;
        uint8_t buf[256];
        size_t n;
        int64_t rejected = 0;
        char *msg = NULL;

        opentelemetry__proto__collector__profiles__v1development__export_profiles_service_response__init(&resp);
        opentelemetry__proto__collector__profiles__v1development__export_profiles_partial_success__init(&ps);
        ps.rejected_profiles = 3;
        ps.error_message = (char *) "3 profiles had no samples";
        resp.partial_success = &ps;
        n = opentelemetry__proto__collector__profiles__v1development__export_profiles_service_response__pack(&resp, buf);
        /* Field 1 (partial_success) holding field 1 (varint 3) and field 2 (the string). */
        ASSERT_EQ(buf[0], 0x0a);
        ASSERT_EQ(buf[2], 0x08);
        ASSERT_EQ(buf[3], 3);
        ASSERT_EQ(buf[4], 0x12);
        ASSERT_EQ(delivery_parse_partial_success(buf, n, &rejected, &msg), 1);
        ASSERT_EQ(rejected, 3);
        ASSERT_STREQ(msg, "3 profiles had no samples");
        free(msg);

        /* Only a warning, no rejected count: still reported. */
        ps.rejected_profiles = 0;
        ps.error_message = (char *) "deprecated attribute";
        n = opentelemetry__proto__collector__profiles__v1development__export_profiles_service_response__pack(&resp, buf);
        ASSERT_EQ(delivery_parse_partial_success(buf, n, &rejected, &msg), 1);
        ASSERT_EQ(rejected, 0);
        free(msg);

        /* An empty partial_success, an empty response: full success. */
        ps.error_message = (char *) "";
        n = opentelemetry__proto__collector__profiles__v1development__export_profiles_service_response__pack(&resp, buf);
        ASSERT_EQ(delivery_parse_partial_success(buf, n, &rejected, &msg), 0);
        ASSERT_EQ(delivery_parse_partial_success(buf, 0, &rejected, &msg), 0);
        ASSERT_EQ(delivery_parse_partial_success("\x0a\x7f", 2, &rejected, &msg), -EBADMSG);
}

/* ---- the queue with a fake transport ---- */

typedef struct Fake {
        sd_event *event;
        Delivery *d;
        OtlpResult script[16];
        uint8_t response[64];
        size_t n_script, next;
        char sent[16][16]; /* bodies in the order they went out */
        size_t n_sent;
        sd_event_source *answer;
} Fake;

static int fake_answer(sd_event_source *s, void *userdata) {
        Fake *f = userdata;

        f->answer = sd_event_source_disable_unref(f->answer);
        ASSERT_TRUE(f->next < f->n_script);
        delivery_complete(f->d, &f->script[f->next++]);
        return 0;
}

static int fake_send(Delivery *d, const void *body, size_t size, void *userdata) {
        Fake *f = userdata;

        ASSERT_TRUE(f->n_sent < ELEMENTSOF(f->sent) && size < sizeof f->sent[0]);
        ASSERT_TRUE(!f->answer); /* one in flight */
        memcpy(f->sent[f->n_sent], body, size);
        f->sent[f->n_sent++][size] = 0;
        /* Like the real transport: the answer comes from the loop, never from inside send. */
        return sd_event_add_defer(f->event, &f->answer, fake_answer, f);
}

static void run_until_idle(Fake *f) {
        for (unsigned i = 0; i < 10000 && (delivery_pending(f->d) > 0 || delivery_in_flight(f->d)); i++)
                ASSERT_OK(sd_event_run(f->event, 100 * 1000));
        ASSERT_EQ(delivery_pending(f->d), 0);
}

static void test_fake_transport(void) {
        _cleanup_free_ char *dir = make_tmpdir();
        static const DeliveryOps ops = { .send = fake_send };
        const DeliveryOptions opts = {
                .spool_dir = dir,
                .backoff_initial_usec = 1000,
                .backoff_max_usec = 4000,
                .endpoint = "fake",
        };
        Fake f = {};
        DeliveryStats st;

        ASSERT_OK(sd_event_new(&f.event));
        ASSERT_OK(delivery_new(f.event, &opts, &ops, &f, &f.d));

        /* 503, 503 (one with Retry-After), 200: the head is sent three times, the later request
         * waits for it. */
        f.script[f.n_script++] = http(503);
        f.script[f.n_script] = http(503);
        f.script[f.n_script++].retry_after_ms = 2;
        f.script[f.n_script++] = http(200);
        f.script[f.n_script++] = http(200);
        ASSERT_OK(delivery_enqueue(f.d, "A", 1));
        ASSERT_OK(delivery_enqueue(f.d, "B", 1));
        ASSERT_EQ(delivery_pending(f.d), 2);
        run_until_idle(&f);
        ASSERT_EQ(f.n_sent, 4);
        ASSERT_STREQ(f.sent[0], "A");
        ASSERT_STREQ(f.sent[1], "A");
        ASSERT_STREQ(f.sent[2], "A");
        ASSERT_STREQ(f.sent[3], "B");
        st = delivery_stats(f.d);
        ASSERT_EQ(st.requests_sent, 2);
        ASSERT_EQ(st.requests_retried, 2);
        ASSERT_EQ(st.requests_failed, 0);
        ASSERT_EQ(st.bytes_sent, 2);
        ASSERT_EQ(st.spool_files, 0);
        ASSERT_EQ(st.backoff_until_ns, 0);
        ASSERT_TRUE(st.last_error && strstr(st.last_error, "HTTP 503"));

        /* 400: dropped, not retried; the next request goes on. A partial success counts. */
        f.script[f.n_script] = http(400);
        f.script[f.n_script++].message = "bad profile";
        {
                Opentelemetry__Proto__Collector__Profiles__V1development__ExportProfilesServiceResponse resp;
                PbPartial ps;
                opentelemetry__proto__collector__profiles__v1development__export_profiles_service_response__init(&resp);
                opentelemetry__proto__collector__profiles__v1development__export_profiles_partial_success__init(&ps);
                ps.rejected_profiles = 2;
                ps.error_message = (char *) "too old";
                resp.partial_success = &ps;
                f.script[f.n_script] = http(200);
                f.script[f.n_script].response = f.response;
                f.script[f.n_script++].response_size =
                        opentelemetry__proto__collector__profiles__v1development__export_profiles_service_response__pack(
                                &resp, f.response);
        }
        ASSERT_OK(delivery_enqueue(f.d, "C", 1));
        ASSERT_OK(delivery_enqueue(f.d, "D", 1));
        run_until_idle(&f);
        ASSERT_EQ(f.n_sent, 6);
        ASSERT_STREQ(f.sent[4], "C");
        ASSERT_STREQ(f.sent[5], "D");
        st = delivery_stats(f.d);
        ASSERT_EQ(st.requests_failed, 1);
        ASSERT_EQ(st.requests_retried, 2);
        ASSERT_EQ(st.requests_sent, 3);
        ASSERT_EQ(st.partial_rejected, 2);
        ASSERT_TRUE(st.last_error && strstr(st.last_error, "too old"));

        /* Restart: what was not accepted is replayed first, in order, before new data. */
        f.script[f.n_script++] = (OtlpResult) { .error = -ECONNREFUSED, .grpc_status = -1, .retry_after_ms = -1 };
        ASSERT_OK(delivery_enqueue(f.d, "E", 1));
        ASSERT_OK(delivery_enqueue(f.d, "F", 1));
        while (f.next < f.n_script)
                ASSERT_OK(sd_event_run(f.event, 100 * 1000));
        ASSERT_TRUE(delivery_backing_off(f.d));
        ASSERT_TRUE(delivery_stats(f.d).backoff_until_ns > 0);
        ASSERT_EQ(delivery_pending(f.d), 2);
        f.d = delivery_free(f.d);

        ASSERT_OK(delivery_new(f.event, &opts, &ops, &f, &f.d));
        ASSERT_EQ(delivery_pending(f.d), 2);
        for (int i = 0; i < 3; i++)
                f.script[f.n_script++] = http(200);
        ASSERT_OK(delivery_enqueue(f.d, "G", 1));
        run_until_idle(&f);
        ASSERT_EQ(f.n_sent, 10);
        ASSERT_STREQ(f.sent[7], "E");
        ASSERT_STREQ(f.sent[8], "F");
        ASSERT_STREQ(f.sent[9], "G");

        f.d = delivery_free(f.d);
        sd_event_unref(f.event);
        rm_rf(dir);
}

/* ---- splitting large intervals ---- */

/* n_pids processes, each with its own 3-frame stack, samples_per_pid samples with distinct
 * thread ids (no merging), interleaved so the splitter must sort them. */
static ExpInterval *make_interval(unsigned n_pids, unsigned samples_per_pid) {
        ExpInterval *iv = exp_interval_new(7, 1000, 2000, 50);
        ASSERT_TRUE(iv);
        for (unsigned p = 0; p < n_pids; p++) {
                ExpProcess *proc = exp_interval_add_process(iv);
                ASSERT_TRUE(proc);
                proc->pid = 100 + p;
                ASSERT_TRUE(asprintf(&proc->comm, "proc-%u", p) > 0);
                for (unsigned f = 0; f < 3; f++) {
                        ExpFrame *fr = exp_interval_add_frame(iv);
                        ASSERT_TRUE(fr);
                        fr->kind = EP_FRAME_KERNEL;
                        fr->addr = 0xffffffff81000000ull + p * 0x100 + f;
                        fr->lines = calloc(1, sizeof *fr->lines);
                        ASSERT_TRUE(fr->lines);
                        fr->n_lines = 1;
                        ASSERT_TRUE(asprintf(&fr->lines[0].function, "a_rather_long_function_name_%u_%u", p, f) > 0);
                }
                ExpStack *st = exp_interval_add_stack(iv);
                ASSERT_TRUE(st);
                st->frames = calloc(3, sizeof *st->frames);
                ASSERT_TRUE(st->frames);
                st->n_frames = 3;
                for (unsigned f = 0; f < 3; f++)
                        st->frames[f] = p * 3 + f;
        }
        for (unsigned k = 0; k < samples_per_pid; k++)
                for (unsigned p = 0; p < n_pids; p++) {
                        ExpSample *sm = exp_interval_add_sample(iv);
                        ASSERT_TRUE(sm);
                        sm->pid = 100 + p;
                        sm->tid = 1000 + k;
                        sm->stack = p;
                        sm->count = 2;
                }
        return iv;
}

typedef struct Parts {
        size_t max, n, over;
        uint64_t events;
        unsigned pid_parts[64]; /* in how many parts each pid appears */
} Parts;

static int collect_part(const void *data, size_t size, void *userdata) {
        Parts *p = userdata;
        PbRequest *req = pb_request_unpack(NULL, size, data);

        ASSERT_TRUE(req);
        p->n++;
        p->over += size > p->max;
        for (size_t i = 0; i < req->n_resource_profiles; i++) {
                const PbResourceProfiles *rp = req->resource_profiles[i];
                const PbProfile *prof = rp->scope_profiles[0]->profiles[0];
                for (size_t a = 0; a < rp->resource->n_attributes; a++)
                        if (streq(rp->resource->attributes[a]->key, "process.pid"))
                                p->pid_parts[rp->resource->attributes[a]->value->int_value - 100]++;
                for (size_t k = 0; k < prof->n_samples; k++)
                        for (size_t v = 0; v < prof->samples[k]->n_values; v++)
                                p->events += (uint64_t) prof->samples[k]->values[v];
        }
        pb_request_free_unpacked(req, NULL);
        return 0;
}

static void test_split(void) {
        _cleanup_free_ void *whole = NULL;
        ExpInterval *iv = make_interval(8, 20);
        OtlpEncodeStats st;
        size_t size;
        Parts parts = {};

        ASSERT_OK(otlp_encode_interval(iv, NULL, &whole, &size, NULL));

        /* Under the limit: one request, byte for byte what otlp_encode_interval() makes. */
        parts.max = size;
        ASSERT_OK(otlp_encode_interval_split(iv, NULL, size, collect_part, &parts, &st));
        ASSERT_EQ(parts.n, 1);
        ASSERT_EQ(st.requests, 1);
        ASSERT_EQ(st.bytes, size);
        ASSERT_EQ(parts.events, 8 * 20 * 2);

        /* A third of it: cut at process boundaries, each process whole in one request. */
        parts = (Parts) { .max = size / 3 };
        ASSERT_OK(otlp_encode_interval_split(iv, NULL, parts.max, collect_part, &parts, &st));
        ASSERT_TRUE(parts.n >= 3);
        ASSERT_EQ(parts.over, 0);
        ASSERT_EQ(st.requests, parts.n);
        ASSERT_EQ(parts.events, 8 * 20 * 2);
        ASSERT_EQ(st.events, 8 * 20 * 2);
        for (unsigned p = 0; p < 8; p++)
                ASSERT_EQ(parts.pid_parts[p], 1);
        exp_interval_free(iv);

        /* One process too large alone: cut between its samples, nothing lost. */
        iv = make_interval(1, 200);
        free(TAKE_PTR(whole));
        ASSERT_OK(otlp_encode_interval(iv, NULL, &whole, &size, NULL));
        parts = (Parts) { .max = size / 4 };
        ASSERT_OK(otlp_encode_interval_split(iv, NULL, parts.max, collect_part, &parts, &st));
        ASSERT_TRUE(parts.n >= 4);
        ASSERT_EQ(parts.over, 0);
        ASSERT_EQ(parts.events, 200 * 2);
        ASSERT_EQ(parts.pid_parts[0], parts.n);

        /* A limit below one sample: every sample alone, still sent. */
        parts = (Parts) { .max = 1 };
        ASSERT_OK(otlp_encode_interval_split(iv, NULL, 1, collect_part, &parts, &st));
        ASSERT_EQ(parts.n, 200);
        ASSERT_EQ(parts.events, 200 * 2);
        exp_interval_free(iv);

        /* No samples: nothing emitted. */
        iv = make_interval(2, 0);
        parts = (Parts) { .max = 1 };
        ASSERT_OK(otlp_encode_interval_split(iv, NULL, 1, collect_part, &parts, &st));
        ASSERT_EQ(parts.n, 0);
        ASSERT_EQ(st.requests, 0);
        exp_interval_free(iv);
}

int main(void) {
        log_set_max_level(getenv("TEST_DEBUG") ? LOG_DEBUG : LOG_CRIT);
        test_classify();
        test_backoff();
        test_spool_restart_and_crash();
        test_spool_bound(true);
        test_spool_bound(false);
        test_partial_success();
        test_fake_transport();
        test_split();
        return tests_summary("test-exporter-delivery");
}
