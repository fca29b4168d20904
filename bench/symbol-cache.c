/* SPDX-License-Identifier: MIT */
/* Persisted symbol cache benchmark: how fast the resolver answers native frames of libc from
 * its in-memory LRU, from the persisted cache (symbols.db, as after a restart: a new resolver
 * whose LRU is empty) and cold (a new resolver without persisted cache: the file opened, its
 * symbol tables read, one lookup per address), and what a row costs on disk. Prints a
 * markdown table (bench/README.md).
 *
 *   bench-symbol-cache [N]     N distinct libc addresses (default 20000) */

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "resolver.h"
#include "symbol-cache.h"

#define ROUNDS 5

static char libc_path[4096];
static unsigned open_calls;

static double now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static int open_libc(void *userdata, const uint8_t id[EP_FILE_ID_SIZE]) {
        open_calls++;
        int fd = open(libc_path, O_RDONLY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* libc's executable mapping in this process: path and file offsets [*lo, *hi). */
static int find_libc_text(uint64_t *lo, uint64_t *hi) {
        FILE *f = fopen("/proc/self/maps", "re");
        char line[4608];
        int r = -ENOENT;

        if (!f)
                return -errno;
        while (fgets(line, sizeof line, f)) {
                unsigned long long start, end, off;
                char perms[8], path[4096] = "";

                if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %4095s", &start, &end, perms, &off, path) == 5 &&
                    perms[2] == 'x' && strstr(path, "/libc.so")) {
                        snprintf(libc_path, sizeof libc_path, "%s", path);
                        *lo = off;
                        *hi = off + (end - start);
                        r = 0;
                        break;
                }
        }
        fclose(f);
        return r;
}

/* Symbolizes every address once; returns lookups per second. */
static double run(EpResolver *r, const uint64_t *addrs, unsigned n, unsigned *ret_ok) {
        unsigned ok = 0;
        double t0 = now_s();

        for (unsigned i = 0; i < n; i++) {
                EpSymRequest req = { .kind = EP_FRAME_NATIVE, .file_id = { 1 }, .addr = addrs[i] };
                const EpSymResult *res;

                if (ep_resolver_symbolize(r, &req, &res) < 0) {
                        fprintf(stderr, "symbolize failed\n");
                        exit(EXIT_FAILURE);
                }
                ok += res->status == EP_SYM_OK;
        }
        if (ret_ok)
                *ret_ok = ok;
        return n / (now_s() - t0);
}

static EpResolver *new_resolver(EpSymbolCache *cache, unsigned n) {
        static const EpFileSource source = { .open_file = open_libc };
        EpResolverConfig cfg = EP_RESOLVER_CONFIG_DEFAULT;
        EpResolver *r = NULL;

        cfg.max_results = n; /* every address fits the memory LRU */
        if (ep_resolver_new(&source, &cfg, NULL, &r) < 0)
                exit(EXIT_FAILURE);
        ep_resolver_set_symbol_cache(r, cache);
        return r;
}

static double best(double a, double b) {
        return a > b ? a : b;
}

int main(int argc, char **argv) {
        unsigned n = argc > 1 ? (unsigned) strtoul(argv[1], NULL, 10) : 20000, ok = 0;
        char dir[] = "/tmp/bench-symbol-cache-XXXXXX", db[256];
        double memory = 0, persisted = 0, cold = 0;
        EpSymbolCache *cache = NULL;
        EpSymbolCacheInfo info;
        uint64_t lo, hi, *addrs;
        struct stat st;

        if (n == 0 || find_libc_text(&lo, &hi) < 0 || !mkdtemp(dir)) {
                fprintf(stderr, "usage: %s [N] (needs libc mapped and /tmp)\n", argv[0]);
                return EXIT_FAILURE;
        }
        addrs = calloc(n, sizeof *addrs);
        if (!addrs)
                return EXIT_FAILURE;
        srandom(42);
        for (unsigned i = 0; i < n; i++) /* distinct: spread over the text, one per stride */
                addrs[i] = lo + (hi - lo) / n * i + (uint64_t) random() % MAX((hi - lo) / n, (uint64_t) 1);

        /* Cold: a fresh resolver each round, no persisted cache. */
        for (int round = 0; round < ROUNDS; round++) {
                EpResolver *r = new_resolver(NULL, n);
                cold = best(cold, run(r, addrs, n, &ok));
                ep_resolver_free(r);
        }
        if (ep_symbol_cache_open(dir, EP_SYMBOL_CACHE_DEFAULT_MAX, NULL, &cache) < 0)
                return EXIT_FAILURE;
        EpResolver *r = new_resolver(cache, n);
        (void) run(r, addrs, n, NULL); /* fills the LRU and queues every answer for symbols.db */
        /* Memory LRU: the same resolver again. */
        for (int round = 0; round < ROUNDS; round++)
                memory = best(memory, run(r, addrs, n, NULL));
        ep_resolver_free(r);
        cache = ep_symbol_cache_free(cache); /* writes the rows */

        /* Persisted: a restart, the database reopened, a resolver whose LRU is empty. */
        for (int round = 0; round < ROUNDS; round++) {
                if (ep_symbol_cache_open(dir, EP_SYMBOL_CACHE_DEFAULT_MAX, NULL, &cache) < 0)
                        return EXIT_FAILURE;
                open_calls = 0;
                r = new_resolver(cache, n);
                persisted = best(persisted, run(r, addrs, n, NULL));
                if (open_calls != 0)
                        fprintf(stderr, "warning: the persisted round opened the file %u times\n", open_calls);
                ep_resolver_free(r);
                ep_symbol_cache_info(cache, &info);
                cache = ep_symbol_cache_free(cache); /* writes the last_used stamps */
        }

        snprintf(db, sizeof db, "%s/%s", dir, EP_SYMBOL_CACHE_FILE);
        uint64_t file_bytes = stat(db, &st) == 0 ? (uint64_t) st.st_size : 0;

        printf("%s: %u distinct addresses in its text, %u named (best of %d rounds)\n\n", libc_path, n, ok, ROUNDS);
        printf("| answered from | lookups/s | µs/lookup |\n|---|---:|---:|\n");
        printf("| memory LRU | %.0f | %.3f |\n", memory, 1e6 / memory);
        printf("| persisted cache (symbols.db, after a restart) | %.0f | %.3f |\n", persisted, 1e6 / persisted);
        printf("| cold (open libc, read its symbols, look up) | %.0f | %.3f |\n", cold, 1e6 / cold);
        printf("\nsymbols.db: %" PRIu64 " entries, %" PRIu64 " bytes of pages in use (%.0f B/entry), file %" PRIu64
               " bytes (%.0f B/entry)\n",
               info.entries, info.bytes, info.entries ? (double) info.bytes / (double) info.entries : 0.0, file_bytes,
               info.entries ? (double) file_bytes / (double) info.entries : 0.0);

        static const char *const suffixes[] = { "", "-wal", "-shm" };
        for (size_t i = 0; i < ELEMENTSOF(suffixes); i++) {
                char p[300];
                snprintf(p, sizeof p, "%s%s", db, suffixes[i]);
                (void) unlink(p);
        }
        (void) rmdir(dir);
        free(addrs);
        return EXIT_SUCCESS;
}
