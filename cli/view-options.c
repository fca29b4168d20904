/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "view-options.h"

int ep_usage_error(const char *verb, const char *format, ...) {
        va_list ap;

        fprintf(stderr, "ebpf-profiler%s%s: ", verb ? " " : "", verb ?: "");
        va_start(ap, format);
        vfprintf(stderr, format, ap);
        va_end(ap);
        fprintf(stderr, "\nTry 'ebpf-profiler%s%s --help'.\n", verb ? " " : "", verb ?: "");
        return EXIT_USAGE;
}

int ep_getopt_error(const char *verb, int c, char **argv) {
        const char *arg = optind > 0 ? argv[optind - 1] : "?";

        if (c == ':')
                return ep_usage_error(verb, "option '%s' needs a value", arg);
        if (optopt != 0 && !startswith(arg, "--")) {
                char opt[3] = { '-', (char) optopt, 0 };
                return ep_usage_error(verb, "invalid option '%s'", opt);
        }
        return ep_usage_error(verb, "unrecognized option '%s'", arg);
}

static bool all_digits(const char *s) {
        if (!*s)
                return false;
        bool dot = false;
        for (; *s; s++) {
                if (*s == '.' && !dot) {
                        dot = true;
                        continue;
                }
                if (!isdigit((unsigned char) *s))
                        return false;
        }
        return true;
}

int ep_parse_when(const char *s, uint64_t now_ns, uint64_t *ret_ns) {
        if (!s || !*s)
                return -EINVAL;

        if (streq(s, "now")) {
                *ret_ns = now_ns;
                return 0;
        }

        if (all_digits(s)) {
                /* Unix seconds, maybe with a fraction. */
                char *end;
                errno = 0;
                double secs = strtod(s, &end);
                if (errno != 0 || *end || secs < 0 || secs > (double) (UINT64_MAX / NSEC_PER_SEC))
                        return -ERANGE;
                *ret_ns = (uint64_t) (secs * (double) NSEC_PER_SEC);
                return 0;
        }

        /* A calendar time: 2024-05-01, 2024-05-01 10:00, 2024-05-01T10:00:05 */
        if (isdigit((unsigned char) s[0]) && strlen(s) >= 10 && s[4] == '-' && s[7] == '-') {
                static const char *const formats[] = {
                        "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M",
                        "%Y-%m-%dT%H:%M", "%Y-%m-%d",
                };
                for (size_t i = 0; i < ELEMENTSOF(formats); i++) {
                        struct tm tm = { .tm_isdst = -1 };
                        const char *end = strptime(s, formats[i], &tm);
                        if (!end || *end)
                                continue;
                        time_t t = mktime(&tm);
                        if (t < 0)
                                return -ERANGE;
                        *ret_ns = (uint64_t) t * NSEC_PER_SEC;
                        return 0;
                }
                return -EINVAL;
        }

        uint64_t d;
        int r = ep_parse_duration(s, &d);
        if (r < 0)
                return r;
        *ret_ns = d >= now_ns ? 0 : now_ns - d;
        return 0;
}

static int too_many(const char *verb, const char *option) {
        ep_usage_error(verb, "%s given more than %d times", option, EP_STORE_FILTER_MAX_VALUES);
        return -EINVAL;
}

