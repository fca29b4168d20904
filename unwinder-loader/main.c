/* SPDX-License-Identifier: MIT */

/* ebpf-profiler-loader: loads the eBPF sampler, turns its records into traces for the
 * collector and serves org.ebpfprofiler.Loader1. Start-up checks name the cause and the fix of
 * every failure that is the machine's configuration rather than a bug. */

#include <bpf/libbpf.h>
#include <getopt.h>
#include <linux/capability.h>
#include <pwd.h>
#include <inttypes.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>

#include "bus.h"
#include "config.h"
#include "log.h"
#include "loader.h"
#include "sysctl.h"

/* Samples also wake the loader when EP_BPF_WAKEUP_BYTES are waiting or a process is new, and
 * Collector1.Flush drains first (Loader1.Drain): the timer only bounds how stale a quiet
 * machine's samples get. Periodic timers allow a quarter of their period of slack, so sd-event
 * runs them in one wake-up (and at the same moment as other processes' timers). */
#define DRAIN_INTERVAL_USEC (1 * USEC_PER_SEC)
#define STATUS_INTERVAL_USEC (2 * USEC_PER_SEC)
#define SWEEP_INTERVAL_USEC (1 * USEC_PER_SEC)
#define PUBLISH_DELAY_USEC (20 * 1000ULL)

#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
#ifndef CAP_BPF
#define CAP_BPF 39
#endif

static void help(void) {
        printf("Usage: ebpf-profiler-loader [OPTIONS]\n"
               "\n"
               "Samples every CPU with eBPF and hands the stacks to the collector\n"
               "(D-Bus name " EP_BUS_LOADER ").\n"
               "\n"
               "  --frequency HZ       samples per second per CPU, 1..%u (default %u)\n"
               "  --include-idle       also record samples of idle CPUs\n"
               "  --symbolizer-user NAME  the symbolizer's user: only it and root may open mapped\n"
               "                       files, perf maps, process memory, kernel symbols\n"
               "                       (default " EP_SYMBOLIZER_USER ")\n"
               "  --collector-user NAME   the collector's user: only it and root may open the\n"
               "                       trace ring and drain it (default " EP_COLLECTOR_USER ")\n"
               "  --unload-delay TIME  unload a file's unwind table this long after the last\n"
               "                       process mapping it went away (default 60s)\n"
               "  --log-level LEVEL    err, warning, notice, info (default) or debug\n"
               "  --help               show this help\n"
               "  --version            show the version\n",
               LOADER_FREQUENCY_MAX, LOADER_FREQUENCY_DEFAULT);
}

/* Returns 1 to run, 0 to exit successfully, -EINVAL after a usage message. */
static int parse_args(int argc, char **argv, Loader *l) {
        enum { ARG_FREQUENCY = 0x100, ARG_INCLUDE_IDLE, ARG_SYMBOLIZER_USER, ARG_COLLECTOR_USER,
               ARG_UNLOAD_DELAY, ARG_LOG_LEVEL, ARG_VERSION };
        static const struct option options[] = {
                { "frequency", required_argument, NULL, ARG_FREQUENCY },
                { "include-idle", no_argument, NULL, ARG_INCLUDE_IDLE },
                { "symbolizer-user", required_argument, NULL, ARG_SYMBOLIZER_USER },
                { "collector-user", required_argument, NULL, ARG_COLLECTOR_USER },
                { "unload-delay", required_argument, NULL, ARG_UNLOAD_DELAY },
                { "log-level", required_argument, NULL, ARG_LOG_LEVEL },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                {},
        };
        uint64_t v;
        int c, level;

        opterr = 0;
        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0)
                switch (c) {
                case ARG_FREQUENCY:
                        if (ep_parse_uint(optarg, 1, LOADER_FREQUENCY_MAX, &v) < 0) {
                                fprintf(stderr, "ebpf-profiler-loader: invalid --frequency '%s': expected an "
                                                "integer from 1 to %u (samples per second per CPU).\n",
                                        optarg, LOADER_FREQUENCY_MAX);
                                return -EINVAL;
                        }
                        l->frequency = (uint32_t) v;
                        break;
                case ARG_INCLUDE_IDLE:
                        l->include_idle = true;
                        break;
                case ARG_SYMBOLIZER_USER:
                        l->symbolizer_user = optarg;
                        break;
                case ARG_COLLECTOR_USER:
                        l->collector_user = optarg;
                        break;
                case ARG_UNLOAD_DELAY:
                        if (ep_parse_duration(optarg, &v) < 0) {
                                fprintf(stderr, "ebpf-profiler-loader: invalid --unload-delay '%s': expected a "
                                                "duration such as 60s, 500ms or 5min.\n", optarg);
                                return -EINVAL;
                        }
                        l->unload_delay_ns = v;
                        break;
                case ARG_LOG_LEVEL:
                        level = log_parse_level(optarg);
                        if (level < 0) {
                                fprintf(stderr, "ebpf-profiler-loader: invalid --log-level '%s': expected err, "
                                                "warning, notice, info or debug.\n", optarg);
                                return -EINVAL;
                        }
                        log_set_max_level(level);
                        break;
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("ebpf-profiler-loader %s\n", EP_VERSION);
                        return 0;
                default:
                        return ep_daemon_getopt_error("ebpf-profiler-loader", c, argv);
                }
        if (ep_daemon_no_arguments("ebpf-profiler-loader", argc, argv) < 0)
                return -EINVAL;
        return 1;
}

