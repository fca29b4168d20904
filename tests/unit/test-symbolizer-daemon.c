/* SPDX-License-Identifier: MIT */
/* The symbolizer daemon end to end on a private dbus-daemon (no root needed; skipped without
 * dbus-daemon). This process plays the collector (OpenSession, rings) and, part of the time,
 * the loader (OpenFile, OpenKallsyms on org.ebpfprofiler.Loader1):
 *   - without a loader, native and kernel requests answer NO_FILE and the daemon stays up;
 *   - with it, native frames, kernel frames and file build IDs resolve; NoSuchFile → NO_FILE;
 *   - properties count, PropertiesChanged is emitted, a second session replaces the first;
 *   - no capabilities are left in the daemon; SIGTERM ends it cleanly. */

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <time.h>
#include <unistd.h>

#include "bus.h"
#include "test-private-bus.h"
#include "shm-ring.h"
#include "test-util.h"
#include "wire-buf.h"
#include "wire-sym.h"
#include "wire.h"

static const char *target;
static uint64_t beta_offset;
static unsigned open_file_calls;
static pid_t bus_pid = -1, sym_pid = -1;
static char workdir[] = "/tmp/test-symbolizer-daemon-XXXXXX";

static void cleanup(void) {
        if (sym_pid > 0)
                kill(sym_pid, SIGKILL);
        if (bus_pid > 0)
                kill(bus_pid, SIGTERM);
        char path[256];
        snprintf(path, sizeof path, "%s/bus.sock", workdir);
        unlink(path);
        rmdir(workdir);
}

static const char kallsyms_text[] = "ffffffff81000000 T _stext\n"
                                    "ffffffff81000100 T do_one_thing\n"
                                    "ffffffffc0001000 t mod_func\t[mymod]\n";

