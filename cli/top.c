/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "daemon.h"
#include "log.h"
#include "terminal-text.h"
#include "utf8.h"
#include "top.h"
#include "view-options.h"

#define MODULE_WIDTH 24
#define COMM_WIDTH 16
/* Containers are shown the way `docker ps` shows them; --container takes any unique prefix. */
#define CONTAINER_SHORT 12

static double percent(uint64_t part, uint64_t whole) {
        return whole ? 100.0 * (double) part / (double) whole : 0.0;
}

static void print_more(FILE *f, size_t shown, size_t n, const char *one, const char *many) {
        if (shown < n)
                fprintf(f, "(%zu more %s; --limit 0 shows all)\n", n - shown, n - shown == 1 ? one : many);
}

void ep_top_print_summary(FILE *f, const EpStoreSummary *summary) {
        EpViewTimes t;

        ep_view_times(summary, &t);
        fprintf(f, "%" PRIu64 " samples, %" PRIu64 " process%s, %s → %s (%s, %" PRIu64 " interval%s)\n",
                summary->samples, summary->processes, summary->processes == 1 ? "" : "es", t.first,
                t.last_shown, t.span, summary->intervals, summary->intervals == 1 ? "" : "s");
}

int ep_top_print_functions(FILE *f, const EpCallTree *tree, EpFunctionOrder order, size_t limit) {
        _cleanup_free_ EpFunctionStat *stats = NULL;
        size_t n;
        int r;

        r = ep_calltree_functions(tree, &stats, &n);
        if (r < 0)
                return r;
        if (order != EP_FUNCTIONS_BY_SELF)
                ep_calltree_sort_functions(tree, stats, n, order);

        uint64_t total = ep_calltree_node(tree, 0)->total;
        size_t shown = limit > 0 ? MIN(limit, n) : n;

        int mw = 6;
        for (size_t i = 0; i < shown; i++)
                mw = MAX(mw, (int) MIN(strlen(ep_calltree_string(tree, stats[i].frame.module)),
                                       (size_t) MODULE_WIDTH));

        fprintf(f, "\n%6s %7s %9s %9s  %-*s  %s\n", "SELF%", "TOTAL%", "SELF", "TOTAL", mw, "MODULE",
                "FUNCTION");
        for (size_t i = 0; i < shown; i++) {
                const EpFunctionStat *s = &stats[i];
                const char *module = ep_calltree_string(tree, s->frame.module);
                fprintf(f, "%5.1f%% %6.1f%% %9" PRIu64 " %9" PRIu64 "  %-*.*s  %s\n",
                        percent(s->self, total), percent(s->total, total), s->self, s->total, mw,
                        MODULE_WIDTH, module, ep_calltree_string(tree, s->frame.name));
        }
        print_more(f, shown, n, "function", "functions");
        return 0;
}

void ep_top_print_groups(FILE *f, EpStoreGroupBy by, const EpStoreGroup *groups, size_t n, uint64_t total,
                         size_t limit) {
        bool threads = by == EP_STORE_GROUP_THREAD;
        size_t shown = limit > 0 ? MIN(limit, n) : n;

        int cw = 4;
        for (size_t i = 0; i < shown; i++)
                cw = MAX(cw, (int) MIN(strlen(groups[i].comm), (size_t) COMM_WIDTH));

        fprintf(f, "\n%6s %9s %8s ", "SHARE%", "SAMPLES", "PID");
        if (threads)
                fprintf(f, "%8s ", "TID");
        fprintf(f, " %-*s  %s\n", cw, "COMM", threads ? "THREAD" : "CONTAINER");

        for (size_t i = 0; i < shown; i++) {
                const EpStoreGroup *g = &groups[i];
                fprintf(f, "%5.1f%% %9" PRIu64 " %8" PRIi64 " ", percent(g->samples, total), g->samples, g->pid);
                if (threads)
                        fprintf(f, "%8" PRIi64 " ", g->tid);
                fprintf(f, " %-*.*s  ", cw, COMM_WIDTH, *g->comm ? g->comm : "?");
                if (threads)
                        fprintf(f, "%s\n", *g->thread_name ? g->thread_name : "?");
                else
                        fprintf(f, "%.*s\n", CONTAINER_SHORT, *g->container_id ? g->container_id : "-");
        }
        if (threads)
                print_more(f, shown, n, "thread", "threads");
        else
                print_more(f, shown, n, "process", "processes");
}

