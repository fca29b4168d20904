/* SPDX-License-Identifier: MIT */
#pragma once

/* UTF-8, strictly: names end up in the store, the views and OTLP strings, which must be valid
 * UTF-8 (no overlong forms, no surrogates, nothing beyond U+10FFFF). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The length (1-4) of the valid character at s, of at most n bytes; 0 when it is invalid or
 * cut off. *ret_cp (may be NULL) gets the code point. */
size_t ep_utf8_char(const uint8_t *s, size_t n, uint32_t *ret_cp);

/* Text for a terminal or a log. What the daemons log and the CLI prints quotes what profiled
 * programs control — function, module, comm, thread and container names, file paths — and a
 * program that names itself with an escape sequence must not be able to move the cursor,
 * rewrite the screen or set the window title of whoever reads it, nor start a log line of its
 * own. So every control character (C0 but tab, and newline where keep_newlines, DEL, C1) and
 * every byte that is not part of valid UTF-8 becomes '?', in place, one per byte, so columns
 * stay where they were. Returns how many bytes were replaced. Machine formats (JSON, folded
 * stacks, flame graphs, exports) escape in their own way. */
size_t ep_utf8_sanitize_text(char *text, size_t n, bool keep_newlines);

/* Encodes cp into out and returns its length; a surrogate becomes '?' and anything beyond
 * U+10FFFF U+FFFD, so the result is always valid. */
size_t ep_utf8_encode(uint32_t cp, char out[static 4]);
