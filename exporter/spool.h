/* SPDX-License-Identifier: MIT */
#pragma once

/* The exporter's disk spool: every encoded request not yet accepted by the backend, one file
 * per request, so a crash, a restart or a long backend outage loses nothing but what the size
 * bound forces out.
 *
 * Format: <dir>/<seq>.req, seq a 16-digit hex sequence number (replay order = name order),
 * holding a 24-byte header — magic "EPSPOOL1", payload size (u64 LE), CRC-32 of the payload
 * (u32 LE), 4 reserved zero bytes — and the payload (an uncompressed
 * ExportProfilesServiceRequest). Written to ".tmp-<seq>", fsync'ed, renamed and the directory
 * fsync'ed: a file with the final name is complete. Leftover ".tmp-*" files are deleted on
 * open; a file whose header or CRC does not match is counted as corrupt and deleted.
 *
 * Only the index (sequence numbers and sizes) is in memory. Without a directory (dir NULL)
 * the spool keeps the payloads in memory instead, under the same bound. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

#define SPOOL_HEADER_SIZE 24

typedef struct Spool Spool;

/* Creates dir (0700) when missing, removes leftover temp files and indexes the requests in it. */
int spool_open(const char *dir, uint64_t max_bytes, Spool **ret);
Spool *spool_free(Spool *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(Spool *, spool_free);

/* Stores a copy of data as the newest request. When the bound would be exceeded, the oldest
 * requests are deleted first; *ret_dropped (optional) says how many. A request larger than the
 * whole bound is refused with -EFBIG. */
int spool_append(Spool *s, const void *data, size_t size, unsigned *ret_dropped);

/* Reads the oldest request: returns 1 with the payload (free()) and its sequence number, 0 when
 * the spool is empty. Corrupt files are deleted on the way and counted in *ret_corrupt
 * (optional, incremented). */
int spool_peek(Spool *s, void **ret_data, size_t *ret_size, uint64_t *ret_seq, unsigned *ret_corrupt);

/* Deletes the request seq (accepted or dropped); a request already gone (pushed out by the
 * bound meanwhile) is fine. */
int spool_remove(Spool *s, uint64_t seq);

size_t spool_files(const Spool *s);
uint64_t spool_bytes(const Spool *s); /* on disk, headers included */
const char *spool_dir(const Spool *s); /* NULL: in memory */
/* The request seq is still spooled (not pushed out by the bound). */
bool spool_contains(const Spool *s, uint64_t seq);