typedef enum TopBy {
        TOP_BY_FUNCTION,
        TOP_BY_PROCESS,
        TOP_BY_THREAD,
} TopBy;

typedef struct TopOptions {
        EpViewOptions view;
        TopBy by;
        EpFunctionOrder order;
        uint64_t limit; /* 0: all */
        bool live;
        uint64_t refresh_ns, window_ns;
        uint64_t iterations; /* 0: until told to stop */
} TopOptions;

/* What one reading of the store gives top: a call tree for functions, or groups. */
typedef struct TopData {
        EpStoreSummary summary;
        EpCallTree *tree;
        EpStoreGroup *groups;
        size_t n_groups;
} TopData;

static void top_data_done(TopData *d) {
        d->tree = ep_calltree_free(d->tree);
        ep_store_groups_free(d->groups, d->n_groups);
        d->groups = NULL;
        d->n_groups = 0;
}

/* Reads what o shows of the samples f selects; says on stderr what went wrong. */
static int top_read(const TopOptions *o, sqlite3 *db, const EpStoreFilter *f, TopData *ret) {
        int r;

        *ret = (TopData) {};
        if (o->by == TOP_BY_FUNCTION)
                /* All processes merged: top needs no per-process nodes, and the tree is smaller. */
                return ep_view_read(&o->view, "top", db, f, 0, &ret->tree, &ret->summary);

        r = ep_store_read_groups(db, f, o->by == TOP_BY_THREAD ? EP_STORE_GROUP_THREAD : EP_STORE_GROUP_PROCESS,
                                 &ret->groups, &ret->n_groups, &ret->summary);
        if (r < 0)
                ep_view_read_error(&o->view, "top", db, r);
        return r;
}

static int top_print_table(FILE *f, const TopOptions *o, const TopData *d, size_t limit) {
        if (o->by == TOP_BY_FUNCTION)
                return ep_top_print_functions(f, d->tree, o->order, limit);
        ep_top_print_groups(f, o->by == TOP_BY_THREAD ? EP_STORE_GROUP_THREAD : EP_STORE_GROUP_PROCESS,
                            d->groups, d->n_groups, d->summary.samples, limit);
        return 0;
}

static int top_once(const TopOptions *o) {
        _cleanup_sqlite_ sqlite3 *db = NULL;
        _cleanup_(top_data_done) TopData d = {};
        int r;

        r = ep_view_open_store(&o->view, "top", &db);
        if (r < 0)
                return EXIT_FAILURE;
        r = top_read(o, db, &o->view.filter, &d);
        if (r < 0)
                return EXIT_FAILURE;
        if (d.summary.samples == 0) {
                ep_view_print_no_samples(&o->view);
                return EXIT_SUCCESS;
        }

        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        FILE *m = open_memstream(&text, &size);
        if (!m)
                return EXIT_FAILURE;
        ep_top_print_summary(m, &d.summary);
        r = top_print_table(m, o, &d, (size_t) o->limit);
        if (fclose(m) != 0 && r >= 0)
                r = -ENOMEM;
        if (r < 0) {
                fprintf(stderr, "ebpf-profiler top: %s\n", strerror(-r));
                return EXIT_FAILURE;
        }
        if (ep_terminal_text_write(stdout, text, size) < 0)
                return EXIT_FAILURE;
        return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* ---- --live ---- */

/* The signals --live handles itself, through a signalfd: quitting must restore the terminal,
 * which no async handler can do safely, and a resize redraws at once. */
typedef struct LiveSignals {
        int fd;
        sigset_t saved;
        bool blocked;
} LiveSignals;

static void live_signals_done(LiveSignals *s) {
        (void) close_nointr(s->fd);
        s->fd = -EBADF;
        if (s->blocked)
                (void) sigprocmask(SIG_SETMASK, &s->saved, NULL);
        s->blocked = false;
}

static int live_signals_init(LiveSignals *ret) {
        sigset_t mask;

        *ret = (LiveSignals) { .fd = -EBADF };
        sigemptyset(&mask);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGHUP);
        sigaddset(&mask, SIGWINCH);
        if (sigprocmask(SIG_BLOCK, &mask, &ret->saved) < 0)
                return -errno;
        ret->blocked = true;
        ret->fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        return ret->fd < 0 ? -errno : 0;
}

