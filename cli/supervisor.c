/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "daemon.h"
#include "log.h"
#include "spawn-util.h"
#include "supervisor.h"
#include "sysctl.h"

#define STARTUP_FAILURES 5
#define STARTUP_WINDOW_NSEC (10 * NSEC_PER_SEC)
#define BACKOFF_MIN_NSEC (1 * NSEC_PER_SEC)
#define BACKOFF_MAX_NSEC (30 * NSEC_PER_SEC)
#define STABLE_NSEC (60 * NSEC_PER_SEC)
#define KILL_TIMEOUT_USEC (5 * USEC_PER_SEC)
#define LINE_MAX_LEN 4096

typedef struct Child {
        EpSupervisor *sup;

        char *name, *bus_name;
        char **argv, **env;
        EpChildPolicy policy;
        bool unprivileged;
        uid_t uid;
        gid_t gid;
        gid_t *groups;
        size_t n_groups;

        pid_t pid;
        sd_event_source *child_source, *output_source, *restart_timer;
        char line[LINE_MAX_LEN];
        size_t line_len;
        char last_line[512];

        int nice;
        uint64_t capabilities;
        bool ready, ever_ready, given_up;
        uint64_t started_ns;
        uint64_t failures[STARTUP_FAILURES]; /* monotonic times, a ring */
        unsigned n_failures;
        uint64_t backoff_ns;
} Child;

struct EpSupervisor {
        sd_event *event;
        sd_bus *bus;
        sd_bus_slot *match;
        Child **children;
        size_t n_children;

        bool started, stopping, all_ready_reported;
        int exit_code;
        sd_event_source *kill_timer;

        ep_supervisor_ready_t ready_cb;
        void *ready_userdata;
};

static char **strv_copy(char *const *v) {
        size_t n = 0;
        while (v && v[n])
                n++;
        char **c = calloc(n + 1, sizeof(char *));
        if (!c)
                return NULL;
        for (size_t i = 0; i < n; i++)
                if (!(c[i] = strdup(v[i]))) {
                        for (size_t j = 0; j < i; j++)
                                free(c[j]);
                        free(c);
                        return NULL;
                }
        return c;
}

static Child *child_free(Child *c) {
        if (!c)
                return NULL;
        sd_event_source_disable_unref(c->child_source);
        sd_event_source_disable_unref(c->output_source);
        sd_event_source_disable_unref(c->restart_timer);
        free(c->name);
        free(c->bus_name);
        ep_strv_free(c->argv);
        ep_strv_free(c->env);
        free(c->groups);
        free(c);
        return NULL;
}

static uint64_t now_ns(void) {
        return ep_now_ns(CLOCK_MONOTONIC);
}

static Child *find_by_bus_name(EpSupervisor *s, const char *bus_name) {
        for (size_t i = 0; i < s->n_children; i++)
                if (s->children[i]->bus_name && streq(s->children[i]->bus_name, bus_name))
                        return s->children[i];
        return NULL;
}

static bool any_running(const EpSupervisor *s) {
        for (size_t i = 0; i < s->n_children; i++)
                if (s->children[i]->pid > 0)
                        return true;
        return false;
}

static void maybe_finish(EpSupervisor *s) {
        if (s->stopping && !any_running(s)) {
                s->kill_timer = sd_event_source_disable_unref(s->kill_timer);
                (void) sd_event_exit(s->event, s->exit_code);
        }
}

/* ---- output relay ---- */

static void emit_line(Child *c, const char *line) {
        if (!*line)
                return;
        /* Daemons name themselves ("ebpf-profiler-loader: ..."); others get a prefix. */
        if (startswith(line, "ebpf-profiler-"))
                fprintf(stderr, "%s\n", line);
        else
                fprintf(stderr, "[%s] %s\n", c->name, line);
        /* Cut to the buffer: the last line only says why a child stopped. */
        snprintf(c->last_line, sizeof(c->last_line), "%.*s", (int) sizeof(c->last_line) - 1, line);
}

