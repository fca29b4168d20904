/* SPDX-License-Identifier: MIT */
/* The private bus of `ebpf-profiler run`: the generated configuration starts with dbus-daemon,
 * and with units/org.ebpfprofiler.conf root may own every name, user ebpf-profiler the three
 * unprivileged ones and the descriptor methods, anyone else only reads properties. `status`
 * prints what it finds on that bus. Needs root (skips otherwise) and dbus-daemon. */

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include "bus-util.h"
#include "bus.h"
#include "cli.h"
#include "private-bus.h"

#include "test-cli-util.h"

#define EXIT_SKIP 77

static int m_ok(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return sd_bus_reply_method_return(m, "");
}

static int get_stops(sd_bus *bus, const char *path, const char *interface, const char *property,
                     sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        return sd_bus_message_append(reply, "a{st}", 2, "max-depth", (uint64_t) 3, "read-failed", (uint64_t) 1);
}

static const char *version = "1.2.3";
static uint32_t frequency = 20;

static const sd_bus_vtable loader_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", NULL, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("UnwindStops", "a{st}", get_stops, 0, 0),
        SD_BUS_METHOD("OpenTraceRing", "", "", m_ok, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD("SetFrequency", "u", "", m_ok, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

static const sd_bus_vtable collector_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", NULL, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("IntervalSeconds", "u", NULL, sizeof(const char *), SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_METHOD("OpenExportRing", "", "", m_ok, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD("Flush", "", "", m_ok, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

static struct {
        const char *version;
        uint32_t interval;
} collector_props = { "1.2.3", 10 };

/* Calls a method as the current user; returns 0 or the negative errno sd-bus maps the error to. */
static int call(sd_bus *bus, const char *dest, const char *path, const char *iface, const char *member) {
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        int r;
        if (streq(member, "SetFrequency"))
                r = sd_bus_call_method(bus, dest, path, iface, member, &error, &reply, "u", 99);
        else
                r = sd_bus_call_method(bus, dest, path, iface, member, &error, &reply, "");
        if (r < 0)
                fprintf(stderr, "  %s.%s: %s\n", dest, member, error.message ?: strerror(-r));
        sd_bus_error_free(&error);
        sd_bus_message_unref(reply);
        return r < 0 ? r : 0;
}

static int get_all(sd_bus *bus, const char *dest, const char *path, const char *iface) {
        sd_bus_message *reply = NULL;
        int r = sd_bus_call_method(bus, dest, path, "org.freedesktop.DBus.Properties", "GetAll", NULL, &reply, "s",
                                   iface);
        sd_bus_message_unref(reply);
        return r;
}

/* Runs in a child as user `who`: returns the number of unexpected results. */
static int client_checks(const char *address, const char *who) {
        sd_bus *bus = NULL;
        int bad = 0, r;

        r = ep_bus_connect(address, &bus);
        if (r < 0) {
                fprintf(stderr, "%s cannot connect: %s\n", who, strerror(-r));
                return 100;
        }

#define EXPECT(cond)                                                              \
        do {                                                                      \
                if (!(cond)) {                                                    \
                        fprintf(stderr, "as %s: unexpected: %s\n", who, #cond);   \
                        bad++;                                                    \
                }                                                                 \
        } while (0)

        /* Everybody reads properties and introspects. */
        EXPECT(get_all(bus, EP_BUS_COLLECTOR, EP_PATH_COLLECTOR, EP_IFACE_COLLECTOR) >= 0);
        EXPECT(get_all(bus, EP_BUS_LOADER, EP_PATH_LOADER, EP_IFACE_LOADER) >= 0);
        EXPECT(call(bus, EP_BUS_LOADER, EP_PATH_LOADER, "org.freedesktop.DBus.Introspectable", "Introspect") >= 0);
        /* Nobody but root changes anything. */
        EXPECT(call(bus, EP_BUS_COLLECTOR, EP_PATH_COLLECTOR, EP_IFACE_COLLECTOR, "Flush") == -EACCES);
        EXPECT(call(bus, EP_BUS_LOADER, EP_PATH_LOADER, EP_IFACE_LOADER, "SetFrequency") == -EACCES);
        /* Nobody but root owns the loader's name. */
        EXPECT(sd_bus_request_name(bus, EP_BUS_LOADER, 0) == -EACCES);

        /* Each daemon's user: its own name and the methods that hand it its descriptors; not
         * another daemon's. */
        bool collector = streq(who, EP_COLLECTOR_USER), symbolizer = streq(who, EP_SYMBOLIZER_USER),
             exporter = streq(who, EP_EXPORTER_USER);
        EXPECT(call(bus, EP_BUS_COLLECTOR, EP_PATH_COLLECTOR, EP_IFACE_COLLECTOR, "OpenExportRing") ==
               (exporter ? 0 : -EACCES));
        EXPECT(call(bus, EP_BUS_LOADER, EP_PATH_LOADER, EP_IFACE_LOADER, "OpenTraceRing") ==
               (collector ? 0 : -EACCES));
        r = sd_bus_request_name(bus, EP_BUS_SYMBOLIZER, 0);
        EXPECT(symbolizer ? r >= 0 : r == -EACCES);
        r = sd_bus_request_name(bus, EP_BUS_COLLECTOR, 0); /* ours: allowed, but taken */
        EXPECT(collector ? r == -EEXIST : r == -EACCES);
        r = sd_bus_request_name(bus, EP_BUS_EXPORTER, 0);
        EXPECT(exporter ? r >= 0 : r == -EACCES);
#undef EXPECT

        sd_bus_flush_close_unref(bus);
        return bad;
}

/* Forks a child that runs fn as user pw (NULL: stays root) while the parent keeps serving
 * `server`. Returns the child's exit status. */
static int run_as(sd_bus *server, const struct passwd *pw, int (*fn)(const char *, const char *),
                  const char *address, const char *who) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0)
                return -1;
        if (pid == 0) {
                if (pw && (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)) {
                        perror("dropping privileges");
                        _exit(101);
                }
                _exit(fn(address, who));
        }
        for (;;) {
                int status;
                pid_t p = waitpid(pid, &status, WNOHANG);
                if (p == pid)
                        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                while (sd_bus_process(server, NULL) > 0)
                        ;
                (void) sd_bus_wait(server, 20 * 1000);
        }
}

/* `ebpf-profiler status` against the bus, output into a file; returns its exit code. */
static int status_child(const char *address, const char *out_path) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0)
                return 100;
        setenv("DBUS_SYSTEM_BUS_ADDRESS", address, 1);
        char *argv_text[] = { (char *) "status", NULL };
        int r = verb_status(1, argv_text);
        fflush(stdout);
        if (r != 3)
                return 50 + r;
        char *argv_json[] = { (char *) "status", (char *) "--json", NULL };
        dprintf(fd, "--- json\n");
        r = verb_status(2, argv_json);
        fflush(stdout);
        return r;
}

