/* SPDX-License-Identifier: MIT */
#pragma once

/* The local profile store: SQLite in WAL mode with the schema of docs/ARCHITECTURE.md
 * ("Local store"). The collector is the only writer; the CLI reads concurrently.
 *
 * Writes happen between store_begin() and store_commit(); the put_* calls insert a row when it
 * is not there yet (INSERT OR IGNORE) and return its id either way. Unsigned 64-bit values
 * (addresses) are stored as the signed integer with the same bits. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sqlite3.h>

#include "macro.h"
#include "symbol.h"
#include "wire.h"

#define STORE_SCHEMA_VERSION 4
#define STORE_STACK_HASH_SIZE 16

typedef struct Store Store;

/* Symbolization of a frame as stored. */
typedef struct StoreSymbol {
        uint8_t status; /* EP_SYM_* */
        bool elf_addr_known; /* false: elf_addr column stays NULL */
        uint64_t elf_addr;
        const char *module; /* NULL: column stays NULL */
        const SymLine *lines;
        size_t n_lines;
} StoreSymbol;

/* Creates the parent directory and the schema when missing, and migrates a store of an older
 * schema version (one transaction). Fails with a logged message naming the path when the file
 * is not an SQLite database (-EBADMSG), is some other database, or has a schema version newer
 * than this build's (-EPROTONOSUPPORT). */
int store_open(const char *path, Store **ret);
Store *store_free(Store *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(Store *, store_free);

const char *store_path(const Store *s);
/* Human-readable text of the last SQLite failure ("" if none). */
const char *store_last_error(const Store *s);

/* How long a write waits for a lock another connection holds (default 5 s). */
void store_set_busy_timeout(Store *s, unsigned ms);

int store_begin(Store *s);
int store_commit(Store *s);
void store_rollback(Store *s);

int store_put_file(Store *s, const uint8_t file_id[EP_FILE_ID_SIZE], const uint8_t htlhash[EP_FILE_ID_SIZE],
                   const char *path, const void *gnu_build_id, size_t gnu_build_id_len, const char *go_build_id,
                   int64_t *ret_id);
/* Sets the build IDs given; a missing one (NULL/empty) keeps what the row has. */
int store_update_file_build_ids(Store *s, int64_t id, const void *gnu_build_id,
                                size_t gnu_build_id_len, const char *go_build_id);

/* file is files.id for native frames, processes.id for unmapped (JIT) frames (whose addresses
 * mean something in one process only; the process row must exist), else 0; flags are the
 * EP_FRAME_FLAG_* of the frame's identity (the return-address flag). sym NULL: pending (an
 * existing row is left as it is); otherwise the row's symbolization and lines are set to sym,
 * except that a named row (EP_SYM_OK) is never replaced by a failure. */
int store_put_frame(Store *s, uint8_t kind, uint8_t flags, int64_t file, uint64_t addr, const StoreSymbol *sym,
                    int64_t *ret_id);
/* The same rule: a failure does not overwrite a name. */
int store_update_frame_symbol(Store *s, int64_t id, const StoreSymbol *sym);

/* frame_ids leaf first. The row is found by a 16-byte hash of the frames blob. */
int store_put_stack(Store *s, const int64_t *frame_ids, size_t n, int64_t *ret_id);
/* The hash store_put_stack uses: first 16 bytes of SHA-256 over the frames blob. */
void store_stack_hash(const void *blob, size_t size, uint8_t ret[STORE_STACK_HASH_SIZE]);

int store_put_process(Store *s, uint32_t pid, uint64_t start_time_ns, const char *comm,
                      const char *exe, const char *container_id, int64_t *ret_id);
int store_update_process(Store *s, int64_t id, const char *comm, const char *exe,
                         const char *container_id);

int store_add_interval(Store *s, uint64_t start_ns, uint64_t end_ns, uint64_t period_ns,
                       int64_t *ret_id);
/* Adds count to the (interval, process, tid, stack) row. */
int store_add_sample(Store *s, int64_t interval, int64_t process, uint32_t tid,
                     const char *thread_name, int64_t stack, uint64_t count);

/* After an interval's samples: adds count to intervals.samples (the sum of its counts) and sets
 * last_interval of the stacks and processes its samples use (what garbage collection goes by;
 * store_add_sample() calls after this one are not covered). */
int store_finish_interval(Store *s, int64_t interval, uint64_t count);

/* What the store holds (Collector1's Store* properties). Times are CLOCK_REALTIME ns, 0 when
 * there is no interval. */
typedef struct StoreStats {
        uint64_t bytes; /* the file and its WAL */
        uint64_t first_ns, last_ns;
        uint64_t intervals;
        uint64_t samples; /* sum of the counts */
} StoreStats;
/* Recomputes the stats with SQL (cheap: intervals only). */
int store_read_stats(Store *s, StoreStats *ret);
/* Keeps stats current after an interval was written, without SQL. */
void store_stats_add_interval(StoreStats *stats, uint64_t start_ns, uint64_t end_ns, uint64_t samples);
/* Bytes of all pages (page_count: the file's size once the WAL is checkpointed) and of the
 * pages in use (page_count - freelist_count: what the size limit counts). Either may be NULL. */
int store_page_bytes(Store *s, uint64_t *ret_total, uint64_t *ret_used);
/* Size of the file plus its WAL on disk, of the WAL alone, and of the file alone. */
uint64_t store_file_bytes(const Store *s);
uint64_t store_wal_bytes(const Store *s);
uint64_t store_db_file_bytes(const Store *s);
/* Turns the checkpoint at commit off (the caller checkpoints, see retention_step()) and
 * truncates the WAL back to wal_bytes after each checkpoint. */
void store_set_manual_checkpoints(Store *s, uint64_t wal_bytes);
int store_schema_version(const Store *s);

/* For retention.c, which works on the same connection. */
sqlite3 *store_db(Store *s);
/* Records and logs an SQLite failure (rc); returns a negative errno. */
int store_fail(Store *s, int rc, const char *what);
/* Runs sql and reads the first column of its first row as an integer or text; returns an
 * SQLite result code (SQLITE_EMPTY: no row). */
int store_exec_first(Store *s, const char *sql, int64_t *ret_int, char *ret_text, size_t text_size);
