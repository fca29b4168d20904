/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "terminal-text.h"
#include "utf8.h"

int ep_terminal_text_write(FILE *f, char *text, size_t n) {
        ep_utf8_sanitize_text(text, n, true);
        return fwrite(text, 1, n, f) == n ? 0 : -EIO;
}
