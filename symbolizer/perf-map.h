/* SPDX-License-Identifier: MIT */
#pragma once

/* Perf maps (/tmp/perf-PID.map): the text a JIT (Node --perf-basic-prof, Python -X perf, the
 * JVM with an agent, ...) writes to name the code it generates, one "START SIZE NAME" line per
 * piece of code. START and SIZE are hexadecimal, with or without "0x"; NAME is the rest of the
 * line and may contain spaces.
 *
 * The text comes from the profiled process, so it is untrusted: lines are bounded
 * (EP_PERF_MAP_LINE_MAX), so are the entries and name bytes a map keeps; lines that do not
 * parse are skipped and counted; any input is safe.
 *
 * JITs re-use addresses (code is freed and other code is generated there), and they only
 * append to the file. So a later line wins over every earlier one it overlaps: the map is kept
 * as a table of disjoint ranges, each naming the newest line that covers it, sorted by start
 * for a binary search. When a newer line covers only part of an older one, the older name
 * stays for the parts it still covers.
 *
 * Reading is incremental: ep_perf_map_read() parses only what was appended since the last
 * read (a file that shrank is read again from the start). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

#define EP_PERF_MAP_LINE_MAX 4096u                 /* longer lines are malformed */
#define EP_PERF_MAP_MAX_ENTRIES (4u << 20)         /* default bound of ranges per map */
#define EP_PERF_MAP_MAX_NAME_BYTES (128u << 20)    /* default bound of name bytes per map */

typedef struct EpPerfMapLimits {
        uint32_t max_entries;    /* ranges kept; lines past it are dropped */
        uint32_t max_name_bytes; /* bytes of names kept (a NUL each included) */
} EpPerfMapLimits;

typedef struct EpPerfMapStats {
        uint64_t lines;     /* lines parsed (blank lines not counted) */
        uint64_t added;     /* lines that became entries */
        uint64_t malformed; /* lines skipped: not "START SIZE NAME", too long, size 0, control
                             * characters or invalid UTF-8 in the name */
        uint64_t dropped;   /* valid lines not kept because a limit was reached */
        uint64_t bytes;     /* bytes read from the file */
        uint64_t rereads;   /* times the file shrank and was read again from the start */
} EpPerfMapStats;

typedef struct EpPerfMap EpPerfMap;

/* limits NULL: the defaults above. */
int ep_perf_map_new(const EpPerfMapLimits *limits, EpPerfMap **ret);
EpPerfMap *ep_perf_map_free(EpPerfMap *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpPerfMap *, ep_perf_map_free);

/* Adds text as if appended to the file, a complete input: its last line needs no newline.
 * Returns 0 or -ENOMEM (the map stays usable). For tests and the fuzzer. */
int ep_perf_map_add_text(EpPerfMap *m, const char *text, size_t size);

/* Reads what fd (the perf map) gained since the last call. A last line without a newline
 * (the JIT may be writing it) is used, and read again once it grows. *ret_changed (may be
 * NULL) tells whether anything was read. Returns 0, -ENOMEM or a read error. */
int ep_perf_map_read(EpPerfMap *m, int fd, bool *ret_changed);

/* The name of the newest line covering addr, or NULL. *ret_start (may be NULL): where the
 * range that names it starts. The string is owned by the map and valid until it changes. */
const char *ep_perf_map_lookup(const EpPerfMap *m, uint64_t addr, uint64_t *ret_start);

/* Ranges in the lookup table. */
size_t ep_perf_map_entries(const EpPerfMap *m);
/* Bytes of memory the map holds (table and names). */
size_t ep_perf_map_memory(const EpPerfMap *m);
const EpPerfMapStats *ep_perf_map_stats(const EpPerfMap *m);
