/* SPDX-License-Identifier: MIT */
#pragma once

/* Symbolized native frames kept across restarts, so a restarted symbolizer answers what it
 * already knew without opening files through the loader or reading their symbols again.
 * SQLite at <cache-dir>/symbols.db (WAL):
 *
 *   PRAGMA user_version = EP_SYMBOL_CACHE_SCHEMA
 *   CREATE TABLE meta(format TEXT NOT NULL)  -- one row: the symbolizer that wrote the answers
 *   CREATE TABLE symbols(file_id BLOB NOT NULL, addr INTEGER NOT NULL, flags INTEGER NOT NULL,
 *                        status INTEGER NOT NULL, elf_addr INTEGER NOT NULL,
 *                        module TEXT NOT NULL, lines BLOB, last_used INTEGER NOT NULL,
 *                        PRIMARY KEY(file_id, addr, flags)) WITHOUT ROWID
 *   CREATE INDEX symbols_lru ON symbols(last_used)
 *   CREATE TABLE files(file_id BLOB PRIMARY KEY, build_id BLOB, debuglink TEXT, path TEXT,
 *                      debug TEXT NOT NULL) WITHOUT ROWID
 *
 * The key is the resolver's: file ID (content hash, so no invalidation by path or mtime is
 * needed), file offset, EP_FRAME_FLAG_RETURN_ADDRESS. `lines` is NULL without lines, else
 * a host-endian blob written with common/wire-buf.h: u16 count, then per line (innermost
 * first) str function, str file, u32 line (str = u32 length + bytes). addr and elf_addr are
 * stored as signed 64-bit integers with the same bits.
 *
 * But an answer also depends on the file's separate debug file, which is not part of its
 * content: one computed before libc6-dbg was installed, or under other --debug-dir roots, is
 * wrong after. So `files` records, per file with rows, what its rows were computed with:
 * `debug` is EP_SYMBOL_CACHE_DEBUG_NOT_NEEDED (its own .symtab and DWARF suffice: debug files
 * change nothing), EP_SYMBOL_CACHE_DEBUG_NONE (looked for, none found) or the path of the
 * debug file used; with what the lookup needs to be redone without opening the file: its GNU
 * build ID, .gnu_debuglink name and the path the search used for it (NULL: build ID only).
 * The resolver queues a file's record before the first row it persists for it in a session,
 * and again when that changes (the search found a file later, with a path). Writing a record
 * deletes the file's rows unless the stored record has the same `debug`: rows of another
 * outcome, or without a record, were computed with something else. The resolver checks a
 * file's record on its first hit in a session (resolver.c): the first candidate that is a
 * readable regular file under the current roots (ep_debug_file_locate()) must be the recorded
 * debug file, or none for "none"; otherwise, or without a record, the file's rows and record
 * are deleted (ep_symbol_cache_drop_file(), counted in invalidated_files) and the answers are
 * computed again. Records of files whose last rows were evicted are deleted with them.
 *
 * `format` is "<project version>+<EP_RESOLVER_ANSWERS_VERSION>/<GNU build ID of the program>":
 * when another symbolizer — another release or another build — opens the file every row is
 * dropped (answers may differ between them). The pages in use
 * (page_count - freelist_count) are kept under max_bytes by deleting the least recently used
 * rows in batches; freed pages are reused, so the file stays near the bound.
 *
 * Reads happen on the request path (one primary-key lookup). Writes — new rows and last_used
 * stamps of rows that were read — are queued and written in one transaction per flush:
 * every EP_SYMBOL_CACHE_FLUSH_USEC from the event loop, at once when
 * EP_SYMBOL_CACHE_FLUSH_ENTRIES are queued, and when the cache is freed.
 *
 * Never fatal: a file that is not a database, another schema version, or corrupt while in use
 * is deleted and created again with one log line (cache-db.c); a row that does not decode is
 * deleted and reported as a miss. One thread. */

#include <stdint.h>
#include <systemd/sd-event.h>

#include "macro.h"
#include "resolver.h"
#include "wire.h"

