/* SPDX-License-Identifier: MIT */
/* `ebpf-profiler run`: the four daemons without systemd. Finds the binaries, picks a bus (the
 * system bus when it answers and has our policy, else a private one), starts the loader as
 * root and the rest as the unprivileged user, supervises them, and on the way out asks the
 * collector to flush its last interval before everything stops. */

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/capability.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#include "bus-util.h"
#include "bus.h"
#include "cli-config.h"
#include "cli.h"
#include "daemon.h"
#include "log.h"
#include "private-bus.h"
#include "spawn-util.h"
#include "store-read.h"
#include "supervisor.h"
#include "sysctl.h"
#include "view-options.h"

#define POLICY_NAME "org.ebpfprofiler.conf"
#define FLUSH_TIMEOUT_USEC (10 * USEC_PER_SEC)
#define EXPORT_SETTLE_USEC (300 * 1000)


extern char **environ;

typedef struct RunArgs {
        uint64_t duration_ns;   /* 0: until stopped */
        const char *frequency;  /* as given, validated */
        const char *unload_delay; /* as given, validated */
        const char *interval;
        const char *retention_age, *retention_size; /* as given, validated */
        const char *store;
        const char *cache_dir;
        const char *endpoint;
        const char *protocol;   /* --otlp-protocol, validated */
        const char *log_level;
        const char *debug_dirs[8]; /* --debug-dir, passed to the symbolizer as given */
        size_t n_debug_dirs;
        bool private_bus;
} RunArgs;

enum { LOADER, SYMBOLIZER, COLLECTOR, EXPORTER, _DAEMON_MAX };

static const struct {
        const char *name;       /* for messages and the [prefix] */
        const char *build_path; /* relative to the build tree's root */
        const char *binary;
        const char *bus_name;
        EpChildPolicy policy;
        const char *user; /* its own system user (NULL: root), so one taken over gains nothing
                           * from the others */
        int nice;         /* as its unit's Nice= */
} daemons[_DAEMON_MAX] = {
        [LOADER] = { "loader", "unwinder-loader", "ebpf-profiler-loader", EP_BUS_LOADER,
                     EP_CHILD_FATAL_AT_STARTUP, NULL, EP_LOADER_NICE },
        [SYMBOLIZER] = { "symbolizer", "symbolizer", "ebpf-profiler-symbolizer", EP_BUS_SYMBOLIZER,
                         EP_CHILD_OPTIONAL, EP_SYMBOLIZER_USER },
        [COLLECTOR] = { "collector", "collector", "ebpf-profiler-collector", EP_BUS_COLLECTOR,
                        EP_CHILD_ESSENTIAL, EP_COLLECTOR_USER },
        [EXPORTER] = { "exporter", "exporter", "ebpf-profiler-exporter", EP_BUS_EXPORTER,
                       EP_CHILD_OPTIONAL, EP_EXPORTER_USER },
};

/* The loader's capabilities: its unit's (EP_LOADER_CAPABILITIES), and CAP_SYS_ADMIN where the
 * kernel lets nothing less open perf events (Debian's kernel.perf_event_paranoid = 3, without
 * the package's sysctl.d drop-in): the alternative docs/systemd.md gives the unit. */
static uint64_t loader_capabilities(void) {
        static const int caps[] = { EP_LOADER_CAPABILITIES };
        uint64_t mask = 0;
        long paranoid;

        for (size_t i = 0; i < ELEMENTSOF(caps); i++)
                mask |= UINT64_C(1) << caps[i];
        if (ep_sysctl_int("kernel/perf_event_paranoid", &paranoid) >= 0 && paranoid > 2) {
                log_notice("kernel.perf_event_paranoid is %ld: the loader gets CAP_SYS_ADMIN, since only that "
                           "opens perf events then (the package's sysctl.d drop-in sets 2).", paranoid);
                mask |= UINT64_C(1) << CAP_SYS_ADMIN;
        }
        return mask;
}

typedef struct Run {
        const RunArgs *args;
        sd_event *event;
        sd_bus *bus;
        EpPrivateBus *pbus;
        sd_event_source *pbus_source;
        EpSupervisor *sup;
        sd_bus_slot *flush_slot;
        sd_event_source *settle_timer;
        bool stop_requested;
} Run;

/* ---- locating things ---- */

static int exe_dir(char **ret) {
        char buf[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
        if (n < 0)
                return -errno;
        buf[n] = 0;
        char *slash = strrchr(buf, '/');
        if (!slash)
                return -EINVAL;
        *slash = 0;
        *ret = strdup(*buf ? buf : "/");
        return *ret ? 0 : -ENOMEM;
}

/* Running from a meson build directory (build/cli/ebpf-profiler next to build/build.ninja)? */
static bool in_build_tree(const char *dir) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/../build.ninja", dir);
        return access(path, F_OK) == 0;
}

