/* SPDX-License-Identifier: MIT */
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "log.h"
#include "macro.h"
#include "unwind-sandbox.h"

#define DEFAULT_MEMORY (1ULL << 30)
#define DEFAULT_CPU_USEC (30 * USEC_PER_SEC)
#define DEFAULT_TIMEOUT_USEC (300 * USEC_PER_SEC)

/* What the child writes at the start of the shared memfd; the blob follows. */
typedef struct SandboxResult {
        int32_t error; /* 0 or negative errno from the extraction */
        uint32_t flags;
        uint64_t size;
        EpUnwindExtractStats stats;
} SandboxResult;

static int write_all(int fd, const void *p, size_t n) {
        const uint8_t *b = p;
        while (n > 0) {
                ssize_t k = write(fd, b, n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                b += k;
                n -= k;
        }
        return 0;
}

static _Noreturn void child_run(int fd, int out, const uint8_t *file_id, const EpUnwindExtractOptions *options,
                                uint64_t memory, rlim_t cpu_sec) {
        SandboxResult res = {};
        struct rlimit rl;
        void *blob = NULL;
        size_t size = 0;

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

        res.error = ep_unwind_extract_full(fd, file_id, NULL, options, &blob, &size, &res.flags, &res.stats);
        res.size = res.error < 0 ? 0 : size;
        if (write_all(out, &res, sizeof res) < 0 || (res.size && write_all(out, blob, size) < 0))
                _exit(EXIT_FAILURE);
        _exit(EXIT_SUCCESS);
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

int ep_unwind_extract_sandboxed(int fd, const uint8_t file_id[EP_FILE_ID_SIZE],
                                const EpUnwindExtractOptions *options, const EpUnwindSandboxLimits *limits,
                                void **ret_blob, size_t *ret_size, uint32_t *ret_flags,
                                EpUnwindExtractStats *ret_stats) {
        uint64_t memory = limits && limits->memory_bytes ? limits->memory_bytes : DEFAULT_MEMORY;
        uint64_t cpu_usec = limits && limits->cpu_usec ? limits->cpu_usec : DEFAULT_CPU_USEC;
        uint64_t cpu_sec = (cpu_usec + USEC_PER_SEC - 1) / USEC_PER_SEC;
        uint64_t timeout = limits && limits->timeout_usec ? limits->timeout_usec : DEFAULT_TIMEOUT_USEC;
        _cleanup_close_ int out = memfd_create("ep-unwind-sandbox", MFD_CLOEXEC);
        _cleanup_free_ void *blob = NULL;
        SandboxResult res;
        uint64_t used_cpu = 0;
        int status = 0, r;
        pid_t pid;

        if (out < 0)
                return -errno;
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0)
                child_run(fd, out, file_id, options, memory, (rlim_t) cpu_sec);

        r = wait_child(pid, timeout, &status, &used_cpu);
        if (r < 0)
                return r;
        /* SIGXCPU, or SIGKILL at the hard limit: told from the OOM killer by the time used
         * (with some slack: the limit is checked at scheduler ticks). */
        if (WIFSIGNALED(status) && used_cpu >= cpu_sec * USEC_PER_SEC * 9 / 10)
                return -ETIME;
        if (WIFSIGNALED(status) || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return -E2BIG; /* out of memory (abort, SIGSEGV on a failed allocation) or crashed */

        if (pread(out, &res, sizeof res, 0) != (ssize_t) sizeof res)
                return -EIO;
        if (res.error < 0)
                return res.error;
        if (res.size == 0 || res.size > (1ULL << 32))
                return -EIO;
        blob = malloc(res.size);
        if (!blob)
                return -ENOMEM;
        if (pread(out, blob, res.size, sizeof res) != (ssize_t) res.size)
                return -EIO;

        *ret_blob = TAKE_PTR(blob);
        *ret_size = res.size;
        *ret_flags = res.flags;
        if (ret_stats)
                *ret_stats = res.stats;
        return 0;
}