static bool have_capability(const struct __user_cap_data_struct caps[2], int cap) {
        return caps[cap / 32].effective & (1u << (cap % 32));
}

static int check_privileges(void) {
        struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
        struct __user_cap_data_struct caps[2] = {};
        bool bpf, perfmon;

        if (syscall(SYS_capget, &hdr, caps) < 0)
                return log_error_errno(errno, "Cannot read the process capabilities: %m");
        bpf = have_capability(caps, CAP_BPF) || have_capability(caps, CAP_SYS_ADMIN);
        perfmon = have_capability(caps, CAP_PERFMON) || have_capability(caps, CAP_SYS_ADMIN);
        if (bpf && perfmon)
                return 0;
        if (geteuid() != 0)
                log_error("ebpf-profiler-loader must run as root (it loads eBPF programs and opens perf "
                          "events); it runs as uid %u%s. Start it as root, or grant CAP_BPF and "
                          "CAP_PERFMON (plus CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE for "
                          "/proc/PID/map_files, CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH for other users' "
                          "processes).",
                          (unsigned) geteuid(), bpf || perfmon ? " with only part of the capabilities" : "");
        else
                log_error("ebpf-profiler-loader runs as root but without %s%s%s in its effective "
                          "capability set (a capability bounding set or a container policy took it away). "
                          "Grant CAP_BPF and CAP_PERFMON.",
                          bpf ? "" : "CAP_BPF", !bpf && !perfmon ? " and " : "", perfmon ? "" : "CAP_PERFMON");
        return -EPERM;
}

/* The perf events are open and the sampling program is attached: CAP_PERFMON is needed no more
 * (SetFrequency changes the period of the open events in place). Dropped from the effective,
 * permitted and inheritable sets, so a loader taken over cannot open perf events of its own. The
 * rest of its capabilities serve every new process (CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH,
 * CAP_CHECKPOINT_RESTORE), every new table (CAP_BPF) and every kernel symbol request
 * (CAP_SYSLOG). Root with CAP_SYS_ADMIN (under `ebpf-profiler run`) keeps perf access through it. */
static void drop_startup_capabilities(void) {
        struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
        struct __user_cap_data_struct caps[2] = {};
        uint32_t bit = 1u << (CAP_PERFMON % 32);
        struct __user_cap_data_struct *c = &caps[CAP_PERFMON / 32];

        if (syscall(SYS_capget, &hdr, caps) < 0) {
                log_warning_errno(errno, "Cannot read the capabilities to drop CAP_PERFMON: %m");
                return;
        }
        if (!((c->effective | c->permitted | c->inheritable) & bit))
                return;
        c->effective &= ~bit;
        c->permitted &= ~bit;
        c->inheritable &= ~bit;
        if (syscall(SYS_capset, &hdr, caps) < 0)
                log_warning_errno(errno, "Cannot drop CAP_PERFMON after start-up (is capset() allowed?): %m");
        else
                log_debug("Dropped CAP_PERFMON: the perf events are open.");
}

static int check_btf(void) {
        if (access("/sys/kernel/btf/vmlinux", R_OK) >= 0)
                return 0;
        return log_error_errno(errno,
                               "This kernel exposes no BTF type information (/sys/kernel/btf/vmlinux: %m). "
                               "The eBPF programs are relocated against it at load time (CO-RE). Use a "
                               "kernel built with CONFIG_DEBUG_INFO_BTF=y (all major distributions since "
                               "2020), version 5.17 or newer.");
}