/* The terminal while --live draws on it: keys without Enter or echo, no cursor. */
typedef struct LiveTerminal {
        int key_fd; /* stdin when it is a terminal we changed, else -1 */
        struct termios saved;
        bool cursor_hidden;
} LiveTerminal;

static void live_terminal_done(LiveTerminal *t) {
        if (t->key_fd >= 0)
                (void) tcsetattr(t->key_fd, TCSANOW, &t->saved);
        t->key_fd = -EBADF;
        if (t->cursor_hidden) {
                fputs("\033[?25h", stdout);
                fflush(stdout);
        }
        t->cursor_hidden = false;
}

static void live_terminal_init(bool draw, LiveTerminal *ret) {
        *ret = (LiveTerminal) { .key_fd = -EBADF };
        if (!draw)
                return;
        fputs("\033[?25l", stdout);
        ret->cursor_hidden = true;

        struct termios raw;
        if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &ret->saved) < 0)
                return; /* no keys: Ctrl-C still works */
        raw = ret->saved;
        raw.c_lflag &= ~(tcflag_t) (ICANON | ECHO);
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        /* Ctrl-C stays a signal (handled above); Ctrl-Z would stop us with the terminal changed. */
        raw.c_cc[VSUSP] = _POSIX_VDISABLE;
        if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0)
                ret->key_fd = STDIN_FILENO;
}

typedef enum LiveEvent {
        LIVE_REDRAW,
        LIVE_QUIT,
} LiveEvent;

/* Reads the keys typed; LIVE_QUIT on q. Keys we do not know are ignored. */
static LiveEvent live_keys(LiveTerminal *t) {
        char buf[64];
        ssize_t n = read(t->key_fd, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                /* The terminal went away: nobody can press q any more. */
                live_terminal_done(t);
                return LIVE_QUIT;
        }
        for (ssize_t i = 0; i < n; i++)
                if (buf[i] == 'q' || buf[i] == 'Q')
                        return LIVE_QUIT;
        return LIVE_REDRAW;
}

/* Waits until the next refresh is due, a signal or a key. Returns a LiveEvent or a negative
 * errno. */