int ep_view_option(EpViewOptions *o, const char *verb, int c, const char *arg) {
        uint64_t u;
        int r;

        switch (c) {
        case EP_VIEW_ARG_STORE:
                if (!*arg) {
                        ep_usage_error(verb, "--store needs a path");
                        return -EINVAL;
                }
                o->store = arg;
                return 1;
        case EP_VIEW_ARG_PID:
                r = ep_parse_uint(arg, 1, INT32_MAX, &u);
                if (r < 0) {
                        ep_usage_error(verb, "invalid PID '%s'", arg);
                        return -EINVAL;
                }
                if (ep_store_filter_add_pid(&o->filter, (int64_t) u) < 0)
                        return too_many(verb, "--pid");
                return 1;
        case EP_VIEW_ARG_COMM:
                if (!*arg) {
                        ep_usage_error(verb, "--comm needs a name");
                        return -EINVAL;
                }
                if (ep_store_filter_add_comm(&o->filter, arg) < 0)
                        return too_many(verb, "--comm");
                return 1;
        case EP_VIEW_ARG_CONTAINER:
                if (strlen(arg) < EP_STORE_CONTAINER_PREFIX_MIN) {
                        ep_usage_error(verb, "--container needs a container ID or a prefix of at least %d characters",
                                       EP_STORE_CONTAINER_PREFIX_MIN);
                        return -EINVAL;
                }
                o->filter.container = arg;
                return 1;
        case EP_VIEW_ARG_THREAD:
                if (!*arg) {
                        ep_usage_error(verb, "--thread needs a thread ID or name");
                        return -EINVAL;
                }
                /* Thread names are set by programs and may be anything; one made of digits only
                 * cannot be selected by name, which is what ps and top do too. */
                if (ep_parse_uint(arg, 0, INT32_MAX, &u) >= 0) {
                        o->filter.tid = (int64_t) u;
                        o->filter.thread_name = NULL;
                } else {
                        o->filter.tid = -1;
                        o->filter.thread_name = arg;
                }
                return 1;
        case EP_VIEW_ARG_SINCE:
        case EP_VIEW_ARG_UNTIL:
                r = ep_parse_when(arg, ep_now_ns(CLOCK_REALTIME), &u);
                if (r < 0) {
                        ep_usage_error(verb,
                                       "invalid time '%s' for --%s (use a time ago like 10m or 1h, unix seconds, or YYYY-MM-DD HH:MM)",
                                       arg, c == EP_VIEW_ARG_SINCE ? "since" : "until");
                        return -EINVAL;
                }
                if (c == EP_VIEW_ARG_SINCE)
                        o->filter.since_ns = u;
                else
                        o->filter.until_ns = u;
                return 1;
        case EP_VIEW_ARG_KERNEL:
                o->filter.kernel = true;
                return 1;
        case EP_VIEW_ARG_NO_KERNEL:
                o->filter.kernel = false;
                return 1;
        case EP_VIEW_ARG_LINES:
                o->lines = true;
                return 1;
        default:
                return 0;
        }
}

int ep_view_open_store(const EpViewOptions *o, const char *verb, sqlite3 **ret) {
        int r = ep_store_open(o->store, ret);
        switch (r) {
        case 0:
                return 0;
        case -ENOENT:
                fprintf(stderr,
                        "ebpf-profiler %s: no profile store at %s.\n"
                        "Start the profiler first (ebpf-profiler run, or systemctl start ebpf-profiler.target),\n"
                        "or point to a store with --store PATH.\n",
                        verb, o->store);
                break;
        case -EACCES:
        case -EPERM:
                fprintf(stderr, "ebpf-profiler %s: cannot read %s: %s (try as root, or as a member of the store's "
                                "group, " EP_COLLECTOR_USER ").\n",
                        verb, o->store, strerror(-r));
                break;
        case -EPROTO:
                fprintf(stderr, "ebpf-profiler %s: %s is not a profile store this version understands (schema %d).\n",
                        verb, o->store, EP_STORE_SCHEMA_VERSION);
                break;
        default:
                fprintf(stderr, "ebpf-profiler %s: cannot open %s: %s\n", verb, o->store, strerror(-r));
        }
        return r;
}

void ep_view_read_error(const EpViewOptions *o, const char *verb, sqlite3 *db, int error) {
        _cleanup_strv_free_ char **ids = NULL;
        size_t n;

        if (error != -ENOTUNIQ || ep_store_find_containers(db, o->filter.container, &ids, &n) < 0) {
                fprintf(stderr, "ebpf-profiler %s: reading %s failed: %s\n", verb, o->store, strerror(-error));
                return;
        }
        fprintf(stderr, "ebpf-profiler %s: --container %s is ambiguous: it starts %zu container IDs (", verb,
                o->filter.container, n);
        for (size_t i = 0; i < n && i < 4; i++)
                fprintf(stderr, "%s%s", i ? ", " : "", ids[i]);
        fprintf(stderr, "%s); give more of the ID.\n", n > 4 ? ", ..." : "");
}

