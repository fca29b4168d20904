/* SPDX-License-Identifier: MIT */
#include <curl/curl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "byte-parse.h"
#include "macro.h"
#include "transport-util.h"

#define RETRY_INFO_TYPE "type.googleapis.com/google.rpc.RetryInfo"
#define MAX_DELAY_S 86400 /* longer delays are nonsense: cap instead of overflowing */

int grpc_frame(const void *msg, size_t size, bool compressed, void **ret, size_t *ret_size) {
        uint8_t *out;

        if (size > UINT32_MAX)
                return -E2BIG;
        out = malloc(GRPC_FRAME_HEADER + size);
        if (!out)
                return -ENOMEM;
        out[0] = compressed ? 1 : 0;
        out[1] = (uint8_t) (size >> 24);
        out[2] = (uint8_t) (size >> 16);
        out[3] = (uint8_t) (size >> 8);
        out[4] = (uint8_t) size;
        if (size > 0)
                memcpy(out + GRPC_FRAME_HEADER, msg, size);
        *ret = out;
        *ret_size = GRPC_FRAME_HEADER + size;
        return 0;
}

int grpc_deframe(const void *data, size_t size, const void **ret_msg, size_t *ret_size,
                 bool *ret_compressed) {
        const uint8_t *p = data;
        size_t n;

        if (size == 0)
                return -ENODATA;
        if (size < GRPC_FRAME_HEADER || p[0] > 1)
                return -EBADMSG;
        n = (size_t) p[1] << 24 | (size_t) p[2] << 16 | (size_t) p[3] << 8 | p[4];
        if (n > size - GRPC_FRAME_HEADER)
                return -EBADMSG;
        *ret_msg = p + GRPC_FRAME_HEADER;
        *ret_size = n;
        *ret_compressed = p[0] == 1;
        return 0;
}

int grpc_status_from_http(long http_status) {
        switch (http_status) {
        case 400:
                return GRPC_INTERNAL;
        case 401:
                return GRPC_UNAUTHENTICATED;
        case 403:
                return GRPC_PERMISSION_DENIED;
        case 404:
                return GRPC_UNIMPLEMENTED;
        case 429:
        case 502:
        case 503:
        case 504:
                return GRPC_UNAVAILABLE;
        default:
                return GRPC_UNKNOWN;
        }
}

int grpc_parse_status(const char *s, int *ret) {
        uint64_t v = 0;

        if (!*s)
                return -EINVAL;
        for (; *s; s++) {
                if (*s < '0' || *s > '9')
                        return -EINVAL;
                v = v * 10 + (uint64_t) (*s - '0');
                if (v > INT32_MAX)
                        return -EINVAL;
        }
        *ret = (int) v;
        return 0;
}

int percent_decode(const char *s, size_t n, char **ret) {
        char *out = malloc(n + 1), *o = out;

        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                int hi, lo;

                if (s[i] == '%' && i + 2 < n &&
                    (hi = ep_hex_digit(s[i + 1])) >= 0 && (lo = ep_hex_digit(s[i + 2])) >= 0) {
                        *o++ = (char) (hi << 4 | lo);
                        i += 2;
                } else
                        *o++ = s[i];
        }
        *o = 0;
        *ret = out;
        return 0;
}

static int base64_value(char c) {
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+')
                return 62;
        if (c == '/')
                return 63;
        return -1;
}

int base64_decode(const char *s, size_t n, void **ret, size_t *ret_size) {
        _cleanup_free_ uint8_t *out = NULL;
        uint32_t acc = 0;
        size_t k = 0, bits = 0;

        while (n > 0 && s[n - 1] == '=')
                n--;
        if (n % 4 == 1)
                return -EINVAL;
        out = malloc(n / 4 * 3 + 3);
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                int v = base64_value(s[i]);
                if (v < 0)
                        return -EINVAL;
                acc = acc << 6 | (uint32_t) v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        out[k++] = (uint8_t) (acc >> bits);
                }
        }
        *ret = TAKE_PTR(out);
        *ret_size = k;
        return 0;
}

/* ---- minimal protobuf reading ---- */

typedef struct PbField {
        uint32_t number;
        unsigned wire;
        uint64_t varint;         /* wire 0 */
        const uint8_t *data;     /* wire 2 */
        size_t size;
} PbField;

/* 1 and the next field, 0 at the end, -EBADMSG on garbage. */
static int pb_next(const uint8_t **p, const uint8_t *end, PbField *f) {
        uint64_t key, len;
        int r;

        if (*p >= end)
                return 0;
        r = ep_read_leb128(p, end, false, &key);
        if (r < 0)
                return r;
        *f = (PbField) { .number = (uint32_t) (key >> 3), .wire = key & 7 };
        if (f->number == 0 || key >> 3 > UINT32_MAX)
                return -EBADMSG;
        switch (f->wire) {
        case 0:
                return ep_read_leb128(p, end, false, &f->varint) < 0 ? -EBADMSG : 1;
        case 1:
        case 5:
                len = f->wire == 1 ? 8 : 4;
                break;
        case 2:
                if (ep_read_leb128(p, end, false, &len) < 0)
                        return -EBADMSG;
                break;
        default:
                return -EBADMSG; /* groups: not in these messages */
        }
        if (len > (uint64_t) (end - *p))
                return -EBADMSG;
        f->data = *p;
        f->size = (size_t) len;
        *p += len;
        return 1;
}

