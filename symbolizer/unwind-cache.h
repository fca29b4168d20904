/* SPDX-License-Identifier: MIT */
#pragma once

/* Extracted unwind tables kept across restarts: SQLite at <dir>/unwind-tables.db, one row per
 * file ID with its GNU build ID, the table format/extractor version, the zlib-compressed blob,
 * its size and a last-used stamp. The sum of the stored (compressed) sizes is kept under a
 * bound by evicting the least recently used rows.
 *
 *   PRAGMA user_version = EP_UNWIND_CACHE_SCHEMA
 *   CREATE TABLE unwind_tables(file_id BLOB PRIMARY KEY, gnu_build_id BLOB,
 *                              format INTEGER NOT NULL, raw_size INTEGER NOT NULL,
 *                              data BLOB NOT NULL, bytes INTEGER NOT NULL,
 *                              last_used INTEGER NOT NULL)
 *   CREATE INDEX unwind_tables_lru ON unwind_tables(last_used, bytes)
 *
 * The index covers what opening the cache and eviction read (sizes and stamps): without it
 * they would read every row, blobs included, before the first table is served.
 *
 * Never fatal: a file that is not a database, has another schema version or turns out corrupt
 * while in use is deleted and created again with one log line; a row whose blob does not
 * decompress or validate, or was written by another format/extractor version, is deleted and
 * reported as a miss. One thread at a time. */

#include <stddef.h>
#include <stdint.h>

#include "macro.h"
#include "wire.h"

#define EP_UNWIND_CACHE_SCHEMA 2
#define EP_UNWIND_CACHE_FILE "unwind-tables.db"
#define EP_UNWIND_CACHE_DEFAULT_MAX (256ull << 20)
/* Bump when extraction changes what it produces for the same file: older rows are then
 * re-extracted instead of reused. */
#define EP_UNWIND_EXTRACTOR_VERSION 1

typedef struct EpUnwindCache EpUnwindCache;

typedef struct EpUnwindCacheInfo {
        uint64_t entries;   /* rows */
        uint64_t bytes;     /* stored (compressed) bytes */
        uint64_t evictions; /* rows evicted for the size bound */
        uint64_t rebuilds;  /* times the database was thrown away and created again */
        uint64_t dropped;   /* rows dropped because they were unusable */
} EpUnwindCacheInfo;

/* Creates dir if needed. -errno when the directory or database cannot be created or written
 * (the caller works without a cache). */
int ep_unwind_cache_open(const char *dir, uint64_t max_bytes, EpUnwindCache **ret);
EpUnwindCache *ep_unwind_cache_free(EpUnwindCache *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpUnwindCache *, ep_unwind_cache_free);

/* 0 and a validated blob (malloc'd) on a hit, which also marks the row used; -ENOENT on a
 * miss; other errors mean the cache could not answer (treat as a miss). */
int ep_unwind_cache_get(EpUnwindCache *c, const uint8_t file_id[EP_FILE_ID_SIZE], void **ret_blob,
                        size_t *ret_size);
/* Stores (or replaces) a table, then evicts down to the bound. A table larger than the whole
 * bound is not stored: -EFBIG. */
int ep_unwind_cache_put(EpUnwindCache *c, const uint8_t file_id[EP_FILE_ID_SIZE], const uint8_t *build_id,
                        size_t build_id_len, const void *blob, size_t size);
void ep_unwind_cache_info(const EpUnwindCache *c, EpUnwindCacheInfo *ret);
const char *ep_unwind_cache_path(const EpUnwindCache *c);