static int live_wait(LiveSignals *s, LiveTerminal *t, uint64_t timeout_ns) {
        uint64_t deadline = ep_now_ns(CLOCK_MONOTONIC) + timeout_ns;

        for (;;) {
                uint64_t now = ep_now_ns(CLOCK_MONOTONIC);
                if (now >= deadline)
                        return LIVE_REDRAW;
                struct pollfd p[2] = {
                        { .fd = s->fd, .events = POLLIN },
                        { .fd = t->key_fd, .events = POLLIN },
                };
                int timeout_ms = (int) MIN((deadline - now + NSEC_PER_MSEC - 1) / NSEC_PER_MSEC, (uint64_t) INT32_MAX);
                if (poll(p, t->key_fd >= 0 ? 2 : 1, timeout_ms) < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (p[0].revents & POLLIN) {
                        struct signalfd_siginfo si;
                        if (read(s->fd, &si, sizeof(si)) == (ssize_t) sizeof(si))
                                return si.ssi_signo == SIGWINCH ? LIVE_REDRAW : LIVE_QUIT;
                }
                if (t->key_fd >= 0 && p[1].revents != 0 && live_keys(t) == LIVE_QUIT)
                        return LIVE_QUIT;
        }
}

/* The first line of a live snapshot: the window, the samples in it and their rate. */
static void live_header(FILE *f, const TopOptions *o, const EpStoreSummary *summary, uint64_t since_ns,
                        uint64_t until_ns, bool keys) {
        char from[32], to[32], window[32], refresh[32];

        ep_format_time(since_ns, from, sizeof(from));
        ep_format_time(until_ns, to, sizeof(to));
        ep_format_span(o->window_ns, window, sizeof(window));
        ep_format_span(o->refresh_ns, refresh, sizeof(refresh));
        /* Samples come in whole intervals, which may start before the window: the rate is over
         * the time they cover. */
        uint64_t covered = summary->last_ns > summary->first_ns ? summary->last_ns - summary->first_ns : 0;
        double rate = covered ? (double) summary->samples * (double) NSEC_PER_SEC / (double) covered : 0.0;
        /* "YYYY-MM-DD " is 11 characters: a window is short, the time of day is enough. */
        fprintf(f, "Last %s (%s → %s): %" PRIu64 " samples, %.1f/s, %" PRIu64 " process%s; refresh %s%s\n",
                window, from + 11, to + 11, summary->samples, rate, summary->processes,
                summary->processes == 1 ? "" : "es", refresh, keys ? ", q quits" : "");
}

/* One snapshot of the last --window as text, its table at most rows long (0: no bound). */
static int live_snapshot(const TopOptions *o, sqlite3 *db, bool keys, size_t rows, char **ret_text) {
        _cleanup_(top_data_done) TopData d = {};
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        int r;

        uint64_t now = ep_now_ns(CLOCK_REALTIME);
        EpStoreFilter f = o->view.filter;
        f.since_ns = now > o->window_ns ? now - o->window_ns : 0;
        f.until_ns = now;
        r = top_read(o, db, &f, &d);
        if (r < 0)
                return r;

        FILE *m = open_memstream(&text, &size);
        if (!m)
                return -ENOMEM;
        live_header(m, o, &d.summary, f.since_ns, f.until_ns, keys);
        if (d.summary.samples == 0)
                fputs("\nNo samples in this window.\n", m);
        else {
                size_t limit = (size_t) o->limit;
                if (rows > 0)
                        limit = limit > 0 ? MIN(limit, rows) : rows;
                r = top_print_table(m, o, &d, limit);
        }
        if (fclose(m) != 0 && r >= 0)
                r = -ENOMEM;
        if (r < 0)
                return r;
        ep_utf8_sanitize_text(text, size, true); /* names are the processes' own: utf8.h */
        *ret_text = TAKE_PTR(text);
        return 0;
}

/* Writes one line cut to cols characters (UTF-8 aware: only lead bytes count). */
static void put_line(FILE *f, const char *line, size_t len, size_t cols) {
        size_t chars = 0, end = 0;
        for (; end < len; end++) {
                if (((unsigned char) line[end] & 0xc0) != 0x80 && chars++ == cols)
                        break;
        }
        fwrite(line, 1, end, f);
}

/* Redraws the screen from the top-left corner: each line cleared to its end, then everything
 * below the last one, so nothing flickers and no old row survives. */
static void live_draw(const char *text, size_t rows, size_t cols) {
        fputs("\033[H", stdout);
        size_t drawn = 0;
        for (const char *p = text; *p && drawn < rows; drawn++) {
                size_t len = strcspn(p, "\n");
                put_line(stdout, p, len, cols);
                fputs("\033[K\n", stdout);
                p += len + (p[len] == '\n');
        }
        fputs("\033[J", stdout);
}

static void terminal_size(size_t *ret_rows, size_t *ret_cols) {
        struct winsize ws = {};
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) < 0 || ws.ws_row == 0 || ws.ws_col == 0)
                ws = (struct winsize) { .ws_row = 24, .ws_col = 80 };
        *ret_rows = ws.ws_row;
        *ret_cols = ws.ws_col;
}

