/* SPDX-License-Identifier: MIT */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <systemd/sd-journal.h>

#include "log.h"
#include "utf8.h"

static const char *log_ident = "ebpf-profiler";
static int log_max_level = LOG_INFO;
static bool log_to_journal;
static _Thread_local pid_t log_context_pid;
static _Thread_local const char *log_context_file;

pid_t log_context_push_pid(pid_t pid) {
        pid_t old = log_context_pid;
        log_context_pid = pid;
        return old;
}

void log_context_pop_pid(pid_t *saved) {
        log_context_pid = *saved;
}

const char *log_context_push_file(const char *path) {
        const char *old = log_context_file;
        log_context_file = path;
        return old;
}

void log_context_pop_file(const char **saved) {
        log_context_file = *saved;
}

/* journald sets JOURNAL_STREAM to "dev:inode" of the stream it connected to stderr; only when
 * it matches our stderr are we really talking to the journal. */
static bool stderr_is_journal(void) {
        const char *e = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;

        if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
                return false;
        if (fstat(STDERR_FILENO, &st) < 0)
                return false;
        return st.st_dev == dev && st.st_ino == ino;
}

void log_setup(const char *ident) {
        const char *lvl;

        if (ident)
                log_ident = ident;
        log_to_journal = stderr_is_journal();
        lvl = getenv("EBPF_PROFILER_LOG_LEVEL");
        if (lvl && log_parse_level(lvl) >= 0)
                log_max_level = log_parse_level(lvl);
}

void log_set_max_level(int level) {
        log_max_level = level;
}

int log_get_max_level(void) {
        return log_max_level;
}

int log_parse_level(const char *s) {
        static const char *const names[] = {
                [LOG_EMERG] = "emerg", [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
                [LOG_ERR] = "err",     [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
                [LOG_INFO] = "info",   [LOG_DEBUG] = "debug",
        };

        if (!s)
                return -EINVAL;
        if (streq(s, "error"))
                return LOG_ERR;
        if (streq(s, "warn"))
                return LOG_WARNING;
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (streq(s, names[i]))
                        return (int) i;
        if (s[0] >= '0' && s[0] <= '7' && s[1] == 0)
                return s[0] - '0';
        return -EINVAL;
}

#define JOURNAL_FIELDS_MAX 12

typedef struct JournalEntry {
        struct iovec iov[JOURNAL_FIELDS_MAX];
        size_t n;
} JournalEntry;

static void journal_entry_done(JournalEntry *e) {
        for (size_t i = 0; i < e->n; i++)
                free(e->iov[i].iov_base);
}

_printf_(2, 3) static void journal_field(JournalEntry *e, const char *format, ...) {
        va_list ap;
        char *s;
        int len;

        if (e->n >= JOURNAL_FIELDS_MAX)
                return;
        va_start(ap, format);
        len = vasprintf(&s, format, ap);
        va_end(ap);
        if (len < 0)
                return;
        e->iov[e->n++] = (struct iovec) { s, (size_t) len };
}

/* One journal entry: the message, its priority and origin, and what it is about. OBJECT_PID
 * makes journald add that process's OBJECT_COMM, OBJECT_EXE, ... (for a privileged sender);
 * EP_FILE names the file being worked on. */
static void send_to_journal(int level, int error, const char *file, int line, const char *func,
                            const char *message_id, const char *message) {
        _cleanup_(journal_entry_done) JournalEntry e = {};

        journal_field(&e, "MESSAGE=%s", message);
        journal_field(&e, "PRIORITY=%d", level);
        journal_field(&e, "SYSLOG_IDENTIFIER=%s", log_ident);
        journal_field(&e, "CODE_FILE=%s", file);
        journal_field(&e, "CODE_LINE=%d", line);
        journal_field(&e, "CODE_FUNC=%s", func);
        if (error > 0)
                journal_field(&e, "ERRNO=%d", error);
        if (message_id)
                journal_field(&e, "MESSAGE_ID=%s", message_id);
        if (log_context_pid > 0)
                journal_field(&e, "OBJECT_PID=%d", (int) log_context_pid);
        if (log_context_file)
                journal_field(&e, "EP_FILE=%s", log_context_file);
        (void) sd_journal_sendv(e.iov, (int) e.n);
}

int log_internal(int level, int error, const char *file, int line, const char *func,
                 const char *message_id, const char *format, ...) {
        char buf[2048];
        va_list ap;

        error = abs(error);
        if (level > log_max_level)
                return -error;

        /* %m must expand to the error we were given, not whatever errno is now. */
        errno = error;
        va_start(ap, format);
        vsnprintf(buf, sizeof buf, format, ap);
        va_end(ap);
        ep_utf8_sanitize_text(buf, strlen(buf), false); /* messages quote what processes control */

        if (log_to_journal)
                send_to_journal(level, error, file, line, func, message_id, buf);
        else
                fprintf(stderr, "%s: %s\n", log_ident, buf);

        return -error;
}
