/* SPDX-License-Identifier: MIT */
#pragma once

/* The text views' output: sanitized for a terminal (ep_utf8_sanitize_text(), utf8.h). */

#include <stddef.h>
#include <stdio.h>

/* Writes the n bytes of text (modified: sanitized, newlines kept) to f. 0, or -EIO. */
int ep_terminal_text_write(FILE *f, char *text, size_t n);
