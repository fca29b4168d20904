/* SPDX-License-Identifier: MIT */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#include "bpf-setup.h"
#include "log.h"
#include "proc-parse.h"
#include "native-unwind.h"
#include "profiler.skel.h"

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

EpBpfLimits ep_bpf_limits_for(uint64_t mem_bytes, uint32_t pid_max) {
        EpBpfLimits lim = {
                /* Processes: a 12 KiB entry each, only for processes that exist. */
                .max_processes = (uint32_t) MIN((uint64_t) MAX(pid_max, 1024u), 65536),
                /* Files: 8 bytes per slot in the outer array, 4 in file_state. A busy machine
                 * maps a few thousand distinct executables and libraries. */
                .max_files = mem_bytes >= (4ULL << 30) ? 32768 : 8192,
                /* Pages: ~96 bytes each, allocated on use; one per 64 KiB of text. At most
                 * 1/64 of memory, between 64 Ki and 1 Mi entries. */
                .max_pages = (uint32_t) MIN(MAX(mem_bytes / 64 / 96, 65536), 1u << 20),
        };
        return lim;
}

uint64_t ep_bpf_limits_max_bytes(const EpBpfLimits *lim) {
        return (uint64_t) lim->max_processes * (sizeof(struct ep_bpf_proc) + 64) +
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
        };
}

int ep_bpf_load(bool include_idle, const EpBpfLimits *limits, EpBpf **ret) {
        _cleanup_(ep_bpf_freep) EpBpf *b = NULL;
        int r;

        libbpf_set_print(libbpf_log);
        b = calloc(1, sizeof *b);
        if (!b)
                return -ENOMEM;

        b->skel = profiler__open();
        if (!b->skel)
                return log_error_errno(errno, "Failed to open the BPF object: %m");
        b->skel->rodata->include_idle = include_idle;
        if (bpf_map__set_max_entries(b->skel->maps.proc_mappings, limits->max_processes) < 0 ||
            bpf_map__set_max_entries(b->skel->maps.unwind_tables, limits->max_files) < 0 ||
            bpf_map__set_max_entries(b->skel->maps.file_state, limits->max_files) < 0 ||
            bpf_map__set_max_entries(b->skel->maps.unwind_pages, limits->max_pages) < 0)
                return log_error_errno(errno, "Cannot size the BPF maps: %m");

        r = profiler__load(b->skel);
        if (r == -EPERM || r == -EACCES)
                return log_error_errno(r,
                                       "Loading BPF programs is not permitted (%m). The loader needs CAP_BPF and "
                                       "CAP_PERFMON in the initial user namespace; in a container, allow the bpf() "
                                       "and perf_event_open() system calls and grant those capabilities (for "
                                       "systemd-nspawn: --capability=CAP_BPF,CAP_PERFMON "
                                       "--system-call-filter='bpf perf_event_open').");
        if (r < 0)
                return log_error_errno(r,
                                       "Failed to load the BPF programs: %m. This kernel may lack a feature they "
                                       "need (BTF, bpf_loop: Linux >= 5.17); run with --log-level=debug for the "
                                       "verifier log.");

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
        _cleanup_fclose_ FILE *f = NULL;
        int paranoid = 99;

        if (error != EACCES && error != EPERM)
                return log_error_errno(error, "perf_event_open() of the CPU clock on CPU %d failed: %m", cpu);
        f = fopen("/proc/sys/kernel/perf_event_paranoid", "re");
        if (!f || fscanf(f, "%d", &paranoid) != 1)
                paranoid = 99;
        return log_error_errno(error,
                               "perf events are blocked: perf_event_open() on CPU %d failed (%m); "
                               "kernel.perf_event_paranoid is %d. System-wide sampling needs CAP_PERFMON "
                               "(or CAP_SYS_ADMIN, or root); without it, set sysctl kernel.perf_event_paranoid=-1. "
                               "In a container, allow perf_event_open() (seccomp) as well.",
                               cpu, paranoid);
}

int ep_bpf_start_sampling(EpBpf *b, uint32_t hz) {
        _cleanup_free_ bool *online = NULL;
        PerfEvent *v = NULL;
        unsigned n = 0;
        int k, r = 0;

        if (hz == 0)
                return -EINVAL;
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

int ep_bpf_read_counters(const EpBpf *b, uint64_t ret[EP_BPF_CNT_MAX]) {
        int ncpu = libbpf_num_possible_cpus();
        _cleanup_free_ uint64_t *values = NULL;
        int fd = bpf_map__fd(b->skel->maps.counters);

        if (ncpu <= 0)
                return ncpu < 0 ? ncpu : -ENODEV;
        values = calloc(ncpu, sizeof *values);
        if (!values)
                return -ENOMEM;
        for (uint32_t i = 0; i < EP_BPF_CNT_MAX; i++) {
                ret[i] = 0;
                if (bpf_map_lookup_elem(fd, &i, values) < 0)
                        return -errno;
                for (int c = 0; c < ncpu; c++)
                        ret[i] += values[c];
        }
        return 0;
}
