/* SPDX-License-Identifier: MIT */
#pragma once

/* What every daemon does the same way: logging set-up, an sd-event loop that exits cleanly on
 * SIGTERM/SIGINT, the bus connection (system bus, or $DBUS_SYSTEM_BUS_ADDRESS as set by
 * `ebpf-profiler run`), publishing one object under a well-known name, sd_notify READY/STATUS
 * and the watchdog, and watching peers so a daemon re-connects when another comes back. */

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "macro.h"

typedef struct EpDaemon {
        const char *ident;
        sd_event *event;
        sd_bus *bus;
        sd_bus_slot *object_slot;
        const char *object_path;
        const char *interface;
} EpDaemon;

/* Also makes the process non-dumpable (PR_SET_DUMPABLE 0). */
int ep_daemon_setup(EpDaemon *d, const char *ident);
/* For every daemon but the exporter, after ep_daemon_setup(): forgets the OTEL_* variables (the
 * exporter's settings, credentials among them) that reached it, and warns once naming them. */
void ep_daemon_drop_exporter_environment(const EpDaemon *d);
/* Exports vtable at path/interface and requests bus_name. */
int ep_daemon_publish(EpDaemon *d, const char *bus_name, const char *path, const char *interface,
                      const sd_bus_vtable *vtable, void *userdata);
/* Tells the service manager we are ready, then runs the loop until exit. Returns the exit code. */
int ep_daemon_run(EpDaemon *d);
void ep_daemon_done(EpDaemon *d);
void ep_daemon_status(EpDaemon *d, const char *format, ...) _printf_(2, 3);
/* Refuses a method call unless it comes from root or from peer_uid (UID_INVALID: root only),
 * the user of the daemon that needs it (the bus policy says the same; a daemon handing out
 * descriptors checks again). 0 when allowed, else a negative errno with *error set to
 * AccessDenied saying "Only root or ... may <what>". */
int ep_bus_check_caller_uid(sd_bus_message *m, sd_bus_error *error, uid_t peer_uid, const char *what);
/* The uid of the peer daemon's user (named by option), for ep_bus_check_caller_uid();
 * UID_INVALID, with a notice, when there is no such user. */
uid_t ep_peer_user_uid(const char *user, const char *option);

/* Emits PropertiesChanged for the NULL-terminated list of property names. */
void ep_daemon_properties_changed(EpDaemon *d, const char *first, ...);
/* Sets a daemon's LastError: replaces *slot with the formatted message and emits
 * PropertiesChanged for "LastError". d may be NULL (or not published yet) to only set the
 * string, for a daemon that publishes its properties itself. Returns 0, or -ENOMEM with *slot
 * unchanged. */
int ep_daemon_set_last_error(EpDaemon *d, char **slot, const char *format, ...) _printf_(3, 4);
int ep_daemon_set_last_errorv(EpDaemon *d, char **slot, const char *format, va_list ap) _printf_(3, 0);

/* Peer tracking. handler(present=true) is called when the peer's name has an owner (at start
 * if it already has one); if it returns < 0 it is called again after 1 s while the peer is
 * still there. handler(present=false) when the owner goes away. */
typedef struct EpPeerWatch EpPeerWatch;
typedef int (*ep_peer_handler_t)(EpPeerWatch *w, bool present, void *userdata);
int ep_peer_watch(EpDaemon *d, const char *bus_name, ep_peer_handler_t handler, void *userdata,
                  EpPeerWatch **ret);
/* Asks for handler(present=true) to run again soon (after a data-plane failure, say). */
void ep_peer_watch_retry(EpPeerWatch *w);
bool ep_peer_watch_present(const EpPeerWatch *w);
EpPeerWatch *ep_peer_watch_free(EpPeerWatch *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpPeerWatch *, ep_peer_watch_free);

/* Command lines of the daemons, parsed with getopt_long() and an optstring starting with ':'.
 * For c == ':' or '?': prints "IDENT: option '--x' needs a value (see --help)." or "unknown
 * option" and returns -EINVAL. */
int ep_daemon_getopt_error(const char *ident, int c, char **argv);
/* After the options: -EINVAL after saying so when an argument is left, else 0. */
int ep_daemon_no_arguments(const char *ident, int argc, char **argv);

/* Parses "20", "1.5s", "500ms", "2min" into nanoseconds. */
int ep_parse_duration(const char *s, uint64_t *ret_ns);
/* Parses "1073741824", "512K", "64MiB", "1.5G" (binary units; B, KB and KiB mean the same)
 * into bytes. */
int ep_parse_size(const char *s, uint64_t *ret_bytes);
/* The smallest --retention-age and --retention-size the collector takes (0 turns a limit off);
 * `ebpf-profiler run` checks them too, so a bad value is a usage error there. */
#define EP_RETENTION_AGE_MIN_NS (60 * NSEC_PER_SEC)
#define EP_RETENTION_SIZE_MIN (256ULL << 10)
int ep_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *ret);
/* Reads clock (CLOCK_MONOTONIC, CLOCK_REALTIME) in ns. Every time-based policy (rate limits,
 * ages, re-read intervals, retention) reads time here, so that a test can replace the clocks
 * with ep_clock_set() and set time instead of sleeping; NULL puts the real clocks back. */
uint64_t ep_now_ns(int clock);
typedef uint64_t (*EpClockFunc)(int clock);
void ep_clock_set(EpClockFunc func);
