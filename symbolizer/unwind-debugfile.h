/* SPDX-License-Identifier: MIT */
#pragma once

/* Where the separate debug file of an ELF file may be, in the order GDB and elfutils look:
 *   ROOT/.build-id/xx/yyyyyyyy.debug          by GNU build ID
 *   DIR/NAME, DIR/.debug/NAME, ROOT/DIR/NAME   by .gnu_debuglink NAME, DIR from the path hint
 * ROOT is normally /usr/lib/debug. Nothing is opened here: the caller opens each candidate with
 * its own (unprivileged) credentials and checks it really belongs to the file (same build ID,
 * else the debuglink CRC, ep_unwind_debug_crc32()). */

#include <stddef.h>
#include <stdint.h>

#define EP_DEBUG_ROOT "/usr/lib/debug"
#define EP_DEBUG_MAX_CANDIDATES 4

/* Fills ret[] with up to EP_DEBUG_MAX_CANDIDATES malloc'd paths; returns how many (>= 0) or
 * -ENOMEM. build_id/debuglink/path_hint may each be missing (NULL or empty). */
int ep_unwind_debug_candidates(const char *root, const uint8_t *build_id, size_t build_id_len, const char *debuglink,
                               const char *path_hint, char *ret[EP_DEBUG_MAX_CANDIDATES]);

/* The CRC-32 .gnu_debuglink stores, over a whole file. */
int ep_unwind_debug_crc32(int fd, uint32_t *ret);