/* google.protobuf.Duration → ms, clamped to [0, MAX_DELAY_S]. */
static int duration_ms(const uint8_t *p, size_t size, int64_t *ret) {
        const uint8_t *end = p + size;
        int64_t seconds = 0, nanos = 0;
        PbField f;
        int r;

        while ((r = pb_next(&p, end, &f)) > 0) {
                if (f.number == 1 && f.wire == 0)
                        seconds = (int64_t) f.varint;
                else if (f.number == 2 && f.wire == 0)
                        nanos = (int32_t) f.varint;
        }
        if (r < 0)
                return r;
        if (seconds < 0 || (seconds == 0 && nanos < 0))
                seconds = nanos = 0;
        if (seconds > MAX_DELAY_S)
                seconds = MAX_DELAY_S, nanos = 0;
        *ret = seconds * 1000 + MAX(nanos, 0) / 1000000;
        return 0;
}

/* A google.protobuf.Any: the delay when it is a RetryInfo with a retry_delay, else -1. */
static int any_retry_delay(const uint8_t *p, size_t size, int64_t *ret) {
        const uint8_t *end = p + size, *value = NULL;
        size_t value_size = 0;
        bool retry_info = false;
        PbField f;
        int r;

        *ret = -1;
        while ((r = pb_next(&p, end, &f)) > 0) {
                if (f.number == 1 && f.wire == 2)
                        retry_info = f.size == strlen(RETRY_INFO_TYPE) &&
                                     memcmp(f.data, RETRY_INFO_TYPE, f.size) == 0;
                else if (f.number == 2 && f.wire == 2)
                        value = f.data, value_size = f.size;
        }
        if (r < 0)
                return r;
        if (!retry_info || !value)
                return 0;
        /* RetryInfo { Duration retry_delay = 1; } */
        end = value + value_size;
        while ((r = pb_next(&value, end, &f)) > 0)
                if (f.number == 1 && f.wire == 2) {
                        r = duration_ms(f.data, f.size, ret);
                        if (r < 0)
                                return r;
                }
        return r;
}

int rpc_status_decode(const void *data, size_t size, char **ret_message, int64_t *ret_retry_ms) {
        const uint8_t *p = data, *end = p + size;
        _cleanup_free_ char *message = NULL;
        int64_t retry_ms = -1;
        PbField f;
        int r;

        while ((r = pb_next(&p, end, &f)) > 0) {
                if (f.number == 2 && f.wire == 2) {
                        free(message);
                        message = strndup((const char *) f.data, f.size);
                        if (!message)
                                return -ENOMEM;
                } else if (f.number == 3 && f.wire == 2) {
                        int64_t d;
                        r = any_retry_delay(f.data, f.size, &d);
                        if (r < 0)
                                return r;
                        if (d >= 0)
                                retry_ms = d;
                }
        }
        if (r < 0)
                return r;
        if (ret_message)
                *ret_message = TAKE_PTR(message);
        if (ret_retry_ms)
                *ret_retry_ms = retry_ms;
        return 0;
}

int parse_retry_after(const char *value, time_t now, int64_t *ret_ms) {
        size_t n;
        time_t t;

        value += strspn(value, " \t");
        n = strlen(value);
        while (n > 0 && strchr(" \t\r\n", value[n - 1]))
                n--;
        if (n == 0)
                return -EINVAL;
        if (strspn(value, "0123456789") == n) {
                uint64_t s = 0;
                for (size_t i = 0; i < n && s <= MAX_DELAY_S; i++)
                        s = s * 10 + (uint64_t) (value[i] - '0');
                *ret_ms = (int64_t) MIN(s, (uint64_t) MAX_DELAY_S) * 1000;
                return 0;
        }
        /* An HTTP-date in any of its three forms (RFC 9110 5.6.7): curl_getdate knows them. */
        _cleanup_free_ char *copy = strndup(value, n);
        if (!copy)
                return -ENOMEM;
        t = curl_getdate(copy, NULL);
        if (t < 0)
                return -EINVAL;
        *ret_ms = t <= now ? 0 : (int64_t) MIN((uint64_t) (t - now), (uint64_t) MAX_DELAY_S) * 1000;
        return 0;
}

void grpc_timeout_format(uint64_t timeout_ms, char buf[static 12]) {
        if (timeout_ms <= 99999999)
                snprintf(buf, 12, "%" PRIu64 "m", timeout_ms);
        else if (timeout_ms / 1000 <= 99999999)
                snprintf(buf, 12, "%" PRIu64 "S", timeout_ms / 1000);
        else
                snprintf(buf, 12, "%" PRIu64 "H", MIN(timeout_ms / 3600000, (uint64_t) 99999999));
}
