/* SPDX-License-Identifier: MIT */

/* ebpf-profiler-exporter as a process, without root: a private dbus-daemon, this test playing
 * the collector (org.ebpfprofiler.Collector1 with OpenExportRing() and an export ring) and a
 * loopback HTTP server playing the OTLP receiver. Checks requests and their content, the
 * Exporter1 counters, malformed groups, HTTP failures (retried from the spool, also across an
 * exporter restart), Flush(), a collector restart, the idle mode and the command line. Usage: test-exporter-daemon PATH-TO-ebpf-profiler-exporter */

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>
#include <zlib.h>

#include "bus.h"
#include "daemon.h"
#include "log.h"
#include "otlp-pb.h"
#include "shm-ring.h"
#include "tests.h"
#include "wire-buf.h"
#include "wire.h"

#define START_NS 1700000000000000000ULL
#define END_NS (START_NS + 5 * NSEC_PER_SEC)
#define WAIT_S 20 /* what a loaded machine may need, paid only on failure */

typedef struct Conn {
        int fd;
        sd_event_source *source;
        uint8_t *buf;
        size_t size, cap;
} Conn;

typedef struct Ctx {
        const char *exporter_path;
        char dir[64], bus_address[128];
        pid_t dbus_pid, exporter_pid;
        sd_event *event;
        sd_bus *bus;
        sd_bus_slot *collector_slot;
        EpRing *ring;
        unsigned open_calls;
        int listen_fd;
        uint16_t port;
        int http_status; /* what the receiver answers */
        unsigned posts;  /* requests seen, whatever the answer */
        PbRequest *requests[16];
        size_t n_requests;
        char content_type[128], content_encoding[64], path[128];
} Ctx;

static Ctx ctx = { .listen_fd = -1, .http_status = 200 };

/* ---- helpers ---- */

/* Runs the loop once (up to 50 ms): the exporter's bus calls to us and its HTTP requests are
 * served there. */
static void run_loop(void) {
        ASSERT_OK(sd_event_run(ctx.event, 50000));
}

/* Runs the loop until cond holds; fails after WAIT_S naming it and what the fakes have seen. */
#define RUN_UNTIL(cond)                                                                             \
        ASSERT_EVENTUALLY((run_loop(), (cond)), WAIT_S, "%u OpenExportRing calls, %zu requests, %s", \
                          ctx.open_calls, ctx.n_requests, flush_done ? "Flush answered" : "no Flush answer")

static uint64_t exporter_u64(const char *property) {
        sd_bus_error error = SD_BUS_ERROR_NULL;
        uint64_t v = 0;
        uint32_t u = 0;
        /* SpoolFiles is the one "u" among the counters. */
        bool is_u = streq(property, "SpoolFiles");
        int r = sd_bus_get_property_trivial(ctx.bus, EP_BUS_EXPORTER, EP_PATH_EXPORTER, EP_IFACE_EXPORTER,
                                            property, &error, is_u ? 'u' : 't', is_u ? (void *) &u : (void *) &v);
        if (is_u)
                v = u;
        if (r < 0)
                fprintf(stderr, "get %s: %s\n", property, error.message ?: strerror(-r));
        sd_bus_error_free(&error);
        ASSERT_OK(r);
        return v;
}

static char *exporter_str(const char *property) {
        sd_bus_error error = SD_BUS_ERROR_NULL;
        char *s = NULL;
        int r = sd_bus_get_property_string(ctx.bus, EP_BUS_EXPORTER, EP_PATH_EXPORTER, EP_IFACE_EXPORTER,
                                           property, &error, &s);
        sd_bus_error_free(&error);
        ASSERT_OK(r);
        return s;
}

/* Waits (running the loop, so the exporter's bus calls to us are served) until a property
 * reaches at least want; returns its value then. */
static uint64_t wait_property(const char *property, uint64_t want) {
        uint64_t v = 0;

        ASSERT_EVENTUALLY((v = exporter_u64(property)) >= want || (run_loop(), false), WAIT_S,
                          "%s = %" PRIu64 ", want at least %" PRIu64, property, v, want);
        return v;
}

