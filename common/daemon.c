/* SPDX-License-Identifier: MIT */
#include <getopt.h>
#include <malloc.h>
#include <math.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/prctl.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include "clock.h"
#include "daemon.h"
#include "log.h"

#define PEER_RETRY_USEC (1 * USEC_PER_SEC)

int ep_daemon_setup(EpDaemon *d, const char *ident) {
        sigset_t mask;
        int r;

        *d = (EpDaemon) { .ident = ident };
        log_setup(ident);
        /* No other process of our user may read our memory or environment (/proc/PID/mem,
         * environ), attach to us or get a core dump of us, which would hold the same: a daemon
         * taken over must gain nothing from its peers. Root keeps CAP_SYS_PTRACE for gdb. Set
         * after any change of user, which resets it. */
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
                return log_error_errno(errno, "Failed to make the process non-dumpable: %m");
        signal(SIGPIPE, SIG_IGN);
        /* Blocks of 256 KiB and more get mappings of their own, returned to the kernel when
         * freed. Left alone, glibc raises this threshold to the largest block freed so far (up
         * to 32 MiB), and from then on a daemon's big transient buffers (unwind tables, an
         * interval's arrays) stay in its heap as free but resident memory. */
        (void) mallopt(M_MMAP_THRESHOLD, 256 * 1024);

        r = sd_event_default(&d->event);
        if (r < 0)
                return log_error_errno(r, "Failed to allocate event loop: %m");

        /* sd-event needs the signals blocked to deliver them through signalfd; a NULL handler
         * makes the loop exit with code 0. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return log_error_errno(errno, "Failed to block signals: %m");
        r = sd_event_add_signal(d->event, NULL, SIGTERM, NULL, NULL);
        if (r >= 0)
                r = sd_event_add_signal(d->event, NULL, SIGINT, NULL, NULL);
        if (r < 0)
                return log_error_errno(r, "Failed to watch termination signals: %m");
        (void) sd_event_set_watchdog(d->event, true);

        r = sd_bus_open_system(&d->bus);
        if (r < 0)
                return log_error_errno(r,
                                       "Failed to connect to the system bus (%s): %m. Is dbus running? "
                                       "Without systemd, start the profiler with `ebpf-profiler run`.",
                                       getenv("DBUS_SYSTEM_BUS_ADDRESS") ?: "/run/dbus/system_bus_socket");
        r = sd_bus_attach_event(d->bus, d->event, SD_EVENT_PRIORITY_NORMAL);
        if (r < 0)
                return log_error_errno(r, "Failed to attach the bus to the event loop: %m");
        /* Losing the bus ends the daemon; its supervisor restarts it. */
        r = sd_bus_set_exit_on_disconnect(d->bus, true);
        if (r < 0)
                return log_error_errno(r, "Failed to set exit-on-disconnect: %m");
        return 0;
}

void ep_daemon_drop_exporter_environment(const EpDaemon *d) {
        extern char **environ;
        char names[256] = "";
        size_t len = 0;

        for (size_t i = 0; environ && environ[i];) {
                const char *e = environ[i], *eq = strchr(e, '=');

                if (!startswith(e, "OTEL_") || !eq) {
                        i++;
                        continue;
                }
                int n = snprintf(names + len, sizeof names - len, "%s%.*s", len ? ", " : "", (int) (eq - e), e);
                len = MIN(len + (size_t) MAX(n, 0), sizeof names - 1);
                _cleanup_free_ char *name = strndup(e, (size_t) (eq - e));
                if (!name || unsetenv(name) < 0)
                        break;
                /* environ[i] is the next variable now */
        }
        if (len > 0)
                log_warning("%s was started with the exporter's variables %s; it ignores them. Only the "
                            "exporter needs them (they may hold a backend's credentials): set them for it "
                            "alone, in /etc/ebpf-profiler/exporter.conf.", d->ident, names);
}

int ep_daemon_publish(EpDaemon *d, const char *bus_name, const char *path, const char *interface,
                      const sd_bus_vtable *vtable, void *userdata) {
        int r;

        r = sd_bus_add_object_vtable(d->bus, &d->object_slot, path, interface, vtable, userdata);
        if (r < 0)
                return log_error_errno(r, "Failed to export %s at %s: %m", interface, path);
        d->object_path = path;
        d->interface = interface;
        r = sd_bus_request_name(d->bus, bus_name, 0);
        if (r < 0)
                return log_error_errno(r,
                                       "Failed to acquire bus name %s: %m (another instance running, or "
                                       "the D-Bus policy org.ebpfprofiler.conf does not allow this user)",
                                       bus_name);
        return 0;
}

int ep_daemon_run(EpDaemon *d) {
        int r;

        log_struct_id(LOG_INFO, MESSAGE_ID_DAEMON_STARTED, "%s " EP_VERSION_STRING " started", d->ident);
        (void) sd_notify(false, "READY=1");
        r = sd_event_loop(d->event);
        (void) sd_notify(false, "STOPPING=1");
        if (r < 0)
                return log_error_errno(r, "Event loop failed: %m");
        return r;
}

