/* SPDX-License-Identifier: MIT */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-journal.h>

#include "log.h"

static const char *log_ident = "ebpf-profiler";
static int log_max_level = LOG_INFO;
static bool log_to_journal;

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

        if (log_to_journal) {
                char codeline[16];
                snprintf(codeline, sizeof codeline, "%d", line);
                if (message_id)
                        sd_journal_send("MESSAGE=%s", buf, "PRIORITY=%d", level, "SYSLOG_IDENTIFIER=%s",
                                        log_ident, "MESSAGE_ID=%s", message_id, "CODE_FILE=%s", file,
                                        "CODE_LINE=%s", codeline, "CODE_FUNC=%s", func, "ERRNO=%d", error,
                                        NULL);
                else
                        sd_journal_send("MESSAGE=%s", buf, "PRIORITY=%d", level, "SYSLOG_IDENTIFIER=%s",
                                        log_ident, "CODE_FILE=%s", file, "CODE_LINE=%s", codeline,
                                        "CODE_FUNC=%s", func, "ERRNO=%d", error, NULL);
        } else
                fprintf(stderr, "%s: %s\n", log_ident, buf);

        return -error;
}