static pid_t spawn(const char *const *argv, const char *endpoint_env) {
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                setenv("DBUS_SYSTEM_BUS_ADDRESS", ctx.bus_address, 1);
                unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
                unsetenv("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT");
                if (endpoint_env)
                        setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint_env, 1);
                execv(argv[0], (char **) argv);
                _exit(127);
        }
        return pid;
}

static int wait_exit(pid_t pid) {
        int status;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        return WEXITSTATUS(status);
}

static int run_exporter_cmdline(const char *const *args) {
        const char *argv[8] = { ctx.exporter_path };
        size_t n = 1;
        for (; args[n - 1] && n < ELEMENTSOF(argv) - 1; n++)
                argv[n] = args[n - 1];
        argv[n] = NULL;
        int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC), saved = dup(STDOUT_FILENO);
        /* keep --help/--version output out of the test log */
        dup2(devnull, STDOUT_FILENO);
        pid_t pid = spawn(argv, NULL);
        dup2(saved, STDOUT_FILENO);
        close(saved);
        close(devnull);
        return wait_exit(pid);
}

/* A failed assertion exits: do not leave the daemons behind. */
static void cleanup_children(void) {
        char cmd[96];

        if (ctx.exporter_pid > 0 && kill(ctx.exporter_pid, SIGKILL) >= 0)
                (void) waitpid(ctx.exporter_pid, NULL, 0);
        if (ctx.dbus_pid > 0 && kill(ctx.dbus_pid, SIGTERM) >= 0)
                (void) waitpid(ctx.dbus_pid, NULL, 0);
        ctx.exporter_pid = ctx.dbus_pid = 0;
        if (ctx.dir[0]) {
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", ctx.dir);
                (void) !system(cmd);
                ctx.dir[0] = 0;
        }
}

/* ---- the private bus ---- */

/* One attempt to connect ctx.bus to the private dbus-daemon; ctx.bus stays NULL on failure. */
static int bus_connect(void) {
        sd_bus *bus = NULL;
        int r;

        if ((r = sd_bus_new(&bus)) < 0 || (r = sd_bus_set_address(bus, ctx.bus_address)) < 0 ||
            (r = sd_bus_set_bus_client(bus, true)) < 0 || (r = sd_bus_start(bus)) < 0) {
                sd_bus_unref(bus);
                return r;
        }
        ctx.bus = bus;
        return 0;
}

static void start_bus(void) {
        char config[128], socket_path[96];
        FILE *f;

        ASSERT_TRUE(mkdtemp(strcpy(ctx.dir, "/tmp/test-exporter-XXXXXX")));
        atexit(cleanup_children);
        snprintf(config, sizeof config, "%s/bus.conf", ctx.dir);
        snprintf(socket_path, sizeof socket_path, "%s/bus", ctx.dir);
        snprintf(ctx.bus_address, sizeof ctx.bus_address, "unix:path=%s", socket_path);
        f = fopen(config, "we");
        ASSERT_TRUE(f);
        fprintf(f,
                "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\"\n"
                " \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n"
                "<busconfig><type>session</type><listen>unix:path=%s</listen><auth>EXTERNAL</auth>\n"
                "<policy context=\"default\"><allow user=\"*\"/><allow own=\"*\"/>"
                "<allow send_destination=\"*\" eavesdrop=\"true\"/><allow eavesdrop=\"true\"/></policy>"
                "</busconfig>\n", socket_path);
        fclose(f);

        ctx.dbus_pid = fork();
        ASSERT_TRUE(ctx.dbus_pid >= 0);
        if (ctx.dbus_pid == 0) {
                char arg[160];
                snprintf(arg, sizeof arg, "--config-file=%s", config);
                execl("/usr/bin/dbus-daemon", "dbus-daemon", arg, "--nofork", "--nopidfile", (char *) NULL);
                _exit(127);
        }
        /* The socket file exists from bind(), before dbus-daemon listens: wait for a connection. */
        int r = 0;
        ASSERT_EVENTUALLY((r = bus_connect()) >= 0, 30, "cannot connect to dbus-daemon (pid %d) at %s: %s",
                          (int) ctx.dbus_pid, socket_path, strerror(-r));
        ASSERT_OK(sd_bus_attach_event(ctx.bus, ctx.event, 0));
}