static int find_daemon(const char *dir, bool build_tree, unsigned i, char **ret) {
        const char *env = getenv("EBPF_PROFILER_LIBEXECDIR");
        char *path = NULL;

        if (env && *env) {
                if (asprintf(&path, "%s/%s", env, daemons[i].binary) < 0)
                        return -ENOMEM;
        } else if (build_tree) {
                if (asprintf(&path, "%s/../%s/%s", dir, daemons[i].build_path, daemons[i].binary) < 0)
                        return -ENOMEM;
        } else if (asprintf(&path, "%s/%s", EP_LIBEXECDIR, daemons[i].binary) < 0)
                return -ENOMEM;

        if (access(path, X_OK) < 0) {
                int r = -errno;
                fprintf(stderr, "ebpf-profiler run: cannot find the %s at %s: %s%s\n", daemons[i].name, path,
                        strerror(-r),
                        build_tree && !env ? " (build the whole tree: ninja -C <builddir>)"
                                           : " (set $EBPF_PROFILER_LIBEXECDIR to where the daemons are)");
                free(path);
                return r;
        }
        *ret = path;
        return 0;
}

/* Where the system bus reads our policy from, or NULL when it is not installed. */
static const char *installed_policy(void) {
        static const char *const candidates[] = {
                EP_DBUS_POLICY_PATH,
                "/usr/share/dbus-1/system.d/" POLICY_NAME,
                "/etc/dbus-1/system.d/" POLICY_NAME,
        };
        for (size_t i = 0; i < ELEMENTSOF(candidates); i++)
                if (access(candidates[i], R_OK) == 0)
                        return candidates[i];
        return NULL;
}

static int find_policy(bool build_tree, char **ret) {
        const char *path = build_tree && access(EP_SOURCE_POLICY_PATH, R_OK) == 0 ? EP_SOURCE_POLICY_PATH
                                                                                  : installed_policy();
        if (!path)
                return -ENOENT;
        *ret = strdup(path);
        return *ret ? 0 : -ENOMEM;
}

/* Does the system bus know our policy? Without it no daemon could own its name there. */
static bool system_policy_installed(void) {
        return installed_policy() != NULL;
}

/* ---- preparing the host ---- */

static int absolute_path(const char *path, char **ret) {
        if (path[0] == '/') {
                *ret = strdup(path);
                return *ret ? 0 : -ENOMEM;
        }
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof(cwd)))
                return log_error_errno(-errno, "Cannot get the working directory: %m");
        return asprintf(ret, "%s/%s", cwd, path) < 0 ? -ENOMEM : 0;
}

/* mkdir -p; *ret_created says whether the last component was made here. */
static int mkdir_parents(const char *path, mode_t mode, bool *ret_created) {
        _cleanup_free_ char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        *ret_created = false;
        for (char *s = p + 1;; s++) {
                if (*s != '/' && *s != 0)
                        continue;
                char c = *s;
                *s = 0;
                if (mkdir(p, mode) == 0) {
                        if (c == 0)
                                *ret_created = true;
                } else if (errno != EEXIST)
                        return -errno;
                *s = c;
                if (c == 0)
                        break;
        }
        struct stat st;
        if (stat(path, &st) < 0)
                return -errno;
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* Hands the regular files directly in dir that are not pw's to pw, as systemd does for a
 * unit's StateDirectory=/CacheDirectory=: a database that root created there (a daemon run by
 * hand, a test) would otherwise lock the daemon out ("Permission denied"). No symlink is
 * followed and no file with other links is touched, so nothing outside dir changes owner. */
static void hand_over_files(const char *dir, const struct passwd *pw) {
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        DIR *d;

        if (fd < 0)
                return;
        d = fdopendir(fd);
        if (!d)
                return;
        fd = -EBADF; /* the DIR owns it now */
        for (struct dirent *de; (de = readdir(d));) {
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
                    st.st_nlink != 1 || st.st_uid == pw->pw_uid)
                        continue;
                if (fchownat(dirfd(d), de->d_name, pw->pw_uid, pw->pw_gid, AT_SYMLINK_NOFOLLOW) < 0)
                        log_warning_errno(-errno, "Cannot hand %s/%s to user %s: %m", dir, de->d_name, pw->pw_name);
        }
        closedir(d);
}

/* A directory a daemon running as pw writes to. The profiler's own (ours: the default place) is
 * handed to pw; a directory the user named only gets created if missing (and then handed over),
 * never taken over. The files in a directory that is pw's are pw's too (hand_over_files). who:
 * the daemon, for the warning when pw cannot write there. */
static int prepare_state_dir(const char *dir, bool ours, const struct passwd *pw, const char *who) {
        bool created;
        int r = mkdir_parents(dir, 0755, &created);
        if (r < 0)
                return log_error_errno(r, "Cannot create %s: %m", dir);
        if ((created || ours) && chown(dir, pw->pw_uid, pw->pw_gid) < 0)
                return log_error_errno(-errno, "Cannot hand %s to user %s: %m", dir, pw->pw_name);

        struct stat st;
        if (stat(dir, &st) < 0)
                return log_error_errno(-errno, "Cannot stat %s: %m", dir);
        if (st.st_uid == pw->pw_uid)
                hand_over_files(dir, pw);
        else if (!(st.st_mode & S_IWOTH))
                log_warning("%s is not writable for user %s (the %s runs as that user).", dir, pw->pw_name, who);
        return 0;
}

