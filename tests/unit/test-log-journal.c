/* SPDX-License-Identifier: MIT */
/* What a daemon sends to journald: in a private mount namespace a datagram socket stands in
 * for /run/systemd/journal/socket, and the test reads the entries common/log.c sends. Needs
 * root (mount namespace); skipped otherwise. */
#include <sched.h>
#include <stdbool.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "tests.h"

#define JOURNAL_DIR "/run/systemd/journal"
#define JOURNAL_SOCKET JOURNAL_DIR "/socket"

static int fake_journal(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX, .sun_path = JOURNAL_SOCKET };
        int fd;

        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return -errno;
        (void) mkdir("/run/systemd", 0755);
        (void) mkdir(JOURNAL_DIR, 0755);
        if (mount("tmpfs", JOURNAL_DIR, "tmpfs", 0, "mode=0755") < 0)
                return -errno;
        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0)
                return -errno;
        return fd;
}

/* Makes log_setup() believe stderr is a journal stream, as systemd sets it up for a service. */
static void pretend_stderr_is_journal(void) {
        struct stat st;
        char v[64];

        ASSERT_OK(fstat(STDERR_FILENO, &st) < 0 ? -errno : 0);
        snprintf(v, sizeof v, "%llu:%llu", (unsigned long long) st.st_dev, (unsigned long long) st.st_ino);
        ASSERT_OK(setenv("JOURNAL_STREAM", v, 1));
}

/* The next entry, fields separated by newlines (the native protocol, small entries). */
static void receive_entry(int fd, char *buf, size_t size) {
        ssize_t n = recv(fd, buf, size - 1, MSG_DONTWAIT);

        ASSERT_TRUE(n > 0);
        buf[n] = 0;
}

static bool has_field(const char *entry, const char *field) {
        size_t len = strlen(field);

        for (const char *p = entry; p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
                if (strncmp(p, field, len) == 0 && (p[len] == '\n' || p[len] == 0))
                        return true;
        return false;
}

int main(void) {
        char entry[4096], field[128];
        int fd;

        if (geteuid() != 0) {
                printf("skipped: needs root for a private mount namespace\n");
                return 77;
        }
        fd = fake_journal();
        ASSERT_OK(fd);
        pretend_stderr_is_journal();
        log_setup("test-log-journal");

        {
                LOG_CONTEXT_PID(4242);
                LOG_CONTEXT_FILE("/usr/lib/libexample.so.1");
                log_struct_id(LOG_WARNING, MESSAGE_ID_PEER_LOST, "peer %s went away", "Collector1");
        }
        receive_entry(fd, entry, sizeof entry);
        ASSERT_TRUE(has_field(entry, "MESSAGE=peer Collector1 went away"));
        ASSERT_TRUE(has_field(entry, "PRIORITY=4"));
        ASSERT_TRUE(has_field(entry, "SYSLOG_IDENTIFIER=test-log-journal"));
        ASSERT_TRUE(has_field(entry, "MESSAGE_ID=" MESSAGE_ID_PEER_LOST));
        ASSERT_TRUE(has_field(entry, "OBJECT_PID=4242"));
        ASSERT_TRUE(has_field(entry, "EP_FILE=/usr/lib/libexample.so.1"));
        ASSERT_TRUE(has_field(entry, "CODE_FUNC=main"));
        ASSERT_TRUE(!has_field(entry, "ERRNO=0"));

        /* Out of the scope the context is gone; an error carries its errno and returns it. */
        ASSERT_EQ(log_error_errno(ENOENT, "Cannot open %s: %m", "x"), -ENOENT);
        receive_entry(fd, entry, sizeof entry);
        ASSERT_TRUE(has_field(entry, "MESSAGE=Cannot open x: No such file or directory"));
        ASSERT_TRUE(has_field(entry, "PRIORITY=3"));
        snprintf(field, sizeof field, "ERRNO=%d", ENOENT);
        ASSERT_TRUE(has_field(entry, field));
        ASSERT_TRUE(strstr(entry, "OBJECT_PID=") == NULL);
        ASSERT_TRUE(strstr(entry, "EP_FILE=") == NULL);
        ASSERT_TRUE(strstr(entry, "MESSAGE_ID=") == NULL);

        /* Below the level nothing is sent. */
        log_debug("not sent");
        ASSERT_TRUE(recv(fd, entry, sizeof entry, MSG_DONTWAIT) < 0);

        return tests_summary("test-log-journal");
}
