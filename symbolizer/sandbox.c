/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "macro.h"
#include "sandbox-filter.h"
#include "sandbox.h"

#define DEFAULT_MEMORY (1ULL << 30)
#define DEFAULT_CPU_USEC (30 * USEC_PER_SEC)
#define DEFAULT_TIMEOUT_USEC (300 * USEC_PER_SEC)

int ep_sandbox_write(int out, const void *p, size_t n) {
        const uint8_t *b = p;

        while (n > 0) {
                ssize_t k = write(out, b, n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                b += k;
                n -= (size_t) k;
        }
        return 0;
}

/* Closes every descriptor but the standard ones, in and out: the symbolizer's bus connection,
 * its rings, its caches are not the child's to use. */
static int close_all_but(int in, int out) {
        int keep[2] = { MIN(in, out), MAX(in, out) };
        unsigned from = 3;

        for (size_t i = 0; i < ELEMENTSOF(keep); i++) {
                if (keep[i] < 3)
                        continue;
                if ((unsigned) keep[i] > from && close_range(from, (unsigned) keep[i] - 1, 0) < 0)
                        return -errno;
                from = (unsigned) keep[i] + 1;
        }
        return close_range(from, ~0U, 0) < 0 ? -errno : 0;
}

static _Noreturn void child_run(const char *name, int in, EpSandboxFn fn, void *userdata, int out,
                                uint64_t memory, rlim_t cpu_sec, pid_t parent) {
        struct rlimit rl;

        /* A symbolizer that is killed takes its sandboxes with it: no orphan parses on for up
         * to its CPU limit with nobody to answer. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
                _exit(EXIT_FAILURE);

        /* Named for what it examines: ps (and a test that holds a table extraction) tells the
         * sandboxes from the symbolizer, and a table extraction from a runtime detection. */
        (void) prctl(PR_SET_NAME, name);

        /* SIGXCPU at the soft limit ends the child; SIGKILL at the hard one if it is caught
         * or ignored. No core file for either. */
        (void) setrlimit(RLIMIT_CORE, &(struct rlimit) {});
        (void) setrlimit(RLIMIT_CPU, &(struct rlimit) { .rlim_cur = cpu_sec, .rlim_max = cpu_sec + 1 });

        /* The limit is relative to what the parent already had mapped (a sanitizer build
         * reserves terabytes of shadow address space up front). */
        if (getrlimit(RLIMIT_AS, &rl) == 0) {
                FILE *f = fopen("/proc/self/statm", "re");
                unsigned long pages = 0;
                if (f) {
                        if (fscanf(f, "%lu", &pages) != 1)
                                pages = 0;
                        fclose(f);
                }
                rlim_t want = (rlim_t) pages * (rlim_t) sysconf(_SC_PAGESIZE) + memory;
                if (pages > 0 && (rl.rlim_max == RLIM_INFINITY || want < rl.rlim_max)) {
                        rl.rlim_cur = want;
                        (void) setrlimit(RLIMIT_AS, &rl);
                }
        }

        /* Last, the limits set: the filter denies changing them. */
        if (close_all_but(in, out) < 0 || ep_sandbox_filter_install(getpid()) < 0)
                _exit(EXIT_FAILURE);
        _exit(fn(userdata, out) < 0 ? EXIT_FAILURE : EXIT_SUCCESS);
}

static int wait_child(pid_t pid, uint64_t timeout_usec, int *ret_status, uint64_t *ret_cpu_usec) {
        struct rusage ru = {};
        _cleanup_close_ int pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
        int r = 0;

        if (pidfd >= 0) {
                struct pollfd p = { .fd = pidfd, .events = POLLIN };
                int ms = (int) MIN(timeout_usec / 1000, (uint64_t) INT32_MAX);
                int k;
                do
                        k = poll(&p, 1, ms);
                while (k < 0 && errno == EINTR);
                if (k == 0) {
                        (void) kill(pid, SIGKILL);
                        r = -ETIMEDOUT;
                }
        }
        while (wait4(pid, ret_status, 0, &ru) < 0)
                if (errno != EINTR)
                        return -errno;
        *ret_cpu_usec = (uint64_t) (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * USEC_PER_SEC +
                        (uint64_t) (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
        return r;
}

int ep_sandbox_run(const char *name, int in, EpSandboxFn fn, void *userdata, const EpSandboxLimits *limits) {
        uint64_t memory = limits && limits->memory_bytes ? limits->memory_bytes : DEFAULT_MEMORY;
        uint64_t cpu_usec = limits && limits->cpu_usec ? limits->cpu_usec : DEFAULT_CPU_USEC;
        uint64_t cpu_sec = (cpu_usec + USEC_PER_SEC - 1) / USEC_PER_SEC;
        uint64_t timeout = limits && limits->timeout_usec ? limits->timeout_usec : DEFAULT_TIMEOUT_USEC;
        _cleanup_close_ int out = memfd_create(name, MFD_CLOEXEC);
        uint64_t used_cpu = 0;
        int status = 0, r;
        pid_t pid;

        if (out < 0)
                return -errno;
        pid_t parent = getpid();
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0)
                child_run(name, in, fn, userdata, out, memory, (rlim_t) cpu_sec, parent);

        r = wait_child(pid, timeout, &status, &used_cpu);
        if (r < 0)
                return r;
        /* SIGXCPU is only the soft CPU limit's. SIGKILL at the hard limit is told from the OOM
         * killer by the time used (with some slack: the limit is checked at scheduler ticks, and
         * the kernel's count and the child's rusage are not the same clock on a busy machine,
         * so the signal is what decides for SIGXCPU). */
        if (WIFSIGNALED(status) &&
            (WTERMSIG(status) == SIGXCPU || used_cpu >= cpu_sec * USEC_PER_SEC * 9 / 10))
                return -ETIME;
        if (WIFSIGNALED(status) || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return -E2BIG; /* out of memory (abort, SIGSEGV on a failed allocation) or crashed */
        return TAKE_FD(out);
}

bool ep_sandbox_error_is_file(int error) {
        switch (error) {
        case -ENOEXEC:
        case -EBADMSG:
        case -E2BIG:
        case -EFBIG:
        case -EIO:
        case -ESTALE:
        case -EBADFD:
        case -ETIME:
                return true;
        default:
                return false;
        }
}
