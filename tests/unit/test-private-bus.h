/* SPDX-License-Identifier: MIT */
#pragma once

/* A throw-away session-type dbus-daemon for tests that run a daemon as a process: listens on
 * <workdir>/bus.sock and reports its address through a pipe. Returns the daemon's PID (the
 * caller kills it) with the address in ret_address, or -1 if it did not come up in 20 s. */

#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests.h"

static inline pid_t test_private_bus_start(const char *workdir, char *ret_address, size_t size) {
        size_t have = 0;
        int pfd[2];
        pid_t pid;

        ret_address[0] = 0;
        if (pipe2(pfd, O_CLOEXEC) < 0)
                return -1;
        pid = fork();
        if (pid < 0)
                return -1;
        if (pid == 0) {
                char listen[400];
                int w = fcntl(pfd[1], F_DUPFD, 10); /* not close-on-exec, and out of the way */
                if (w < 0 || dup2(w, 3) != 3)
                        _exit(127);
                snprintf(listen, sizeof listen, "--address=unix:path=%s/bus.sock", workdir);
                execl("/usr/bin/dbus-daemon", "dbus-daemon", "--session", "--nofork", "--nopidfile", "--nosyslog",
                      listen, "--print-address=3", (char *) NULL);
                _exit(127);
        }
        close(pfd[1]);

        struct pollfd p = { .fd = pfd[0], .events = POLLIN };
        for (uint64_t deadline = tests_monotonic_ms() + 20000;
             tests_monotonic_ms() < deadline && !strchr(ret_address, '\n');) {
                if (poll(&p, 1, 100) <= 0)
                        continue;
                ssize_t n = read(pfd[0], ret_address + have, size - 1 - have);
                if (n <= 0)
                        break;
                have += (size_t) n;
                ret_address[have] = 0;
        }
        ret_address[strcspn(ret_address, "\n")] = 0;
        close(pfd[0]);
        return ret_address[0] ? pid : -1;
}
