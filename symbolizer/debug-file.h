/* SPDX-License-Identifier: MIT */
#pragma once

/* Separate debug files for symbolization: where to look (the debug roots, --debug-dir) and
 * finding the one that belongs to an opened ELF file. Candidates come from
 * ep_unwind_debug_candidates() (unwind-debugfile.h), once per root: by GNU build ID, then by
 * .gnu_debuglink next to the path the process maps the file at. A candidate is used only
 * when it really is that file's debug file: same GNU build ID when the file has one, else the
 * .gnu_debuglink CRC-32 over the whole candidate, and the same ELF machine either way.
 *
 * The symbolizer opens these itself, read-only and with its own unprivileged credentials: they
 * are files anyone may read (distribution -dbgsym packages), not the profiled process's. */

#include <stddef.h>
#include <stdint.h>

#include "elf-symbols.h"
#include "unwind-debugfile.h" /* EP_DEBUG_ROOT, the candidate paths */

#define EP_DEBUG_ROOTS_MAX 8
#define EP_DEBUG_PATH_MAX 4096

/* Replaces the roots with a colon-separated list (empty elements are ignored). -EINVAL when
 * no root is left or there are more than EP_DEBUG_ROOTS_MAX, -ENOMEM. */
int ep_debug_roots_set(const char *list);
/* Appends roots from a colon-separated list (the first call after start-up replaces the
 * default, so a repeated --debug-dir accumulates). */
int ep_debug_roots_add(const char *list);
/* Back to the default (/usr/lib/debug). */
void ep_debug_roots_reset(void);
/* The current roots (NULL-terminated, owned by this module). */
const char *const *ep_debug_roots(void);

/* The debug file of f: 0 and *ret (a new EpElfFile, *ret_path its path when ret_path is not
 * NULL), -ENOENT when none is found (or f has neither build ID nor debuglink), -ENOMEM.
 * path_hint is where the process maps f (may be NULL: only build-ID lookups then). */
int ep_debug_file_find(EpElfFile *f, const char *path_hint, EpElfFile **ret, char **ret_path);
/* Where ep_debug_file_find() would look first now, without opening anything: the first
 * candidate under the current roots that is a regular file we may read. For checking that
 * an earlier search would still come out the same (symbol-cache.h) with a few stat() calls;
 * a candidate that exists but is not the file's debug file (another build ID, a wrong CRC) is
 * returned all the same. 0 and *ret_path (a new string), -ENOENT, -ENOMEM. */
int ep_debug_file_locate(const uint8_t *build_id, size_t build_id_len, const char *debuglink, const char *path_hint,
                         char **ret_path);