/* The live header, the blank line, the column header and the "more" line around the table. */
#define LIVE_OVERHEAD 4

static int top_live(const TopOptions *o) {
        _cleanup_sqlite_ sqlite3 *db = NULL;
        _cleanup_(live_signals_done) LiveSignals sig = { .fd = -EBADF };
        _cleanup_(live_terminal_done) LiveTerminal term = { .key_fd = -EBADF };
        bool draw = isatty(STDOUT_FILENO);
        int r;

        /* The store stays open; every snapshot is its own read transaction, so it sees what the
         * collector wrote since and never holds the WAL back. */
        r = ep_view_open_store(&o->view, "top", &db);
        if (r < 0)
                return EXIT_FAILURE;
        r = live_signals_init(&sig);
        if (r < 0) {
                fprintf(stderr, "ebpf-profiler top: cannot watch signals: %s\n", strerror(-r));
                return EXIT_FAILURE;
        }
        live_terminal_init(draw, &term);

        for (uint64_t i = 0; o->iterations == 0 || i < o->iterations; i++) {
                if (i > 0) {
                        r = live_wait(&sig, &term, o->refresh_ns);
                        if (r < 0) {
                                fprintf(stderr, "ebpf-profiler top: %s\n", strerror(-r));
                                return EXIT_FAILURE;
                        }
                        if (r == LIVE_QUIT)
                                break;
                }

                size_t rows = 0, cols = 0;
                if (draw)
                        terminal_size(&rows, &cols);
                _cleanup_free_ char *text = NULL;
                r = live_snapshot(o, db, term.key_fd >= 0,
                                  draw ? (rows > LIVE_OVERHEAD + 1 ? rows - LIVE_OVERHEAD - 1 : 1) : 0, &text);
                if (r < 0)
                        return EXIT_FAILURE;
                if (draw)
                        live_draw(text, rows - 1, cols);
                else
                        /* A pipe gets every snapshot, a blank line between two. */
                        printf("%s%s", i > 0 ? "\n" : "", text);
                if (fflush(stdout) != 0)
                        return EXIT_FAILURE;
        }
        return EXIT_SUCCESS;
}

static void help(void) {
        printf("Usage: ebpf-profiler top [OPTIONS]\n"
               "\n"
               "Lists what was hot in the profile store. By function (the default): SELF%% is the\n"
               "share of samples in which the function was running (the leaf frame), TOTAL%% the\n"
               "share in which it was anywhere on the stack (counted once per stack). By process\n"
               "or thread: each one's share of the samples.\n"
               "\n"
               "Options:\n"
               EP_VIEW_OPTIONS_HELP
               "      --by WHAT         function (the default), process or thread\n"
               "      --sort KEY        functions by self (the default) or total samples\n"
               "  -n, --limit N         show N rows (default 20, 0 = all)\n"
               "      --live            refresh in the terminal like perf top (q or Ctrl-C quits);\n"
               "                        piped, print one snapshot per refresh\n"
               "      --window DURATION with --live: show the last DURATION (default 10s)\n"
               "      --refresh SECONDS with --live: read the store again this often (default 2)\n"
               "      --iterations N    with --live: stop after N snapshots (default: never)\n"
               "  -h, --help            show this help\n"
               "\n"
               "Examples: top --pid 1234 --since 10m; top --by thread --comm postgres;\n"
               "          top --live --container 3f2a --window 30s\n");
}

static int parse_by(const char *s, TopBy *ret) {
        static const char *const names[] = {
                [TOP_BY_FUNCTION] = "function",
                [TOP_BY_PROCESS] = "process",
                [TOP_BY_THREAD] = "thread",
        };
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (streq(s, names[i])) {
                        *ret = (TopBy) i;
                        return 0;
                }
        return -EINVAL;
}

/* The message for a bad command line, and -EINVAL. */
#define USAGE(...) (ep_usage_error("top", __VA_ARGS__), -EINVAL)