static int prepare_store(const char *store, const struct passwd *pw) {
        _cleanup_free_ char *dir = strdup(store);
        if (!dir)
                return -ENOMEM;
        *strrchr(dir, '/') = 0;
        if (!*dir)
                return log_error_errno(-EINVAL, "Put the store in a directory of its own, not in /.");

        return prepare_state_dir(dir, streq(dir, EP_STATE_DIR), pw, "collector");
}

/* The exporter's spool (unsent OTLP requests) lives with the store, in a directory of our own
 * that the unprivileged exporter owns; 0700: it holds profile data. */
static int prepare_spool(const char *store, const struct passwd *pw, char **ret) {
        _cleanup_free_ char *dir = NULL;
        const char *slash = strrchr(store, '/');
        int r;

        if (asprintf(&dir, "%.*s/spool", (int) (slash - store), store) < 0)
                return -ENOMEM;
        r = prepare_state_dir(dir, true, pw, "exporter");
        if (r < 0)
                return r;
        if (chmod(dir, 0700) < 0)
                log_warning_errno(-errno, "Cannot restrict access to %s: %m", dir);
        *ret = TAKE_PTR(dir);
        return 0;
}

static int lock_runtime_dir(const char *dir, int *ret_fd) {
        bool created;
        int r = mkdir_parents(dir, 0755, &created);
        if (r < 0)
                return log_error_errno(r, "Cannot create %s: %m", dir);
        (void) chmod(dir, 0755);

        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/run.lock", dir);
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
                return log_error_errno(-errno, "Cannot open %s: %m", path);
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                r = -errno;
                close(fd);
                if (r == -EWOULDBLOCK) {
                        fprintf(stderr, "ebpf-profiler run: another 'ebpf-profiler run' is active (%s is locked).\n", path);
                        return -EBUSY;
                }
                return log_error_errno(r, "Cannot lock %s: %m", path);
        }
        *ret_fd = fd;
        return 0;
}

/* ---- the environment of the daemons ---- */

/* What `run` sets itself, and the exporter's OTEL_* settings (a backend's credentials among
 * them, OTEL_EXPORTER_OTLP_HEADERS) for every daemon but the exporter. */
static bool env_dropped(const char *e, bool exporter) {
        static const char *const drop[] = {
                "DBUS_SYSTEM_BUS_ADDRESS=", "NOTIFY_SOCKET=", "WATCHDOG_PID=", "WATCHDOG_USEC=",
                "LISTEN_PID=", "LISTEN_FDS=", "LISTEN_FDNAMES=", "HOME=", "USER=", "LOGNAME=",
        };
        for (size_t i = 0; i < ELEMENTSOF(drop); i++)
                if (startswith(e, drop[i]))
                        return true;
        return !exporter && startswith(e, "OTEL_");
}

static char **make_env(const char *bus_address, const struct passwd *pw, bool exporter) {
        size_t n = 0;
        while (environ[n])
                n++;
        char **env = calloc(n + 5, sizeof(char *));
        if (!env)
                return NULL;
        size_t k = 0;
        bool ok = true;
        for (size_t i = 0; i < n; i++)
                if (!env_dropped(environ[i], exporter))
                        ok = ok && (env[k++] = strdup(environ[i]));
        if (bus_address)
                ok = ok && asprintf(&env[k++], "DBUS_SYSTEM_BUS_ADDRESS=%s", bus_address) >= 0;
        ok = ok && asprintf(&env[k++], "HOME=%s", pw ? pw->pw_dir : "/root") >= 0;
        ok = ok && asprintf(&env[k++], "USER=%s", pw ? pw->pw_name : "root") >= 0;
        ok = ok && asprintf(&env[k++], "LOGNAME=%s", pw ? pw->pw_name : "root") >= 0;
        if (!ok) {
                for (size_t i = 0; i < k; i++)
                        free(env[i]);
                free(env);
                return NULL;
        }
        return env;
}

/* ---- stopping ---- */

static void stop_now(Run *run) {
        run->flush_slot = sd_bus_slot_unref(run->flush_slot);
        run->settle_timer = sd_event_source_disable_unref(run->settle_timer);
        ep_supervisor_stop(run->sup, EXIT_SUCCESS);
}

static int on_exporter_flushed(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Run *run = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(m);
        if (e)
                log_warning("Exporter flush failed: %s", e->message ?: e->name);
        stop_now(run);
        return 0;
}

static int on_export_settled(sd_event_source *s, uint64_t usec, void *userdata) {
        Run *run = userdata;
        run->settle_timer = sd_event_source_disable_unref(run->settle_timer);
        int r = sd_bus_call_method_async(run->bus, &run->flush_slot, EP_BUS_EXPORTER, EP_PATH_EXPORTER,
                                         EP_IFACE_EXPORTER, "Flush", on_exporter_flushed, run, "");
        if (r < 0)
                stop_now(run);
        return 0;
}

/* Whether the exporter has somewhere to send to: --otlp-endpoint, or the OTel variables it
 * inherits (see make_env()). */
static bool exporting(const RunArgs *a) {
        const char *p = getenv("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT"), *g = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
        return a->endpoint || (p && *p) || (g && *g);
}