void loader_set_error(Loader *l, const char *format, ...) {
        va_list ap;

        /* PropertiesChanged comes with the other statistics (loader_bus_emit_changes). */
        va_start(ap, format);
        (void) ep_daemon_set_last_errorv(NULL, &l->last_error, format, ap);
        va_end(ap);
}

bool loader_collector_attached(const Loader *l) {
        return l->consumer && sd_bus_track_count(l->consumer) > 0;
}

static uint64_t physical_memory(void) {
        long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
        return pages > 0 && size > 0 ? (uint64_t) pages * (uint64_t) size : 1ULL << 30;
}

static uint32_t pid_max(void) {
        long v;

        if (ep_sysctl_int("kernel/pid_max", &v) < 0 || v <= 0 || v > UINT32_MAX)
                return 32768;
        return (uint32_t) v;
}

/* CLOCK_REALTIME - CLOCK_BOOTTIME, read between two BOOTTIME readings to halve the error. */
static uint64_t measure_boot_to_realtime(void) {
        uint64_t best = 0, best_gap = UINT64_MAX;

        for (int i = 0; i < 5; i++) {
                uint64_t b1 = ep_now_ns(CLOCK_BOOTTIME), rt = ep_now_ns(CLOCK_REALTIME);
                uint64_t b2 = ep_now_ns(CLOCK_BOOTTIME);
                if (b2 - b1 < best_gap) {
                        best_gap = b2 - b1;
                        best = rt - (b1 + (b2 - b1) / 2);
                }
        }
        return best;
}

static int on_bpf_record(void *ctx, void *data, size_t size) {
        Loader *l = ctx;
        int r = loader_handle_bpf_record(l, data, size);

        if (r == -EBADMSG) {
                log_once(LOG_WARNING, "Malformed record in the BPF ring buffer (size %zu); skipped.", size);
                loader_set_error(l, "malformed record in the BPF ring buffer");
        } else if (r == -ENOMEM) {
                log_once(LOG_ERR, "Out of memory while converting a trace; dropped.");
                loader_set_error(l, "out of memory while converting a trace");
        }
        return 0; /* keep draining */
}

void loader_drain(Loader *l) {
        int r = ring_buffer__consume(l->bpf_ring);

        if (r < 0)
                log_once_errno(LOG_WARNING, r, "Reading the BPF ring buffer failed: %m");
        loader_retry_deferred(l, 0);
        if (l->ring_dirty) {
                (void) ep_ring_notify(l->ring); /* once per batch, not per record */
                l->ring_dirty = false;
        }
}

static void on_table_loaded(uint32_t file_key, void *userdata) {
        loader_retry_deferred(userdata, file_key);
}

static int on_publish_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Loader *l = userdata;

        ep_tables_publish(l->tables);
        return 0;
}

/* A table is ready to be published: wait a little for others, then publish them together. */
static void on_publish_soon(void *userdata) {
        Loader *l = userdata;
        int r = 0;

        if (!l->publish_timer)
                r = sd_event_add_time_relative(l->daemon.event, &l->publish_timer, CLOCK_MONOTONIC,
                                               PUBLISH_DELAY_USEC, 0, on_publish_timer, l);
        else {
                int enabled = SD_EVENT_OFF;
                (void) sd_event_source_get_enabled(l->publish_timer, &enabled);
                if (enabled != SD_EVENT_OFF)
                        return; /* already coming */
                r = sd_event_source_set_time_relative(l->publish_timer, PUBLISH_DELAY_USEC);
                if (r >= 0)
                        r = sd_event_source_set_enabled(l->publish_timer, SD_EVENT_ONESHOT);
        }
        if (r < 0)
                ep_tables_publish(l->tables); /* no timer: at once */
}

static int on_bpf_ring_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        loader_drain(userdata);
        return 0;
}

static int on_drain_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        loader_drain(userdata);
        return sd_event_source_set_time_relative(s, DRAIN_INTERVAL_USEC);
}

static int on_status_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Loader *l = userdata;
        uint64_t c[EP_BPF_CNT_MAX];

        if (ep_bpf_read_counters(l->bpf, c) >= 0 && c[EP_BPF_CNT_RINGBUF_FULL] > l->lost_samples_seen) {
                if (l->lost_samples_seen == 0)
                        log_warning("The BPF ring buffer overflowed: samples are being lost (see the "
                                    "LostSamples property). The loader is not draining fast enough.");
                loader_set_error(l, "BPF ring buffer full: %" PRIu64 " samples lost so far",
                                 c[EP_BPF_CNT_RINGBUF_FULL]);
                l->lost_samples_seen = c[EP_BPF_CNT_RINGBUF_FULL];
        }

        loader_bus_emit_changes(l);
        ep_daemon_status(&l->daemon, "Sampling %u CPUs at %u Hz; %" PRIu64 " traces sent, %zu processes, %zu files",
                         ep_bpf_n_cpus(l->bpf), l->frequency, l->traces_sent,
                         ep_proc_table_n_processes(l->procs), ep_proc_table_n_files(l->procs));
        return sd_event_source_set_time_relative(s, STATUS_INTERVAL_USEC);
}