static int loader_open_file(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const void *p;
        size_t n;
        int r;

        open_file_calls++;
        r = sd_bus_message_read_array(m, 'y', &p, &n);
        if (r < 0)
                return r;
        if (n != EP_FILE_ID_SIZE || ((const uint8_t *) p)[0] != 1)
                return sd_bus_reply_method_errorf(m, "org.ebpfprofiler.Error.NoSuchFile", "No such file");
        int fd = open(target, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        r = sd_bus_reply_method_return(m, "h", fd);
        close(fd);
        return r;
}

static int loader_open_kallsyms(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        int fd = test_memfd_with("kallsyms", kallsyms_text), r;
        if (fd < 0)
                return fd;
        r = sd_bus_reply_method_return(m, "h", fd);
        close(fd);
        return r;
}

static const sd_bus_vtable loader_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD("OpenFile", "ay", "h", loader_open_file, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD("OpenKallsyms", "", "h", loader_open_kallsyms, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

static unsigned properties_changed;
static int on_properties_changed(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        properties_changed++;
        return 0;
}

/* Processes the bus and waits for fd (or just time) for up to ms. */
static void pump(sd_bus *bus, int fd, int ms) {
        while (sd_bus_process(bus, NULL) > 0)
                ;
        struct pollfd p[2] = {
                { .fd = sd_bus_get_fd(bus), .events = (short) sd_bus_get_events(bus) },
                { .fd = fd, .events = POLLIN },
        };
        (void) poll(p, fd >= 0 ? 2 : 1, ms);
        while (sd_bus_process(bus, NULL) > 0)
                ;
}

typedef struct Response {
        uint16_t type;
        uint64_t cookie;
        uint8_t status;
        char module[64];
        uint16_t n_lines;
        char function[128];
        size_t build_id_len;
} Response;

static bool pop_response(EpRing *resp, Response *ret) {
        EpRingRecord h;
        const void *p;
        EpReader rd;

        if (ep_ring_peek(resp, &h, &p) <= 0)
                return false;
        *ret = (Response) { .type = h.type };
        ep_reader_init(&rd, p, h.len);
        ret->cookie = ep_get_u64(&rd);
        ret->status = ep_get_u8(&rd);
        if (h.type == EP_MSG_SYM_RESPONSE) {
                (void) ep_get_u64(&rd);
                _cleanup_free_ char *module = ep_get_str(&rd, 63);
                ret->n_lines = ep_get_u16(&rd);
                for (uint16_t i = 0; i < ret->n_lines; i++) {
                        _cleanup_free_ char *fn = ep_get_str(&rd, 127);
                        free(ep_get_str(&rd, 127)); /* the file */
                        (void) ep_get_u32(&rd);
                        if (i == 0 && fn)
                                snprintf(ret->function, sizeof ret->function, "%s", fn);
                }
                snprintf(ret->module, sizeof ret->module, "%s", module ?: "?");
        } else {
                (void) ep_get_blob(&rd, EP_BUILD_ID_MAX, &ret->build_id_len);
                free(ep_get_str(&rd, 256)); /* the Go name */
        }
        CHECK(ep_reader_done(&rd));
        ep_ring_consume(resp);
        return true;
}

static void send_request(EpRing *req, uint16_t type, uint64_t cookie, uint8_t kind, uint8_t file, uint64_t addr) {
        uint8_t buf[256], id[EP_FILE_ID_SIZE] = { file };
        EpWriter w;

        ep_writer_init(&w, buf, sizeof buf);
        if (type == EP_MSG_SYM_REQUEST) {
                EpSymRequestMsg m = { .cookie = cookie, .kind = kind, .addr = addr, .path = "/some/path" };
                memcpy(m.file_id, id, sizeof id);
                ep_put_sym_request(&w, &m);
        } else {
                ep_put_u64(&w, cookie);
                ep_put_bytes(&w, id, sizeof id);
                ep_put_str(&w, "/some/path");
        }
        CHECK_INT(ep_ring_push(req, type, buf, (uint32_t) w.size), 0);
        CHECK_INT(ep_ring_notify(req), 0);
}

static Response ask(sd_bus *bus, EpRing *req, EpRing *resp, uint16_t type, uint8_t kind, uint8_t file, uint64_t addr) {
        static uint64_t cookie = 1000;
        Response r;
        uint64_t deadline = tests_monotonic_ms() + 20000; /* a loaded machine, not a normal answer */

        send_request(req, type, ++cookie, kind, file, addr);
        while (tests_monotonic_ms() < deadline) {
                if (pop_response(resp, &r)) {
                        CHECK_U64(r.cookie, cookie);
                        return r;
                }
                pump(bus, ep_ring_eventfd(resp), 20);
                ep_ring_clear_wakeup(resp);
        }
        TEST_FAIL("no response to request %" PRIu64, cookie);
}

static void open_session(sd_bus *bus, EpRing **ret_req, EpRing **ret_resp) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        int fds[4];

        int r = sd_bus_call_method(bus, EP_BUS_SYMBOLIZER, EP_PATH_SYMBOLIZER, EP_IFACE_SYMBOLIZER, "OpenSession",
                                   &error, &reply, "");
        if (r < 0)
                TEST_FAIL("OpenSession: %s", error.message ?: strerror(-r));
        CHECK(sd_bus_message_read(reply, "hhhh", &fds[0], &fds[1], &fds[2], &fds[3]) >= 0);
        ep_ring_free(*ret_req);
        ep_ring_free(*ret_resp);
        *ret_req = *ret_resp = NULL;
        CHECK_INT(ep_ring_attach(fds[0], fds[1], ret_req), 0);
        CHECK_INT(ep_ring_attach(fds[2], fds[3], ret_resp), 0);
        sd_bus_message_unref(reply);
}

static uint64_t get_t(sd_bus *bus, const char *name) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        uint64_t v = 0;
        CHECK(sd_bus_get_property_trivial(bus, EP_BUS_SYMBOLIZER, EP_PATH_SYMBOLIZER, EP_IFACE_SYMBOLIZER, name, &error,
                                          't', &v) >= 0);
        return v;
}

static uint32_t get_u(sd_bus *bus, const char *name) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        uint32_t v = 0;
        CHECK(sd_bus_get_property_trivial(bus, EP_BUS_SYMBOLIZER, EP_PATH_SYMBOLIZER, EP_IFACE_SYMBOLIZER, name, &error,
                                          'u', &v) >= 0);
        return v;
}