static int on_collector_flushed(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Run *run = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(m);

        run->flush_slot = sd_bus_slot_unref(run->flush_slot);
        if (e) {
                log_warning("Collector flush failed: %s", e->message ?: e->name);
                stop_now(run);
                return 0;
        }
        log_debug("The collector wrote its last interval.");

        /* The interval reaches the exporter through its ring; give it a moment before asking
         * it to send. */
        if (exporting(run->args) && ep_supervisor_ready(run->sup, "exporter") &&
            sd_event_add_time_relative(run->event, &run->settle_timer, CLOCK_MONOTONIC, EXPORT_SETTLE_USEC, 0,
                                       on_export_settled, run) >= 0)
                return 0;
        stop_now(run);
        return 0;
}

/* The first request stops gracefully (flush, then SIGTERM); the next one does not wait. */
static void request_stop(Run *run) {
        if (ep_supervisor_stopping(run->sup) || run->stop_requested) {
                if (run->stop_requested)
                        ep_supervisor_stop(run->sup, EXIT_SUCCESS);
                return;
        }
        run->stop_requested = true;

        if (ep_supervisor_ready(run->sup, "collector") &&
            sd_bus_call_method_async(run->bus, &run->flush_slot, EP_BUS_COLLECTOR, EP_PATH_COLLECTOR,
                                     EP_IFACE_COLLECTOR, "Flush", on_collector_flushed, run, "") >= 0)
                return;
        stop_now(run);
}

static int on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Run *run = userdata;
        if (!run->stop_requested)
                printf("Stopping (SIG%s)...\n", sigabbrev_np((int) si->ssi_signo) ?: "?");
        else
                printf("Stopping without waiting...\n");
        fflush(stdout);
        request_stop(run);
        return 0;
}

static int on_duration(sd_event_source *s, uint64_t usec, void *userdata) {
        Run *run = userdata;
        printf("Duration reached; stopping...\n");
        fflush(stdout);
        request_stop(run);
        return 0;
}

static int on_private_bus_exit(sd_event_source *s, const siginfo_t *si, void *userdata) {
        Run *run = userdata;
        char status[64];

        run->pbus->pid = 0; /* sd-event reaps it */
        run->pbus_source = sd_event_source_disable_unref(run->pbus_source);
        log_error("The private bus (dbus-daemon) %s; stopping everything. See %s.",
                  ep_wait_status_string(si->si_code, si->si_status, status, sizeof(status)),
                  run->pbus->log_path);
        ep_supervisor_stop(run->sup, EXIT_FAILURE);
        return 0;
}

static void on_ready(EpSupervisor *s, const char *name, bool first, void *userdata) {
        if (!name) {
                printf("All four daemons are up. Profiling; Ctrl-C stops.\n");
                fflush(stdout);
        } else if (!first)
                log_info("The %s is back.", name);
}

/* ---- options ---- */

static void help(void) {
        printf("Usage: ebpf-profiler run [OPTIONS]\n"
               "\n"
               "Runs the profiler's four daemons in the foreground, without systemd: the loader\n"
               "as root, the symbolizer, collector and exporter each as its own unprivileged\n"
               "user (" EP_SYMBOLIZER_USER ", " EP_COLLECTOR_USER ", " EP_EXPORTER_USER "). Uses the\n"
               "system bus when it answers and has the ebpf-profiler policy, else a private bus.\n"
               "Must run as root.\n"
               "\n"
               "Options:\n"
               "      --duration DURATION    stop after this long (30s, 10min, 1h; default: until\n"
               "                             Ctrl-C or SIGTERM)\n"
               "      --frequency HZ         samples per second per CPU (1-10000; loader default 20)\n"
               "      --unload-delay DURATION\n"
               "                             keep a file's unwind table this long after the last\n"
               "                             process using it exits (loader default 60s)\n"
               "      --interval DURATION    aggregation interval of the store (collector default)\n"
               "      --store PATH           the profile store (default " EP_STORE_DEFAULT_PATH ")\n"
               "      --retention-age DURATION\n"
               "                             delete store intervals older than this (default 3d)\n"
               "      --retention-size SIZE  keep the store under this size, oldest first (default 1G)\n"
               "      --cache-dir DIR        the symbolizer's cache (default " EP_CACHE_DIR ")\n"
               "      --debug-dir DIR        where the symbolizer looks for separate debug files\n"
               "                             (repeatable or a colon list; default /usr/lib/debug)\n"
               "      --otlp-endpoint URL    also export OTLP profiles to URL (the exporter also\n"
               "                             reads $OTEL_EXPORTER_OTLP_* and\n"
               "                             /etc/ebpf-profiler/exporter.conf)\n"
               "      --otlp-protocol PROTO  http/protobuf (default) or grpc\n"
               "      --private-bus          always start a private bus\n"

               "      --log-level LEVEL      debug, info, notice, warning, err (for all daemons)\n"
               "  -h, --help                 show this help\n");
}

