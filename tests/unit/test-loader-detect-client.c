/* SPDX-License-Identifier: MIT */
/* The loader's DetectRuntime calls (unwinder-loader/symbolizer-client.c) against a scripted
 * symbolizer on a private dbus-daemon (skipped without one), this process being both:
 *   - requests wait while the symbolizer is absent and go out when it appears;
 *   - the descriptor sent is the file's, with its file ID;
 *   - answers, refusals (UnusableRuntime, BadFile), a transient error retried after ~1 s, a
 *     symbolizer without the method (held until another one appears), a file no process maps;
 *   - at most 2 calls in flight, sent in the order asked; the callback never runs inside
 *     ep_symclient_detect(). */

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "bus.h"
#include "file-id.h"
#include "runtime-facts.h"
#include "symbolizer-client.h"
#include "test-private-bus.h"
#include "tests.h"

#define MAX_HELD 8

/* The symbolizer's side. */
typedef struct Fake {
        sd_bus *bus;
        sd_bus_slot *object;
        const char *script[16]; /* per call: a runtime name, or an error name */
        unsigned n_script, calls;
        bool hold;              /* keep the calls unanswered */
        sd_bus_message *held[MAX_HELD];
        uint8_t held_id[MAX_HELD][EP_FILE_ID_SIZE]; /* the file each held call is about */
        unsigned n_held;
        bool bad_fd;            /* a call whose descriptor was not the file its ID names */
} Fake;

/* The loader's side: what the callbacks got. */
typedef struct Got {
        unsigned n;
        uint32_t key;
        EpDetectResult result;
        char runtime[32], error[256];
        size_t size;
        EpCPythonFacts facts;
} Got;

static pid_t bus_pid = -1;
static char workdir[] = "/tmp/test-loader-detect-client-XXXXXX";
static sd_event *event;
static bool in_detect_call;

static void cleanup(void) {
        char path[200];

        if (bus_pid > 0)
                kill(bus_pid, SIGTERM);
        snprintf(path, sizeof path, "%s/bus.sock", workdir);
        unlink(path);
        rmdir(workdir);
}

static int fake_reply(Fake *f, sd_bus_message *call, const char *what) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        EpCPythonFacts facts;
        int r;

        if (startswith(what, "org."))
                return sd_bus_reply_method_errorf(call, what, "scripted %s", what);
        ep_cpython_facts_init(&facts);
        facts.minor = 12;
        r = sd_bus_message_new_method_return(call, &reply);
        if (r >= 0)
                r = sd_bus_message_append(reply, "s", what);
        if (r >= 0)
                r = sd_bus_message_append_array(reply, 'y', &facts, what[0] ? sizeof facts : 0);
        if (r >= 0)
                r = sd_bus_send(f->bus, reply, NULL);
        return r;
}

static int fake_detect(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Fake *f = userdata;
        uint8_t actual[EP_FILE_ID_SIZE];
        const void *id;
        size_t n;
        int fd;

        ASSERT_OK(sd_bus_message_read(m, "h", &fd));
        ASSERT_OK(sd_bus_message_read_array(m, 'y', &id, &n));
        ASSERT_EQ(n, EP_FILE_ID_SIZE);
        if (ep_file_id_from_fd(fd, actual, NULL) < 0 || memcmp(actual, id, EP_FILE_ID_SIZE) != 0)
                f->bad_fd = true;
        f->calls++;
        if (f->hold) {
                ASSERT_TRUE(f->n_held < MAX_HELD);
                memcpy(f->held_id[f->n_held], id, EP_FILE_ID_SIZE);
                f->held[f->n_held++] = sd_bus_message_ref(m);
                return 1;
        }
        return fake_reply(f, m, f->calls <= f->n_script ? f->script[f->calls - 1] : "cpython");
}