/* Returns 1 to go on, 0 after --help, -EINVAL after saying what is wrong. */
static int parse_args(int argc, char **argv, TopOptions *o) {
        enum {
                ARG_BY = _EP_VIEW_ARG_MAX,
                ARG_SORT,
                ARG_LIVE,
                ARG_REFRESH,
                ARG_WINDOW,
                ARG_ITERATIONS,
        };
        static const struct option options[] = {
                EP_VIEW_LONG_OPTIONS,
                { "by", required_argument, NULL, ARG_BY },
                { "sort", required_argument, NULL, ARG_SORT },
                { "limit", required_argument, NULL, 'n' },
                { "live", no_argument, NULL, ARG_LIVE },
                { "refresh", required_argument, NULL, ARG_REFRESH },
                { "window", required_argument, NULL, ARG_WINDOW },
                { "iterations", required_argument, NULL, ARG_ITERATIONS },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        const char *live_only = NULL, *sort = NULL;
        int c, r;

        opterr = 0;
        while ((c = getopt_long(argc, argv, ":hn:", options, NULL)) >= 0) {
                r = ep_view_option(&o->view, "top", c, optarg);
                if (r < 0)
                        return r;
                if (r > 0)
                        continue;
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case 'n':
                        if (ep_parse_uint(optarg, 0, SIZE_MAX, &o->limit) < 0)
                                return USAGE("invalid --limit '%s'", optarg);
                        break;
                case ARG_BY:
                        if (parse_by(optarg, &o->by) < 0)
                                return USAGE("invalid --by '%s' (function, process or thread)", optarg);
                        break;
                case ARG_SORT:
                        if (streq(optarg, "self"))
                                o->order = EP_FUNCTIONS_BY_SELF;
                        else if (streq(optarg, "total"))
                                o->order = EP_FUNCTIONS_BY_TOTAL;
                        else
                                return USAGE("invalid --sort '%s' (self or total)", optarg);
                        sort = optarg;
                        break;
                case ARG_LIVE:
                        o->live = true;
                        break;
                case ARG_REFRESH:
                        if (ep_parse_duration(optarg, &o->refresh_ns) < 0 || o->refresh_ns < 100 * NSEC_PER_MSEC)
                                return USAGE("invalid --refresh '%s' (seconds, at least 0.1)", optarg);
                        live_only = "--refresh";
                        break;
                case ARG_WINDOW:
                        if (ep_parse_duration(optarg, &o->window_ns) < 0 || o->window_ns < NSEC_PER_MSEC)
                                return USAGE("invalid --window '%s' (a duration: 30s, 5m)", optarg);
                        live_only = "--window";
                        break;
                case ARG_ITERATIONS:
                        if (ep_parse_uint(optarg, 1, UINT64_MAX, &o->iterations) < 0)
                                return USAGE("invalid --iterations '%s'", optarg);
                        live_only = "--iterations";
                        break;
                default:
                        (void) ep_getopt_error("top", c, argv);
                        return -EINVAL;
                }
        }
        if (optind < argc)
                return USAGE("unexpected argument '%s'", argv[optind]);
        if (sort && o->by != TOP_BY_FUNCTION)
                return USAGE("--sort orders functions; processes and threads rank by samples");
        if (live_only && !o->live)
                return USAGE("%s needs --live", live_only);
        if (o->live && (o->view.filter.since_ns > 0 || o->view.filter.until_ns != UINT64_MAX))
                return USAGE("--live shows the last --window; --since and --until do not apply");
        return 1;
}

int verb_top(int argc, char **argv) {
        TopOptions o = {
                .view = EP_VIEW_OPTIONS_INIT,
                .by = TOP_BY_FUNCTION,
                .order = EP_FUNCTIONS_BY_SELF,
                .limit = 20,
                .refresh_ns = 2 * NSEC_PER_SEC,
                .window_ns = 10 * NSEC_PER_SEC,
        };

        int r = parse_args(argc, argv, &o);
        if (r <= 0)
                return r < 0 ? EXIT_USAGE : EXIT_SUCCESS;
        return o.live ? top_live(&o) : top_once(&o);
}
