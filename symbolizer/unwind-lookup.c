/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "clock.h"
#include "file-id.h"
#include "log.h"
#include "unwind-lookup.h"
#include "unwind-sandbox.h"

int ep_unwind_lookup(EpUnwindCache *cache, int fd, const uint8_t file_id[EP_FILE_ID_SIZE],
                     const EpUnwindExtractOptions *options, EpUnwindStats *stats, void **ret_blob, size_t *ret_size) {
        uint8_t actual[EP_FILE_ID_SIZE];
        EpUnwindExtractStats xs = {};
        uint32_t flags;
        void *blob;
        size_t size;
        uint64_t start;
        int r;

        r = ep_file_id_from_fd(fd, actual, NULL);
        if (r < 0) {
                stats->extract_errors++;
                return r;
        }
        if (memcmp(actual, file_id, EP_FILE_ID_SIZE) != 0) {
                stats->extract_errors++;
                return -ESTALE;
        }

        if (cache && ep_unwind_cache_get(cache, file_id, &blob, &size) >= 0) {
                stats->cache_hits++;
                stats->tables++;
                *ret_blob = blob;
                *ret_size = size;
                return 0;
        }

        stats->cache_misses++;
        start = ep_clock_ns(CLOCK_MONOTONIC);
        r = ep_unwind_extract_sandboxed(fd, file_id, options, NULL, &blob, &size, &flags, &xs);
        stats->extract_nsec += ep_clock_ns(CLOCK_MONOTONIC) - start;
        if (r < 0) {
                stats->extract_errors++;
                return r;
        }

        if (cache) {
                int k = ep_unwind_cache_put(cache, file_id, xs.build_id, xs.build_id_len, blob, size);
                if (k < 0 && k != -EFBIG)
                        log_debug_errno(k, "Could not store an unwind table in the cache: %m");
                EpUnwindCacheInfo info;
                ep_unwind_cache_info(cache, &info);
                stats->cache_bytes = info.bytes;
        }

        stats->tables++;
        *ret_blob = blob;
        *ret_size = size;
        return 0;
}