/* ---- the fake collector ---- */

static int method_open_export_ring(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        ctx.ring = ep_ring_free(ctx.ring);
        ASSERT_OK(ep_ring_create("test-export", 1 << 20, &ctx.ring));
        ctx.open_calls++;
        return sd_bus_reply_method_return(m, "hh", ep_ring_memfd(ctx.ring), ep_ring_eventfd(ctx.ring));
}

static const sd_bus_vtable collector_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD("OpenExportRing", "", "hh", method_open_export_ring, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

static void collector_appear(void) {
        ASSERT_OK(sd_bus_add_object_vtable(ctx.bus, &ctx.collector_slot, EP_PATH_COLLECTOR, EP_IFACE_COLLECTOR,
                                           collector_vtable, NULL));
        ASSERT_OK(sd_bus_request_name(ctx.bus, EP_BUS_COLLECTOR, 0));
}

static void collector_vanish(void) {
        ASSERT_OK(sd_bus_release_name(ctx.bus, EP_BUS_COLLECTOR));
        ctx.collector_slot = sd_bus_slot_unref(ctx.collector_slot);
        ctx.ring = ep_ring_free(ctx.ring);
}

static void push(uint16_t type, EpWriter *w) {
        ASSERT_TRUE(!w->overflow);
        ASSERT_OK(ep_ring_push(ctx.ring, type, w->data, (uint32_t) w->size));
        ep_writer_reset(w);
}

/* One interval: two processes sharing a native frame; 3 + 2 events. With broken set, the
 * stack names a frame that was never defined. */
static void push_group(uint64_t id, bool broken, bool empty) {
        static const uint8_t file_id[16] = { 0xaa, 0xbb, 0xcc, 0xdd, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };
        EpWriter w;

        ep_writer_init_dynamic(&w);
        ep_put_u64(&w, id);
        ep_put_u64(&w, START_NS);
        ep_put_u64(&w, END_NS);
        ep_put_u64(&w, 50000000);
        push(EP_MSG_EXP_BEGIN, &w);
        if (!empty) {
                for (uint32_t pid = 1000; pid <= 1001; pid++) {
                        ep_put_u32(&w, pid);
                        ep_put_str(&w, "busy");
                        ep_put_str(&w, "/opt/busy");
                        ep_put_str(&w, pid == 1001 ? "c0ffee" : "");
                        push(EP_MSG_EXP_PROCESS, &w);
                }
                for (uint32_t ref = 1; ref <= 2; ref++) {
                        ep_put_u32(&w, ref);
                        ep_put_u8(&w, ref == 1 ? EP_FRAME_NATIVE : EP_FRAME_KERNEL);
                        ep_put_bytes(&w, ref == 1 ? file_id : (const uint8_t[16]) {}, 16);
                        ep_put_bytes(&w, ref == 1 ? file_id : (const uint8_t[16]) {}, 16); /* htlhash */
                        ep_put_blob(&w, NULL, 0);
                        ep_put_str(&w, ""); /* no Go build ID */
                        ep_put_str(&w, ref == 1 ? "/opt/busy" : "");
                        ep_put_u64(&w, ref == 1 ? 0x4242 : 0xffffffff81234567ULL);
                        ep_put_u64(&w, ref == 1 ? 0x404242 : 0); /* ELF address */
                        ep_put_u16(&w, 1);
                        ep_put_str(&w, ref == 1 ? "spin" : "asm_sysvec_apic_timer_interrupt");
                        ep_put_str(&w, ref == 1 ? "busy.c" : "");
                        ep_put_u32(&w, ref == 1 ? 12 : 0);
                        push(EP_MSG_EXP_FRAME, &w);
                }
                ep_put_u32(&w, 7);
                ep_put_u32(&w, 2);
                ep_put_u32(&w, 2);
                ep_put_u32(&w, broken ? 99 : 1);
                push(EP_MSG_EXP_STACK, &w);
                for (uint32_t pid = 1000; pid <= 1001; pid++) {
                        uint32_t n = pid == 1000 ? 3 : 2;
                        ep_put_u32(&w, pid);
                        ep_put_u32(&w, pid);
                        ep_put_u32(&w, 1);
                        ep_put_str(&w, "busy");
                        ep_put_u32(&w, 7);
                        ep_put_u64(&w, n);
                        ep_put_u32(&w, n);
                        for (uint32_t i = 0; i < n; i++)
                                ep_put_u64(&w, START_NS + (i + 1) * 50000000ULL);
                        push(EP_MSG_EXP_SAMPLE, &w);
                }
        }
        ep_put_u64(&w, id);
        push(EP_MSG_EXP_END, &w);
        ASSERT_OK(ep_ring_notify(ctx.ring));
        ep_writer_done(&w);
}

/* ---- the OTLP/HTTP receiver ---- */

static void header_value(const char *headers, const char *name, char *ret, size_t size) {
        const char *p = strcasestr(headers, name), *end;
        ret[0] = 0;
        if (!p)
                return;
        p += strlen(name);
        while (*p == ' ')
                p++;
        end = strstr(p, "\r\n");
        snprintf(ret, size, "%.*s", (int) (end ? end - p : (ptrdiff_t) strlen(p)), p);
}

static void handle_request(Conn *c, size_t header_len, size_t body_len) {
        _cleanup_free_ uint8_t *plain = NULL;
        char reply[256];
        size_t plain_cap = 1 << 20;
        z_stream z = {};

        c->buf[header_len - 1] = 0; /* terminate the header block for the string searches */
        header_value((char *) c->buf, "\r\ncontent-type:", ctx.content_type, sizeof ctx.content_type);
        header_value((char *) c->buf, "\r\ncontent-encoding:", ctx.content_encoding, sizeof ctx.content_encoding);
        sscanf((char *) c->buf, "POST %127s ", ctx.path);
        ctx.posts++;

        if (ctx.http_status == 200) {
                plain = malloc(plain_cap);
                ASSERT_TRUE(plain);
                ASSERT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
                z.next_in = c->buf + header_len;
                z.avail_in = (uInt) body_len;
                z.next_out = plain;
                z.avail_out = (uInt) plain_cap;
                ASSERT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
                inflateEnd(&z);
                ASSERT_TRUE(ctx.n_requests < ELEMENTSOF(ctx.requests));
                ctx.requests[ctx.n_requests] = pb_request_unpack(NULL, z.total_out, plain);
                ASSERT_TRUE(ctx.requests[ctx.n_requests]);
                ctx.n_requests++;
        }
        snprintf(reply, sizeof reply,
                 "HTTP/1.1 %d %s\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n"
                 "Connection: close\r\n\r\n",
                 ctx.http_status, ctx.http_status == 200 ? "OK" : "Service Unavailable");
        ASSERT_TRUE(write(c->fd, reply, strlen(reply)) == (ssize_t) strlen(reply));
}

static void conn_free(Conn *c) {
        sd_event_source_disable_unref(c->source);
        close(c->fd);
        free(c->buf);
        free(c);
}

static int on_conn(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Conn *c = userdata;
        const uint8_t *end;
        ssize_t n;

        if (c->cap - c->size < 65536) {
                c->cap = c->cap * 2 + 65536;
                c->buf = realloc(c->buf, c->cap);
                ASSERT_TRUE(c->buf);
        }
        n = read(fd, c->buf + c->size, c->cap - c->size - 1);
        if (n <= 0) {
                conn_free(c);
                return 0;
        }
        c->size += n;
        c->buf[c->size] = 0;
        end = memmem(c->buf, c->size, "\r\n\r\n", 4);
        if (end) {
                char len[32];
                size_t header_len = end + 4 - c->buf, body_len;
                c->buf[header_len - 1] = 0;
                header_value((char *) c->buf, "\r\ncontent-length:", len, sizeof len);
                c->buf[header_len - 1] = '\n';
                body_len = strtoul(len, NULL, 10);
                if (c->size >= header_len + body_len) {
                        handle_request(c, header_len, body_len);
                        conn_free(c);
                }
        }
        return 0;
}

static int on_accept(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Conn *c;
        int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC);

        if (cfd < 0)
                return 0;
        c = calloc(1, sizeof *c);
        ASSERT_TRUE(c);
        c->fd = cfd;
        ASSERT_OK(sd_event_add_io(ctx.event, &c->source, cfd, EPOLLIN, on_conn, c));
        return 0;
}