static int parse_args(int argc, char **argv, RunArgs *a) {
        enum {
                ARG_DURATION = 0x100,
                ARG_FREQUENCY,
                ARG_UNLOAD_DELAY,
                ARG_INTERVAL,
                ARG_RETENTION_AGE,
                ARG_RETENTION_SIZE,
                ARG_STORE,
                ARG_CACHE_DIR,
                ARG_ENDPOINT,
                ARG_PROTOCOL,
                ARG_PRIVATE_BUS,
                ARG_LOG_LEVEL,
                ARG_DEBUG_DIR,
        };
        static const struct option options[] = {
                { "duration", required_argument, NULL, ARG_DURATION },
                { "frequency", required_argument, NULL, ARG_FREQUENCY },
                { "unload-delay", required_argument, NULL, ARG_UNLOAD_DELAY },
                { "interval", required_argument, NULL, ARG_INTERVAL },
                { "retention-age", required_argument, NULL, ARG_RETENTION_AGE },
                { "retention-size", required_argument, NULL, ARG_RETENTION_SIZE },
                { "store", required_argument, NULL, ARG_STORE },
                { "cache-dir", required_argument, NULL, ARG_CACHE_DIR },
                { "otlp-endpoint", required_argument, NULL, ARG_ENDPOINT },
                { "otlp-protocol", required_argument, NULL, ARG_PROTOCOL },
                { "private-bus", no_argument, NULL, ARG_PRIVATE_BUS },
                { "log-level", required_argument, NULL, ARG_LOG_LEVEL },
                { "debug-dir", required_argument, NULL, ARG_DEBUG_DIR },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        uint64_t u;
        int c;

        opterr = 0;
        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_DURATION:
                        if (ep_parse_duration(optarg, &u) < 0 || u == 0)
                                return ep_usage_error("run", "invalid --duration '%s' (use 30s, 10min, 1h)", optarg);
                        a->duration_ns = u;
                        break;
                case ARG_FREQUENCY:
                        if (ep_parse_uint(optarg, 1, 10000, &u) < 0)
                                return ep_usage_error("run", "invalid --frequency '%s' (1 to 10000 Hz)", optarg);
                        a->frequency = optarg;
                        break;
                case ARG_UNLOAD_DELAY:
                        if (ep_parse_duration(optarg, &u) < 0)
                                return ep_usage_error("run", "invalid --unload-delay '%s' (use 500ms, 10s, 5min)", optarg);
                        a->unload_delay = optarg;
                        break;
                case ARG_INTERVAL:
                        if (ep_parse_duration(optarg, &u) < 0 || u < NSEC_PER_SEC)
                                return ep_usage_error("run", "invalid --interval '%s' (at least 1s)", optarg);
                        a->interval = optarg;
                        break;
                case ARG_RETENTION_AGE:
                        if (ep_parse_duration(optarg, &u) < 0 || (u > 0 && u < EP_RETENTION_AGE_MIN_NS))
                                return ep_usage_error("run", "invalid --retention-age '%s' (at least 1min, e.g. 12h, 3d; 0 keeps everything)",
                                                      optarg);
                        a->retention_age = optarg;
                        break;
                case ARG_RETENTION_SIZE:
                        if (ep_parse_size(optarg, &u) < 0 || (u > 0 && u < EP_RETENTION_SIZE_MIN))
                                return ep_usage_error("run", "invalid --retention-size '%s' (at least 256K, e.g. 500M, 2G; 0 for no limit)",
                                                      optarg);
                        a->retention_size = optarg;
                        break;
                case ARG_STORE:
                        if (!*optarg)
                                return ep_usage_error("run", "--store needs a path");
                        a->store = optarg;
                        break;
                case ARG_CACHE_DIR:
                        if (!*optarg)
                                return ep_usage_error("run", "--cache-dir needs a path");
                        a->cache_dir = optarg;
                        break;
                case ARG_ENDPOINT:
                        /* Checked after the loop: gRPC also takes HOST:PORT. */
                        a->endpoint = optarg;
                        break;
                case ARG_PROTOCOL:
                        if (!streq(optarg, "http/protobuf") && !streq(optarg, "grpc"))
                                return ep_usage_error("run", "invalid --otlp-protocol '%s' (http/protobuf or grpc%s)",
                                                      optarg, streq(optarg, "http/json") ? "; http/json is not supported" : "");
                        a->protocol = optarg;
                        break;
                case ARG_PRIVATE_BUS:
                        a->private_bus = true;
                        break;
                case ARG_LOG_LEVEL:
                        if (log_parse_level(optarg) < 0)
                                return ep_usage_error("run", "invalid --log-level '%s' (debug, info, notice, warning, err)",
                                                      optarg);
                        a->log_level = optarg;
                        break;
                case ARG_DEBUG_DIR:
                        if (!*optarg)
                                return ep_usage_error("run", "--debug-dir needs a path");
                        if (a->n_debug_dirs >= ELEMENTSOF(a->debug_dirs))
                                return ep_usage_error("run", "at most %zu --debug-dir options",
                                                      ELEMENTSOF(a->debug_dirs));
                        a->debug_dirs[a->n_debug_dirs++] = optarg;
                        break;
                default:
                        return ep_getopt_error("run", c, argv);
                }
        if (optind < argc)
                return ep_usage_error("run", "unexpected argument '%s'", argv[optind]);
        /* The exporter checks the rest; catch the obvious here so it does not fail to start. */
        if (a->endpoint && !startswith(a->endpoint, "http://") && !startswith(a->endpoint, "https://") &&
            !(a->protocol && streq(a->protocol, "grpc") && !strstr(a->endpoint, "://")))
                return ep_usage_error("run", "invalid --otlp-endpoint '%s' (http://HOST:PORT/... or https://...; "
                                      "HOST:PORT with --otlp-protocol grpc)", a->endpoint);
        return -1; /* go on */
}

