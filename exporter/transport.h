/* SPDX-License-Identifier: MIT */
#pragma once

/* OTLP transports: OTLP/HTTP protobuf (POST, gzip) and OTLP/gRPC (ProfilesService/Export over
 * HTTP/2 through libcurl, cleartext h2c or TLS), both driven by sd-event so the loop never
 * blocks. The transport sends one encoded ExportProfilesServiceRequest and reports what came
 * back; deciding whether to retry is the delivery layer's job (delivery.h). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "macro.h"

typedef enum OtlpProtocol {
        OTLP_PROTOCOL_HTTP_PROTOBUF,
        OTLP_PROTOCOL_GRPC,
} OtlpProtocol;

typedef enum OtlpCompression {
        OTLP_COMPRESSION_GZIP,
        OTLP_COMPRESSION_NONE,
} OtlpCompression;

/* Where and how to send: the result of options, OTEL_* variables and the config file
 * (otlp-config.h). Strings are owned by the config. */
typedef struct OtlpConfig {
        char *endpoint;          /* full URL: http(s)://host:port/v1development/profiles for
                                  * HTTP; http(s)://host:port for gRPC; NULL: exporting is off */
        OtlpProtocol protocol;
        OtlpCompression compression;
        uint64_t timeout_ms;     /* per request */
        char **headers;          /* NULL-terminated "Name: value" list (OTEL_…_HEADERS) */
        char *ca_file;           /* TLS: CA bundle to verify the server with; NULL: system's */
        char *client_cert;       /* TLS client certificate (PEM), with client_key */
        char *client_key;
        bool insecure;           /* gRPC: cleartext h2c even without http:// (OTEL_…_INSECURE) */
} OtlpConfig;

/* gRPC status codes (grpc/doc/statuscodes.md), as OtlpResult.grpc_status carries them. */
enum {
        GRPC_OK = 0,
        GRPC_CANCELLED = 1,
        GRPC_UNKNOWN = 2,
        GRPC_INVALID_ARGUMENT = 3,
        GRPC_DEADLINE_EXCEEDED = 4,
        GRPC_PERMISSION_DENIED = 7,
        GRPC_RESOURCE_EXHAUSTED = 8,
        GRPC_ABORTED = 10,
        GRPC_OUT_OF_RANGE = 11,
        GRPC_UNIMPLEMENTED = 12,
        GRPC_INTERNAL = 13,
        GRPC_UNAVAILABLE = 14,
        GRPC_DATA_LOSS = 15,
        GRPC_UNAUTHENTICATED = 16,
};

typedef struct OtlpTransport OtlpTransport;

typedef struct OtlpResult {
        int error;                /* 0 when the server answered, else a negative errno
                                   * (connection refused, timeout, TLS failure: transient) */
        long http_status;         /* HTTP status, 0 without a response */
        int grpc_status;          /* gRPC status code from the trailers, -1 for HTTP/protobuf or
                                   * when missing */
        const char *message;      /* error text (transport, grpc-message, HTTP body Status), or
                                   * NULL on success */
        const void *response;     /* the ExportProfilesServiceResponse bytes (HTTP body or the
                                   * gRPC message, unframed and decompressed), may be empty */
        size_t response_size;
        int64_t retry_after_ms;   /* HTTP Retry-After or gRPC RetryInfo/pushback, -1 absent */
        size_t request_size;      /* bytes put on the wire (compressed body) */
} OtlpResult;

typedef void (*otlp_done_t)(OtlpTransport *t, const OtlpResult *result, void *userdata);

int otlp_transport_new(sd_event *event, const OtlpConfig *config, unsigned max_in_flight,
                       OtlpTransport **ret);
OtlpTransport *otlp_transport_free(OtlpTransport *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(OtlpTransport *, otlp_transport_free);

/* Sends one encoded request (uncompressed protobuf; the transport compresses and frames it as
 * the protocol wants). body stays owned by the caller and must stay valid until done runs;
 * done runs from the event loop, never from inside this call. -EBUSY when max_in_flight
 * requests are running. */
int otlp_transport_send(OtlpTransport *t, const void *body, size_t size, otlp_done_t done, void *userdata);
unsigned otlp_transport_in_flight(const OtlpTransport *t);
const char *otlp_protocol_name(OtlpProtocol p); /* "http/protobuf", "grpc" */