static void start_receiver(void) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof a;

        ctx.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        ASSERT_TRUE(ctx.listen_fd >= 0);
        ASSERT_OK(bind(ctx.listen_fd, (struct sockaddr *) &a, sizeof a) < 0 ? -errno : 0);
        ASSERT_OK(listen(ctx.listen_fd, 16) < 0 ? -errno : 0);
        ASSERT_OK(getsockname(ctx.listen_fd, (struct sockaddr *) &a, &len) < 0 ? -errno : 0);
        ctx.port = ntohs(a.sin_port);
        ASSERT_OK(sd_event_add_io(ctx.event, NULL, ctx.listen_fd, EPOLLIN, on_accept, NULL));
}

/* ---- checks ---- */

static bool flush_done;
static char flush_error[256]; /* "" when Flush() succeeded */
static int on_flush_reply(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const sd_bus_error *e = sd_bus_message_get_error(m);
        snprintf(flush_error, sizeof flush_error, "%s", e && e->message ? e->message : "");
        flush_done = true;
        return 0;
}
static void flush(void) {
        flush_done = false;
        ASSERT_OK(sd_bus_call_method_async(ctx.bus, NULL, EP_BUS_EXPORTER, EP_PATH_EXPORTER, EP_IFACE_EXPORTER,
                                           "Flush", on_flush_reply, NULL, ""));
        RUN_UNTIL(flush_done);
}