static int on_sweep_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Loader *l = userdata;

        loader_sweep_processes(l);
        ep_tables_sweep(l->tables);
        return sd_event_source_set_time_relative(s, SWEEP_INTERVAL_USEC);
}

static int add_timer(Loader *l, sd_event_source **ret, uint64_t interval, sd_event_time_handler_t handler) {
        int r = sd_event_add_time_relative(l->daemon.event, ret, CLOCK_MONOTONIC, interval, interval / 4,
                                           handler, l);
        if (r >= 0)
                r = sd_event_source_set_enabled(*ret, SD_EVENT_ON);
        return r;
}

static int setup_event_sources(Loader *l) {
        int r;

        l->bpf_ring = ring_buffer__new(ep_bpf_events_fd(l->bpf), on_bpf_record, l, NULL);
        if (!l->bpf_ring)
                return log_error_errno(errno, "Cannot map the BPF ring buffer: %m");
        r = sd_event_add_io(l->daemon.event, &l->bpf_ring_source, ring_buffer__epoll_fd(l->bpf_ring), EPOLLIN,
                            on_bpf_ring_io, l);
        if (r >= 0)
                r = add_timer(l, &l->drain_timer, DRAIN_INTERVAL_USEC, on_drain_timer);
        if (r >= 0)
                r = add_timer(l, &l->status_timer, STATUS_INTERVAL_USEC, on_status_timer);
        if (r >= 0)
                r = add_timer(l, &l->sweep_timer, SWEEP_INTERVAL_USEC, on_sweep_timer);
        if (r < 0)
                return log_error_errno(r, "Cannot set up the event loop sources: %m");
        return 0;
}

static void loader_done(Loader *l) {
        sd_event_source_disable_unref(l->bpf_ring_source);
        sd_event_source_disable_unref(l->drain_timer);
        sd_event_source_disable_unref(l->status_timer);
        sd_event_source_disable_unref(l->sweep_timer);
        sd_event_source_disable_unref(l->publish_timer);
        sd_bus_track_unref(l->consumer);
        ring_buffer__free(l->bpf_ring);
        ep_symclient_free(l->symclient);
        loader_deferred_free(l);
        loader_runtimes_free(l);
        ep_proc_table_free(l->procs); /* before the tables: no forget calls on free */
        ep_tables_free(l->tables);
        ep_bpf_free(l->bpf);
        ep_bpf_lister_free(l->bpf_lister);
        ep_ring_free(l->ring);
        trace_cache_free(l->trace_cache);
        free(l->proc_scratch);
        free(l->last_error);
        ep_daemon_done(&l->daemon);
}

/* The loader holds one descriptor per mapped file it knows (proc-maps.c pins each inode it
 * identified), more than a service's soft limit (1024) on a big host: up to the hard limit,
 * which is the administrator's. Nothing here uses select(), which could not take them. */
static rlim_t raise_fd_limit(void) {
        struct rlimit rl;

        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return 1024;
        if (rl.rlim_cur >= rl.rlim_max)
                return rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) >= 0)
                return rl.rlim_cur;
        log_warning_errno(errno, "Cannot raise the limit of open files to %llu: %m", (unsigned long long) rl.rlim_max);
        return getrlimit(RLIMIT_NOFILE, &rl) < 0 ? 1024 : rl.rlim_cur;
}