int ep_view_read(const EpViewOptions *o, const char *verb, sqlite3 *db, const EpStoreFilter *f,
                 EpStoreReadFlags flags, EpCallTree **ret_tree, EpStoreSummary *ret_summary) {
        _cleanup_calltree_ EpCallTree *tree = NULL;
        int r;

        r = ep_calltree_new(&tree);
        if (r < 0) {
                fprintf(stderr, "ebpf-profiler %s: out of memory\n", verb);
                return r;
        }
        r = ep_store_read(db, f, flags | (o->lines ? EP_STORE_READ_LINES : 0), tree, ret_summary);
        if (r < 0) {
                ep_view_read_error(o, verb, db, r);
                return r;
        }
        *ret_tree = TAKE_PTR(tree);
        return 0;
}

int ep_view_load(const EpViewOptions *o, const char *verb, EpStoreReadFlags flags, EpCallTree **ret_tree,
                 EpStoreSummary *ret_summary) {
        _cleanup_sqlite_ sqlite3 *db = NULL;
        _cleanup_calltree_ EpCallTree *tree = NULL;
        int r;

        r = ep_view_open_store(o, verb, &db);
        if (r < 0)
                return r;
        r = ep_view_read(o, verb, db, &o->filter, flags, &tree, ret_summary);
        if (r < 0)
                return r;
        if (ret_summary->samples == 0) {
                ep_view_print_no_samples(o);
                return 0;
        }
        *ret_tree = TAKE_PTR(tree);
        return 1;
}

void ep_format_time(uint64_t ns, char *buf, size_t size) {
        time_t t = (time_t) (ns / NSEC_PER_SEC);
        struct tm tm;
        if (!localtime_r(&t, &tm) || strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm) == 0)
                snprintf(buf, size, "@%" PRIu64, (uint64_t) (ns / NSEC_PER_SEC));
}

void ep_format_span(uint64_t ns, char *buf, size_t size) {
        uint64_t s = (uint64_t) (ns / NSEC_PER_SEC);
        if (ns < NSEC_PER_SEC)
                snprintf(buf, size, "%" PRIu64 "ms", (uint64_t) (ns / NSEC_PER_MSEC));
        else if (s < 60)
                snprintf(buf, size, "%" PRIu64 "s", s);
        else if (s < 3600)
                snprintf(buf, size, "%" PRIu64 "min %" PRIu64 "s", s / 60, s % 60);
        else if (s < 86400)
                snprintf(buf, size, "%" PRIu64 "h %" PRIu64 "min", s / 3600, s % 3600 / 60);
        else
                snprintf(buf, size, "%" PRIu64 "d %" PRIu64 "h", s / 86400, s % 86400 / 3600);
}

void ep_view_times(const EpStoreSummary *summary, EpViewTimes *ret) {
        ep_format_time(summary->first_ns, ret->first, sizeof(ret->first));
        ep_format_time(summary->last_ns, ret->last, sizeof(ret->last));
        ep_format_span(summary->last_ns - MIN(summary->first_ns, summary->last_ns), ret->span, sizeof(ret->span));
        /* "YYYY-MM-DD " is 11 characters. */
        ret->last_shown = strncmp(ret->first, ret->last, 11) == 0 ? ret->last + 11 : ret->last;
}

static void describe_list(FILE *f, const char *what, size_t n, const int64_t *numbers, const char *const *names) {
        for (size_t i = 0; i < n; i++) {
                fputs(i == 0 ? ", " : " or ", f);
                if (i == 0)
                        fprintf(f, "%s ", what);
                if (numbers)
                        fprintf(f, "%" PRIi64, numbers[i]);
                else
                        fputs(names[i], f);
        }
}

void ep_view_describe_filter(const EpViewOptions *o, FILE *f) {
        const EpStoreFilter *s = &o->filter;

        describe_list(f, "pid", s->n_pids, s->pids, NULL);
        describe_list(f, "comm", s->n_comms, NULL, s->comms);
        if (s->container)
                fprintf(f, ", container %s", s->container);
        if (s->tid >= 0)
                fprintf(f, ", thread %" PRIi64, s->tid);
        if (s->thread_name)
                fprintf(f, ", thread %s", s->thread_name);
}

void ep_view_print_no_samples(const EpViewOptions *o) {
        if (!ep_store_filter_selects_all(&o->filter))
                printf("No samples in %s match these filters.\n", o->store);
        else
                printf("The store %s holds no samples yet.\n", o->store);
}
