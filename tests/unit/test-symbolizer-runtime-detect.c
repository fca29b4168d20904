/* SPDX-License-Identifier: MIT */
/* Symbolizer1.DetectRuntime's work (symbolizer/runtime-detect.c), without a bus:
 *   - for every CPython on the machine, the sandboxed detection answers "cpython" with facts
 *     that pass the loader's validation (common/runtime-facts.c) and say what python-detect.c
 *     found, with the PT_LOAD segments readelf lists; in-process the same bytes;
 *   - a 3.13 whose _Py_DebugOffsets differ from the table is an unusable runtime;
 *   - files that are no runtime answer "", a descriptor of another file, a truncated libpython
 *     and a child that crashes, fails or spins are errors of the file, never a crash of ours;
 *   - which answers are BadFile, UnusableRuntime and transient. */

#include <gelf.h>
#include <libelf.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "file-id.h"
#include "python-detect.h"
#include "runtime-detect.h"
#include "sandbox.h"
#include "test-python-util.h"
#include "tests.h"
#include "unwind-service.h"

static const char *tmpdir;

static int detect_path(const char *path, EpRuntimeDetection *ret) {
        uint8_t id[EP_FILE_ID_SIZE];
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);

        ASSERT_TRUE(fd >= 0);
        ASSERT_OK(ep_file_id_from_fd(fd, id, NULL));
        return ep_runtime_detect_sandboxed(fd, id, ret);
}

/* The PT_LOAD segments as readelf lists them. */
static uint32_t readelf_loads(const char *path, EpFactsSegment *ret, uint32_t max) {
        char cmd[PATH_MAX + 64], line[1024];
        uint32_t n = 0;
        FILE *p;

        snprintf(cmd, sizeof cmd, "readelf -lW '%s' 2>/dev/null", path);
        p = popen(cmd, "r");
        ASSERT_TRUE(p);
        while (fgets(line, sizeof line, p)) {
                unsigned long long off, vaddr, paddr, filesz, memsz;

                if (sscanf(line, " LOAD %llx %llx %llx %llx %llx", &off, &vaddr, &paddr, &filesz, &memsz) != 5)
                        continue;
                ASSERT_TRUE(n < max);
                ret[n++] = (EpFactsSegment) { .offset = off, .vaddr = vaddr, .filesz = filesz, .memsz = memsz };
        }
        pclose(p);
        return n;
}

static void check_install(const PyInstall *in) {
        EpFactsSegment loads[EP_CPYTHON_FACTS_MAX_SEGMENTS];
        EpRuntimeDetection d, direct;
        EpCPythonFacts checked;
        EpPyRuntime rt;
        uint32_t n_loads;

        ASSERT_EQ(detect_path(in->runtime, &d), 0);
        ASSERT_TRUE(streq(d.runtime, EP_RUNTIME_CPYTHON));
        ASSERT_OK(ep_cpython_facts_validate(&d.facts, sizeof d.facts, &checked));

        ASSERT_EQ(ep_py_detect_path(in->runtime, &rt), 1);
        ASSERT_EQ(d.facts.major, in->major);
        ASSERT_EQ(d.facts.minor, in->minor);
        ASSERT_TRUE(d.facts.micro == in->micro || d.facts.micro == EP_CPYTHON_MICRO_UNKNOWN);
        ASSERT_EQ(d.facts.layout_source, in->minor >= 13 ? EP_CPYTHON_LAYOUT_DEBUG_OFFSETS : EP_CPYTHON_LAYOUT_TABLE);
        ASSERT_EQ(d.facts.n_eval, rt.n_eval);
        for (unsigned i = 0; i < rt.n_eval; i++) {
                ASSERT_EQ(d.facts.eval[i].start, rt.eval[i].start);
                ASSERT_EQ(d.facts.eval[i].end, rt.eval[i].end);
        }
        if (in->minor == 6) {
                ASSERT_EQ(d.facts.interp_head_addr, rt.interp_head_addr);
                ASSERT_EQ(d.facts.runtime_addr, 0);
        } else {
                ASSERT_EQ(d.facts.runtime_addr, rt.runtime_addr);
                ASSERT_EQ(d.facts.runtime_size, rt.runtime_size);
                ASSERT_EQ(d.facts.interp_head_addr, 0);
        }

        n_loads = readelf_loads(in->runtime, loads, ELEMENTSOF(loads));
        ASSERT_EQ(d.facts.n_segments, n_loads);
        ASSERT_TRUE(memcmp(d.facts.segments, loads, n_loads * sizeof loads[0]) == 0);

        /* The sandbox changes nothing in the answer. */
        {
                _cleanup_close_ int fd = open(in->runtime, O_RDONLY | O_CLOEXEC);
                ASSERT_TRUE(fd >= 0);
                ASSERT_EQ(ep_runtime_detect_fd(fd, in->runtime, &direct), 0);
                ASSERT_TRUE(memcmp(&direct.facts, &d.facts, sizeof d.facts) == 0);
        }
        printf("  %s: cpython %u.%u, %u eval range(s), %u segments\n", in->runtime, d.facts.major, d.facts.minor,
               d.facts.n_eval, d.facts.n_segments);
}

