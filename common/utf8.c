/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "utf8.h"

size_t ep_utf8_char(const uint8_t *s, size_t n, uint32_t *ret_cp) {
        uint8_t c;
        size_t len;
        uint32_t cp;

        if (n == 0)
                return 0;
        c = s[0];
        if (c < 0x80)
                len = 1, cp = c;
        else if ((c & 0xe0) == 0xc0)
                len = 2, cp = c & 0x1f;
        else if ((c & 0xf0) == 0xe0)
                len = 3, cp = c & 0x0f;
        else if ((c & 0xf8) == 0xf0)
                len = 4, cp = c & 0x07;
        else
                return 0;
        if (len > n)
                return 0;
        for (size_t k = 1; k < len; k++) {
                if ((s[k] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (s[k] & 0x3f);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
                return 0;
        if (ret_cp)
                *ret_cp = cp;
        return len;
}

size_t ep_utf8_encode(uint32_t cp, char out[static 4]) {
        if (cp >= 0xd800 && cp <= 0xdfff)
                cp = '?';
        if (cp > 0x10ffff)
                cp = 0xfffd;
        if (cp < 0x80) {
                out[0] = (char) cp;
                return 1;
        }
        if (cp < 0x800) {
                out[0] = (char) (0xc0 | cp >> 6);
                out[1] = (char) (0x80 | (cp & 0x3f));
                return 2;
        }
        if (cp < 0x10000) {
                out[0] = (char) (0xe0 | cp >> 12);
                out[1] = (char) (0x80 | ((cp >> 6) & 0x3f));
                out[2] = (char) (0x80 | (cp & 0x3f));
                return 3;
        }
        out[0] = (char) (0xf0 | cp >> 18);
        out[1] = (char) (0x80 | ((cp >> 12) & 0x3f));
        out[2] = (char) (0x80 | ((cp >> 6) & 0x3f));
        out[3] = (char) (0x80 | (cp & 0x3f));
        return 4;
}

size_t ep_utf8_sanitize_text(char *text, size_t n, bool keep_newlines) {
        uint8_t *s = (uint8_t *) text;
        size_t replaced = 0;

        for (size_t i = 0; i < n;) {
                uint32_t cp;
                size_t len = ep_utf8_char(s + i, n - i, &cp);
                bool control = (cp < 0x20 && cp != '\t' && !(cp == '\n' && keep_newlines)) ||
                               (cp >= 0x7f && cp < 0xa0);

                if (len > 0 && !control) {
                        i += len;
                        continue;
                }
                /* An invalid byte alone, a control character byte by byte. */
                len = len ?: 1;
                memset(s + i, '?', len);
                replaced += len;
                i += len;
        }
        return replaced;
}
