/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdarg.h>
#include <sys/types.h>
#include <syslog.h>

#include "macro.h"

/* Logs go to the journal (structured) when stderr is connected to it, else to stderr as text.
 * Every log_*_errno() returns the negative errno it was given, so callers can write
 *   return log_error_errno(r, "Failed to open %s: %m", path);
 * "%m" expands to strerror of that errno. */

void log_setup(const char *ident);
void log_set_max_level(int level);
int log_get_max_level(void);
int log_parse_level(const char *s);

int log_internal(int level, int error, const char *file, int line, const char *func,
                 const char *message_id, const char *format, ...) _printf_(7, 8);

#define log_full_errno(level, error, ...) \
        log_internal((level), (error), __FILE__, __LINE__, __func__, NULL, __VA_ARGS__)
#define log_full(level, ...) log_full_errno((level), 0, __VA_ARGS__)

#define log_debug(...) log_full(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_full(LOG_INFO, __VA_ARGS__)
#define log_notice(...) log_full(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_full(LOG_WARNING, __VA_ARGS__)
#define log_error(...) log_full(LOG_ERR, __VA_ARGS__)

#define log_debug_errno(e, ...) log_full_errno(LOG_DEBUG, (e), __VA_ARGS__)
#define log_info_errno(e, ...) log_full_errno(LOG_INFO, (e), __VA_ARGS__)
#define log_notice_errno(e, ...) log_full_errno(LOG_NOTICE, (e), __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_WARNING, (e), __VA_ARGS__)
#define log_error_errno(e, ...) log_full_errno(LOG_ERR, (e), __VA_ARGS__)

/* What the messages logged in a scope are about, as journal fields: OBJECT_PID= (journald adds
 * the process's comm, exe and cmdline) and EP_FILE=. Per thread; restored when the scope ends.
 *   LOG_CONTEXT_PID(pid);
 *   LOG_CONTEXT_FILE(path); */
pid_t log_context_push_pid(pid_t pid);
void log_context_pop_pid(pid_t *saved);
const char *log_context_push_file(const char *path);
void log_context_pop_file(const char **saved);
#define LOG_CONTEXT_PID(pid) \
        _cleanup_(log_context_pop_pid) _unused_ pid_t UNIQ_T(log_ctx_pid_, __COUNTER__) = log_context_push_pid(pid)
#define LOG_CONTEXT_FILE(path) \
        _cleanup_(log_context_pop_file) _unused_ const char *UNIQ_T(log_ctx_file_, __COUNTER__) = \
                log_context_push_file(path)

/* Key events carry a MESSAGE_ID so they can be found with journalctl MESSAGE_ID=... */
#define log_struct_id(level, id, ...) \
        log_internal((level), 0, __FILE__, __LINE__, __func__, (id), __VA_ARGS__)

/* Logs at most once per call site: for conditions that can repeat per sample. The counter
 * that records every occurrence is the caller's job. */
#define log_once(level, ...)                                   \
        ({                                                     \
                static int _logged_ = 0;                       \
                if (!__atomic_exchange_n(&_logged_, 1, __ATOMIC_RELAXED)) \
                        log_full((level), __VA_ARGS__);        \
        })
#define log_once_errno(level, e, ...)                          \
        ({                                                     \
                static int _logged_ = 0;                       \
                int _e_ = (e);                                 \
                if (!__atomic_exchange_n(&_logged_, 1, __ATOMIC_RELAXED)) \
                        log_full_errno((level), _e_, __VA_ARGS__); \
                -abs(_e_);                                     \
        })

#define MESSAGE_ID_DAEMON_STARTED "4e1b7c3a0f8d4a6c9b2e5d7f1a3c8e60"
#define MESSAGE_ID_PEER_CONNECTED "4e1b7c3a0f8d4a6c9b2e5d7f1a3c8e61"
#define MESSAGE_ID_PEER_LOST "4e1b7c3a0f8d4a6c9b2e5d7f1a3c8e62"
#define MESSAGE_ID_INTERVAL_WRITTEN "4e1b7c3a0f8d4a6c9b2e5d7f1a3c8e63"
