/* SPDX-License-Identifier: MIT */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "bpf-setup.h"
#include "log.h"
#include "proc-parse.h"
#include "native-unwind.h"
#include "profiler.skel.h"
#include "ring-size.h"
#include "sysctl.h"

#define MAX_CPUS 4096

typedef struct PerfEvent {
        int fd;
        struct bpf_link *link;
} PerfEvent;

struct EpBpf {
        struct profiler *skel;
        PerfEvent *events; /* one per online CPU */
        unsigned n_events;
};

static int libbpf_log(enum libbpf_print_level level, const char *format, va_list ap) _printf_(2, 0);
static int libbpf_log(enum libbpf_print_level level, const char *format, va_list ap) {
        char buf[1024];
        size_t n;

        /* libbpf is chatty and its failures are reported by us with cause and fix; its own
         * lines (the verifier log among them) are there with --log-level=debug. */
        if (log_get_max_level() < LOG_DEBUG)
                return 0;
        vsnprintf(buf, sizeof buf, format, ap);
        n = strlen(buf);
        while (n > 0 && buf[n - 1] == '\n')
                buf[--n] = 0;
        log_debug("%s", buf);
        return 0;
}

static void perf_events_close(PerfEvent *v, unsigned n) {
        for (unsigned i = 0; i < n; i++) {
                bpf_link__destroy(v[i].link);
                close_nointr(v[i].fd);
        }
        free(v);
}

EpBpf *ep_bpf_free(EpBpf *b) {
        if (!b)
                return NULL;
        perf_events_close(b->events, b->n_events);
        profiler__destroy(b->skel);
        free(b);
        return NULL;
}

EpBpfLimits ep_bpf_limits_for(uint64_t mem_bytes, uint32_t pid_max, uint32_t hz, unsigned n_cpus) {
        EpBpfLimits lim = {
                /* Processes: a 12 KiB entry each, only for processes that exist. */
                .max_processes = (uint32_t) MIN((uint64_t) MAX(pid_max, 1024u), 65536),
                /* Files: 8 bytes per slot in the outer array, 4 in file_state. A busy machine
                 * maps a few thousand distinct executables and libraries. */
                .max_files = mem_bytes >= (4ULL << 30) ? 32768 : 8192,
                /* Pages: ~96 bytes each, allocated on use; one per 64 KiB of text. At most
                 * 1/64 of memory, between 64 Ki and 1 Mi entries. */
                .max_pages = (uint32_t) MIN(MAX(mem_bytes / 64 / 96, 65536), 1u << 20),
                .ringbuf_bytes = ep_bpf_ringbuf_size(hz, n_cpus),
        };
        return lim;
}

uint64_t ep_bpf_limits_max_bytes(const EpBpfLimits *lim) {
        return (uint64_t) lim->ringbuf_bytes + (uint64_t) lim->max_processes * (sizeof(struct ep_bpf_proc) + 64) +
               (uint64_t) lim->max_pages * 96 + (uint64_t) lim->max_files * (8 + 8) +
               (uint64_t) EP_BPF_MAX_RULES * sizeof(struct ep_unwind_rule);
}

EpUnwindMaps ep_bpf_unwind_maps(const EpBpf *b) {
        return (EpUnwindMaps) {
                .proc_mappings = bpf_map__fd(b->skel->maps.proc_mappings),
                .unwind_rules = bpf_map__fd(b->skel->maps.unwind_rules),
                .unwind_pages = bpf_map__fd(b->skel->maps.unwind_pages),
                .unwind_tables = bpf_map__fd(b->skel->maps.unwind_tables),
                .file_state = bpf_map__fd(b->skel->maps.file_state),
                .py_procs = bpf_map__fd(b->skel->maps.py_procs),
                .tables_gen = &b->skel->bss->tables_gen,
        };
}

/* The inode number of the initial PID namespace (include/linux/proc_ns.h). */
#define PROC_PID_INIT_INO 0xEFFFFFFCU

/* Where the BPF programs must translate process IDs: the loader's PID namespace, or 0/0 in the
 * initial one (no translation). In a container the loader reads /proc of its own namespace, so
 * the IDs in the records must be those. */
static int loader_pid_namespace(uint64_t *ret_dev, uint64_t *ret_ino) {
        struct stat st;

        if (stat("/proc/self/ns/pid", &st) < 0)
                return log_error_errno(errno, "Cannot find the loader's PID namespace (/proc/self/ns/pid): %m");
        if (st.st_ino == PROC_PID_INIT_INO) {
                *ret_dev = *ret_ino = 0;
                return 0;
        }
        log_info("Running in a PID namespace (inode %" PRIu64 "): only its processes are profiled.",
                 (uint64_t) st.st_ino);
        *ret_dev = st.st_dev;
        *ret_ino = st.st_ino;
        return 0;
}