/* Who an unprivileged daemon runs as. */
typedef struct Identity {
        struct passwd pw; /* pw_name and pw_dir point at the copies below */
        char *name, *dir;
        gid_t *groups;
        int n_groups;
} Identity;

static void identity_done(Identity *id) {
        free(id->name);
        free(id->dir);
        free(id->groups);
        *id = (Identity) {};
}

static int identity_load(const char *user, Identity *ret) {
        _cleanup_(identity_done) Identity id = {};
        struct passwd *pw = getpwnam(user);

        if (!pw) {
                fprintf(stderr,
                        "ebpf-profiler run: user '%s' does not exist. The symbolizer, collector and exporter run\n"
                        "as system users of their own (%s, %s, %s), which the D-Bus policy\n"
                        "names: create them with scripts/setup.sh, or with systemd-sysusers and the profiler's\n"
                        "sysusers.d file.\n",
                        user, EP_SYMBOLIZER_USER, EP_COLLECTOR_USER, EP_EXPORTER_USER);
                return -ESRCH;
        }
        id.pw = *pw;
        id.name = strdup(pw->pw_name);
        id.dir = strdup(pw->pw_dir ?: "/");
        if (!id.name || !id.dir)
                return -ENOMEM;
        id.pw.pw_name = id.name;
        id.pw.pw_dir = id.dir;

        for (int ng = 16;;) {
                gid_t *g = reallocarray(id.groups, (size_t) ng, sizeof(gid_t));
                if (!g)
                        return -ENOMEM;
                id.groups = g;
                int want = ng;
                if (getgrouplist(id.name, id.pw.pw_gid, id.groups, &want) >= 0) {
                        id.n_groups = want;
                        break;
                }
                if (want <= ng)
                        return log_error_errno(-EINVAL, "Cannot list the groups of %s.", id.name);
                ng = want;
        }
        *ret = id;
        id = (Identity) {};
        return 0;
}

typedef struct Prepared {
        char *paths[_DAEMON_MAX];
        char *policy;
        char *store;
        char *cache_dir;
        char *spool_dir; /* the exporter's, next to the store */
        Identity ids[_DAEMON_MAX]; /* of the unprivileged daemons */
        int lock_fd;
} Prepared;

static void prepared_done(Prepared *p) {
        for (unsigned i = 0; i < _DAEMON_MAX; i++) {
                free(p->paths[i]);
                identity_done(&p->ids[i]);
        }
        free(p->policy);
        free(p->store);
        free(p->cache_dir);
        free(p->spool_dir);
        (void) close_nointr(p->lock_fd);
}

/* argv of one daemon, with the options that concern it. */
static char **daemon_argv(unsigned i, const char *path, const RunArgs *a, const Prepared *p) {
        const char *v[16 + 2 * ELEMENTSOF(a->debug_dirs)];
        size_t n = 0;

        v[n++] = path;
        switch (i) {
        case SYMBOLIZER:
                v[n++] = "--cache-dir";
                v[n++] = p->cache_dir;
                v[n++] = "--collector-user";
                v[n++] = p->ids[COLLECTOR].name;
                for (size_t k = 0; k < a->n_debug_dirs; k++) {
                        v[n++] = "--debug-dir";
                        v[n++] = a->debug_dirs[k];
                }
                break;
        case LOADER:
                v[n++] = "--symbolizer-user";
                v[n++] = p->ids[SYMBOLIZER].name;
                v[n++] = "--collector-user";
                v[n++] = p->ids[COLLECTOR].name;
                if (a->frequency) {
                        v[n++] = "--frequency";
                        v[n++] = a->frequency;
                }
                if (a->unload_delay) {
                        v[n++] = "--unload-delay";
                        v[n++] = a->unload_delay;
                }
                break;
        case COLLECTOR:
                v[n++] = "--store";
                v[n++] = p->store;
                v[n++] = "--exporter-user";
                v[n++] = p->ids[EXPORTER].name;
                if (a->interval) {
                        v[n++] = "--interval";
                        v[n++] = a->interval;
                }
                if (a->retention_age) {
                        v[n++] = "--retention-age";
                        v[n++] = a->retention_age;
                }
                if (a->retention_size) {
                        v[n++] = "--retention-size";
                        v[n++] = a->retention_size;
                }
                break;
        case EXPORTER:
                if (a->endpoint) {
                        v[n++] = "--endpoint";
                        v[n++] = a->endpoint;
                }
                if (a->protocol) {
                        v[n++] = "--protocol";
                        v[n++] = a->protocol;
                }
                v[n++] = "--spool-dir";
                v[n++] = p->spool_dir;
                break;
        }
        if (a->log_level) {
                v[n++] = "--log-level";
                v[n++] = a->log_level;
        }
        v[n] = NULL;

        char **argv = calloc(n + 1, sizeof(char *));
        if (!argv)
                return NULL;
        for (size_t k = 0; k < n; k++)
                argv[k] = (char *) v[k];
        return argv;
}