static int on_output(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        Child *c = userdata;

        ssize_t n = read(fd, c->line + c->line_len, sizeof(c->line) - 1 - c->line_len);
        if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                        return 0;
                n = 0;
        }
        if (n == 0) {
                /* The child closed its output (it exited): flush a last partial line. */
                c->line[c->line_len] = 0;
                emit_line(c, c->line);
                c->line_len = 0;
                c->output_source = sd_event_source_disable_unref(c->output_source);
                return 0;
        }
        c->line_len += (size_t) n;
        c->line[c->line_len] = 0;

        char *start = c->line, *nl;
        while ((nl = strchr(start, '\n'))) {
                *nl = 0;
                emit_line(c, start);
                start = nl + 1;
        }
        size_t rest = c->line_len - (size_t) (start - c->line);
        if (rest == sizeof(c->line) - 1) {
                /* A line longer than the buffer: show it in pieces. */
                emit_line(c, c->line);
                rest = 0;
        } else
                memmove(c->line, start, rest);
        c->line_len = rest;
        return 0;
}

/* ---- spawning ---- */

/* Leaves only the capabilities in keep (bit N: capability N) in the bounding set, and none
 * inheritable or ambient: a program exec'd as root then holds keep, and one exec'd as another
 * user nothing it could regain. Returns 0 or a negative errno. */
static int limit_capabilities(uint64_t keep) {
        struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
        struct __user_cap_data_struct d[2];
        int r;

        r = ep_bounding_set_limit(keep);
        if (r < 0)
                return r;
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
                return -errno;
        if (syscall(SYS_capget, &h, d) < 0)
                return -errno;
        d[0].inheritable = d[1].inheritable = 0;
        if (syscall(SYS_capset, &h, d) < 0)
                return -errno;
        return 0;
}

/* In the child, after fork: never returns. */
_Noreturn static void child_exec(Child *c, int output_fd, pid_t parent) {
        /* Own session: terminal signals reach `run`, which stops the daemons in order. */
        (void) setsid();
        ep_child_reset_signals();

        int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0 || dup2(output_fd, STDOUT_FILENO) < 0 ||
            dup2(output_fd, STDERR_FILENO) < 0)
                _exit(126);
        /* Everything else we hold is O_CLOEXEC; this is belt and braces. */
        (void) syscall(SYS_close_range, 3U, ~0U, 0U);

        if (c->nice != 0 && setpriority(PRIO_PROCESS, 0, c->nice) < 0) {
                dprintf(STDERR_FILENO, "cannot set niceness %d: %s\n", c->nice, strerror(errno));
                _exit(126);
        }

        int r = limit_capabilities(c->unprivileged ? 0 : c->capabilities);
        if (r < 0) {
                dprintf(STDERR_FILENO, "cannot limit the capabilities: %s\n", strerror(-r));
                _exit(126);
        }
        if (c->unprivileged) {
                /* setuid() away from root clears the permitted and effective sets; with the
                 * bounding set empty nothing can be regained. */
                if (setgroups(c->n_groups, c->groups) < 0) {
                        dprintf(STDERR_FILENO, "cannot set supplementary groups: %s\n", strerror(errno));
                        _exit(126);
                }
                if (setresgid(c->gid, c->gid, c->gid) < 0 || setresuid(c->uid, c->uid, c->uid) < 0) {
                        dprintf(STDERR_FILENO, "cannot switch to uid %u gid %u: %s\n", (unsigned) c->uid,
                                (unsigned) c->gid, strerror(errno));
                        _exit(126);
                }
        }
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
                dprintf(STDERR_FILENO, "cannot set no_new_privs: %s\n", strerror(errno));
                _exit(126);
        }

        /* Set after the credential change, which clears it. If `run` is already gone, so be it. */
        (void) prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
                _exit(0);

        umask(0022);
        if (chdir("/") < 0)
                _exit(126);

        execve(c->argv[0], c->argv, c->env);
        dprintf(STDERR_FILENO, "cannot execute %s%s: %s\n", c->argv[0],
                c->unprivileged ? " as the unprivileged user" : "", strerror(errno));
        _exit(127);
}

