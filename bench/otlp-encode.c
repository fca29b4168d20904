/* SPDX-License-Identifier: MIT */
/* OTLP encoding cost and size: wire bytes per sample (gzip, as sent) for a typical interval,
 * and encode time (with gzip, as the exporter does per request) per 10,000 samples. A typical interval here is 5 s at 99 Hz on N CPUs (all
 * busy): many processes, stacks of 10-40 frames drawn from a shared pool of frames with
 * symbols (as a real machine's libc/libstdc++/kernel frames repeat across stacks), one
 * timestamp per event. The figures for both the unsplit encoder and the 4 MiB split (what the
 * exporter sends) are printed as a markdown table; "baseline" is the same interval without
 * timestamps, to show what per-event timestamps cost; "strings by index" sends attribute string
 * values and resource attribute keys as string-table references (OtlpEncodeOptions).
 *
 *   build/exporter/bench-otlp-encode [CPUS]
 */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench-util.h"
#include "macro.h"
#include "gzip.h"
#include "otlp-encode.h"
#include "profile-model.h"

#define INTERVAL_S 5
#define HZ 99
#define PROCESSES 60
#define FRAME_POOL 6000
#define STACKS 3000
#define SPLIT_LIMIT (4u << 20)
#define RUNS 5

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return rng_state;
}

static char *_printf_(1, 2) xasprintf(const char *fmt, ...) {
        va_list ap;
        char *s = NULL;
        int r;

        va_start(ap, fmt);
        r = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (r < 0)
                abort();
        return s;
}

static void add_frames(ExpInterval *iv) {
        for (unsigned i = 0; i < FRAME_POOL; i++) {
                ExpFrame *f = exp_interval_add_frame(iv);
                unsigned file = i % 40;

                if (!f)
                        abort();
                f->kind = i % 10 == 0 ? EP_FRAME_KERNEL : EP_FRAME_NATIVE;
                if (f->kind == EP_FRAME_NATIVE) {
                        f->file_id[0] = (uint8_t) (file + 1);
                        f->build_id_len = 20;
                        memset(f->build_id, (int) file + 1, 20);
                        f->mapping_path = xasprintf("/usr/lib/x86_64-linux-gnu/libexample%u.so.%u", file, 1);
                        f->elf_addr = 0x1000 + (uint64_t) i * 64;
                }
                f->addr = 0x1000 + (uint64_t) i * 64;
                f->n_lines = i % 7 == 0 ? 2 : 1; /* some inline chains */
                f->lines = calloc(f->n_lines, sizeof(ExpLine));
                if (!f->lines)
                        abort();
                for (size_t l = 0; l < f->n_lines; l++) {
                        f->lines[l].function = xasprintf("namespace%u::Class::function_%u(int, char const*)", file, i + (unsigned) l);
                        f->lines[l].file = xasprintf("/build/src/module%u/file%u.cc", file, i % 97);
                        f->lines[l].line = 10 + i % 500;
                }
        }
}

static void add_stacks(ExpInterval *iv) {
        for (unsigned i = 0; i < STACKS; i++) {
                ExpStack *s = exp_interval_add_stack(iv);
                if (!s)
                        abort();
                s->n_frames = 10 + rng() % 31;
                s->frames = calloc(s->n_frames, sizeof(uint32_t));
                if (!s->frames)
                        abort();
                for (size_t k = 0; k < s->n_frames; k++)
                        s->frames[k] = (uint32_t) (rng() % FRAME_POOL);
        }
}

/* One sample row per (process, thread, stack) seen, counts summing to cpus × HZ × INTERVAL_S. */
static void add_samples(ExpInterval *iv, unsigned cpus, bool timestamps) {
        uint64_t events = (uint64_t) cpus * HZ * INTERVAL_S, placed = 0;

        for (unsigned p = 0; p < PROCESSES; p++) {
                ExpProcess *pr = exp_interval_add_process(iv);
                if (!pr)
                        abort();
                pr->pid = 1000 + p;
                pr->comm = xasprintf("worker%u", p);
                pr->exe_path = xasprintf("/usr/bin/worker%u", p);
        }
        while (placed < events) {
                ExpSample *s = exp_interval_add_sample(iv);
                unsigned p = (unsigned) (rng() % PROCESSES);

                if (!s)
                        abort();
                s->pid = 1000 + p;
                s->tid = s->pid + (unsigned) (rng() % 4);
                s->cpu = (uint32_t) (rng() % cpus);
                s->thread_name = xasprintf("worker%u-%u", p, s->tid % 4);
                s->stack = (uint32_t) (rng() % STACKS);
                s->count = MIN(1 + rng() % 4, events - placed);
                placed += s->count;
                if (timestamps) {
                        s->timestamps = calloc(s->count, sizeof(uint64_t));
                        if (!s->timestamps)
                                abort();
                        for (size_t t = 0; t < s->count; t++)
                                s->timestamps[t] = iv->start_ns + rng() % (INTERVAL_S * 1000000000ull);
                        s->n_timestamps = s->count;
                }
        }
}