static char *read_all(const char *path) {
        FILE *f = fopen(path, "re");
        if (!f)
                return strdup("");
        char *buf = calloc(1, 65536);
        size_t n = fread(buf, 1, 65535, f);
        buf[n] = 0;
        fclose(f);
        return buf;
}

int main(int argc, char **argv) {
        if (argc < 2) {
                fprintf(stderr, "usage: %s POLICY\n", argv[0]);
                return EXIT_FAILURE;
        }
        const char *policy = argv[1];

        if (geteuid() != 0) {
                fprintf(stderr, "skip: needs root (owning names as root, switching users)\n");
                return EXIT_SKIP;
        }
        if (system("command -v dbus-daemon >/dev/null") != 0) {
                fprintf(stderr, "skip: dbus-daemon is not installed\n");
                return EXIT_SKIP;
        }
        signal(SIGPIPE, SIG_IGN);

        /* The configuration text. */
        char *conf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&conf, &size);
        CHECK_INT(ep_private_bus_write_config(f, "/run/x/bus", "/p/org.ebpfprofiler.conf", "messagebus"), 0);
        fclose(f);
        CHECK(strstr(conf, "<type>system</type>") != NULL);
        CHECK(strstr(conf, "<listen>unix:path=/run/x/bus</listen>") != NULL);
        CHECK(strstr(conf, "<auth>EXTERNAL</auth>") != NULL);
        CHECK(strstr(conf, "<deny own=\"*\"/>") != NULL);
        CHECK(strstr(conf, "<include>/p/org.ebpfprofiler.conf</include>") != NULL);
        CHECK(strstr(conf, "<user>messagebus</user>") != NULL);
        free(conf);

        char dir[] = "/tmp/test-cli-private-bus.XXXXXX";
        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return EXIT_FAILURE;
        }
        /* Other users must reach the socket, as under /run. */
        chmod(dir, 0755);
        char runtime[600];
        snprintf(runtime, sizeof(runtime), "%s/run", dir);

        EpPrivateBus *b = NULL;
        CHECK_INT(ep_private_bus_start(runtime, policy, &b), 0);
        if (!b)
                return EXIT_FAILURE;
        fprintf(stderr, "bus: %s (pid %d)\n", b->address, (int) b->pid);
        CHECK(startswith(b->address, "unix:path="));

        /* The address file that `status` reads. */
        setenv("EBPF_PROFILER_RUNTIME_DIR", runtime, 1);
        char *addr_file = NULL;
        CHECK_INT(ep_bus_address_file(&addr_file), 0);
        char *stored = read_all(addr_file);
        CHECK(strncmp(stored, b->address, strlen(b->address)) == 0);
        free(stored);
        struct stat st;
        CHECK(stat(runtime, &st) == 0 && (st.st_mode & 07777) == 0755);

        /* Root may own every name. */
        sd_bus *server = NULL;
        CHECK_INT(ep_bus_connect(b->address, &server), 0);
        if (!server)
                return EXIT_FAILURE;
        CHECK(sd_bus_request_name(server, EP_BUS_LOADER, 0) >= 0);
        CHECK(sd_bus_request_name(server, EP_BUS_COLLECTOR, 0) >= 0);
        CHECK(sd_bus_request_name(server, EP_BUS_SYMBOLIZER, 0) >= 0);
        CHECK(sd_bus_request_name(server, EP_BUS_EXPORTER, 0) >= 0);
        CHECK(sd_bus_release_name(server, EP_BUS_SYMBOLIZER) >= 0);
        CHECK(sd_bus_release_name(server, EP_BUS_EXPORTER) >= 0);
        CHECK(sd_bus_add_object_vtable(server, NULL, EP_PATH_LOADER, EP_IFACE_LOADER, loader_vtable, &version) >= 0);
        CHECK(sd_bus_add_object_vtable(server, NULL, EP_PATH_COLLECTOR, EP_IFACE_COLLECTOR, collector_vtable,
                                       &collector_props) >= 0);
        (void) frequency;

        /* Someone else entirely. */
        struct passwd *nobody = getpwnam("nobody");
        if (nobody) {
                struct passwd pw = *nobody;
                CHECK_INT(run_as(server, &pw, client_checks, b->address, "nobody"), 0);
        }

        /* Each daemon's user (scripts/setup.sh makes them). */
        static const char *const daemon_users[] = { EP_COLLECTOR_USER, EP_SYMBOLIZER_USER, EP_EXPORTER_USER };
        for (size_t i = 0; i < ELEMENTSOF(daemon_users); i++) {
                struct passwd *found = getpwnam(daemon_users[i]);
                if (!found) {
                        fprintf(stderr, "user %s does not exist: run scripts/setup.sh\n", daemon_users[i]);
                        CHECK(found != NULL);
                        continue;
                }
                struct passwd pw = *found;
                CHECK_INT(run_as(server, &pw, client_checks, b->address, daemon_users[i]), 0);
        }

        /* status: two of four names answer → exit 3, properties printed generically. */
        char out_path[700];
        snprintf(out_path, sizeof(out_path), "%s/status.out", dir);
        CHECK_INT(run_as(server, NULL, status_child, b->address, out_path), 3);
        char *out = read_all(out_path);
        fputs(out, stderr);
        CHECK(strstr(out, "● loader     org.ebpfprofiler.Loader1     running (pid ") != NULL);
        CHECK(strstr(out, "○ symbolizer org.ebpfprofiler.Symbolizer1 not running") != NULL);
        CHECK(strstr(out, "    UnwindStops          max-depth=3, read-failed=1\n") != NULL);
        CHECK(strstr(out, "    IntervalSeconds      10\n") != NULL);
        CHECK(strstr(out, "\"UnwindStops\": {\"max-depth\": 3, \"read-failed\": 1}") != NULL);
        CHECK(strstr(out, "\"running\": 2}") != NULL);
        free(out);

        sd_bus_flush_close_unref(server);

        /* Stopping removes what `status` would find. */
        int status = ep_private_bus_stop(b);
        CHECK(status >= 0);
        CHECK(access(addr_file, F_OK) < 0);
        CHECK(access(b->socket_path, F_OK) < 0);
        CHECK_INT(b->pid, 0);
        ep_private_bus_free(b);
        free(addr_file);

        return test_finish(dir);
}
