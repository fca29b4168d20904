/* SPDX-License-Identifier: MIT */
/* Requests that alternate between files, through a real symbolizer session (its rings, its
 * batching), as the collector sends them: frame i is in file i % F, the way the frames of a
 * stack alternate between libc, an interpreter and the program. Two ways, each with a fresh
 * resolver under the daemon's default memory budgets:
 *   one at a time  each request answered before the next is sent (an idle symbolizer);
 *   queued         as many requests as the ring holds, then answered (a symbolizer behind:
 *                  batches of up to 512, grouped by file).
 * Each also with the files parsed in the native worker (symbolizer/native-worker.h; this
 * program is the worker when run with --native-worker), against the same in-process run: what
 * the worker's process boundary costs.
 * Prints a markdown table (bench/README.md): frames/s, files opened, DWARF handles opened (in
 * this process: the worker's are its own).
 *
 *   bench-symbolize-session [FILE...]     (default: libc, libm, libstdc++, libLLVM, node)
 * BENCH_FRAMES sets the number of frames (default 4000). */

#include <errno.h>
#include <inttypes.h>

#include "bench-offsets.h"
#include "bench-util.h"
#include "dwarf-lines.h"
#include "native-worker.h"
#include "resolver.h"
#include "session.h"
#include "shm-ring.h"
#include "wire-buf.h"
#include "wire-sym.h"

#define MAX_FILES 64

static const char *paths[MAX_FILES];
static size_t n_paths;
static uint64_t opens;