static const sd_bus_vtable fake_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD_WITH_ARGS("DetectRuntime", SD_BUS_ARGS("h", file, "ay", file_id),
                                SD_BUS_RESULT("s", runtime, "ay", facts), fake_detect, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

static void fake_appear(Fake *f) {
        ASSERT_OK(sd_bus_request_name(f->bus, EP_BUS_SYMBOLIZER, 0));
}

static void fake_leave(Fake *f) {
        ASSERT_OK(sd_bus_release_name(f->bus, EP_BUS_SYMBOLIZER));
}

static void fake_script(Fake *f, const char *const *script, unsigned n) {
        f->calls = 0;
        f->n_script = n;
        for (unsigned i = 0; i < n; i++)
                f->script[i] = script[i];
}

static void on_done(uint32_t key, const EpDetectAnswer *a, void *userdata) {
        Got *g = userdata;

        ASSERT_TRUE(!in_detect_call);
        g->n++;
        g->key = key;
        g->result = a->result;
        snprintf(g->runtime, sizeof g->runtime, "%s", a->runtime ?: "(null)");
        snprintf(g->error, sizeof g->error, "%s", a->error ?: "");
        g->size = a->size;
        if (a->result == EP_DETECT_ANSWERED && a->size == sizeof g->facts)
                memcpy(&g->facts, a->facts, sizeof g->facts);
}

static void detect(EpSymClient *c, uint32_t key, Got *g) {
        *g = (Got) {};
        in_detect_call = true;
        ASSERT_OK(ep_symclient_detect(c, key, on_done, g));
        in_detect_call = false;
}

/* Runs the loop for usec, or until *n reaches want (n may be NULL). */
static void run(uint64_t usec, const unsigned *n, unsigned want) {
        uint64_t end = (uint64_t) ep_now_ns(CLOCK_MONOTONIC) / 1000 + usec;

        while ((!n || *n < want) && (uint64_t) ep_now_ns(CLOCK_MONOTONIC) / 1000 < end)
                ASSERT_TRUE(sd_event_run(event, 50 * 1000) >= 0);
}

static void test_answers(EpSymClient *c, Fake *f, uint32_t key) {
        static const char *const answers[] = { "cpython", "", EP_ERROR_UNUSABLE_RUNTIME, EP_ERROR_BAD_FILE };
        Got g;

        for (size_t i = 0; i < ELEMENTSOF(answers); i++) {
                fake_script(f, &answers[i], 1);
                detect(c, key, &g);
                run(5 * USEC_PER_SEC, &g.n, 1);
                ASSERT_EQ(g.n, 1);
                ASSERT_EQ(g.key, key);
                ASSERT_EQ(f->calls, 1);
                if (i < 2) {
                        ASSERT_EQ(g.result, EP_DETECT_ANSWERED);
                        ASSERT_TRUE(streq(g.runtime, answers[i]));
                        ASSERT_EQ(g.size, i == 0 ? sizeof(EpCPythonFacts) : 0);
                        if (i == 0)
                                ASSERT_EQ(g.facts.header.magic, EP_RUNTIME_FACTS_MAGIC);
                } else {
                        ASSERT_EQ(g.result, EP_DETECT_REFUSED);
                        ASSERT_TRUE(strstr(g.error, answers[i]) && strstr(g.error, "scripted"));
                }
        }
        ASSERT_TRUE(!f->bad_fd);
}

/* A transient error: asked again after a second. */
static void test_transient(EpSymClient *c, Fake *f, uint32_t key) {
        static const char *const script[] = { SD_BUS_ERROR_NO_MEMORY, "cpython" };
        uint64_t start = ep_now_ns(CLOCK_MONOTONIC);
        Got g;

        fake_script(f, script, ELEMENTSOF(script));
        detect(c, key, &g);
        run(10 * USEC_PER_SEC, &g.n, 1);
        ASSERT_EQ(g.n, 1);
        ASSERT_EQ(g.result, EP_DETECT_ANSWERED);
        ASSERT_EQ(f->calls, 2);
        ASSERT_TRUE(ep_now_ns(CLOCK_MONOTONIC) - start >= 900 * NSEC_PER_MSEC);
}

/* A symbolizer without the method: the request waits for another symbolizer. */
static void test_unsupported(EpSymClient *c, Fake *f, uint32_t key) {
        static const char *const script[] = { SD_BUS_ERROR_UNKNOWN_METHOD, "cpython" };
        Got g;

        fake_script(f, script, ELEMENTSOF(script));
        detect(c, key, &g);
        run(2500 * 1000, NULL, 0);
        ASSERT_EQ(g.n, 0);
        ASSERT_EQ(f->calls, 1); /* not retried on a timer */
        fake_leave(f);
        run(200 * 1000, NULL, 0);
        fake_appear(f);
        run(5 * USEC_PER_SEC, &g.n, 1);
        ASSERT_EQ(g.n, 1);
        ASSERT_EQ(g.result, EP_DETECT_ANSWERED);
        ASSERT_TRUE(streq(g.runtime, "cpython"));
        ASSERT_EQ(f->calls, 2);
}

/* Four files asked at once: two calls in flight at a time. */
/* At most two in flight, sent in the order asked (a start asks about dozens of files: the
 * first process seen is not answered last). */
static void test_in_flight(EpSymClient *c, Fake *f, EpProcTable *procs, const uint32_t *keys, size_t n_keys) {
        Got g[4];
        unsigned answered;

        ASSERT_TRUE(n_keys >= ELEMENTSOF(g));
        fake_script(f, NULL, 0);
        f->hold = true;
        for (size_t i = 0; i < ELEMENTSOF(g); i++)
                detect(c, keys[i], &g[i]);
        run(500 * 1000, NULL, 0);
        ASSERT_EQ(f->n_held, 2);
        for (unsigned i = 0; i < f->n_held; i++)
                ASSERT_TRUE(memcmp(f->held_id[i], ep_proc_table_file(procs, keys[i])->id, EP_FILE_ID_SIZE) == 0);
        f->hold = false;
        for (unsigned i = 0; i < f->n_held; i++) {
                ASSERT_OK(fake_reply(f, f->held[i], "cpython"));
                sd_bus_message_unref(f->held[i]);
        }
        f->n_held = 0;
        for (uint64_t end = ep_now_ns(CLOCK_MONOTONIC) + 5 * NSEC_PER_SEC; ep_now_ns(CLOCK_MONOTONIC) < end;) {
                answered = 0;
                for (size_t i = 0; i < ELEMENTSOF(g); i++)
                        answered += g[i].n;
                if (answered == ELEMENTSOF(g))
                        break;
                ASSERT_TRUE(sd_event_run(event, 50 * 1000) >= 0);
        }
        for (size_t i = 0; i < ELEMENTSOF(g); i++) {
                ASSERT_EQ(g[i].n, 1);
                ASSERT_EQ(g[i].key, keys[i]);
                ASSERT_EQ(g[i].result, EP_DETECT_ANSWERED);
        }
        ASSERT_EQ(f->calls, 4);
}

int main(void) {
        char address[512] = "";
        _cleanup_(ep_proc_table_freep) EpProcTable *procs = NULL;
        EpSymClient *c = NULL;
        EpDaemon d = { .ident = "test" };
        uint32_t keys[16];
        size_t n_keys = 0;
        EpProcess *p;
        Fake f = {};
        Got g;

        if (access("/usr/bin/dbus-daemon", X_OK) < 0) {
                fprintf(stderr, "dbus-daemon not installed, skipping\n");
                return EXIT_TEST_SKIP;
        }
        ASSERT_TRUE(mkdtemp(workdir));
        atexit(cleanup);
        bus_pid = test_private_bus_start(workdir, address, sizeof address);
        ASSERT_TRUE(bus_pid > 0);
        ASSERT_OK(setenv("DBUS_SYSTEM_BUS_ADDRESS", address, 1));

        /* Our own mappings give the files. */
        ASSERT_OK(ep_proc_table_new("/proc", 0, &procs));
        ASSERT_OK(ep_proc_table_add(procs, getpid(), &p));
        for (size_t i = 0; i < p->n_mappings && n_keys < ELEMENTSOF(keys); i++) {
                uint32_t k = p->mappings[i].file_key;
                bool seen = false;

                for (size_t j = 0; j < n_keys; j++)
                        seen = seen || keys[j] == k;
                if (k != 0 && !seen)
                        keys[n_keys++] = k;
        }
        ASSERT_TRUE(n_keys >= 4);

        ASSERT_OK(sd_event_default(&event));
        d.event = event;
        ASSERT_OK(sd_bus_open_system(&d.bus));
        ASSERT_OK(sd_bus_attach_event(d.bus, event, 0));
        ASSERT_OK(sd_bus_open_system(&f.bus));
        ASSERT_OK(sd_bus_attach_event(f.bus, event, 0));
        ASSERT_OK(sd_bus_add_object_vtable(f.bus, &f.object, EP_PATH_SYMBOLIZER, EP_IFACE_SYMBOLIZER, fake_vtable, &f));

        ASSERT_OK(ep_symclient_new(&d, NULL, procs, &c));

        /* No symbolizer yet: the request waits, and goes out when one appears. */
        detect(c, keys[0], &g);
        run(500 * 1000, NULL, 0);
        ASSERT_EQ(g.n, 0);
        ASSERT_EQ(f.calls, 0);
        fake_appear(&f);
        run(5 * USEC_PER_SEC, &g.n, 1);
        ASSERT_EQ(g.n, 1);
        ASSERT_EQ(g.result, EP_DETECT_ANSWERED);
        ASSERT_EQ(f.calls, 1);

        test_answers(c, &f, keys[0]);
        test_transient(c, &f, keys[1]);
        test_unsupported(c, &f, keys[2]);
        test_in_flight(c, &f, procs, keys, n_keys);

        /* A file no process maps: not sent, and said so. */
        fake_script(&f, NULL, 0);
        detect(c, 0x7fffffff, &g);
        run(5 * USEC_PER_SEC, &g.n, 1);
        ASSERT_EQ(g.n, 1);
        ASSERT_EQ(g.result, EP_DETECT_UNAVAILABLE);
        ASSERT_EQ(f.calls, 0);
        ASSERT_TRUE(!f.bad_fd);

        /* Freed with a request waiting: its callback never runs. */
        fake_leave(&f);
        run(200 * 1000, NULL, 0);
        detect(c, keys[0], &g);
        c = ep_symclient_free(c);
        run(200 * 1000, NULL, 0);
        ASSERT_EQ(g.n, 0);

        sd_bus_slot_unref(f.object);
        sd_bus_flush_close_unref(f.bus);
        sd_bus_flush_close_unref(d.bus);
        sd_event_unref(event);
        return tests_summary("loader-detect-client");
}