/* ---- main ---- */

static int prepare(const RunArgs *a, Prepared *p) {
        _cleanup_free_ char *dir = NULL;
        int r;

        for (unsigned i = 0; i < _DAEMON_MAX; i++) {
                if (!daemons[i].user)
                        continue;
                r = identity_load(daemons[i].user, &p->ids[i]);
                if (r < 0)
                        return r;
        }

        r = exe_dir(&dir);
        if (r < 0)
                return log_error_errno(r, "Cannot find where ebpf-profiler runs from: %m");
        bool build_tree = in_build_tree(dir);
        for (unsigned i = 0; i < _DAEMON_MAX; i++) {
                r = find_daemon(dir, build_tree, i, &p->paths[i]);
                if (r < 0)
                        return r;
        }
        r = find_policy(build_tree, &p->policy);
        if (r < 0 && r != -ENOENT)
                return r;

        /* The daemons run in /: their paths must not depend on our working directory. */
        r = absolute_path(a->store, &p->store);
        if (r < 0)
                return r;
        r = absolute_path(a->cache_dir, &p->cache_dir);
        if (r < 0)
                return r;

        r = lock_runtime_dir(ep_runtime_dir(), &p->lock_fd);
        if (r < 0)
                return r;
        r = prepare_store(p->store, &p->ids[COLLECTOR].pw);
        if (r < 0)
                return r;
        r = prepare_spool(p->store, &p->ids[EXPORTER].pw, &p->spool_dir);
        if (r < 0)
                return r;
        /* The symbolizer's cache; not fatal if it cannot be made. */
        (void) prepare_state_dir(p->cache_dir, streq(p->cache_dir, EP_CACHE_DIR), &p->ids[SYMBOLIZER].pw,
                                 "symbolizer");
        return 0;
}

/* Picks and connects the bus. ret_address: what the daemons get in $DBUS_SYSTEM_BUS_ADDRESS
 * (NULL: the default system bus). */
static int setup_bus(Run *run, const Prepared *p, const char **ret_address, const char **ret_kind) {
        const RunArgs *a = run->args;
        const char *env = getenv("DBUS_SYSTEM_BUS_ADDRESS");
        int r;

        if (!a->private_bus) {
                bool explicit = env && *env;
                if (!explicit && !system_policy_installed())
                        log_debug("The ebpf-profiler D-Bus policy is not installed on this system.");
                else {
                        r = ep_bus_connect(NULL, &run->bus);
                        if (r >= 0) {
                                *ret_address = explicit ? env : NULL;
                                *ret_kind = explicit ? "given by $DBUS_SYSTEM_BUS_ADDRESS" : "system bus";
                                return 0;
                        }
                        log_debug_errno(r, "The system bus does not answer: %m");
                }
                if (explicit)
                        log_warning("$DBUS_SYSTEM_BUS_ADDRESS (%s) does not answer; starting a private bus.", env);
        }

        if (!p->policy) {
                fprintf(stderr, "ebpf-profiler run: cannot find the D-Bus policy %s (looked in the build tree and %s).\n",
                        POLICY_NAME, EP_DBUS_POLICY_PATH);
                return -ENOENT;
        }
        r = ep_private_bus_start(ep_runtime_dir(), p->policy, &run->pbus);
        if (r < 0)
                return r;
        r = sd_event_add_child(run->event, &run->pbus_source, run->pbus->pid, WEXITED, on_private_bus_exit, run);
        if (r < 0)
                return log_error_errno(r, "Cannot watch the private bus: %m");
        /* When the bus dies the daemons follow; report the cause before the symptoms. */
        (void) sd_event_source_set_priority(run->pbus_source, SD_EVENT_PRIORITY_IMPORTANT - 10);
        r = ep_bus_connect(run->pbus->address, &run->bus);
        if (r < 0)
                return log_error_errno(r, "Cannot connect to the private bus %s: %m", run->pbus->address);
        *ret_address = run->pbus->address;
        *ret_kind = "private bus";
        return 0;
}

static int check_not_running(sd_bus *bus) {
        for (unsigned i = 0; i < _DAEMON_MAX; i++) {
                pid_t pid = 0;
                int r = ep_bus_name_owner_pid(bus, daemons[i].bus_name, &pid);
                if (r > 0) {
                        fprintf(stderr,
                                "ebpf-profiler run: ebpf-profiler is already running: %s is owned by pid %d.\n"
                                "Stop it first (systemctl stop ebpf-profiler.target), or see 'ebpf-profiler status'.\n",
                                daemons[i].bus_name, (int) pid);
                        return -EBUSY;
                }
        }
        return 0;
}

