/* SPDX-License-Identifier: MIT */
#pragma once

/* Supervision of the daemons for `ebpf-profiler run`: start them (unprivileged ones switched to
 * their user before exec), relay their output line by line with a "[name]" prefix, restart
 * those that die after a backoff, and stop them all (SIGTERM, SIGKILL after 5 s). A daemon is
 * "ready" once its bus name has an owner.
 *
 * Restart policy: before a daemon was ever ready, it is restarted after 1 s, and given up after
 * 5 failures within 10 s; a daemon with EP_CHILD_FATAL_AT_STARTUP (the loader) is not retried
 * at all: its failure stops everything. Once a daemon was ready it is always restarted, after
 * 1 s, doubling for each failure within a minute of its start, capped at 30 s. Giving up on an
 * EP_CHILD_ESSENTIAL daemon stops everything. */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "macro.h"

typedef enum EpChildPolicy {
        EP_CHILD_OPTIONAL,
        EP_CHILD_ESSENTIAL,
        EP_CHILD_FATAL_AT_STARTUP,
} EpChildPolicy;

typedef struct EpChildSpec {
        const char *name;     /* "loader": for messages */
        const char *bus_name; /* ready once this name has an owner */
        char **argv;          /* argv[0]: the binary's path */
        EpChildPolicy policy;
        bool unprivileged;    /* switch to uid/gid/groups, drop every capability */
        uid_t uid;
        gid_t gid;
        const gid_t *groups;
        size_t n_groups;
        char **env;           /* the complete environment */
        int nice;             /* its niceness (setpriority(2)), as its unit's Nice= */
        /* For a daemon that stays root: its bounding set (bit N: capability N), as its unit's
         * CapabilityBoundingSet=. An unprivileged one gets none. Either runs with
         * no_new_privs, as its unit's NoNewPrivileges=yes. */
        uint64_t capabilities;
} EpChildSpec;

typedef struct EpSupervisor EpSupervisor;

/* Called each time a daemon becomes ready (first == the first time for that daemon) and when
 * all are ready for the first time (name == NULL). */
typedef void (*ep_supervisor_ready_t)(EpSupervisor *s, const char *name, bool first, void *userdata);

/* bus: where readiness is watched (NameOwnerChanged). sd-event child sources need SIGCHLD
 * blocked before this is called. */
int ep_supervisor_new(sd_event *e, sd_bus *bus, EpSupervisor **ret);
EpSupervisor *ep_supervisor_free(EpSupervisor *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpSupervisor *, ep_supervisor_free);

void ep_supervisor_set_ready_callback(EpSupervisor *s, ep_supervisor_ready_t cb, void *userdata);

/* Copies spec (strings, argv, env, groups). */
int ep_supervisor_add(EpSupervisor *s, const EpChildSpec *spec);
int ep_supervisor_start(EpSupervisor *s);

bool ep_supervisor_ready(const EpSupervisor *s, const char *name);

/* Stops every daemon, then makes the event loop exit with exit_code. A second call while
 * stopping sends SIGKILL at once. */
void ep_supervisor_stop(EpSupervisor *s, int exit_code);
bool ep_supervisor_stopping(const EpSupervisor *s);