static int on_child_exit(sd_event_source *source, const siginfo_t *si, void *userdata);

static int child_spawn(Child *c) {
        EpSupervisor *s = c->sup;
        int fds[2];
        int r;

        if (pipe2(fds, O_CLOEXEC) < 0)
                return log_error_errno(-errno, "Cannot create a pipe for the %s: %m", c->name);
        _cleanup_close_ int read_fd = fds[0];
        _cleanup_close_ int write_fd = fds[1];

        pid_t parent = getpid();
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0)
                return log_error_errno(-errno, "Cannot fork for the %s: %m", c->name);
        if (pid == 0)
                child_exec(c, write_fd, parent);

        c->pid = pid;
        c->started_ns = now_ns();
        c->ready = false;
        c->line_len = 0;
        c->last_line[0] = 0;
        closep(&write_fd);

        (void) fcntl(read_fd, F_SETFL, O_NONBLOCK);
        c->output_source = sd_event_source_disable_unref(c->output_source);
        r = sd_event_add_io(s->event, &c->output_source, read_fd, EPOLLIN, on_output, c);
        if (r < 0)
                log_warning_errno(r, "Cannot relay the output of the %s: %m", c->name);
        else {
                (void) sd_event_source_set_io_fd_own(c->output_source, true);
                read_fd = -EBADF;
                /* Relay output before reacting to the exit, so the last words come first. */
                (void) sd_event_source_set_priority(c->output_source, SD_EVENT_PRIORITY_IMPORTANT);
        }

        c->child_source = sd_event_source_disable_unref(c->child_source);
        r = sd_event_add_child(s->event, &c->child_source, pid, WEXITED, on_child_exit, c);
        if (r < 0) {
                (void) kill(pid, SIGKILL);
                (void) waitpid(pid, NULL, 0);
                c->pid = 0;
                return log_error_errno(r, "Cannot watch the %s: %m", c->name);
        }
        log_debug("Started the %s as pid %d: %s", c->name, (int) pid, c->argv[0]);
        return 0;
}

static int on_restart(sd_event_source *source, uint64_t usec, void *userdata) {
        Child *c = userdata;

        c->restart_timer = sd_event_source_disable_unref(c->restart_timer);
        if (c->sup->stopping)
                return 0;
        log_info("Restarting the %s.", c->name);
        if (child_spawn(c) < 0) {
                /* Try again later rather than losing the daemon for good. */
                (void) sd_event_add_time_relative(c->sup->event, &c->restart_timer, CLOCK_MONOTONIC,
                                                  BACKOFF_MAX_NSEC / 1000, 0, on_restart, c);
        }
        return 0;
}

static unsigned failures_within(const Child *c, uint64_t now, uint64_t window) {
        unsigned n = 0;
        for (unsigned i = 0; i < MIN(c->n_failures, (unsigned) STARTUP_FAILURES); i++)
                if (now - c->failures[i] <= window)
                        n++;
        return n;
}

