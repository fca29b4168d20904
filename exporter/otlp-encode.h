/* SPDX-License-Identifier: MIT */
#pragma once

/* Interval model (profile-model.h) → one OTLP ExportProfilesServiceRequest (profiles
 * v1development, v1.10+ field numbers), protobuf binary. No D-Bus, no network: the CLI can use
 * it too.
 *
 * Shape of the request:
 *  - one ProfilesDictionary; element 0 of every table is the zero value, strings, functions,
 *    mappings, attributes and stacks are de-duplicated;
 *  - one ResourceProfiles per process (process.pid, process.executable.name/.path,
 *    container.id, host.name), each with one ScopeProfiles (the profiler's name and version)
 *    holding one Profile: sample_type (samples, count), period_type (cpu, nanoseconds), period,
 *    time_unix_nano/duration_nano from the interval;
 *  - samples carry stack_index, attribute_indices (thread.name, thread.id, cpu.logical_number)
 *    and one timestamp per event; should the model lack timestamps for some events, that
 *    Profile uses one aggregated value per sample instead (counts are never lost);
 *  - one Mapping per file (filename, process.executable.build_id.htlhash and .gnu), one
 *    Location per frame (address, lines innermost first, profile.frame.type). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "profile-model.h"

typedef struct OtlpEncodeOptions {
        const char *host_name;     /* resource attribute host.name; NULL or "" leaves it out */
        const char *scope_name;    /* NULL: "ebpf-profiler" */
        const char *scope_version; /* NULL: the project version */
        bool no_cpu;               /* the model has no CPU numbers (the store keeps none):
                                    * leave cpu.logical_number out */
        char *const *resource_attributes; /* NULL-terminated key, value, … pairs added to every
                                    * Resource (OTEL_RESOURCE_ATTRIBUTES, otlp-config.h); the
                                    * per-process ones win, except host.name */
        bool strings_by_index;     /* attribute string values and resource attribute keys as
                                    * string_table references (OTLP >= 1.10 key_strindex,
                                    * string_value_strindex). Off by default: it does not make
                                    * requests smaller (bench/README.md) and receivers built on
                                    * older protos read such attributes as empty. */
} OtlpEncodeOptions;

typedef struct OtlpEncodeStats {
        size_t resources, samples, stacks, locations, functions, mappings, strings, attributes;
        uint64_t events;
        size_t requests, bytes; /* otlp_encode_interval_split(): requests emitted, their bytes */
} OtlpEncodeStats;

/* Returns 0 and the request bytes (free()) in *ret_data / *ret_size. When the interval holds
 * no samples there is nothing to send: *ret_data = NULL, *ret_size = 0. ret_stats is optional. */
int otlp_encode_interval(const ExpInterval *iv, const OtlpEncodeOptions *opts, void **ret_data,
                         size_t *ret_size, OtlpEncodeStats *ret_stats);

/* Called for each request of a split interval; data is valid during the call only. < 0 stops
 * the encoding and is returned. */
typedef int (*otlp_emit_t)(const void *data, size_t size, void *userdata);

/* Like otlp_encode_interval(), but a request over max_size bytes is split into several, each a
 * complete request with its own dictionary: at process boundaries (a ResourceProfiles stays
 * whole), and a single process over the limit between its samples. Sends the parts in order
 * through emit. Nothing is emitted for an interval without samples. In ret_stats, resources,
 * samples and events are summed over the parts (a process cut in two counts twice), the
 * dictionary sizes are not filled in. */
int otlp_encode_interval_split(const ExpInterval *iv, const OtlpEncodeOptions *opts, size_t max_size,
                               otlp_emit_t emit, void *userdata, OtlpEncodeStats *ret_stats);

/* "native", "kernel", ... (the profile.frame.type value for a frame kind). */
const char *otlp_frame_type(uint8_t kind);