/* File id: its index + 1 in the first byte. */
static int open_file(void *userdata, const uint8_t id[EP_FILE_ID_SIZE]) {
        if (id[0] == 0 || id[0] > n_paths)
                return -ENOENT;
        opens++;
        int fd = open(paths[id[0] - 1], O_RDONLY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

typedef struct Frame {
        uint8_t file;
        uint64_t offset;
} Frame;

typedef struct Run {
        double ms;
        size_t named;
        uint64_t file_opens, dwarf_opens;
} Run;

typedef struct Bench {
        EpResolver *resolver;
        EpNativeWorker *worker;
        EpSession *session;
        EpRing *req, *resp;
        EpSymStats stats;
} Bench;

static void bench_open(Bench *b, bool worker) {
        EpFileSource src = { .open_file = open_file };
        EpResolverConfig config = EP_RESOLVER_CONFIG_DEFAULT;
        char *argv[] = { (char *) "bench-native-worker", (char *) "--native-worker", NULL };

        *b = (Bench) {};
        if (ep_resolver_new(&src, &config, &b->stats, &b->resolver) < 0 ||
            (worker && ep_native_worker_new("/proc/self/exe", argv, &src, &b->stats, &b->worker) < 0))
                abort();
        if (worker) {
                EpNativeParser parser = ep_native_worker_parser(b->worker);
                ep_resolver_set_native_parser(b->resolver, &parser);
        }
        if (ep_session_new(NULL, b->resolver, &b->stats, &b->session) < 0 ||
            ep_ring_attach(ep_session_request_memfd(b->session), ep_session_request_eventfd(b->session), &b->req) < 0 ||
            ep_ring_attach(ep_session_response_memfd(b->session), ep_session_response_eventfd(b->session), &b->resp) < 0)
                abort();
}

static void bench_close(Bench *b) {
        ep_ring_free(b->req);
        ep_ring_free(b->resp);
        ep_session_free(b->session);
        ep_resolver_free(b->resolver);
        ep_native_worker_free(b->worker);
}

static bool send_frame(Bench *b, uint64_t cookie, const Frame *f) {
        uint8_t buf[4096];
        EpWriter w;
        EpSymRequestMsg m = { .cookie = cookie, .kind = EP_FRAME_NATIVE, .addr = f->offset,
                              .path = paths[f->file - 1] };

        m.file_id[0] = f->file;
        ep_writer_init(&w, buf, sizeof buf);
        ep_put_sym_request(&w, &m);
        if (w.overflow)
                abort();
        /* Leave room for the biggest record, as the collector does. */
        if (ep_ring_data_size(b->req) - ep_ring_bytes_used(b->req) < 2 * (sizeof(EpRingRecord) + sizeof buf))
                return false;
        return ep_ring_push(b->req, EP_MSG_SYM_REQUEST, buf, (uint32_t) w.size) == 0;
}

/* Reads every response there is; returns how many, counting the named ones in *named. */
static size_t drain(Bench *b, size_t *named) {
        EpRingRecord h;
        const void *p;
        size_t n = 0;

        while (ep_ring_peek(b->resp, &h, &p) > 0) {
                EpReader rd;
                ep_reader_init(&rd, p, h.len);
                (void) ep_get_u64(&rd); /* cookie */
                if (ep_get_u8(&rd) == EP_SYM_OK)
                        (*named)++;
                ep_ring_consume(b->resp);
                n++;
        }
        return n;
}

static Run run(const Frame *frames, size_t n, bool queued, bool worker) {
        uint64_t dwarf0 = ep_dwarf_opens();
        size_t sent = 0, answered = 0;
        Bench b;
        Run r = {};

        opens = 0;
        bench_open(&b, worker);
        double t0 = bench_now_ms();
        while (answered < n) {
                size_t before = sent + answered;

                do {
                        if (sent < n && send_frame(&b, sent, &frames[sent]))
                                sent++;
                        else
                                break;
                } while (queued);
                while (ep_session_process(b.session) > 0)
                        answered += drain(&b, &r.named);
                answered += drain(&b, &r.named);
                if (sent + answered == before) {
                        fprintf(stderr, "No progress: %zu sent, %zu answered, %" PRIu64 " dropped.\n", sent,
                                answered, b.stats.response_drops);
                        abort();
                }
        }
        r.ms = bench_now_ms() - t0;
        r.file_opens = opens;
        r.dwarf_opens = ep_dwarf_opens() - dwarf0;
        bench_close(&b);
        return r;
}

static void add_path(const char *p) {
        if (p && n_paths < MAX_FILES && access(p, R_OK) == 0)
                paths[n_paths++] = p;
}

int main(int argc, char **argv) {
        if (argc == 2 && strcmp(argv[1], "--native-worker") == 0)
                return ep_native_worker_main(3);
        char *llvm = bench_biggest_llvm();
        const char *env = getenv("BENCH_FRAMES");
        size_t n = env ? strtoul(env, NULL, 10) : 4000;

        if (argc > 1)
                for (int i = 1; i < argc; i++)
                        add_path(argv[i]);
        else {
                add_path(BENCH_LIBDIR "/libc.so.6");
                add_path(BENCH_LIBDIR "/libm.so.6");
                add_path(BENCH_LIBDIR "/libstdc++.so.6");
                add_path(llvm);
                add_path("/usr/bin/node");
        }
        if (n_paths == 0 || n == 0) {
                fprintf(stderr, "No readable file, or no frames.\n");
                return 1;
        }

        /* Frame i: file i % F, the (i / F)-th random address of that file. */
        size_t per_file = (n + n_paths - 1) / n_paths;
        uint64_t *offsets[MAX_FILES];
        Frame *frames = calloc(n, sizeof(Frame));
        if (!frames)
                abort();
        for (size_t f = 0; f < n_paths; f++) {
                offsets[f] = make_offsets(paths[f], per_file, (unsigned) f + 1);
                if (!offsets[f]) {
                        fprintf(stderr, "%s: no function symbols\n", paths[f]);
                        return 1;
                }
        }
        for (size_t i = 0; i < n; i++)
                frames[i] = (Frame) { .file = (uint8_t) (i % n_paths + 1), .offset = offsets[i % n_paths][i / n_paths] };

        (void) run(frames, n, true, false); /* reads the files into the page cache for all runs */
        Run runs[2][2]; /* [worker][queued] */
        for (int w = 0; w < 2; w++)
                for (int q = 0; q < 2; q++)
                        runs[w][q] = run(frames, n, q, w);

        printf("| %zu files, %zu frames | frames/s | named | files opened | DWARF handles opened |\n"
               "|---|---|---|---|---|\n", n_paths, n);
        for (int w = 0; w < 2; w++)
                for (int q = 0; q < 2; q++) {
                        const Run *r = &runs[w][q];
                        printf("| %s, %s | %.0f | %.1f%% | %" PRIu64 " | %s%" PRIu64 " |\n",
                               q ? "queued" : "one at a time", w ? "native worker" : "in process", n / (r->ms / 1e3),
                               100.0 * (double) r->named / (double) n, r->file_opens, w ? "(worker's) " : "",
                               r->dwarf_opens);
                }
        printf("| queued / one at a time, in process | %.2fx | | | |\n", runs[0][0].ms / runs[0][1].ms);
        for (int q = 0; q < 2; q++)
                printf("| native worker / in process, %s | %.2fx | | | |\n", q ? "queued" : "one at a time",
                       runs[0][q].ms / runs[1][q].ms);

        for (size_t f = 0; f < n_paths; f++)
                free(offsets[f]);
        free(frames);
        free(llvm);
        return 0;
}
