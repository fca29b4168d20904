/* SPDX-License-Identifier: MIT */
/* Loader1.OpenPerfMap's file checks (unwinder-loader/jit-map-open.c) against real processes:
 * a map the process wrote is opened; a symlink, a file of another user and a FIFO at that
 * path are refused without hanging; a process in its own pid and mount namespaces is found
 * by its inner pid under its own /tmp. Needs root (skipped otherwise). Files this test
 * creates are removed by their pid-named path. */

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jit-map-open.h"
#include "proc-parse.h"
#include "tests.h"

#define NOBODY 65534
#define OTHER_UID 4242
#define EXIT_NO_NAMESPACES 2 /* the namespaced child's status when unshare() or mount() is refused */

static void test_parse_nspid(void) {
        pid_t pid = 0;

        ASSERT_EQ(ep_parse_status_nspid("Name:\tx\nNSpid:\t1234\nNSpgid:\t1\n", &pid), 0);
        ASSERT_EQ(pid, 1234);
        ASSERT_EQ(ep_parse_status_nspid("NSpid:\t1234\t77\t5\n", &pid), 0);
        ASSERT_EQ(pid, 5); /* the innermost namespace */
        ASSERT_EQ(ep_parse_status_nspid("NSpid:\t42", &pid), 0);
        ASSERT_EQ(pid, 42);
        ASSERT_EQ(ep_parse_status_nspid("Name:\tx\nPid:\t3\n", &pid), -ENOENT);
        ASSERT_EQ(ep_parse_status_nspid("NSpid:\n", &pid), -ENOENT);
        ASSERT_EQ(ep_parse_status_nspid("NSpid:\tabc\n", &pid), -EINVAL);
        ASSERT_EQ(ep_parse_status_nspid("NSpid:\t-4\n", &pid), -EINVAL);
        ASSERT_EQ(ep_parse_status_nspid("NSpid:\t99999999999\n", &pid), -EINVAL);
        ASSERT_EQ(ep_parse_status_nspid("", &pid), -ENOENT);
}

static char map_path[64];

static void remove_map(void) {
        if (map_path[0])
                (void) unlink(map_path);
}

/* A child running as nobody (dumpable, so /proc/PID is owned by nobody) that writes its perf
 * map and waits until the pipe closes. */
static pid_t start_jit_child(int *ret_release) {
        int ready[2], release[2];
        pid_t pid;
        char c;

        ASSERT_OK(pipe2(ready, O_CLOEXEC));
        ASSERT_OK(pipe2(release, O_CLOEXEC));
        pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                char path[64];
                FILE *f;

                close(ready[0]);
                close(release[1]);
                if (setresgid(NOBODY, NOBODY, NOBODY) < 0 || setresuid(NOBODY, NOBODY, NOBODY) < 0 ||
                    prctl(PR_SET_DUMPABLE, 1) < 0)
                        _exit(2);
                snprintf(path, sizeof path, "/tmp/perf-%d.map", (int) getpid());
                f = fopen(path, "wx");
                if (!f)
                        _exit(3);
                fprintf(f, "7f0000001000 40 LazyCompile:*hotLoop /tmp/x.js:3\n");
                fclose(f);
                if (write(ready[1], "r", 1) != 1)
                        _exit(4);
                if (read(release[0], &c, 1) < 0)
                        _exit(5);
                _exit(0);
        }
        close(ready[1]);
        close(release[0]);
        snprintf(map_path, sizeof map_path, "/tmp/perf-%d.map", (int) pid);
        ASSERT_EQ(read(ready[0], &c, 1), 1);
        close(ready[0]);
        *ret_release = release[1];
        return pid;
}