void ep_daemon_done(EpDaemon *d) {
        d->object_slot = sd_bus_slot_unref(d->object_slot);
        if (d->bus) {
                sd_bus_flush(d->bus);
                d->bus = sd_bus_flush_close_unref(d->bus);
        }
        d->event = sd_event_unref(d->event);
}

void ep_daemon_status(EpDaemon *d, const char *format, ...) {
        char buf[512];
        va_list ap;

        va_start(ap, format);
        vsnprintf(buf, sizeof buf, format, ap);
        va_end(ap);
        (void) sd_notifyf(false, "STATUS=%s", buf);
}

void ep_daemon_properties_changed(EpDaemon *d, const char *first, ...) {
        const char *names[64];
        size_t n = 0;
        va_list ap;

        if (!d->object_path)
                return;
        va_start(ap, first);
        for (const char *s = first; s && n < ELEMENTSOF(names) - 1; s = va_arg(ap, const char *))
                names[n++] = s;
        va_end(ap);
        names[n] = NULL;
        (void) sd_bus_emit_properties_changed_strv(d->bus, d->object_path, d->interface, (char **) names);
}

int ep_daemon_set_last_errorv(EpDaemon *d, char **slot, const char *format, va_list ap) {
        char *s;

        if (vasprintf(&s, format, ap) < 0)
                return -ENOMEM;
        free(*slot);
        *slot = s;
        if (d)
                ep_daemon_properties_changed(d, "LastError", NULL);
        return 0;
}

int ep_daemon_set_last_error(EpDaemon *d, char **slot, const char *format, ...) {
        va_list ap;
        int r;

        va_start(ap, format);
        r = ep_daemon_set_last_errorv(d, slot, format, ap);
        va_end(ap);
        return r;
}

int ep_bus_check_caller_uid(sd_bus_message *m, sd_bus_error *error, uid_t peer_uid, const char *what) {
        _cleanup_(sd_bus_creds_unrefp) sd_bus_creds *creds = NULL;
        uid_t uid;
        int r;

        r = sd_bus_query_sender_creds(m, SD_BUS_CREDS_EUID, &creds);
        if (r >= 0)
                r = sd_bus_creds_get_euid(creds, &uid);
        if (r < 0)
                return r;
        if (uid != 0 && (peer_uid == UID_INVALID || uid != peer_uid))
                return sd_bus_error_setf(error, SD_BUS_ERROR_ACCESS_DENIED,
                                         "Only root or the ebpf-profiler daemon that needs it may %s", what);
        return 0;
}

uid_t ep_peer_user_uid(const char *user, const char *option) {
        struct passwd *pw = getpwnam(user);

        if (!pw) {
                log_notice("User '%s' (%s) does not exist: only root may call the methods meant for it.", user,
                           option);
                return UID_INVALID;
        }
        return pw->pw_uid;
}

/* ---- peer tracking ---- */

struct EpPeerWatch {
        EpDaemon *daemon;
        char *name;
        ep_peer_handler_t handler;
        void *userdata;
        sd_bus_slot *match_slot, *owner_call_slot;
        sd_event_source *retry_source;
        bool present;
};

static void peer_schedule_retry(EpPeerWatch *w, uint64_t usec);

static void peer_appeared(EpPeerWatch *w) {
        int r;

        w->present = true;
        r = w->handler(w, true, w->userdata);
        if (r < 0) {
                log_debug_errno(r, "Attaching to %s failed, retrying: %m", w->name);
                peer_schedule_retry(w, PEER_RETRY_USEC);
        } else
                log_struct_id(LOG_INFO, MESSAGE_ID_PEER_CONNECTED, "Attached to %s", w->name);
}

static void peer_vanished(EpPeerWatch *w) {
        if (!w->present)
                return;
        w->present = false;
        w->retry_source = sd_event_source_disable_unref(w->retry_source);
        log_struct_id(LOG_NOTICE, MESSAGE_ID_PEER_LOST, "%s went away; waiting for it to come back", w->name);
        (void) w->handler(w, false, w->userdata);
}

static int peer_retry_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        EpPeerWatch *w = userdata;
        w->retry_source = sd_event_source_disable_unref(w->retry_source);
        if (w->present)
                peer_appeared(w);
        return 0;
}

static void peer_schedule_retry(EpPeerWatch *w, uint64_t usec) {
        if (w->retry_source)
                return;
        if (sd_event_add_time_relative(w->daemon->event, &w->retry_source, CLOCK_MONOTONIC, usec, 0,
                                       peer_retry_cb, w) < 0)
                log_warning("Cannot schedule a retry for %s", w->name);
}

static int name_owner_changed_cb(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        EpPeerWatch *w = userdata;
        const char *name, *old_owner, *new_owner;

        if (sd_bus_message_read(m, "sss", &name, &old_owner, &new_owner) < 0 || !streq(name, w->name))
                return 0;
        if (old_owner[0])
                peer_vanished(w);
        if (new_owner[0])
                peer_appeared(w);
        return 0;
}

static int get_name_owner_cb(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        EpPeerWatch *w = userdata;

        w->owner_call_slot = sd_bus_slot_unref(w->owner_call_slot);
        if (!sd_bus_message_is_method_error(m, NULL) && !w->present)
                peer_appeared(w);
        return 0;
}