static int on_child_exit(sd_event_source *source, const siginfo_t *si, void *userdata) {
        Child *c = userdata;
        EpSupervisor *s = c->sup;
        char status[64];
        uint64_t now = now_ns(), ran = now - c->started_ns;

        ep_wait_status_string(si->si_code, si->si_status, status, sizeof(status));
        c->child_source = sd_event_source_disable_unref(c->child_source);
        c->pid = 0;
        c->ready = false;

        if (s->stopping) {
                log_debug("The %s %s.", c->name, status);
                maybe_finish(s);
                return 0;
        }

        /* What a daemon said last explains an exit with an error status; after a signal it is
         * just whatever it happened to log before. */
        bool say_why = si->si_code == CLD_EXITED && si->si_status != 0 && c->last_line[0];
        const char *why_sep = say_why ? " (last message: " : "", *why = say_why ? c->last_line : "",
                   *why_end = say_why ? ")" : "";
        uint64_t delay;

        if (!c->ever_ready) {
                if (c->policy == EP_CHILD_FATAL_AT_STARTUP) {
                        log_error("The %s failed at start-up: it %s%s%s%s", c->name, status, why_sep, why, why_end);
                        ep_supervisor_stop(s, EXIT_FAILURE);
                        return 0;
                }
                c->failures[c->n_failures++ % STARTUP_FAILURES] = now;
                if (failures_within(c, now, STARTUP_WINDOW_NSEC) >= STARTUP_FAILURES) {
                        c->given_up = true;
                        log_error("Giving up on the %s: it failed %d times within %llu s at start-up; the last time it %s%s%s%s",
                                  c->name, STARTUP_FAILURES, (unsigned long long) (STARTUP_WINDOW_NSEC / NSEC_PER_SEC), status,
                                  why_sep, why, why_end);
                        if (c->policy == EP_CHILD_ESSENTIAL) {
                                log_error("Nothing can be profiled without the %s; stopping.", c->name);
                                ep_supervisor_stop(s, EXIT_FAILURE);
                        }
                        return 0;
                }
                delay = BACKOFF_MIN_NSEC;
        } else {
                if (ran >= STABLE_NSEC || c->backoff_ns == 0)
                        c->backoff_ns = BACKOFF_MIN_NSEC;
                else
                        c->backoff_ns = MIN(c->backoff_ns * 2, BACKOFF_MAX_NSEC);
                delay = c->backoff_ns;
        }

        log_warning("The %s %s after %llu.%01llu s%s%s%s; restarting it in %llu s.", c->name, status,
                    (unsigned long long) (ran / NSEC_PER_SEC),
                    (unsigned long long) (ran % NSEC_PER_SEC / (NSEC_PER_SEC / 10)), why_sep, why, why_end,
                    (unsigned long long) (delay / NSEC_PER_SEC));
        int r = sd_event_add_time_relative(s->event, &c->restart_timer, CLOCK_MONOTONIC, delay / 1000, 0,
                                           on_restart, c);
        if (r < 0) {
                log_error_errno(r, "Cannot schedule the restart of the %s: %m", c->name);
                ep_supervisor_stop(s, EXIT_FAILURE);
        }
        return 0;
}

/* ---- readiness ---- */

static int on_name_owner_changed(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        EpSupervisor *s = userdata;
        const char *name, *old_owner, *new_owner;

        if (sd_bus_message_read(m, "sss", &name, &old_owner, &new_owner) < 0)
                return 0;
        Child *c = find_by_bus_name(s, name);
        if (!c)
                return 0;

        if (!*new_owner) {
                c->ready = false;
                return 0;
        }
        if (c->ready)
                return 0;
        c->ready = true;
        bool first = !c->ever_ready;
        c->ever_ready = true;
        log_debug("The %s is on the bus as %s.", c->name, name);
        if (s->ready_cb)
                s->ready_cb(s, c->name, first, s->ready_userdata);

        if (!s->all_ready_reported) {
                for (size_t i = 0; i < s->n_children; i++)
                        if (!s->children[i]->ready)
                                return 0;
                s->all_ready_reported = true;
                if (s->ready_cb)
                        s->ready_cb(s, NULL, true, s->ready_userdata);
        }
        return 0;
}

/* ---- public ---- */

int ep_supervisor_new(sd_event *e, sd_bus *bus, EpSupervisor **ret) {
        EpSupervisor *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->event = sd_event_ref(e);
        s->bus = sd_bus_ref(bus);

        int r = sd_bus_match_signal(bus, &s->match, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                    "org.freedesktop.DBus", "NameOwnerChanged", on_name_owner_changed, s);
        if (r < 0) {
                ep_supervisor_free(s);
                return r;
        }
        *ret = s;
        return 0;
}

EpSupervisor *ep_supervisor_free(EpSupervisor *s) {
        if (!s)
                return NULL;
        for (size_t i = 0; i < s->n_children; i++) {
                Child *c = s->children[i];
                if (c->pid > 0) {
                        /* Only when the loop was left early: do not leave orphans behind. */
                        (void) kill(c->pid, SIGKILL);
                        (void) waitpid(c->pid, NULL, 0);
                }
                child_free(c);
        }
        free(s->children);
        sd_event_source_disable_unref(s->kill_timer);
        sd_bus_slot_unref(s->match);
        sd_bus_unref(s->bus);
        sd_event_unref(s->event);
        free(s);
        return NULL;
}

