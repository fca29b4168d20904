/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "daemon.h"
#include "spawn-util.h"

void ep_child_reset_signals(void) {
        sigset_t all;
        struct sigaction sa = { .sa_handler = SIG_DFL };

        for (int sig = 1; sig < _NSIG; sig++)
                if (sig != SIGKILL && sig != SIGSTOP)
                        (void) sigaction(sig, &sa, NULL);
        sigemptyset(&all);
        (void) sigprocmask(SIG_SETMASK, &all, NULL);
}

int ep_kill_and_wait(pid_t pid, uint64_t timeout_ns, int *ret_status) {
        uint64_t deadline = ep_now_ns(CLOCK_MONOTONIC) + timeout_ns;
        bool killed = false;
        int status;

        if (kill(pid, SIGTERM) < 0 && errno != ESRCH)
                return -errno;
        for (;;) {
                pid_t p = waitpid(pid, &status, WNOHANG);
                if (p < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (p == pid)
                        break;
                if (!killed && ep_now_ns(CLOCK_MONOTONIC) >= deadline) {
                        (void) kill(pid, SIGKILL);
                        killed = true;
                }
                struct timespec ts = { .tv_nsec = 20 * NSEC_PER_MSEC };
                nanosleep(&ts, NULL);
        }
        if (ret_status)
                *ret_status = status;
        return 0;
}

const char *ep_wait_status_string(int code, int status, char *buf, size_t size) {
        switch (code) {
        case CLD_EXITED:
                snprintf(buf, size, "exited with status %d", status);
                break;
        case CLD_KILLED:
        case CLD_DUMPED:
                snprintf(buf, size, "was killed by signal %s%s", sigabbrev_np(status) ?: "?",
                         code == CLD_DUMPED ? " (core dumped)" : "");
                break;
        default:
                snprintf(buf, size, "changed state (code %d, status %d)", code, status);
        }
        return buf;
}

void ep_strv_free(char **v) {
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}