static char spool_dir[96];
static pid_t spawn_exporter(const char *endpoint_env) {
        return spawn((const char *[]) { ctx.exporter_path, "--log-level", getenv("TEST_DEBUG") ? "debug" : "err",
                                        "--spool-dir", spool_dir, NULL },
                     endpoint_env);
}
static size_t spool_files_on_disk(void) {
        char cmd[160];
        snprintf(cmd, sizeof cmd, "ls '%s' | grep -c '\\.req$'", spool_dir);
        FILE *f = popen(cmd, "r");
        unsigned n = 0;
        ASSERT_TRUE(f);
        ASSERT_EQ(fscanf(f, "%u", &n), 1);
        pclose(f);
        return n;
}

static void check_request(const PbRequest *req) {
        const PbDictionary *d = req->dictionary;
        uint64_t events = 0;

        ASSERT_TRUE(d);
        ASSERT_STREQ(d->string_table[0], "");
        ASSERT_TRUE(d->n_mapping_table == 2 && d->n_location_table == 3 && d->n_function_table == 3 &&
                    d->n_stack_table == 2 && d->n_link_table == 1);
        ASSERT_EQ(req->n_resource_profiles, 2);
        for (size_t i = 0; i < req->n_resource_profiles; i++) {
                const PbProfile *p = req->resource_profiles[i]->scope_profiles[0]->profiles[0];
                ASSERT_EQ(p->period, 50000000);
                ASSERT_TRUE(p->time_unix_nano == START_NS);
                for (size_t k = 0; k < p->n_samples; k++) {
                        ASSERT_EQ(p->samples[k]->stack_index, 1);
                        events += p->samples[k]->n_timestamps_unix_nano;
                }
        }
        ASSERT_EQ(events, 5);
        const PbStack *st = d->stack_table[1];
        ASSERT_EQ(st->n_location_indices, 2);
        const PbLocation *kernel = d->location_table[st->location_indices[0]];
        const PbLocation *native = d->location_table[st->location_indices[1]];
        ASSERT_EQ(kernel->mapping_index, 0);
        ASSERT_EQ(native->mapping_index, 1);
        ASSERT_EQ(native->address, 0x404242); /* the ELF address */
        ASSERT_STREQ(d->string_table[d->function_table[native->lines[0]->function_index]->name_strindex], "spin");
        ASSERT_STREQ(d->string_table[d->mapping_table[1]->filename_strindex], "/opt/busy");
}