int ep_peer_watch(EpDaemon *d, const char *bus_name, ep_peer_handler_t handler, void *userdata,
                  EpPeerWatch **ret) {
        _cleanup_(ep_peer_watch_freep) EpPeerWatch *w = NULL;
        _cleanup_free_ char *match = NULL;
        int r;

        w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        *w = (EpPeerWatch) { .daemon = d, .handler = handler, .userdata = userdata };
        w->name = strdup(bus_name);
        if (!w->name)
                return -ENOMEM;
        if (asprintf(&match,
                     "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',"
                     "interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='%s'",
                     bus_name) < 0)
                return -ENOMEM;
        /* Install the match before asking for the current owner so no change is missed. */
        r = sd_bus_add_match(d->bus, &w->match_slot, match, name_owner_changed_cb, w);
        if (r < 0)
                return log_error_errno(r, "Failed to watch %s: %m", bus_name);
        r = sd_bus_call_method_async(d->bus, &w->owner_call_slot, "org.freedesktop.DBus",
                                     "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetNameOwner",
                                     get_name_owner_cb, w, "s", bus_name);
        if (r < 0)
                return log_error_errno(r, "Failed to ask for the owner of %s: %m", bus_name);
        *ret = TAKE_PTR(w);
        return 0;
}

void ep_peer_watch_retry(EpPeerWatch *w) {
        if (w->present)
                peer_schedule_retry(w, PEER_RETRY_USEC / 10);
}

bool ep_peer_watch_present(const EpPeerWatch *w) {
        return w->present;
}

EpPeerWatch *ep_peer_watch_free(EpPeerWatch *w) {
        if (!w)
                return NULL;
        sd_bus_slot_unref(w->match_slot);
        sd_bus_slot_unref(w->owner_call_slot);
        sd_event_source_disable_unref(w->retry_source);
        free(w->name);
        free(w);
        return NULL;
}

/* ---- parsing ---- */

int ep_daemon_getopt_error(const char *ident, int c, char **argv) {
        if (c == ':')
                fprintf(stderr, "%s: option '%s' needs a value (see --help).\n", ident, argv[optind - 1]);
        else
                fprintf(stderr, "%s: unknown option '%s' (see --help).\n", ident, argv[optind - 1]);
        return -EINVAL;
}

int ep_daemon_no_arguments(const char *ident, int argc, char **argv) {
        if (optind >= argc)
                return 0;
        fprintf(stderr, "%s: unexpected argument '%s' (see --help).\n", ident, argv[optind]);
        return -EINVAL;
}

int ep_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *ret) {
        unsigned long long v;
        char *end;

        if (!s || !*s || *s == '-' || *s == '+')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno || *end)
                return -EINVAL;
        if (v < min || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

typedef struct UnitSuffix {
        const char *suffix;
        double factor;
} UnitSuffix;

/* A non-negative decimal number followed by one of the suffixes, scaled by its factor. */
static int parse_scaled(const char *s, const UnitSuffix *units, size_t n_units, uint64_t *ret) {
        double v;
        char *end;

        if (!s || !*s || *s == '-' || *s == '+')
                return -EINVAL;
        errno = 0;
        v = strtod(s, &end);
        if (errno || end == s || !isfinite(v) || v < 0)
                return -EINVAL;
        for (size_t i = 0; i < n_units; i++)
                if (streq(end, units[i].suffix)) {
                        double scaled = v * units[i].factor;
                        if (scaled >= 18e18)
                                return -ERANGE;
                        *ret = (uint64_t) scaled;
                        return 0;
                }
        return -EINVAL;
}

int ep_parse_duration(const char *s, uint64_t *ret_ns) {
        static const UnitSuffix units[] = {
                { "ns", 1 },        { "us", 1e3 },      { "ms", 1e6 },    { "s", 1e9 },
                { "sec", 1e9 },     { "m", 60e9 },      { "min", 60e9 },  { "h", 3600e9 },
                { "d", 86400e9 },   { "", 1e9 }, /* a bare number is seconds */
        };

        return parse_scaled(s, units, ELEMENTSOF(units), ret_ns);
}

int ep_parse_size(const char *s, uint64_t *ret_bytes) {
        static const UnitSuffix units[] = {
                { "", 1 },          { "B", 1 },
                { "K", 0x1p10 },    { "KB", 0x1p10 }, { "KiB", 0x1p10 },
                { "M", 0x1p20 },    { "MB", 0x1p20 }, { "MiB", 0x1p20 },
                { "G", 0x1p30 },    { "GB", 0x1p30 }, { "GiB", 0x1p30 },
                { "T", 0x1p40 },    { "TB", 0x1p40 }, { "TiB", 0x1p40 },
        };

        return parse_scaled(s, units, ELEMENTSOF(units), ret_bytes);
}

static EpClockFunc clock_override;

void ep_clock_set(EpClockFunc func) {
        clock_override = func;
}

uint64_t ep_now_ns(int clock) {
        return clock_override ? clock_override(clock) : ep_clock_ns(clock);
}
