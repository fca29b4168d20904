/* SPDX-License-Identifier: MIT */
/* libFuzzer target: arbitrary bytes as a perf map (symbolizer/perf-map.c). The input is split
 * in up to three appends to a memfd, read incrementally after each (as the symbolizer reads a
 * map a JIT keeps writing), also parsed in one piece with ep_perf_map_add_text(); then
 * addresses taken from the input and around every range boundary are looked up. Checks
 * beyond "no crash, no sanitizer report, no leak": a name found lies inside the table, and
 * the incremental read and the one-piece parse agree when the input ends with a newline.
 * Small limits keep the entry-budget and name-compaction paths reachable. Built with clang
 * by tests/fuzz/meson.build; seeds in corpus-perf-map/. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "perf-map.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void append(int fd, const uint8_t *data, size_t size) {
        off_t end = lseek(fd, 0, SEEK_END);

        for (size_t done = 0; done < size;) {
                ssize_t k = pwrite(fd, data + done, size - done, end + (off_t) done);
                if (k <= 0)
                        abort();
                done += (size_t) k;
        }
}

static uint64_t addr_from(const uint8_t *data, size_t size, size_t i) {
        uint64_t v = 0;

        for (size_t k = 0; k < 8 && i + k < size; k++)
                v = v << 8 | data[i + k];
        return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static int fd = -1;
        const EpPerfMapLimits limits = { .max_entries = 512, .max_name_bytes = 8192 };
        EpPerfMap *inc = NULL, *whole = NULL;
        size_t cut1, cut2;

        if (fd < 0) {
                fd = memfd_create("fuzz-perf-map", MFD_CLOEXEC);
                if (fd < 0)
                        abort();
        }
        if (ftruncate(fd, 0) < 0)
                abort();
        if (ep_perf_map_new(&limits, &inc) < 0 || ep_perf_map_new(&limits, &whole) < 0)
                abort();

        /* Cut points from the first two bytes. */
        cut1 = size > 2 ? data[0] % (size + 1) : 0;
        cut2 = size > 2 ? cut1 + data[1] % (size - cut1 + 1) : 0;
        append(fd, data, cut1);
        (void) ep_perf_map_read(inc, fd, NULL);
        append(fd, data + cut1, cut2 - cut1);
        (void) ep_perf_map_read(inc, fd, NULL);
        append(fd, data + cut2, size - cut2);
        (void) ep_perf_map_read(inc, fd, NULL);
        (void) ep_perf_map_read(inc, fd, NULL); /* nothing new */

        (void) ep_perf_map_add_text(whole, (const char *) data, size);

        /* A read that ends inside a line uses that line as far as it goes (the JIT may be
         * writing it); the complete line wins later if it is valid. So both agree when the
         * reads end at line ends. */
        bool same = size > 0 && data[size - 1] == '\n' && (cut1 == 0 || data[cut1 - 1] == '\n') &&
                    (cut2 == 0 || data[cut2 - 1] == '\n') && ep_perf_map_stats(whole)->dropped == 0 &&
                    ep_perf_map_stats(inc)->dropped == 0;
        for (size_t i = 0; i < size; i += 3) {
                uint64_t a = addr_from(data, size, i), start;
                const char *n1 = ep_perf_map_lookup(inc, a, &start);
                const char *n2 = ep_perf_map_lookup(whole, a, NULL);

                if (n1 && (start > a || strlen(n1) > EP_PERF_MAP_LINE_MAX))
                        abort();
                if (same && ((n1 == NULL) != (n2 == NULL) || (n1 && strcmp(n1, n2) != 0)))
                        abort();
                /* around a boundary */
                if (n1) {
                        (void) ep_perf_map_lookup(inc, start - 1, NULL);
                        (void) ep_perf_map_lookup(inc, start, NULL);
                }
        }
        (void) ep_perf_map_lookup(inc, 0, NULL);
        (void) ep_perf_map_lookup(inc, UINT64_MAX, NULL);

        ep_perf_map_free(inc);
        ep_perf_map_free(whole);
        return 0;
}
