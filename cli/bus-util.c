/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus-util.h"
#include "log.h"

#define BUS_TIMEOUT_USEC (5 * USEC_PER_SEC)


const char *ep_runtime_dir(void) {
        const char *e = getenv("EBPF_PROFILER_RUNTIME_DIR");
        return e && *e == '/' ? e : EP_RUNTIME_DIR_DEFAULT;
}

int ep_bus_address_file(char **ret) {
        return asprintf(ret, "%s/bus-address", ep_runtime_dir()) < 0 ? -ENOMEM : 0;
}

int ep_bus_connect(const char *address, sd_bus **ret) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        int r;

        if (address) {
                r = sd_bus_new(&bus);
                if (r < 0)
                        return r;
                r = sd_bus_set_address(bus, address);
                if (r < 0)
                        return r;
                r = sd_bus_set_bus_client(bus, true);
                if (r < 0)
                        return r;
                r = sd_bus_negotiate_fds(bus, true);
                if (r < 0)
                        return r;
                r = sd_bus_start(bus);
        } else
                r = sd_bus_open_system(&bus);
        if (r < 0)
                return r;
        (void) sd_bus_set_method_call_timeout(bus, BUS_TIMEOUT_USEC);

        /* Connecting is lazy in places; a round trip proves someone answers. */
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                               "org.freedesktop.DBus", "GetId", NULL, &reply, "");
        if (r < 0)
                return r;

        *ret = TAKE_PTR(bus);
        return 0;
}

static int read_address_file(char **ret) {
        _cleanup_free_ char *path = NULL;
        int r = ep_bus_address_file(&path);
        if (r < 0)
                return r;

        _cleanup_fclose_ FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        char *line = NULL;
        size_t n = 0;
        ssize_t l = getline(&line, &n, f);
        if (l <= 0) {
                free(line);
                return -ENODATA;
        }
        line[strcspn(line, "\r\n")] = 0;
        if (!*line) {
                free(line);
                return -ENODATA;
        }
        *ret = line;
        return 0;
}

int ep_bus_open_for_views(sd_bus **ret, char **ret_address, const char **ret_source) {
        const char *env = getenv("DBUS_SYSTEM_BUS_ADDRESS");
        int r;

        if (env && *env) {
                r = ep_bus_connect(env, ret);
                if (r < 0)
                        return r;
                *ret_address = strdup(env);
                *ret_source = "environment";
                return 0;
        }

        _cleanup_free_ char *address = NULL;
        if (read_address_file(&address) >= 0) {
                r = ep_bus_connect(address, ret);
                if (r >= 0) {
                        *ret_address = TAKE_PTR(address);
                        *ret_source = "run";
                        return 0;
                }
                log_debug_errno(r, "Bus %s from the address file does not answer: %m", address);
        }

        r = ep_bus_connect(NULL, ret);
        if (r < 0)
                return r;
        *ret_address = NULL;
        *ret_source = "system";
        return 0;
}

int ep_bus_name_owner_pid(sd_bus *bus, const char *name, pid_t *ret_pid) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        const char *owner;
        int r;

        r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                               "org.freedesktop.DBus", "GetNameOwner", &error, &reply, "s", name);
        if (r < 0) {
                bool absent = sd_bus_error_has_name(&error, "org.freedesktop.DBus.Error.NameHasNoOwner");
                sd_bus_error_free(&error);
                if (absent) {
                        if (ret_pid)
                                *ret_pid = 0;
                        return 0;
                }
                return r;
        }
        if (!ret_pid)
                return 1;

        r = sd_bus_message_read(reply, "s", &owner);
        if (r < 0)
                return r;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *pid_reply = NULL;
        uint32_t pid = 0;
        r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                               "org.freedesktop.DBus", "GetConnectionUnixProcessID", NULL, &pid_reply,
                               "s", owner);
        if (r >= 0)
                (void) sd_bus_message_read(pid_reply, "u", &pid);
        *ret_pid = (pid_t) pid;
        return 1;
}
