/* SPDX-License-Identifier: MIT */
/* file-probe.c: a mapped file is opened and identified only if it is a regular file, and a
 * file whose open or read never ends (a FUSE mount its user stopped answering, stood in for by
 * a probe that blocks on a pipe) costs the caller one bounded wait: the probe is left to its
 * thread, the files of its device are refused at once until it ends, other devices go on. */

#include <fcntl.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "file-probe.h"
#include "tests.h"

static char dir[] = "/tmp/test-file-probe-XXXXXX";
static int release_pipe[2] = { -1, -1 };
static atomic_uint blocking_calls;

/* The file never answers until the test writes to release_pipe. */
static int blocking_work(const char *path, EpFileProbeFlags flags, EpFileProbeResult *ret) {
        char c;

        atomic_fetch_add(&blocking_calls, 1);
        return read(release_pipe[0], &c, 1) == 1 ? -EIO : -errno;
}

static void test_regular_file_opened_and_identified(EpFileProber *p) {
        _cleanup_close_ int fd = -EBADF, own = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        EpFileIdentity ident, want;
        struct stat st;

        ASSERT_TRUE(own >= 0);
        ASSERT_OK(fstat(own, &st));
        ASSERT_OK(ep_file_identify(own, &want));
        ASSERT_EQ(ep_file_probe(p, "/proc/self/exe", st.st_dev, &fd, &ident), 0);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(memcmp(ident.id, want.id, EP_FILE_ID_SIZE), 0);
        ASSERT_EQ(memcmp(ident.htlhash, want.htlhash, EP_FILE_ID_SIZE), 0);
        ASSERT_EQ(ident.size, want.size);
        ASSERT_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0); /* blocking again for its reader */
}

/* A pin is the inode identified, held: an O_PATH descriptor of that very file. */
static void test_pin_holds_the_file_identified(EpFileProber *p) {
        _cleanup_close_ int pin = -EBADF;
        EpFileIdentity ident, want;
        struct stat st, pinned;
        char path[64], cmd[128];

        snprintf(path, sizeof path, "%s/lib.so", dir);
        snprintf(cmd, sizeof cmd, "cp /proc/%d/exe '%s'", (int) getpid(), path);
        ASSERT_EQ(system(cmd), 0);
        ASSERT_OK(stat(path, &st) < 0 ? -errno : 0);
        ASSERT_EQ(ep_file_probe_pin(p, path, st.st_dev, &pin, &ident), 0);
        ASSERT_TRUE(pin >= 0);
        ASSERT_EQ(fcntl(pin, F_GETFL) & O_PATH, O_PATH);
        ASSERT_OK(fstat(pin, &pinned) < 0 ? -errno : 0);
        ASSERT_EQ(pinned.st_ino, st.st_ino);
        ASSERT_OK(unlink(path) < 0 ? -errno : 0); /* the inode stays while pinned */
        ASSERT_OK(fstat(pin, &pinned) < 0 ? -errno : 0);
        ASSERT_EQ(pinned.st_nlink, 0u);
        ASSERT_EQ(pinned.st_ino, st.st_ino);
        {
                _cleanup_close_ int own = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);

                ASSERT_TRUE(own >= 0);
                ASSERT_OK(ep_file_identify(own, &want));
        }
        /* The same content, as the htlhash says; the copy is ID'd as itself unless it is a
         * system file (file-id.h). */
        ASSERT_EQ(memcmp(ident.htlhash, want.htlhash, EP_FILE_ID_SIZE), 0);
        ASSERT_EQ(ident.size, want.size);
}

/* A FIFO (with no writer: a blocking open would never return), a symlink to it, a device. */
static void test_only_regular_files(EpFileProber *p) {
        char fifo[64], link[64];
        int fd = -EBADF;

        snprintf(fifo, sizeof fifo, "%s/fifo", dir);
        snprintf(link, sizeof link, "%s/link", dir);
        ASSERT_OK(mkfifo(fifo, 0600));
        ASSERT_OK(symlink(fifo, link));
        ASSERT_EQ(ep_file_probe(p, fifo, 0, &fd, NULL), -EBADFD);
        ASSERT_EQ(ep_file_probe(p, link, 0, &fd, NULL), -EBADFD);
        ASSERT_EQ(ep_file_probe(p, "/dev/null", 0, &fd, NULL), -EBADFD);
        ASSERT_EQ(fd, -EBADF);
        ASSERT_EQ(ep_file_probe(p, "/nonexistent/file", 0, &fd, NULL), -ENOENT);
}

static void test_stuck_device(EpFileProber *p) {
        dev_t stuck = makedev(0, 4242), other = makedev(0, 4243);
        EpFileIdentity id;

        ASSERT_OK(pipe2(release_pipe, O_CLOEXEC));
        ep_file_prober_set_work(p, blocking_work);
        ASSERT_EQ(ep_file_probe(p, "/fuse/lib.so", stuck, NULL, &id), -ETIMEDOUT);
        ASSERT_EQ(ep_file_prober_timeouts(p), 1u);
        ASSERT_EQ(ep_file_prober_stuck(p), 1u);

        /* Its device is not probed again while it is stuck: no second wait, no second thread. */
        ASSERT_EQ(ep_file_probe(p, "/fuse/other.so", stuck, NULL, &id), -ETIMEDOUT);
        ASSERT_EQ(atomic_load(&blocking_calls), 1u);
        ASSERT_EQ(ep_file_prober_timeouts(p), 1u);

        /* Another device is. */
        ASSERT_EQ(ep_file_probe(p, "/other/lib.so", other, NULL, &id), -ETIMEDOUT);
        ASSERT_EQ(atomic_load(&blocking_calls), 2u);
        ASSERT_EQ(ep_file_prober_stuck(p), 2u);

        /* The mount answers again: the stuck probes end by themselves, the devices are free. */
        ASSERT_EQ(write(release_pipe[1], "xx", 2), 2);
        ASSERT_EVENTUALLY(ep_file_prober_stuck(p) == 0, 60, "%u stuck", ep_file_prober_stuck(p));
        ASSERT_OK(write(release_pipe[1], "x", 1) == 1 ? 0 : -errno);
        ASSERT_EQ(ep_file_probe(p, "/fuse/lib.so", stuck, NULL, &id), -EIO);
        ASSERT_EQ(atomic_load(&blocking_calls), 3u);
}

int main(void) {
        _cleanup_(ep_file_prober_freep) EpFileProber *p = NULL;
        char cmd[64];

        ASSERT_TRUE(mkdtemp(dir));
        ASSERT_OK(ep_file_prober_new(&p));
        test_regular_file_opened_and_identified(p);
        test_pin_holds_the_file_identified(p);
        test_only_regular_files(p);
        test_stuck_device(p);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        ASSERT_EQ(system(cmd), 0);
        return tests_summary("loader-file-probe");
}
