/* SPDX-License-Identifier: MIT */
/* Starts short-lived children, alternately with posix_spawn and with vfork + execv, each
 * running this same program in child mode for CHILD_SECONDS:
 *   child:  main → child_outer → child_inner → child_spin
 * The parent waits for each child before starting the next and prints one line per child,
 * "spawned PID posix_spawn" or "spawned PID vfork", so a test knows which processes to look
 * at. Built without frame pointers. Usage: spawn SECONDS [CHILD_SECONDS]
 *        spawn --child CHILD_SECONDS
 *
 * Or, with --fork-exec, one child that runs this program's image before it execs another:
 *   spawn --fork-exec PRE_SECONDS PROGRAM [ARGS...]
 * spins until a line comes on stdin (so the profiler knows it), forks, prints "forked PID" and
 * waits for the child, which runs
 *   main → fork_then_exec → pre_exec_outer → pre_exec_spin → child_spin
 * for PRE_SECONDS, prints "exec" and execs PROGRAM ARGS. */
#include <errno.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "workload.h"

extern char **environ;

volatile uint64_t sink;

#define NOINLINE __attribute__((noinline))

NOINLINE uint64_t child_spin(double until) {
        uint64_t x = sink;
        while (workload_now() < until)
                x = workload_burst(x);
        sink = x;
        return x;
}

NOINLINE uint64_t child_inner(double until) {
        uint64_t r = child_spin(until);
        sink += r;
        return r;
}

NOINLINE uint64_t child_outer(double until) {
        uint64_t r = child_inner(until);
        sink += r;
        return r;
}

NOINLINE uint64_t pre_exec_spin(double until) {
        uint64_t r = child_spin(until);
        sink += r; /* no tail call: a frame of its own */
        return r;
}

NOINLINE uint64_t pre_exec_outer(double until) {
        uint64_t r = pre_exec_spin(until);
        sink += r;
        return r;
}

static int wait_child(pid_t pid);

NOINLINE int fork_then_exec(double pre_seconds, char **argv) {
        struct pollfd in = { .fd = STDIN_FILENO, .events = POLLIN };
        pid_t pid;

        while (poll(&in, 1, 0) == 0)
                sink += child_spin(workload_now() + 0.01);
        pid = fork();
        if (pid < 0) {
                perror("fork");
                return 1;
        }
        if (pid == 0) {
                sink += pre_exec_outer(workload_now() + pre_seconds);
                printf("exec\n");
                fflush(stdout);
                execv(argv[0], argv);
                _exit(127);
        }
        printf("forked %d\n", (int) pid);
        fflush(stdout);
        return wait_child(pid) < 0;
}

static int wait_child(pid_t pid) {
        int status;

        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -ECHILD;
}

int main(int argc, char **argv) {
        char self[4096];
        ssize_t n;

        if (argc > 3 && strcmp(argv[1], "--fork-exec") == 0)
                return fork_then_exec(atof(argv[2]), argv + 3);
        if (argc > 2 && strcmp(argv[1], "--child") == 0) {
                sink += child_outer(workload_now() + atof(argv[2]));
                return 0;
        }

        double until = workload_deadline(argc, argv);
        const char *child_seconds = argc > 2 ? argv[2] : "0.5";

        n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n < 0) {
                perror("readlink /proc/self/exe");
                return 1;
        }
        self[n] = 0;

        char *child_argv[] = { self, (char *) "--child", (char *) child_seconds, NULL };
        for (unsigned i = 0; workload_now() < until; i++) {
                pid_t pid;
                const char *how;

                if (i % 2 == 0) {
                        int r = posix_spawn(&pid, self, NULL, NULL, child_argv, environ);
                        if (r != 0) {
                                fprintf(stderr, "posix_spawn: %s\n", strerror(r));
                                return 1;
                        }
                        how = "posix_spawn";
                } else {
                        pid = vfork();
                        if (pid < 0) {
                                perror("vfork");
                                return 1;
                        }
                        if (pid == 0) {
                                execv(self, child_argv);
                                _exit(127);
                        }
                        how = "vfork";
                }
                printf("spawned %d %s\n", (int) pid, how);
                fflush(stdout);
                if (wait_child(pid) < 0) {
                        fprintf(stderr, "child %d failed\n", (int) pid);
                        return 1;
                }
        }
        return 0;
}