void ep_supervisor_set_ready_callback(EpSupervisor *s, ep_supervisor_ready_t cb, void *userdata) {
        s->ready_cb = cb;
        s->ready_userdata = userdata;
}

int ep_supervisor_add(EpSupervisor *s, const EpChildSpec *spec) {
        Child *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->sup = s;
        c->policy = spec->policy;
        c->unprivileged = spec->unprivileged;
        c->nice = spec->nice;
        c->capabilities = spec->capabilities;
        c->uid = spec->uid;
        c->gid = spec->gid;
        c->name = strdup(spec->name);
        c->bus_name = spec->bus_name ? strdup(spec->bus_name) : NULL;
        c->argv = strv_copy(spec->argv);
        c->env = strv_copy(spec->env);
        c->n_groups = spec->n_groups;
        c->groups = calloc(MAX(spec->n_groups, (size_t) 1), sizeof(gid_t));
        if (!c->name || (spec->bus_name && !c->bus_name) || !c->argv || !c->env || !c->groups) {
                child_free(c);
                return -ENOMEM;
        }
        if (spec->n_groups > 0)
                memcpy(c->groups, spec->groups, spec->n_groups * sizeof(gid_t));

        Child **a = reallocarray(s->children, s->n_children + 1, sizeof(Child *));
        if (!a) {
                child_free(c);
                return -ENOMEM;
        }
        s->children = a;
        s->children[s->n_children++] = c;
        return 0;
}

int ep_supervisor_start(EpSupervisor *s) {
        s->started = true;
        for (size_t i = 0; i < s->n_children; i++) {
                int r = child_spawn(s->children[i]);
                if (r < 0) {
                        ep_supervisor_stop(s, EXIT_FAILURE);
                        return r;
                }
        }
        return 0;
}

bool ep_supervisor_ready(const EpSupervisor *s, const char *name) {
        for (size_t i = 0; i < s->n_children; i++)
                if (streq(s->children[i]->name, name))
                        return s->children[i]->ready && s->children[i]->pid > 0;
        return false;
}

bool ep_supervisor_stopping(const EpSupervisor *s) {
        return s->stopping;
}

static int on_kill_timeout(sd_event_source *source, uint64_t usec, void *userdata) {
        EpSupervisor *s = userdata;

        for (size_t i = 0; i < s->n_children; i++) {
                Child *c = s->children[i];
                if (c->pid > 0) {
                        log_warning("The %s did not stop within %llu s; killing it.", c->name,
                                    (unsigned long long) (KILL_TIMEOUT_USEC / USEC_PER_SEC));
                        (void) kill(c->pid, SIGKILL);
                }
        }
        return 0;
}

void ep_supervisor_stop(EpSupervisor *s, int exit_code) {
        if (s->stopping) {
                /* Asked again: do not wait any longer. */
                if (exit_code > s->exit_code)
                        s->exit_code = exit_code;
                on_kill_timeout(NULL, 0, s);
                return;
        }
        s->stopping = true;
        s->exit_code = exit_code;

        for (size_t i = 0; i < s->n_children; i++) {
                Child *c = s->children[i];
                c->restart_timer = sd_event_source_disable_unref(c->restart_timer);
                if (c->pid > 0 && kill(c->pid, SIGTERM) < 0 && errno != ESRCH)
                        log_warning_errno(-errno, "Cannot signal the %s: %m", c->name);
        }

        if (any_running(s)) {
                int r = sd_event_add_time_relative(s->event, &s->kill_timer, CLOCK_MONOTONIC,
                                                   KILL_TIMEOUT_USEC, 0, on_kill_timeout, s);
                if (r < 0)
                        on_kill_timeout(NULL, 0, s);
        } else
                /* Only marks the loop for exit; safe from any callback. */
                (void) sd_event_exit(s->event, s->exit_code);
}