int main(int argc, char **argv) {
        static Loader loader; /* large (frame scratch): not on the stack */
        Loader *l = &loader;
        rlim_t fd_limit;
        int r;

        l->frequency = LOADER_FREQUENCY_DEFAULT;
        l->unload_delay_ns = LOADER_UNLOAD_DELAY_DEFAULT_NS;
        l->symbolizer_user = EP_SYMBOLIZER_USER;
        l->collector_user = EP_COLLECTOR_USER;
        log_setup("ebpf-profiler-loader");
        r = parse_args(argc, argv, l);
        if (r <= 0)
                return r < 0 ? 2 : 0;
        /* The bus policy already limits who may ask for descriptors; the loader checks again,
         * since what it hands out was opened with root's reach. */
        l->symbolizer_uid = ep_peer_user_uid(l->symbolizer_user, "--symbolizer-user");
        l->collector_uid = ep_peer_user_uid(l->collector_user, "--collector-user");

        if (check_privileges() < 0 || check_btf() < 0)
                return 1;
        fd_limit = raise_fd_limit();

        l->boot_to_realtime_ns = measure_boot_to_realtime();
        r = ep_proc_table_new("/proc", l->boot_to_realtime_ns, &l->procs);
        if (r >= 0) /* like the file slots: an eighth for each user but root */
                ep_proc_table_set_max_user_pins(l->procs,
                                                (unsigned) MIN(fd_limit / 8, (rlim_t) EP_PROC_TABLE_USER_PINS_MAX));
        if (r >= 0)
                r = ep_ring_create("ebpf-profiler-traces", LOADER_TRACE_RING_SIZE, &l->ring);
        if (r >= 0)
                r = trace_cache_new(LOADER_TRACE_CACHE_SLOTS, LOADER_TRACE_CACHE_BYTES, &l->trace_cache);
        if (r < 0) {
                log_error_errno(r, "Cannot allocate the loader's tables and trace ring: %m");
                goto finish;
        }

        l->limits = ep_bpf_limits_for(physical_memory(), pid_max(), l->frequency,
                                      (unsigned) MAX(sysconf(_SC_NPROCESSORS_ONLN), 1L));
        r = ep_bpf_load(l->include_idle, &l->limits, &l->bpf);
        if (r < 0)
                goto finish;
        l->maps = ep_bpf_unwind_maps(l->bpf);
        log_info("BPF ring buffer %u KiB; native unwinding maps: up to %u processes, %u files, %u table "
                 "pages, %u rules (at most %" PRIu64 " MiB of kernel memory when full).",
                 l->limits.ringbuf_bytes >> 10, l->limits.max_processes, l->limits.max_files - 1,
                 l->limits.max_pages, EP_BPF_MAX_RULES, ep_bpf_limits_max_bytes(&l->limits) >> 20);
        l->proc_scratch = calloc(1, sizeof *l->proc_scratch);
        if (!l->proc_scratch) {
                r = log_error_errno(ENOMEM, "Out of memory.");
                goto finish;
        }
        r = ep_tables_new(&l->maps, l->limits.max_files, l->unload_delay_ns, &l->tables);
        if (r < 0) {
                log_error_errno(r, "Cannot set up the unwind tables: %m");
                goto finish;
        }
        ep_proc_table_set_forget(l->procs, loader_untrack_process, l);
        loader_setup_vdso(l);
        ep_tables_set_loaded_cb(l->tables, on_table_loaded, l);

        r = ep_bpf_start_sampling(l->bpf, l->frequency);
        if (r < 0)
                goto finish;
        /* Before CAP_PERFMON goes: the iterator is a tracing program. */
        r = ep_bpf_lister_new(&l->bpf_lister);
        if (r < 0)
                log_warning_errno(r, "Cannot load the iterator over BPF programs, so BPF code will be named "
                                  "from kallsyms alone (ListBpfPrograms fails): %m");
        drop_startup_capabilities();

        r = ep_daemon_setup(&l->daemon, "ebpf-profiler-loader");
        if (r < 0)
                goto finish;
        ep_daemon_drop_exporter_environment(&l->daemon);
        ep_tables_set_publish_cb(l->tables, on_publish_soon, l);
        r = ep_symclient_new(&l->daemon, l->tables, l->procs, &l->symclient);
        if (r < 0)
                goto finish;
        /* Samples of processes not known yet are kept (frame-pointer steps) and make them
         * known; the scan covers everything that runs already. */
        (void) loader_scan_processes(l);
        r = setup_event_sources(l);
        if (r < 0)
                goto finish;
        r = loader_bus_publish(l);
        if (r < 0)
                goto finish;

        log_info("Sampling %u CPUs at %u Hz%s.", ep_bpf_n_cpus(l->bpf), l->frequency,
                 l->include_idle ? " (idle included)" : "");
        ep_daemon_status(&l->daemon, "Sampling %u CPUs at %u Hz", ep_bpf_n_cpus(l->bpf), l->frequency);
        r = ep_daemon_run(&l->daemon);

finish:
        loader_done(l);
        return r < 0 ? EXIT_FAILURE : r;
}