#define EP_SYMBOL_CACHE_SCHEMA 3 /* 2: files; 3: PLT stubs named (2 cached them unnamed) */
#define EP_SYMBOL_CACHE_FILE "symbols.db"
#define EP_SYMBOL_CACHE_DEFAULT_MAX (64ull << 20)
#define EP_SYMBOL_CACHE_FLUSH_USEC (200 * 1000ULL)
#define EP_SYMBOL_CACHE_FLUSH_ENTRIES 1000
/* files.debug besides a path */
#define EP_SYMBOL_CACHE_DEBUG_NOT_NEEDED "not-needed"
#define EP_SYMBOL_CACHE_DEBUG_NONE "none"

typedef struct EpSymbolCacheInfo {
        uint64_t entries;   /* rows, including queued new rows */
        uint64_t bytes;     /* database pages in use, after the last flush */
        uint64_t pending;   /* queued writes */
        uint64_t flushes;   /* transactions written */
        uint64_t evictions; /* rows deleted for the size bound */
        uint64_t dropped;   /* rows deleted because they did not decode or were too old */
        uint64_t rebuilds;  /* times the file was thrown away and created again */
        uint64_t invalidated_files; /* files whose rows were deleted: their debug file changed */
} EpSymbolCacheInfo;

/* A row of `files`. */
typedef struct EpSymbolFileRecord {
        uint8_t build_id[EP_BUILD_ID_MAX]; /* GNU */
        size_t build_id_len;               /* 0: none */
        char *debuglink;                   /* .gnu_debuglink name, NULL: none */
        char *path;                        /* the path hint of the debug search, NULL: none */
        char *debug;                       /* EP_SYMBOL_CACHE_DEBUG_* or the debug file's path */
} EpSymbolFileRecord;

void ep_symbol_file_record_done(EpSymbolFileRecord *rec);
/* A copy of rec: 0 and *ret, or -ENOMEM. */
int ep_symbol_file_record_copy(const EpSymbolFileRecord *rec, EpSymbolFileRecord *ret);

/* Opens or creates <dir>/symbols.db. With an event loop, queued writes are flushed from it;
 * without one (tests, tools) only ep_symbol_cache_flush() and _free() write. -errno when the
 * directory or database cannot be created or written (the caller works without). */
int ep_symbol_cache_open(const char *dir, uint64_t max_bytes, sd_event *event, EpSymbolCache **ret);
/* Writes what is queued, then closes. */
EpSymbolCache *ep_symbol_cache_free(EpSymbolCache *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpSymbolCache *, ep_symbol_cache_free);

/* flags: only EP_FRAME_FLAG_RETURN_ADDRESS is part of the key. 0 and *ret filled (empty on
 * entry; the caller frees it with ep_sym_result_done()) on a hit, -ENOENT on a miss, -ENOMEM;
 * other errors mean the cache could not answer (treat as a miss). */
int ep_symbol_cache_get(EpSymbolCache *c, const uint8_t file_id[EP_FILE_ID_SIZE], uint64_t addr, uint8_t flags,
                        EpSymResult *ret);
/* Queues a result for writing (copied). Only final answers belong here (EP_SYM_OK,
 * EP_SYM_NOT_FOUND): others are refused with -EINVAL. */
int ep_symbol_cache_put(EpSymbolCache *c, const uint8_t file_id[EP_FILE_ID_SIZE], uint64_t addr, uint8_t flags,
                        const EpSymResult *res);
/* Queues a file's record (copied), written before the rows queued after it. -EINVAL without
 * rec->debug, -ENOENT without a database, -ENOMEM. */
int ep_symbol_cache_put_file(EpSymbolCache *c, const uint8_t file_id[EP_FILE_ID_SIZE],
                             const EpSymbolFileRecord *rec);
/* The written record of a file: 0 and *ret (free with ep_symbol_file_record_done()), -ENOENT
 * when there is none, -ENOMEM, other -errno when the cache cannot answer. */
int ep_symbol_cache_get_file(EpSymbolCache *c, const uint8_t file_id[EP_FILE_ID_SIZE], EpSymbolFileRecord *ret);
/* Deletes a file's written rows and record at once (queued writes stay queued) and counts it
 * in invalidated_files. Returns how many rows went, or -errno. */
int ep_symbol_cache_drop_file(EpSymbolCache *c, const uint8_t file_id[EP_FILE_ID_SIZE]);
/* Writes the queue in one transaction and evicts down to the bound. */
int ep_symbol_cache_flush(EpSymbolCache *c);

void ep_symbol_cache_info(const EpSymbolCache *c, EpSymbolCacheInfo *ret);
const char *ep_symbol_cache_path(const EpSymbolCache *c);
