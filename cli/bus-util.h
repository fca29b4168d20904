/* SPDX-License-Identifier: MIT */
#pragma once

/* Finding the bus the daemons are on, from the CLI's point of view. */

#include <stdbool.h>
#include <systemd/sd-bus.h>

#include "macro.h"

#define EP_RUNTIME_DIR_DEFAULT "/run/ebpf-profiler"

/* /run/ebpf-profiler, or $EBPF_PROFILER_RUNTIME_DIR (tests). */
const char *ep_runtime_dir(void);

/* <runtime dir>/bus-address: where `ebpf-profiler run` leaves the address of its private bus. */
int ep_bus_address_file(char **ret);

/* Connects as a client to the bus at address (NULL: the system bus, honouring
 * $DBUS_SYSTEM_BUS_ADDRESS) and checks that it answers. */
int ep_bus_connect(const char *address, sd_bus **ret);

/* The bus `status` and friends use: $DBUS_SYSTEM_BUS_ADDRESS, else the address `ebpf-profiler
 * run` wrote, else the system bus. ret_address: the address (NULL for the default system bus);
 * ret_source: where it came from ("environment", "run", "system"). */
int ep_bus_open_for_views(sd_bus **ret, char **ret_address, const char **ret_source);

/* Whether name has an owner; ret_pid (optional) gets the owner's pid, or 0. */
int ep_bus_name_owner_pid(sd_bus *bus, const char *name, pid_t *ret_pid);