typedef struct Measure {
        uint64_t events;
        size_t raw, gz, requests;
        double encode_ms;
} Measure;

static int count_part(const void *data, size_t size, void *userdata) {
        Measure *m = userdata;
        void *gz = NULL;
        size_t gz_size = 0;

        if (exp_gzip(data, size, &gz, &gz_size) < 0)
                return -ENOMEM;
        free(gz);
        m->raw += size;
        m->gz += gz_size;
        m->requests++;
        return 0;
}

static Measure measure(const ExpInterval *iv, bool split, bool strings_by_index) {
        const OtlpEncodeOptions opts = { .host_name = "bench-host", .strings_by_index = strings_by_index };
        Measure best = { .encode_ms = 1e18 };

        for (int run = 0; run < RUNS; run++) {
                Measure m = { .events = exp_interval_events(iv) };
                double t0 = bench_now_ms();

                if (split) {
                        if (otlp_encode_interval_split(iv, &opts, SPLIT_LIMIT, count_part, &m, NULL) < 0)
                                abort();
                        m.encode_ms = bench_now_ms() - t0;
                } else {
                        void *data = NULL;
                        size_t size = 0;
                        if (otlp_encode_interval(iv, &opts, &data, &size, NULL) < 0 ||
                            count_part(data, size, &m) < 0)
                                abort();
                        m.encode_ms = bench_now_ms() - t0;
                        free(data);
                }
                if (m.encode_ms < best.encode_ms)
                        best = m;
        }
        return best;
}

static void row(const char *what, unsigned cpus, const Measure *m) {
        printf("| %s | %u | %" PRIu64 " | %zu | %zu | %zu | %.1f | %.2f | %.1f |\n", what, cpus, m->events, m->requests,
               m->raw, m->gz, (double) m->gz / (double) m->events, (double) m->raw / (double) m->gz,
               m->encode_ms * 10000.0 / (double) m->events);
}

int main(int argc, char **argv) {
        unsigned cpus = argc > 1 ? (unsigned) atoi(argv[1]) : 16;

        if (cpus == 0) {
                fprintf(stderr, "usage: %s [CPUS]\n", argv[0]);
                return 2;
        }
        printf("Interval of %d s at %d Hz on %u busy CPUs: %d processes, %d stacks of 10-40 frames "
               "from %d distinct frames; best of %d runs.\n\n",
               INTERVAL_S, HZ, cpus, PROCESSES, STACKS, FRAME_POOL, RUNS);
        printf("| encoding | CPUs | samples | requests | protobuf bytes | gzip bytes | gzip bytes/sample | "
               "ratio | encode + gzip ms per 10k samples |\n|---|---|---|---|---|---|---|---|---|\n");

        for (int timestamps = 0; timestamps <= 1; timestamps++) {
                ExpInterval *iv = exp_interval_new(1, 1700000000000000000ull, 1700000005000000000ull,
                                                   1000000000ull / HZ);
                if (!iv)
                        return 1;
                rng_state = 0x9e3779b97f4a7c15ull;
                add_frames(iv);
                add_stacks(iv);
                add_samples(iv, cpus, timestamps);

                Measure whole = measure(iv, false, false), parts = measure(iv, true, false);
                row(timestamps ? "one request" : "one request, baseline: no timestamps", cpus, &whole);
                row(timestamps ? "split at 4 MiB (what is sent)" : "split at 4 MiB, no timestamps", cpus, &parts);
                if (timestamps) {
                        /* Attribute strings and resource keys by reference (OTLP 1.10). */
                        Measure by_index = measure(iv, true, true);
                        row("split at 4 MiB, strings by index", cpus, &by_index);
                }
                exp_interval_free(iv);
        }
        return 0;
}
