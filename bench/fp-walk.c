/* SPDX-License-Identifier: MIT */
/* Runs bench/fp-walk.bpf.c (the kernel's frame-pointer walk of the user stack) on a CPU-clock
 * perf event per CPU for a while and prints what the kernel's BPF statistics say it cost:
 *
 *     bench-fp-walk BPF_OBJECT FREQUENCY_HZ SECONDS
 *     {"samples": N, "run_time_ns": T, "user_stacks": S, "frames": F}
 *
 * Needs root and BPF run-time statistics on (bench/bpf-cost.py holds BPF_ENABLE_STATS, and sets
 * kernel.perf_event_max_stack so the walk is not cut at 127 frames). */

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t percpu_sum(int map_fd, uint32_t key, int n_cpus) {
        uint64_t values[n_cpus], sum = 0;

        if (bpf_map_lookup_elem(map_fd, &key, values) < 0)
                return 0;
        for (int i = 0; i < n_cpus; i++)
                sum += values[i];
        return sum;
}

int main(int argc, char **argv) {
        struct bpf_prog_info info = {};
        uint32_t info_len = sizeof(info);
        struct bpf_object *obj;
        struct bpf_program *prog;
        int n_cpus = libbpf_num_possible_cpus(), totals_fd;
        double seconds;
        long freq;

        if (argc != 4 || (freq = strtol(argv[2], NULL, 10)) <= 0 || (seconds = strtod(argv[3], NULL)) <= 0) {
                fprintf(stderr, "usage: %s BPF_OBJECT FREQUENCY_HZ SECONDS\n", argv[0]);
                return 2;
        }
        obj = bpf_object__open_file(argv[1], NULL);
        if (!obj || bpf_object__load(obj) < 0) {
                fprintf(stderr, "%s: cannot load %s: %s\n", argv[0], argv[1], strerror(errno));
                return 1;
        }
        prog = bpf_object__find_program_by_name(obj, "fp_walk");
        totals_fd = bpf_object__find_map_fd_by_name(obj, "totals");
        if (!prog || totals_fd < 0 || n_cpus <= 0) {
                fprintf(stderr, "%s: %s has no fp_walk program or totals map\n", argv[0], argv[1]);
                return 1;
        }
        for (int cpu = 0; cpu < n_cpus; cpu++) {
                struct perf_event_attr attr = {
                        .type = PERF_TYPE_SOFTWARE,
                        .size = sizeof(attr),
                        .config = PERF_COUNT_SW_CPU_CLOCK,
                        .freq = 1,
                        .sample_freq = (uint64_t) freq,
                };
                int fd = (int) syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);

                if (fd < 0)
                        continue; /* an offline CPU */
                if (!bpf_program__attach_perf_event(prog, fd)) {
                        fprintf(stderr, "%s: cannot attach to CPU %d: %s\n", argv[0], cpu, strerror(errno));
                        return 1;
                }
        }
        struct timespec ts = { .tv_sec = (time_t) seconds,
                               .tv_nsec = (long) ((seconds - (double) (time_t) seconds) * 1e9) };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
        if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &info_len) < 0) {
                fprintf(stderr, "%s: cannot read the program's statistics: %s\n", argv[0], strerror(errno));
                return 1;
        }
        printf("{\"samples\": %" PRIu64 ", \"run_time_ns\": %" PRIu64 ", \"user_stacks\": %" PRIu64
               ", \"frames\": %" PRIu64 "}\n",
               (uint64_t) info.run_cnt, (uint64_t) info.run_time_ns, percpu_sum(totals_fd, 0, n_cpus),
               percpu_sum(totals_fd, 1, n_cpus));
        return 0;
}