int main(int argc, char **argv) {
        _cleanup_free_ char *endpoint = NULL, *s = NULL;

        if (argc != 2) {
                fprintf(stderr, "usage: %s PATH-TO-ebpf-profiler-exporter\n", argv[0]);
                return EXIT_FAILURE;
        }
        ctx.exporter_path = argv[1];
        if (access("/usr/bin/dbus-daemon", X_OK) < 0) {
                printf("test-exporter-daemon: no dbus-daemon, skipped\n");
                return 77;
        }
        log_set_max_level(LOG_ERR);
        signal(SIGPIPE, SIG_IGN);
        ASSERT_OK(sd_event_new(&ctx.event));
        start_bus();
        start_receiver();

        /* The command line, before any daemon runs. */
        ASSERT_EQ(run_exporter_cmdline((const char *[]) { "--version", NULL }), 0);
        ASSERT_EQ(run_exporter_cmdline((const char *[]) { "--help", NULL }), 0);
        ASSERT_EQ(run_exporter_cmdline((const char *[]) { "--bogus", NULL }), 2);
        ASSERT_EQ(run_exporter_cmdline((const char *[]) { "--log-level", "loud", NULL }), 2);
        ASSERT_EQ(run_exporter_cmdline((const char *[]) { "--endpoint", "ftp://x/y", NULL }), 2);
        ASSERT_EQ(run_exporter_cmdline((const char *[]) { "--endpoint", NULL }), 2);
        ASSERT_EQ(run_exporter_cmdline((const char *[]) { "extra", NULL }), 2);
        ASSERT_EQ(run_exporter_cmdline((const char *[]) { "--spool-max-size", "1K", NULL }), 2);
        ASSERT_EQ(run_exporter_cmdline((const char *[]) { "--spool-max-size", "lots", NULL }), 2);
        ASSERT_EQ(run_exporter_cmdline((const char *[]) { "--spool-dir", "", NULL }), 2);

        /* The endpoint from $OTEL_EXPORTER_OTLP_ENDPOINT (+ the profiles path). */
        collector_appear();
        ASSERT_TRUE(asprintf(&endpoint, "http://127.0.0.1:%u/", ctx.port) > 0);
        snprintf(spool_dir, sizeof spool_dir, "%s/spool", ctx.dir);
        ctx.exporter_pid = spawn_exporter(endpoint);
        RUN_UNTIL(ctx.open_calls >= 1);
        ASSERT_EQ(wait_property("Intervals", 0), 0);
        s = exporter_str("Endpoint");
        free(endpoint);
        ASSERT_TRUE(asprintf(&endpoint, "http://127.0.0.1:%u/v1development/profiles", ctx.port) > 0);
        ASSERT_STREQ(s, endpoint);
        free(s);
        s = exporter_str("Protocol");
        ASSERT_STREQ(s, "http/protobuf");

        /* One interval → one request with the right headers and content. */
        push_group(1, false, false);
        RUN_UNTIL(ctx.n_requests >= 1);
        ASSERT_STREQ(ctx.path, "/v1development/profiles");
        ASSERT_STREQ(ctx.content_type, "application/x-protobuf");
        ASSERT_STREQ(ctx.content_encoding, "gzip");
        check_request(ctx.requests[0]);
        ASSERT_EQ(wait_property("RequestsSent", 1), 1);
        ASSERT_TRUE(exporter_u64("BytesSent") > 0);
        ASSERT_EQ(exporter_u64("Intervals"), 1);

        /* A malformed group is dropped and counted; the next one goes through. */
        push_group(2, true, false);
        push_group(3, false, false);
        RUN_UNTIL(ctx.n_requests >= 2);
        check_request(ctx.requests[1]);
        ASSERT_EQ(wait_property("DecodeErrors", 1), 1);
        ASSERT_EQ(wait_property("Intervals", 2), 2);

        /* An empty interval sends nothing. */
        push_group(4, false, true);
        ASSERT_EQ(wait_property("Intervals", 3), 3);

        /* The receiver is unavailable: the request stays spooled and is retried; Flush() says
         * what remains. */
        ctx.http_status = 503;
        push_group(5, false, false);
        flush();
        ASSERT_TRUE(strstr(flush_error, "1 requests remain spooled"));
        ASSERT_TRUE(strstr(flush_error, "HTTP 503"));
        ASSERT_TRUE(ctx.posts >= 3);
        ASSERT_TRUE(wait_property("RequestsRetried", 1) >= 1);
        ASSERT_EQ(exporter_u64("RequestsFailed"), 0);
        ASSERT_EQ(exporter_u64("SpoolFiles"), 1);
        ASSERT_TRUE(exporter_u64("SpoolBytes") > 0);
        ASSERT_TRUE(exporter_u64("LastErrorNs") > 0);
        ASSERT_EQ(spool_files_on_disk(), 1);
        free(s);
        s = exporter_str("LastError");
        ASSERT_TRUE(strstr(s, "HTTP 503"));
        ASSERT_EQ(exporter_u64("RequestsSent"), 2);

        /* It works again: Flush() does not wait out the back-off. */
        ctx.http_status = 200;
        flush();
        ASSERT_STREQ(flush_error, "");
        RUN_UNTIL(ctx.n_requests >= 3);
        check_request(ctx.requests[2]);
        ASSERT_EQ(exporter_u64("RequestsSent"), 3);
        ASSERT_EQ(exporter_u64("SpoolFiles"), 0);
        ASSERT_EQ(exporter_u64("BackoffUntilNs"), 0);
        ASSERT_EQ(spool_files_on_disk(), 0);

        /* The collector goes away and comes back with a new ring: the exporter re-attaches. */
        collector_vanish();
        collector_appear();
        RUN_UNTIL(ctx.open_calls >= 2);
        push_group(6, false, false);
        RUN_UNTIL(ctx.n_requests >= 4);
        check_request(ctx.requests[3]);

        /* The receiver fails, the exporter stops (SIGTERM: a clean exit) with the request
         * spooled; the next exporter replays it. */
        ctx.http_status = 503;
        push_group(7, false, false);
        flush();
        ASSERT_TRUE(strstr(flush_error, "remain spooled"));
        kill(ctx.exporter_pid, SIGTERM);
        ASSERT_EQ(wait_exit(ctx.exporter_pid), 0);
        ASSERT_EQ(spool_files_on_disk(), 1);
        ctx.http_status = 200;
        ctx.exporter_pid = spawn_exporter(endpoint);
        RUN_UNTIL(ctx.n_requests >= 5);
        check_request(ctx.requests[4]);
        ASSERT_EQ(wait_property("RequestsSent", 1), 1);
        flush();
        ASSERT_STREQ(flush_error, "");
        ASSERT_EQ(spool_files_on_disk(), 0);
        kill(ctx.exporter_pid, SIGTERM);
        ASSERT_EQ(wait_exit(ctx.exporter_pid), 0);
        ctx.exporter_pid = 0;

        /* Without an endpoint: idle, Endpoint "", no OpenExportRing() call. */
        ctx.exporter_pid = spawn((const char *[]) { ctx.exporter_path, "--log-level", "warning", NULL }, NULL);
        for (int i = 0; i < 100; i++) {
                sd_bus_error error = SD_BUS_ERROR_NULL;
                char *e = NULL;
                int r = sd_bus_get_property_string(ctx.bus, EP_BUS_EXPORTER, EP_PATH_EXPORTER, EP_IFACE_EXPORTER,
                                                   "Endpoint", &error, &e);
                sd_bus_error_free(&error);
                if (r >= 0) {
                        ASSERT_STREQ(e, "");
                        free(e);
                        break;
                }
                ASSERT_TRUE(i < 99);
                sd_event_run(ctx.event, 50000);
        }
        ASSERT_OK(sd_bus_call_method(ctx.bus, EP_BUS_EXPORTER, EP_PATH_EXPORTER, EP_IFACE_EXPORTER, "Flush",
                                     NULL, NULL, ""));
        ASSERT_EQ(ctx.open_calls, 3);
        kill(ctx.exporter_pid, SIGTERM);
        ASSERT_EQ(wait_exit(ctx.exporter_pid), 0);
        ctx.exporter_pid = 0;

        for (size_t i = 0; i < ctx.n_requests; i++)
                pb_request_free_unpacked(ctx.requests[i], NULL);
        ctx.ring = ep_ring_free(ctx.ring);
        ctx.collector_slot = sd_bus_slot_unref(ctx.collector_slot);
        sd_bus_flush_close_unref(ctx.bus);
        cleanup_children();
        return tests_summary("test-exporter-daemon");
}