int ep_bpf_load(bool include_idle, const EpBpfLimits *limits, EpBpf **ret) {
        _cleanup_(ep_bpf_freep) EpBpf *b = NULL;
        uint64_t pidns_dev = 0, pidns_ino = 0;
        int r;

        libbpf_set_print(libbpf_log);
        b = calloc(1, sizeof *b);
        if (!b)
                return -ENOMEM;

        b->skel = profiler__open();
        if (!b->skel)
                return log_error_errno(errno, "Failed to open the BPF object: %m");
        b->skel->rodata->include_idle = include_idle;
        r = loader_pid_namespace(&pidns_dev, &pidns_ino);
        if (r < 0)
                return r;
        b->skel->rodata->pidns_dev = pidns_dev;
        b->skel->rodata->pidns_ino = pidns_ino;
        if (bpf_map__set_max_entries(b->skel->maps.proc_mappings, limits->max_processes) < 0 ||
            bpf_map__set_max_entries(b->skel->maps.unwind_tables, limits->max_files) < 0 ||
            bpf_map__set_max_entries(b->skel->maps.file_state, limits->max_files) < 0 ||
            bpf_map__set_max_entries(b->skel->maps.unwind_pages, limits->max_pages) < 0 ||
            bpf_map__set_max_entries(b->skel->maps.events, limits->ringbuf_bytes) < 0)
                return log_error_errno(errno, "Cannot size the BPF maps: %m");

        r = profiler__load(b->skel);
        /* The verifier rejects a program with EACCES too: only EPERM surely means privilege. */
        if (r == -EPERM)
                return log_error_errno(r,
                                       "Loading BPF programs is not permitted (%m). The loader needs CAP_BPF and "
                                       "CAP_PERFMON in the initial user namespace; in a container, allow the bpf() "
                                       "and perf_event_open() system calls and grant those capabilities (for "
                                       "systemd-nspawn: --capability=CAP_BPF,CAP_PERFMON "
                                       "--system-call-filter='bpf perf_event_open').");
        if (r < 0)
                return log_error_errno(r,
                                       "Failed to load the BPF programs: %m. The kernel's verifier may have "
                                       "rejected them, this kernel may lack a feature they need (BTF, bpf_loop: "
                                       "Linux >= 5.17), or loading is not permitted here (CAP_BPF, CAP_PERFMON); "
                                       "run with --log-level=debug for the verifier log.");

        r = profiler__attach(b->skel); /* the tracepoints; on_sample is attached per CPU */
        if (r < 0)
                return log_error_errno(r, "Failed to attach the process exit/exec tracepoints: %m");

        *ret = TAKE_PTR(b);
        return 0;
}

static int online_cpus(bool *online, size_t n) {
        _cleanup_fclose_ FILE *f = fopen("/sys/devices/system/cpu/online", "re");
        char buf[4096];
        int k;

        if (!f || !fgets(buf, sizeof buf, f)) {
                /* Unusual: fall back to every configured CPU. */
                long c = sysconf(_SC_NPROCESSORS_ONLN);
                memset(online, 0, n * sizeof *online);
                for (long i = 0; i < c && (size_t) i < n; i++)
                        online[i] = true;
                return c > 0 ? (int) MIN((size_t) c, n) : -ENODEV;
        }
        k = ep_parse_cpu_list(buf, online, n);
        return k > 0 ? k : -ENODEV;
}

static int perf_error(int cpu, int error) {
        long paranoid;

        if (error != EACCES && error != EPERM)
                return log_error_errno(error, "perf_event_open() of the CPU clock on CPU %d failed: %m", cpu);
        if (ep_sysctl_int("kernel/perf_event_paranoid", &paranoid) < 0)
                paranoid = 99;
        if (paranoid >= 3)
                /* Debian's and Ubuntu's kernels add level 3: only CAP_SYS_ADMIN may open perf
                 * events then, CAP_PERFMON is not enough. */
                return log_error_errno(error,
                                       "perf events are blocked: perf_event_open() on CPU %d failed (%m) because "
                                       "kernel.perf_event_paranoid is %ld; at 3 and above this distribution's "
                                       "kernel admits only CAP_SYS_ADMIN. The package ships "
                                       "/usr/lib/sysctl.d/60-ebpf-profiler.conf setting it to 2 (the upstream "
                                       "default): apply it with 'sysctl --system', or check for a file that "
                                       "overrides it ('systemd-analyze cat-config sysctl.d'). Alternatively grant "
                                       "the loader CAP_SYS_ADMIN ('systemctl edit ebpf-profiler-loader.service').",
                                       cpu, paranoid);
        return log_error_errno(error,
                               "perf events are blocked: perf_event_open() on CPU %d failed (%m); "
                               "kernel.perf_event_paranoid is %ld. System-wide sampling needs CAP_PERFMON "
                               "(or CAP_SYS_ADMIN, or root); without it, set sysctl kernel.perf_event_paranoid=-1. "
                               "In a container, allow perf_event_open() (seccomp) as well.",
                               cpu, paranoid);
}

