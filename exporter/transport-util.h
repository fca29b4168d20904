/* SPDX-License-Identifier: MIT */
#pragma once

/* The byte-level pieces of the OTLP transports, kept apart from the curl machinery so unit
 * tests reach them: gRPC message framing, trailer values (percent-decoding, base64), the few
 * protobuf messages a server sends back on errors (google.rpc.Status, RetryInfo) and
 * Retry-After. Every decoder is bounded by its input and fails cleanly on garbage. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "transport.h"

#define GRPC_FRAME_HEADER 5 /* compressed flag, 4-byte big-endian length */

/* One length-prefixed message: 5-byte header + payload, into a new buffer (free()). */
int grpc_frame(const void *msg, size_t size, bool compressed, void **ret, size_t *ret_size);

/* The first message of a response body: its payload (pointing into data) and flag. -EBADMSG
 * when the body is shorter than its header says, -ENODATA when the body is empty. */
int grpc_deframe(const void *data, size_t size, const void **ret_msg, size_t *ret_size,
                 bool *ret_compressed);

/* The gRPC status for a non-200 HTTP answer (grpc/doc/http-grpc-status-mapping.md). */
int grpc_status_from_http(long http_status);

/* "14" → 14; -EINVAL for anything but a decimal number up to 2^31-1. */
int grpc_parse_status(const char *s, int *ret);

/* grpc-message: percent-decoding into a new string; malformed escapes are kept as they are
 * (the spec says decoding must not fail). */
int percent_decode(const char *s, size_t n, char **ret);

/* Base64 with or without padding (grpc-*-bin headers), standard alphabet. */
int base64_decode(const char *s, size_t n, void **ret, size_t *ret_size);

/* google.rpc.Status: the message (field 2, new string or NULL when absent) and the delay of
 * a google.rpc.RetryInfo detail in ms (-1 when none). Either output may be NULL. -EBADMSG on
 * malformed protobuf. */
int rpc_status_decode(const void *data, size_t size, char **ret_message, int64_t *ret_retry_ms);

/* Retry-After: delta-seconds or an HTTP-date (compared to now); a date in the past is 0.
 * -EINVAL when it is neither. */
int parse_retry_after(const char *value, time_t now, int64_t *ret_ms);

/* grpc-timeout value for a timeout in ms: "<n>m", at most 8 digits (the spec's limit) so long
 * timeouts move to seconds. buf needs 12 bytes. */
void grpc_timeout_format(uint64_t timeout_ms, char buf[static 12]);