/* A 3.13 whose _Py_DebugOffsets says the thread list is elsewhere: a build with another
 * layout, refused as an unusable runtime (not a bad file). */
static void check_debug_offsets_mismatch(const PyInstall *in) {
        char path[PATH_MAX + 64];
        EpRuntimeDetection d;
        EpPyRuntime rt;
        uint64_t off;
        int fd;

        ASSERT_EQ(ep_py_detect_path(in->runtime, &rt), 1);
        ASSERT_TRUE(rt.runtime_file_offset != UINT64_MAX);
        snprintf(path, sizeof path, "%s/debug-offsets", tmpdir);
        py_copy_file(in->runtime, path, -1);
        fd = open(path, O_RDWR | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        off = rt.runtime_file_offset + offsetof(EpPyDebugOffsets313, thread_state.next);
        ASSERT_EQ(pwrite(fd, &(uint64_t) { 4096 }, sizeof(uint64_t), (off_t) off), (ssize_t) sizeof(uint64_t));
        close(fd);

        ASSERT_EQ(detect_path(path, &d), -EBADMSG);
        ASSERT_TRUE(d.unusable);
        ASSERT_TRUE(streq(ep_runtime_detect_error_name(&d), EP_ERROR_UNUSABLE_RUNTIME));
        printf("  %s with another _Py_DebugOffsets: %s\n", in->runtime, d.what);
        unlink(path);
}

static void check_not_runtimes(void) {
        EpRuntimeDetection d;

        ASSERT_EQ(detect_path("/bin/true", &d), 0); /* ELF, no Python */
        ASSERT_TRUE(streq(d.runtime, ""));
        ASSERT_EQ(detect_path("/etc/passwd", &d), 0); /* not ELF */
        ASSERT_TRUE(streq(d.runtime, ""));
}

static void check_wrong_file_id(void) {
        uint8_t id[EP_FILE_ID_SIZE] = {};
        _cleanup_close_ int fd = open("/bin/true", O_RDONLY | O_CLOEXEC);
        EpRuntimeDetection d;

        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(ep_runtime_detect_sandboxed(fd, id, &d), -ESTALE);
        ASSERT_TRUE(streq(ep_runtime_detect_error_name(&d), EP_ERROR_BAD_FILE));
}

static void check_truncated(const PyInstall *in) {
        static const off_t sizes[] = { 16, 64, 4096, 1 << 20 };
        char path[PATH_MAX + 64];

        snprintf(path, sizeof path, "%s/truncated", tmpdir);
        for (size_t i = 0; i < ELEMENTSOF(sizes); i++) {
                EpRuntimeDetection d;

                py_copy_file(in->runtime, path, sizes[i]);
                (void) detect_path(path, &d);
                ASSERT_TRUE(!streq(d.runtime, EP_RUNTIME_CPYTHON));
                unlink(path);
        }
}

static int child_aborts(void *userdata, int out) {
        abort();
}

static int child_fails(void *userdata, int out) {
        return -EIO;
}

static int child_spins(void *userdata, int out) {
        for (volatile uint64_t i = 0;; i++)
                ;
        return 0;
}

static int child_answers(void *userdata, int out) {
        return ep_sandbox_write(out, "ok", 2);
}

static int child_reports_and_waits(void *userdata, int out) {
        const int *report = userdata;
        pid_t self = getpid();

        if (write(*report, &self, sizeof self) != sizeof self)
                return -errno;
        for (;;)
                pause();
}

/* A sandbox does not outlive the process that runs it: killed with it, not left parsing. The
 * test is the orphan's subreaper, so it sees how the sandbox ended. */
static void check_sandbox_dies_with_its_parent(void) {
        int report[2], status = 0;
        pid_t parent, sandbox = 0;

        ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
        ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
        parent = fork();
        ASSERT_TRUE(parent >= 0);
        if (parent == 0) {
                (void) ep_sandbox_run("test", report[1], child_reports_and_waits, &report[1], NULL);
                _exit(EXIT_SUCCESS);
        }
        ASSERT_EQ(read(report[0], &sandbox, sizeof sandbox), (ssize_t) sizeof sandbox);
        ASSERT_EQ(kill(parent, SIGKILL), 0);
        ASSERT_EQ(waitpid(parent, NULL, 0), parent);
        for (uint64_t deadline = tests_monotonic_ms() + 30 * 1000; waitpid(sandbox, &status, WNOHANG) != sandbox;) {
                if (tests_monotonic_ms() >= deadline) {
                        (void) kill(sandbox, SIGKILL); /* it holds our stdout: the test would hang */
                        (void) waitpid(sandbox, NULL, 0);
                        fprintf(stderr, "sandbox %d outlived its parent by 30 s\n", (int) sandbox);
                        exit(EXIT_FAILURE);
                }
                usleep(10 * 1000);
        }
        ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        close(report[0]);
        close(report[1]);
        ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
}

static void check_sandbox(void) {
        const EpSandboxLimits cpu = { .cpu_usec = 1 }, wall = { .timeout_usec = 200 * 1000 };
        char buf[2];
        int fd;

        ASSERT_EQ(ep_sandbox_run("test", -1, child_aborts, NULL, NULL), -E2BIG);
        ASSERT_EQ(ep_sandbox_run("test", -1, child_fails, NULL, NULL), -E2BIG);
        ASSERT_EQ(ep_sandbox_run("test", -1, child_spins, NULL, &cpu), -ETIME);
        ASSERT_EQ(ep_sandbox_run("test", -1, child_spins, NULL, &(EpSandboxLimits) { .cpu_usec = 60 * USEC_PER_SEC,
                                                                                .timeout_usec = wall.timeout_usec }),
                  -ETIMEDOUT);
        fd = ep_sandbox_run("test", -1, child_answers, NULL, NULL);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(pread(fd, buf, sizeof buf, 0), 2);
        ASSERT_TRUE(memcmp(buf, "ok", 2) == 0);
        close(fd);
}

/* What a child taken over could try, each answered 1 when refused as it must be (and the
 * two things it needs, 1 when they work). */
typedef struct Held {
        int not_passed, passed;
        const char *writable;
} Held;

static int child_tries(void *userdata, int out) {
        const Held *h = userdata;
        char results[9];
        int fd;

        results[0] = fcntl(h->not_passed, F_GETFD) < 0 && errno == EBADF;
        results[1] = fcntl(h->passed, F_GETFD) >= 0;
        results[2] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0) < 0 && errno == EPERM;
        fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
        results[3] = fd >= 0;
        results[4] = open(h->writable, O_WRONLY | O_CLOEXEC) < 0 && errno == EPERM;
        results[5] = open(h->writable, O_RDONLY | O_CREAT | O_CLOEXEC, 0600) < 0 && errno == EPERM;
        results[6] = kill(getppid(), 0) < 0 && errno == EPERM;
        results[7] = execve("/bin/true", (char *[]) { (char *) "true", NULL }, environ) < 0 && errno == EPERM;
        results[8] = setrlimit(RLIMIT_CPU, &(struct rlimit) { RLIM_INFINITY, RLIM_INFINITY }) < 0 && errno == EPERM;
        return ep_sandbox_write(out, results, sizeof results);
}

