/* SPDX-License-Identifier: MIT */
/* Native symbolization benchmark: frames per second through the resolver (ep_resolver_symbolize,
 * as the daemon answers them), cold (a fresh resolver: file opened, symbols and DWARF read on
 * first use) and warm (the same frames again: result cache), for libc.so.6, DWARF-rich binaries
 * (/usr/bin/node, or the Rust test program) and libLLVM (.dynsym only); then peak RSS while
 * symbolizing 100k frames of libLLVM and of node, each in a child process so the peaks are its
 * own. Prints markdown tables (bench/README.md).
 *
 *   bench-symbolize [FILE...]
 * Addresses are random offsets inside random functions of the file's symbol table, as `nm -S`
 * (binutils) lists them, mapped to file offsets through PT_LOAD. */

#include <dirent.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-offsets.h"
#include "bench-util.h"
#include "dwarf-lines.h"
#include "resolver.h"

#define FRAMES 20000
#define RSS_FRAMES 100000

/* ---- resolver ---- */

static const char *bench_path;

static int open_file(void *userdata, const uint8_t id[EP_FILE_ID_SIZE]) {
        int fd = open(bench_path, O_RDONLY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

typedef struct Pass {
        double ms;
        size_t ok, lines;
} Pass;

static Pass run_pass(EpResolver *r, const uint64_t *offsets, size_t n) {
        Pass p = {};
        double t0 = bench_now_ms();

        for (size_t i = 0; i < n; i++) {
                EpSymRequest req = { .kind = EP_FRAME_NATIVE, .file_id = { 0xbe }, .addr = offsets[i], .path = bench_path };
                const EpSymResult *res;

                if (ep_resolver_symbolize(r, &req, &res) < 0)
                        abort();
                if (res->status == EP_SYM_OK) {
                        p.ok++;
                        p.lines += res->n_lines;
                }
        }
        p.ms = bench_now_ms() - t0;
        return p;
}

static void bench_file(const char *path) {
        EpFileSource src = { .open_file = open_file };
        EpResolverConfig config = EP_RESOLVER_CONFIG_DEFAULT;
        EpResolver *r = NULL;
        struct stat st;
        uint64_t *offsets;

        if (stat(path, &st) < 0)
                return;
        offsets = make_offsets(path, FRAMES, 1);
        if (!offsets) {
                printf("| %s | no function symbols |\n", path);
                return;
        }
        bench_path = path;
        if (ep_resolver_new(&src, &config, NULL, &r) < 0)
                abort();
        Pass cold = run_pass(r, offsets, FRAMES);
        Pass warm = run_pass(r, offsets, FRAMES);
        ep_resolver_free(r);

        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        printf("| %s | %.1f MiB | %d | %.1f%% | %.2f | %.0f | %.0f |\n", base, (double) st.st_size / (1 << 20), FRAMES,
               100.0 * (double) cold.ok / FRAMES, cold.ok ? (double) cold.lines / (double) cold.ok : 0.0,
               FRAMES / (cold.ms / 1e3), FRAMES / (warm.ms / 1e3));
        fflush(stdout);
        free(offsets);
}

/* ---- memory ---- */

static long status_kb(const char *field) {
        char line[256];
        long v = -1;
        FILE *f = fopen("/proc/self/status", "re");

        if (!f)
                return -1;
        while (fgets(line, sizeof line, f))
                if (strncmp(line, field, strlen(field)) == 0 && line[strlen(field)] == ':')
                        v = strtol(line + strlen(field) + 1, NULL, 10);
        fclose(f);
        return v;
}

/* In a child: RSS before, peak, and anonymous RSS after 100k frames of path. */
static void bench_rss(const char *path) {
        int pipefd[2];
        long v[5] = {};

        if (!path || access(path, R_OK) < 0 || pipe(pipefd) < 0)
                return;
        /* The addresses are made here, so nm's memory is not the child's. */
        uint64_t *offsets = make_offsets(path, RSS_FRAMES, 2);
        if (!offsets)
                return;
        pid_t pid = fork();
        if (pid == 0) {
                EpFileSource src = { .open_file = open_file };
                EpResolverConfig config = EP_RESOLVER_CONFIG_DEFAULT;
                EpResolver *r = NULL;

                bench_path = path;
                v[0] = status_kb("VmRSS");
                if (ep_resolver_new(&src, &config, NULL, &r) < 0)
                        _exit(1);
                double t0 = bench_now_ms();
                (void) run_pass(r, offsets, RSS_FRAMES);
                v[4] = (long) (bench_now_ms() - t0);
                v[1] = status_kb("VmHWM");
                v[2] = status_kb("RssAnon");
                v[3] = status_kb("RssFile");
                if (write(pipefd[1], v, sizeof v) != sizeof v)
                        _exit(1);
                _exit(0);
        }
        close(pipefd[1]);
        if (read(pipefd[0], v, sizeof v) != sizeof v)
                memset(v, 0, sizeof v);
        close(pipefd[0]);
        waitpid(pid, NULL, 0);
        free(offsets);

        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        printf("| %s | %d | %ld | %.1f | %.1f | %.1f | %.1f |\n", base, RSS_FRAMES, v[4], v[0] / 1024.0,
               v[1] / 1024.0, v[2] / 1024.0, v[3] / 1024.0);
        fflush(stdout);
}

int main(int argc, char **argv) {
        char *llvm = bench_biggest_llvm();
        const char *defaults[] = { BENCH_LIBDIR "/libc.so.6", "/usr/bin/node", getenv("BENCH_DWARF_PROG"), llvm };

        printf("| file | size | frames | named | lines/frame | cold frames/s | warm frames/s |\n"
               "|---|---|---|---|---|---|---|\n");
        if (argc > 1)
                for (int i = 1; i < argc; i++)
                        bench_file(argv[i]);
        else
                for (size_t i = 0; i < ELEMENTSOF(defaults); i++)
                        if (defaults[i])
                                bench_file(defaults[i]);

        printf("\n| file | frames | ms | RSS before MiB | peak RSS MiB | anon RSS after MiB | file RSS after MiB |\n"
               "|---|---|---|---|---|---|---|\n");
        bench_rss(llvm);
        bench_rss("/usr/bin/node");
        if (getenv("BENCH_DWARF_PROG"))
                bench_rss(getenv("BENCH_DWARF_PROG"));
        printf("\n(Dwarf handles opened: %" PRIu64 ")\n", ep_dwarf_opens());
        free(llvm);
        return 0;
}