/* Changes the period of the open events in place: no gap in sampling, and no new
 * perf_event_open() that the loader's privileges might no longer allow. */
static int set_period(EpBpf *b, uint32_t hz) {
        uint64_t period = NSEC_PER_SEC / hz;

        for (unsigned i = 0; i < b->n_events; i++)
                if (ioctl(b->events[i].fd, PERF_EVENT_IOC_PERIOD, &period) < 0)
                        return log_warning_errno(errno, "Cannot change the sampling period on event %u: %m; "
                                                 "re-opening the perf events.", i);
        return 0;
}

int ep_bpf_start_sampling(EpBpf *b, uint32_t hz) {
        _cleanup_free_ bool *online = NULL;
        PerfEvent *v = NULL;
        unsigned n = 0;
        int k, r = 0;

        if (hz == 0)
                return -EINVAL;
        if (b->n_events > 0 && set_period(b, hz) >= 0)
                return 0;
        online = calloc(MAX_CPUS, sizeof *online);
        if (!online)
                return -ENOMEM;
        k = online_cpus(online, MAX_CPUS);
        if (k < 0)
                return log_error_errno(k, "Cannot find the online CPUs: %m");
        v = calloc(k, sizeof *v);
        if (!v)
                return -ENOMEM;

        for (int cpu = 0; cpu < MAX_CPUS && n < (unsigned) k; cpu++) {
                struct perf_event_attr attr = {
                        .type = PERF_TYPE_SOFTWARE,
                        .size = sizeof attr,
                        .config = PERF_COUNT_SW_CPU_CLOCK,
                        /* The CPU clock is a timer: a period in nanoseconds gives exactly hz. */
                        .sample_period = NSEC_PER_SEC / hz,
                        .disabled = 1,
                };
                int fd;

                if (!online[cpu])
                        continue;
                fd = (int) syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
                if (fd < 0) {
                        r = perf_error(cpu, errno);
                        break;
                }
                v[n].fd = fd;
                v[n].link = bpf_program__attach_perf_event(b->skel->progs.on_sample, fd);
                n++;
                if (!v[n - 1].link) {
                        r = log_error_errno(errno, "Failed to attach the sampling program on CPU %d: %m", cpu);
                        break;
                }
        }
        if (r < 0) {
                perf_events_close(v, n);
                return r;
        }

        perf_events_close(b->events, b->n_events);
        b->events = v;
        b->n_events = n;
        return 0;
}

unsigned ep_bpf_n_cpus(const EpBpf *b) {
        return b->n_events;
}

int ep_bpf_events_fd(const EpBpf *b) {
        return bpf_map__fd(b->skel->maps.events);
}

/* All the per-CPU counters in one system call (batched lookups came in Linux 5.6; the
 * programs need 5.17 for bpf_loop). */
int ep_bpf_read_counters(const EpBpf *b, uint64_t ret[EP_BPF_CNT_MAX]) {
        uint32_t keys[EP_BPF_CNT_MAX], count = EP_BPF_CNT_MAX, out_batch = 0;
        int ncpu = libbpf_num_possible_cpus(), fd = bpf_map__fd(b->skel->maps.counters);
        LIBBPF_OPTS(bpf_map_batch_opts, opts);
        _cleanup_free_ uint64_t *values = NULL;

        if (ncpu <= 0)
                return ncpu < 0 ? ncpu : -ENODEV;
        values = calloc((size_t) ncpu * EP_BPF_CNT_MAX, sizeof *values);
        if (!values)
                return -ENOMEM;
        if (bpf_map_lookup_batch(fd, NULL, &out_batch, keys, values, &count, &opts) < 0 && errno != ENOENT)
                return -errno;
        if (count != EP_BPF_CNT_MAX)
                return -EIO;
        for (uint32_t i = 0; i < count; i++) {
                if (keys[i] >= EP_BPF_CNT_MAX)
                        return -EIO;
                ret[keys[i]] = 0;
                for (int c = 0; c < ncpu; c++)
                        ret[keys[i]] += values[(size_t) i * ncpu + c];
        }
        return 0;
}