/* A child holds no descriptor of ours but the file it examines, and cannot reach another
 * process, the bus, a program or a file to write: taken over by a crafted file, it has
 * nothing of the symbolizer's. */
static void check_sandbox_holds_nothing(void) {
        char writable[] = "/tmp/test-sandbox-XXXXXX", results[9];
        _cleanup_close_ int not_passed = open("/dev/null", O_RDONLY | O_CLOEXEC), passed = -EBADF, fd = -EBADF;
        Held h;

        passed = mkstemp(writable);
        ASSERT_TRUE(not_passed >= 0 && passed >= 0);
        h = (Held) { .not_passed = not_passed, .passed = passed, .writable = writable };
        fd = ep_sandbox_run("test", passed, child_tries, &h, NULL);
        unlink(writable);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(pread(fd, results, sizeof results, 0), (ssize_t) sizeof results);
        for (size_t i = 0; i < sizeof results; i++)
                if (!results[i]) {
                        fprintf(stderr, "sandbox check %zu failed\n", i);
                        exit(EXIT_FAILURE);
                }
}

static void check_error_names(void) {
        EpRuntimeDetection d = { .error = -ENODATA, .unusable = 1 };

        ASSERT_TRUE(streq(ep_runtime_detect_error_name(&d), EP_ERROR_UNUSABLE_RUNTIME));
        d = (EpRuntimeDetection) { .error = -EBADMSG };
        ASSERT_TRUE(streq(ep_runtime_detect_error_name(&d), EP_ERROR_BAD_FILE));
        d = (EpRuntimeDetection) { .error = -ETIME };
        ASSERT_TRUE(streq(ep_runtime_detect_error_name(&d), EP_ERROR_BAD_FILE));
        d = (EpRuntimeDetection) { .error = -ETIMEDOUT }; /* the machine, not the file: asked again */
        ASSERT_TRUE(ep_runtime_detect_error_name(&d) == NULL);
        d = (EpRuntimeDetection) { .error = -ENOMEM };
        ASSERT_TRUE(ep_runtime_detect_error_name(&d) == NULL);
        d = (EpRuntimeDetection) {};
        ASSERT_TRUE(ep_runtime_detect_error_name(&d) == NULL);
}

int main(void) {
        PyInstall ins[PY_MAX_INSTALLS];
        size_t n;

        (void) elf_version(EV_CURRENT);
        check_error_names();
        check_sandbox();
        check_sandbox_dies_with_its_parent();
        check_sandbox_holds_nothing();
        tmpdir = py_tmpdir_make("test-runtime-detect");
        check_not_runtimes();
        check_wrong_file_id();

        n = py_discover(ins);
        if (n == 0) {
                printf("test-symbolizer-runtime-detect: no CPython on this machine, partly skipped\n");
                return tests_summary("test-symbolizer-runtime-detect");
        }
        for (size_t i = 0; i < n; i++) {
                check_install(&ins[i]);
                if (ins[i].minor >= 13)
                        check_debug_offsets_mismatch(&ins[i]);
        }
        check_truncated(&ins[0]);
        return tests_summary("test-symbolizer-runtime-detect");
}