static int run_supervised(Run *run, const Prepared *p, const char *bus_address) {
        int r;

        r = ep_supervisor_new(run->event, run->bus, &run->sup);
        if (r < 0)
                return log_error_errno(r, "Cannot set up supervision: %m");
        ep_supervisor_set_ready_callback(run->sup, on_ready, run);

        for (unsigned i = 0; i < _DAEMON_MAX; i++) {
                const Identity *id = &p->ids[i];
                const struct passwd *pw = daemons[i].user ? &id->pw : NULL;
                char **argv = daemon_argv(i, p->paths[i], run->args, p);
                char **env = make_env(bus_address, pw, i == EXPORTER);
                EpChildSpec spec = {
                        .name = daemons[i].name,
                        .bus_name = daemons[i].bus_name,
                        .argv = argv,
                        .env = env,
                        .policy = daemons[i].policy,
                        .unprivileged = daemons[i].user != NULL,
                        .uid = id->pw.pw_uid,
                        .gid = id->pw.pw_gid,
                        .groups = id->groups,
                        .n_groups = (size_t) id->n_groups,
                        .nice = daemons[i].nice,
                        .capabilities = i == LOADER ? loader_capabilities() : 0,
                };
                r = argv && env ? ep_supervisor_add(run->sup, &spec) : -ENOMEM;
                free(argv);
                ep_strv_free(env);
                if (r < 0)
                        return log_error_errno(r, "Cannot set up the %s: %m", daemons[i].name);
        }

        if ((r = sd_event_add_signal(run->event, NULL, SIGINT, on_signal, run)) < 0 ||
            (r = sd_event_add_signal(run->event, NULL, SIGTERM, on_signal, run)) < 0)
                return log_error_errno(r, "Cannot watch signals: %m");
        if (run->args->duration_ns > 0) {
                r = sd_event_add_time_relative(run->event, NULL, CLOCK_MONOTONIC, run->args->duration_ns / 1000, 0,
                                               on_duration, run);
                if (r < 0)
                        return log_error_errno(r, "Cannot set the duration timer: %m");
        }

        r = ep_supervisor_start(run->sup);
        if (r < 0)
                return r;
        return sd_event_loop(run->event);
}

int verb_run(int argc, char **argv) {
        RunArgs a = {
                .store = EP_STORE_DEFAULT_PATH,
                .cache_dir = EP_CACHE_DIR,
        };
        int r = parse_args(argc, argv, &a);
        if (r >= 0)
                return r;

        if (a.log_level)
                log_set_max_level(log_parse_level(a.log_level));

        if (geteuid() != 0) {
                fprintf(stderr,
                        "ebpf-profiler run: must run as root: the loader needs BPF and perf privileges and\n"
                        "the other daemons are started as their own users. Try: sudo ebpf-profiler run\n");
                return EXIT_FAILURE;
        }

        Prepared p = { .lock_fd = -EBADF };
        Run run = { .args = &a };
        int exit_code = EXIT_FAILURE;

        /* Before any child exists: sd-event takes signals and child exits as events. */
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGTERM);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        /* Our output may be a pipe that goes away; that must not kill the supervisor. */
        signal(SIGPIPE, SIG_IGN);

        r = prepare(&a, &p);
        if (r < 0)
                goto finish;

        r = sd_event_default(&run.event);
        if (r < 0) {
                log_error_errno(r, "Cannot create the event loop: %m");
                goto finish;
        }

        const char *bus_address = NULL, *bus_kind = NULL;
        r = setup_bus(&run, &p, &bus_address, &bus_kind);
        if (r < 0)
                goto finish;
        r = check_not_running(run.bus);
        if (r < 0)
                goto finish;
        r = sd_bus_attach_event(run.bus, run.event, SD_EVENT_PRIORITY_NORMAL);
        if (r < 0) {
                log_error_errno(r, "Cannot attach the bus to the event loop: %m");
                goto finish;
        }
        (void) sd_bus_set_method_call_timeout(run.bus, FLUSH_TIMEOUT_USEC);

        char span[32] = "";
        if (a.duration_ns)
                ep_format_span(a.duration_ns, span, sizeof(span));
        printf("ebpf-profiler: starting the daemons on the %s (%s) as root, '%s', '%s' and '%s'; store %s%s%s.\n",
               bus_kind, bus_address ?: "/run/dbus/system_bus_socket", p.ids[SYMBOLIZER].name,
               p.ids[COLLECTOR].name, p.ids[EXPORTER].name, p.store, a.duration_ns ? "; for " : "", span);
        fflush(stdout);

        r = run_supervised(&run, &p, bus_address);
        if (r >= 0)
                exit_code = r;

finish:
        if (run.sup)
                run.sup = ep_supervisor_free(run.sup);
        run.flush_slot = sd_bus_slot_unref(run.flush_slot);
        run.settle_timer = sd_event_source_disable_unref(run.settle_timer);
        if (run.bus) {
                sd_bus_flush_close_unref(run.bus);
                run.bus = NULL;
        }
        run.pbus_source = sd_event_source_disable_unref(run.pbus_source);
        if (run.pbus) {
                (void) ep_private_bus_stop(run.pbus);
                run.pbus = ep_private_bus_free(run.pbus);
        }
        sd_event_unref(run.event);
        prepared_done(&p);

        if (exit_code == EXIT_SUCCESS) {
                bool default_store = streq(a.store, EP_STORE_DEFAULT_PATH);
                printf("Stopped. See the profile with:\n"
                       "  ebpf-profiler top%s%s\n"
                       "  ebpf-profiler flamegraph%s%s -o flamegraph.html\n",
                       default_store ? "" : " --store ", default_store ? "" : a.store,
                       default_store ? "" : " --store ", default_store ? "" : a.store);
        }
        return exit_code;
}
