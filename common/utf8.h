/* SPDX-License-Identifier: MIT */
#pragma once

/* UTF-8, strictly: names end up in the store, the views and OTLP strings, which must be valid
 * UTF-8 (no overlong forms, no surrogates, nothing beyond U+10FFFF). */

#include <stddef.h>
#include <stdint.h>

/* The length (1-4) of the valid character at s, of at most n bytes; 0 when it is invalid or
 * cut off. *ret_cp (may be NULL) gets the code point. */
size_t ep_utf8_char(const uint8_t *s, size_t n, uint32_t *ret_cp);

/* Encodes cp into out and returns its length; a surrogate becomes '?' and anything beyond
 * U+10FFFF U+FFFD, so the result is always valid. */
size_t ep_utf8_encode(uint32_t cp, char out[static 4]);
