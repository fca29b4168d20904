/* SPDX-License-Identifier: MIT */
#pragma once

/* State of the loader daemon, shared by its parts: main.c (start-up, event sources),
 * trace-convert.c (BPF records → trace ring), loader-bus.c (the D-Bus object). */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "bpf-setup.h"
#include "daemon.h"
#include "proc-maps.h"
#include "shm-ring.h"
#include "wire.h"

#define LOADER_TRACE_RING_SIZE (8u << 20)
#define LOADER_FREQUENCY_DEFAULT 20u
#define LOADER_FREQUENCY_MAX 10000u

typedef struct Loader {
        EpDaemon daemon;

        /* configuration */
        uint32_t frequency;
        bool include_idle;

        /* BPF side */
        EpBpf *bpf;
        struct ring_buffer *bpf_ring;
        sd_event_source *bpf_ring_source;
        sd_event_source *drain_timer;
        sd_event_source *status_timer;
        sd_event_source *sweep_timer;

        /* trace ring and its consumer */
        EpRing *ring;
        uint64_t ring_gen;        /* bumped by each OpenTraceRing; 0 while nobody opened it */
        sd_bus_track *consumer;   /* whoever called OpenTraceRing last */
        bool ring_active;         /* a consumer holds the ring: produce traces */
        bool ring_dirty;          /* records written since the consumer was last woken */
        bool ring_was_full;       /* logged once per consumer */

        /* processes and files */
        EpProcTable *procs;
        uint64_t boot_to_realtime_ns; /* CLOCK_REALTIME - CLOCK_BOOTTIME, measured at start */
        uint64_t last_liveness_check_ns;

        /* statistics */
        uint64_t traces_sent;
        uint64_t bad_records;
        uint64_t lost_samples_seen; /* LostSamples when last checked */
        uint64_t published[8];    /* last values sent in PropertiesChanged */
        char *last_error;

        EpFrame frames[EP_MAX_FRAMES]; /* conversion scratch */
} Loader;

/* Sets the LastError property (the caller logs). */
void loader_set_error(Loader *l, const char *format, ...) _printf_(2, 3);
bool loader_collector_attached(const Loader *l);

/* trace-convert.c */
int loader_handle_bpf_record(Loader *l, const void *data, size_t size);
void loader_sweep_processes(Loader *l);
/* Called when a new consumer took the ring: everything must be announced again. */
void loader_ring_reset(Loader *l);

/* loader-bus.c */
int loader_bus_publish(Loader *l);
void loader_bus_emit_changes(Loader *l);
