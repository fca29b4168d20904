/* SPDX-License-Identifier: MIT */
#pragma once

/* A private, system-like D-Bus bus for `ebpf-profiler run` on hosts without a system bus:
 * dbus-daemon with a generated configuration (deny by default, like a system bus) that
 * includes our policy file, listening on <dir>/bus. Its address goes to <dir>/bus-address so
 * `ebpf-profiler status` from another shell finds it. */

#include <stdio.h>
#include <sys/types.h>

#include "macro.h"

typedef struct EpPrivateBus {
        pid_t pid;            /* dbus-daemon, 0 once stopped */
        char *dir;
        char *config_path;    /* <dir>/bus.conf */
        char *socket_path;    /* <dir>/bus */
        char *log_path;       /* <dir>/dbus-daemon.log: the daemon's own messages */
        char *address;        /* as dbus-daemon printed it */
        char *address_file;   /* <dir>/bus-address */
} EpPrivateBus;

/* The configuration: a system bus (EXTERNAL auth, nothing may own names or call methods
 * unless a policy allows it) listening on socket_path, including policy_path. user: the
 * account the daemon switches to after binding (NULL: stay as started). */
int ep_private_bus_write_config(FILE *f, const char *socket_path, const char *policy_path,
                                const char *user);

/* Creates dir (0755), writes the configuration, starts dbus-daemon and waits until it prints
 * its address, then writes the address file. Errors are logged. */
int ep_private_bus_start(const char *dir, const char *policy_path, EpPrivateBus **ret);

/* SIGTERM, then SIGKILL after 5 s; removes the address file and the socket. Returns the
 * daemon's wait status, or a negative errno. */
int ep_private_bus_stop(EpPrivateBus *b);

/* Stops the bus if still running and frees b. */
EpPrivateBus *ep_private_bus_free(EpPrivateBus *b);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpPrivateBus *, ep_private_bus_free);
