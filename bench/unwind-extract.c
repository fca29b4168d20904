/* SPDX-License-Identifier: MIT */
/* Unwind-table extraction benchmark: for each file, the cold extraction time (no table
 * cache; the file itself in the page cache, best of 3), the table it makes, and the time to
 * answer from the SQLite cache after a reopen (what a symbolizer restart costs). Prints a
 * markdown table (bench/README.md).
 *
 *   bench-unwind-extract [FILE...]
 * Without files: this machine's libc.so.6, libstdc++.so.6 and the biggest libLLVM. */

#include <dirent.h>
#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench-util.h"
#include "file-id.h"
#include "unwind-cache.h"
#include "unwind-extract.h"
#include "unwind-lookup.h"
#include "unwind-table.h"

#define RUNS 3

static void remove_cache(const char *dir) {
        char p[512];
        const char *names[] = { EP_UNWIND_CACHE_FILE, EP_UNWIND_CACHE_FILE "-wal", EP_UNWIND_CACHE_FILE "-shm" };

        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
                snprintf(p, sizeof p, "%s/%s", dir, names[i]);
                unlink(p);
        }
}

static int bench(const char *path, const char *cache_dir) {
        uint8_t id[EP_FILE_ID_SIZE];
        EpUnwindExtractStats st = {};
        EpUnwindStats stats = {};
        EpUnwindCache *cache = NULL;
        EpUnwindCacheInfo info;
        double cold = 1e30, hit;
        uint32_t flags = 0;
        struct stat sb;
        void *blob;
        size_t size = 0;
        int fd, r;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &sb) < 0) {
                fprintf(stderr, "%s: %m\n", path);
                return -1;
        }
        r = ep_file_id_from_fd(fd, id, NULL);
        if (r < 0)
                return r;

        for (int i = 0; i < RUNS; i++) {
                double t = bench_now_ms();
                r = ep_unwind_extract_full(fd, id, path, NULL, &blob, &size, &flags, &st);
                t = bench_now_ms() - t;
                if (r < 0) {
                        fprintf(stderr, "%s: extraction failed: %s\n", path, strerror(-r));
                        close(fd);
                        return r;
                }
                if (ep_unwind_table_validate(blob, size) < 0) {
                        fprintf(stderr, "%s: invalid table\n", path);
                        return -1;
                }
                free(blob);
                cold = t < cold ? t : cold;
        }

        /* Store through the lookup (a miss), reopen, answer from the cache. */
        remove_cache(cache_dir);
        r = ep_unwind_cache_open(cache_dir, EP_UNWIND_CACHE_DEFAULT_MAX, &cache);
        if (r < 0)
                return r;
        r = ep_unwind_lookup(cache, fd, id, NULL, &stats, &blob, &size);
        if (r < 0)
                return r;
        free(blob);
        ep_unwind_cache_info(cache, &info);
        ep_unwind_cache_free(cache);

        r = ep_unwind_cache_open(cache_dir, EP_UNWIND_CACHE_DEFAULT_MAX, &cache);
        if (r < 0)
                return r;
        hit = bench_now_ms();
        r = ep_unwind_lookup(cache, fd, id, NULL, &stats, &blob, &size);
        hit = bench_now_ms() - hit;
        if (r < 0 || stats.cache_hits != 1)
                return -1;
        free(blob);
        ep_unwind_cache_free(cache);
        remove_cache(cache_dir);
        close(fd);

        const char *base = strrchr(path, '/');
        printf("| %s | %.1f MiB | %" PRIu64 " | %u | %u | %zu | %.1f | %" PRIu64 " | %.0f | %.1f |\n",
               base ? base + 1 : path, (double) sb.st_size / (1 << 20), st.fdes, st.n_entries, st.n_rules, size,
               st.fdes ? (double) size / (double) st.fdes : 0.0, info.bytes, cold, hit);
        return 0;
}

int main(int argc, char *argv[]) {
        char cache_dir[] = "/tmp/bench-unwind-cache-XXXXXX";
        const char *files[8];
        char *llvm = NULL;
        int n = 0, failed = 0;

        if (argc > 1)
                for (int i = 1; i < argc && n < 8; i++)
                        files[n++] = argv[i];
        else {
                Dl_info info;
                if (dladdr((void *) gnu_get_libc_version, &info) && info.dli_fname)
                        files[n++] = info.dli_fname;
                files[n++] = BENCH_LIBDIR "/libstdc++.so.6";
                llvm = bench_biggest_llvm();
                if (llvm)
                        files[n++] = llvm;
        }

        if (!mkdtemp(cache_dir)) {
                perror("mkdtemp");
                return EXIT_FAILURE;
        }

        printf("| file | size | FDEs | entries | rules | blob bytes | bytes/FDE | cached bytes (zlib) | cold ms "
               "| cache-hit ms |\n");
        printf("|---|---|---|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < n; i++)
                if (bench(files[i], cache_dir) < 0)
                        failed++;

        rmdir(cache_dir);
        free(llvm);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