static bool name_has_owner(sd_bus *bus, const char *name) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        int has = 0;

        if (sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                               "NameHasOwner", &error, &reply, "s", name) < 0)
                return false;
        (void) sd_bus_message_read(reply, "b", &has);
        sd_bus_message_unref(reply);
        return has;
}

static void check_no_capabilities(pid_t pid) {
        char path[64], line[256];
        bool eff = false, nnp = false;

        snprintf(path, sizeof path, "/proc/%d/status", (int) pid);
        FILE *f = fopen(path, "re");
        CHECK(f);
        while (fgets(line, sizeof line, f)) {
                if (startswith(line, "CapEff:") || startswith(line, "CapPrm:") || startswith(line, "CapAmb:")) {
                        CHECK(strstr(line, "0000000000000000"));
                        eff = true;
                }
                if (startswith(line, "NoNewPrivs:")) {
                        CHECK(strstr(line, "1"));
                        nnp = true;
                }
        }
        fclose(f);
        CHECK(eff && nnp);
}

int main(void) {
        const char *symbolizer = test_env("SYM_TEST_SYMBOLIZER");
        _cleanup_ring_ EpRing *req = NULL, *resp = NULL;
        char address[512] = "";
        sd_bus *bus = NULL;
        Response r;

        target = test_env("SYM_TEST_TARGET");
        if (access("/usr/bin/dbus-daemon", X_OK) < 0) {
                fprintf(stderr, "dbus-daemon not installed, skipping\n");
                return 77;
        }
        beta_offset = test_target_offset(target, "sym_test_beta");

        CHECK(mkdtemp(workdir));
        atexit(cleanup);

        bus_pid = test_private_bus_start(workdir, address, sizeof address);
        CHECK(bus_pid > 0);
        CHECK(setenv("DBUS_SYSTEM_BUS_ADDRESS", address, 1) == 0);
        CHECK(sd_bus_open_system(&bus) >= 0);

        CHECK(sd_bus_match_signal(bus, NULL, EP_BUS_SYMBOLIZER, EP_PATH_SYMBOLIZER, "org.freedesktop.DBus.Properties",
                                  "PropertiesChanged", on_properties_changed, NULL) >= 0);

        /* The symbolizer, with no loader on the bus. */
        sym_pid = fork();
        CHECK(sym_pid >= 0);
        if (sym_pid == 0) {
                /* No cache: the default directory is the installed daemon's, not a test's. */
                execl(symbolizer, symbolizer, "--log-level=debug", "--cache-dir=", (char *) NULL);
                _exit(127);
        }
        ASSERT_EVENTUALLY(name_has_owner(bus, EP_BUS_SYMBOLIZER), 30, "%s has no owner (symbolizer pid %d)",
                          EP_BUS_SYMBOLIZER, (int) sym_pid);
        check_no_capabilities(sym_pid);

        open_session(bus, &req, &resp);

        /* No loader yet: passing failures, which the collector asks again. */
        r = ask(bus, req, resp, EP_MSG_SYM_REQUEST, EP_FRAME_NATIVE, 1, beta_offset + 2);
        CHECK_INT(r.status, EP_SYM_RETRY);
        r = ask(bus, req, resp, EP_MSG_SYM_REQUEST, EP_FRAME_KERNEL, 0, 0xffffffff81000104);
        CHECK_INT(r.status, EP_SYM_RETRY);
        CHECK_INT(open_file_calls, 0);

        /* The loader arrives. */
        CHECK(sd_bus_add_object_vtable(bus, NULL, EP_PATH_LOADER, EP_IFACE_LOADER, loader_vtable, NULL) >= 0);
        CHECK(sd_bus_request_name(bus, EP_BUS_LOADER, 0) >= 0);
        ASSERT_EVENTUALLY((pump(bus, -1, 50),
                           (r = ask(bus, req, resp, EP_MSG_SYM_REQUEST, EP_FRAME_NATIVE, 1, beta_offset + 2)).status !=
                                   EP_SYM_RETRY),
                          30, "status %u (RETRY: the symbolizer has not seen the loader)", r.status);
        CHECK_INT(r.status, EP_SYM_OK);
        CHECK_STR(r.function, "sym_test_beta");
        CHECK_INT(open_file_calls, 1);

        r = ask(bus, req, resp, EP_MSG_SYM_REQUEST, EP_FRAME_NATIVE, 1, beta_offset + 4);
        CHECK_STR(r.function, "sym_test_beta");
        CHECK_INT(open_file_calls, 1); /* the open file is cached */

        r = ask(bus, req, resp, EP_MSG_SYM_REQUEST, EP_FRAME_KERNEL, 0, 0xffffffff81000104);
        CHECK_INT(r.status, EP_SYM_OK);
        CHECK_STR(r.function, "do_one_thing");
        r = ask(bus, req, resp, EP_MSG_SYM_REQUEST, EP_FRAME_KERNEL, 0, 0xffffffffc0001004);
        CHECK_STR(r.function, "mod_func");
        CHECK_STR(r.module, "mymod");

        r = ask(bus, req, resp, EP_MSG_SYM_FILE_REQUEST, 0, 1, 0);
        CHECK_INT(r.type, EP_MSG_SYM_FILE_RESPONSE);
        CHECK_INT(r.status, EP_SYM_OK);
        CHECK_INT(r.build_id_len, 20);

        r = ask(bus, req, resp, EP_MSG_SYM_REQUEST, EP_FRAME_NATIVE, 2, 0x1000); /* NoSuchFile */
        CHECK_INT(r.status, EP_SYM_NO_FILE);

        /* A new session replaces the old one. */
        open_session(bus, &req, &resp);
        r = ask(bus, req, resp, EP_MSG_SYM_REQUEST, EP_FRAME_NATIVE, 1, beta_offset + 2);
        CHECK_STR(r.function, "sym_test_beta");

        /* Properties, and their change signal (every 2 s). */
        CHECK(get_t(bus, "Requests") >= 9);
        CHECK(get_t(bus, "Resolved") >= 5);
        CHECK(get_t(bus, "FileErrors") >= 1);
        CHECK(get_t(bus, "RetryAnswers") >= 2); /* the two asked before the loader came */
        CHECK(get_t(bus, "CacheHits") >= 1);
        CHECK(get_u(bus, "CacheEntries") >= 3);
        CHECK_INT(get_u(bus, "FilesOpen"), 1);
        ASSERT_EVENTUALLY((pump(bus, -1, 50), properties_changed > 0), 30, "%u PropertiesChanged signals",
                          properties_changed);

        /* The loader leaves: answers degrade, the daemon stays. */
        CHECK(sd_bus_release_name(bus, EP_BUS_LOADER) >= 0);
        /* Serves our bus a while; no wait for anything: a call to the loader's name fails now,
         * so the answers below are the same whether or not the symbolizer has seen it go. */
        pump(bus, -1, 200);
        r = ask(bus, req, resp, EP_MSG_SYM_REQUEST, EP_FRAME_NATIVE, 7, 0x1000);
        CHECK_INT(r.status, EP_SYM_RETRY); /* no loader to ask: not an answer */
        r = ask(bus, req, resp, EP_MSG_SYM_REQUEST, EP_FRAME_NATIVE, 1, beta_offset + 6); /* still open */
        CHECK_STR(r.function, "sym_test_beta");
        CHECK(name_has_owner(bus, EP_BUS_SYMBOLIZER));

        /* SIGTERM: a clean exit. */
        int status = 0;
        CHECK(kill(sym_pid, SIGTERM) == 0);
        ASSERT_EVENTUALLY(waitpid(sym_pid, &status, WNOHANG) == sym_pid, 30, "symbolizer (pid %d) still running after SIGTERM",
                          (int) sym_pid);
        CHECK(WIFEXITED(status));
        CHECK_INT(WEXITSTATUS(status), 0);
        sym_pid = -1;

        sd_bus_flush_close_unref(bus);
        TEST_DONE("test-symbolizer-daemon");
}