static void stop_child(pid_t pid, int release) {
        int status;

        close(release);
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void check_opens(pid_t pid) {
        char buf[256];
        _cleanup_close_ int fd = ep_open_perf_map(pid);
        ssize_t n;

        ASSERT_OK(fd);
        n = pread(fd, buf, sizeof buf - 1, 0);
        ASSERT_TRUE(n > 0);
        buf[n] = 0;
        ASSERT_STREQ(buf, "7f0000001000 40 LazyCompile:*hotLoop /tmp/x.js:3\n");
        /* Read-only: the symbolizer gets no way to change the process's file. */
        ASSERT_EQ(write(fd, "x", 1), -1);
}

static void test_real_process(void) {
        int release;
        pid_t pid = start_jit_child(&release);
        char target[] = "/tmp/ep-test-perf-map-target-XXXXXX";
        int tfd;

        /* The map the process wrote, owned by its user. */
        check_opens(pid);

        /* Another user's file at that path. */
        ASSERT_OK(chown(map_path, OTHER_UID, OTHER_UID));
        ASSERT_EQ(ep_open_perf_map(pid), -EPERM);
        ASSERT_OK(chown(map_path, NOBODY, NOBODY));
        check_opens(pid);

        /* A symlink to a file the process's user owns: refused all the same. */
        tfd = mkstemp(target);
        ASSERT_OK(tfd);
        ASSERT_OK(fchown(tfd, NOBODY, NOBODY));
        close(tfd);
        ASSERT_OK(unlink(map_path));
        ASSERT_OK(symlink(target, map_path));
        ASSERT_EQ(ep_open_perf_map(pid), -EPERM);
        ASSERT_OK(unlink(map_path));
        ASSERT_OK(unlink(target));

        /* A FIFO nobody writes to: refused at once instead of blocking the loader. */
        ASSERT_OK(mkfifo(map_path, 0644));
        ASSERT_OK(chown(map_path, NOBODY, NOBODY));
        alarm(10); /* a hang fails the test */
        ASSERT_EQ(ep_open_perf_map(pid), -EPERM);
        alarm(0);
        ASSERT_OK(unlink(map_path));

        /* A directory. */
        ASSERT_OK(mkdir(map_path, 0755));
        ASSERT_OK(chown(map_path, NOBODY, NOBODY));
        ASSERT_EQ(ep_open_perf_map(pid), -EPERM);
        ASSERT_OK(rmdir(map_path));

        /* No map. */
        ASSERT_EQ(ep_open_perf_map(pid), -ENOENT);

        stop_child(pid, release);
        map_path[0] = 0;

        /* The process is gone. */
        ASSERT_EQ(ep_open_perf_map(pid), -ESRCH);
        ASSERT_EQ(ep_open_perf_map(0), -EINVAL);
}

/* A process in its own pid namespace (pid 1 there) with its own /tmp: the map is found as
 * that process names it, inside its mount namespace; the host's /tmp is not touched. */
static void test_namespaced_process(void) {
        int ready[2], release[2], written[2];
        pid_t outer, inner;
        char c;

        ASSERT_OK(pipe2(ready, O_CLOEXEC));
        ASSERT_OK(pipe2(release, O_CLOEXEC));
        ASSERT_OK(pipe2(written, O_CLOEXEC));
        outer = fork();
        ASSERT_OK(outer);
        if (outer == 0) {
                pid_t child;

                close(ready[0]);
                close(release[1]);
                if (unshare(CLONE_NEWNS | CLONE_NEWPID) < 0 ||
                    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
                    mount("tmpfs", "/tmp", "tmpfs", 0, "mode=1777") < 0)
                        _exit(EXIT_NO_NAMESPACES);
                child = fork();
                if (child < 0)
                        _exit(3);
                if (child == 0) {
                        FILE *f = fopen("/tmp/perf-1.map", "wx"); /* getpid() == 1 here */
                        if (getpid() != 1 || !f)
                                _exit(4);
                        fprintf(f, "1000 10 namespaced\n");
                        if (fclose(f) != 0 || write(written[1], "w", 1) != 1 || read(release[0], &c, 1) < 0)
                                _exit(5);
                        _exit(0);
                }
                /* Tell the test the child's pid as the host sees it, once its map exists. */
                close(written[1]);
                if (read(written[0], &c, 1) != 1 || write(ready[1], &child, sizeof child) != sizeof child)
                        _exit(5);
                int status;
                if (waitpid(child, &status, 0) != child || !WIFEXITED(status))
                        _exit(6);
                _exit(WEXITSTATUS(status));
        }
        close(ready[1]);
        close(release[0]);
        close(written[0]);
        close(written[1]);
        if (read(ready[0], &inner, sizeof inner) != sizeof inner) {
                int status;
                ASSERT_EQ(waitpid(outer, &status, 0), outer);
                /* Only a machine that refuses new namespaces (a container without CAP_SYS_ADMIN)
                 * excuses this part; anything else is a failure. */
                if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_NO_NAMESPACES) {
                        fprintf(stderr, "SKIP: cannot make a pid and mount namespace here (unshare or mount "
                                        "refused): the namespaced perf map is not checked\n");
                        exit(EXIT_TEST_SKIP);
                }
                fprintf(stderr, "namespaced child failed (wait status 0x%x)\n", (unsigned) status);
                exit(EXIT_FAILURE);
        }

        char buf[64];
        _cleanup_close_ int fd = ep_open_perf_map(inner);
        ASSERT_OK(fd);
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        ASSERT_TRUE(n > 0);
        buf[n] = 0;
        ASSERT_STREQ(buf, "1000 10 namespaced\n");

        close(release[1]);
        close(ready[0]);
        int status;
        ASSERT_EQ(waitpid(outer, &status, 0), outer);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void) {
        test_parse_nspid();
        if (geteuid() != 0) {
                printf("test-loader-perf-map: %u checks passed; the process checks need root, skipped\n",
                       tests_checks);
                return EXIT_TEST_SKIP;
        }
        atexit(remove_map);
        test_real_process();
        test_namespaced_process();
        return tests_summary("test-loader-perf-map");
}
