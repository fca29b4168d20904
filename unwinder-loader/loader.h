/* SPDX-License-Identifier: MIT */
#pragma once

/* State of the loader daemon, shared by its parts: main.c (start-up, event sources),
 * trace-convert.c (BPF records → trace ring), loader-bus.c (the D-Bus object). */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "bpf-programs.h"
#include "bpf-setup.h"
#include "daemon.h"
#include "proc-maps.h"
#include "shm-ring.h"
#include "symbolizer-client.h"
#include "tables.h"
#include "trace-cache.h"
#include "wire.h"

#define LOADER_TRACE_RING_SIZE (8u << 20)
#define LOADER_FREQUENCY_DEFAULT 20u
#define LOADER_FREQUENCY_MAX 10000u
#define LOADER_UNLOAD_DELAY_DEFAULT_NS (60 * NSEC_PER_SEC)
/* trace-cache.h: conversions of stacks seen before; 1 MiB holds ~1,500 stacks of 28 frames or
 * ~100 of 430 */
#define LOADER_TRACE_CACHE_SLOTS 1024u
#define LOADER_TRACE_CACHE_BYTES (1u << 20)

struct Deferred;

typedef struct Loader {
        EpDaemon daemon;

        /* configuration */
        uint32_t frequency;
        bool include_idle;
        uint64_t unload_delay_ns; /* --unload-delay */
        /* --symbolizer-user, --collector-user and their uids (UID_INVALID: root only): who
         * besides root may ask for the descriptors each of them needs. */
        const char *symbolizer_user, *collector_user;
        uid_t symbolizer_uid, collector_uid;
        uint64_t memory_refusals; /* OpenProcessMemory calls refused: a daemon of ours, not dumpable */

        /* BPF side */
        EpBpf *bpf;
        EpBpfLister *bpf_lister;   /* ListBpfPrograms; NULL if the kernel refused its iterator */
        struct ring_buffer *bpf_ring;
        sd_event_source *bpf_ring_source;
        sd_event_source *drain_timer;
        sd_event_source *status_timer;
        sd_event_source *sweep_timer;
        sd_event_source *publish_timer;

        /* trace ring and its consumer */
        EpRing *ring;
        uint64_t ring_gen;        /* bumped by each OpenTraceRing; 0 while nobody opened it */
        sd_bus_track *consumer;   /* whoever called OpenTraceRing last */
        bool ring_active;         /* a consumer holds the ring: produce traces */
        bool ring_dirty;          /* records written since the consumer was last woken */
        bool ring_was_full;       /* logged once per consumer */

        /* processes and files */
        EpProcTable *procs;
        EpBpfLimits limits;
        EpUnwindMaps maps;
        EpTables *tables;          /* per-file unwind tables in BPF */
        EpSymClient *symclient;    /* asks the symbolizer for them */
        struct ep_bpf_proc *proc_scratch; /* one BPF proc_mappings value being built */
        uint64_t mapping_overflows; /* processes with more file mappings than a BPF entry holds */
        uint64_t bpf_sync_errors;  /* proc_mappings updates that failed */
        uint64_t boot_to_realtime_ns; /* CLOCK_REALTIME - CLOCK_BOOTTIME, measured at start */
        uint64_t last_liveness_check_ns;

        /* statistics */
        uint64_t traces_sent;
        uint64_t bad_records;
        uint64_t lost_samples_seen; /* LostSamples when last checked */
        uint64_t published[12];   /* last values sent in PropertiesChanged */
        char *last_error;

        /* samples waiting for a table before they are unwound in the loader (user-unwind.c) */
        struct Deferred *deferred_head, **deferred_tail;
        unsigned n_deferred;
        size_t deferred_bytes;
        uint64_t stack_copies;     /* samples received with a stack copy */
        uint64_t user_unwinds;     /* ... whose stack the loader's unwind recovered better */
        uint64_t inherited_images; /* samples of a forked child placed in its parent's mappings */
        uint64_t deferred_total;   /* samples that waited for a table */
        uint64_t deferred_expired; /* ... and were sent when the wait ran out */

        /* runtime-cpython.c: what the symbolizer said about files by file key (PyFile *), and
         * statistics */
        struct EpHashmap *py_files;
        uint64_t py_runtimes;      /* files found to be usable CPython runtimes */
        uint64_t py_detect_errors; /* CPython files that cannot be used, answers refused */
        /* trace-convert.c: interpreter frames of every runtime */
        uint64_t interp_frames_sent;
        uint64_t interp_spliced;   /* BPF's unplaced interpreter frames placed in a loader unwind */
        uint64_t interp_unplaced_dropped; /* interpreter frames a loader unwind found no place for */
        uint64_t interp_orphaned;  /* interpreter frames of a process that runs no runtime any more */

        TraceCache *trace_cache;       /* conversions of stacks seen before */
        EpFrame frames[EP_MAX_FRAMES]; /* conversion scratch */
        uint64_t counters[EP_BPF_CNT_MAX]; /* loader-bus.c: the BPF counters, as last read */
        uint64_t counters_read_ns;
        uint64_t user_frames[EP_BPF_MAX_USER_FRAMES];
        uint64_t spliced_frames[EP_BPF_MAX_USER_FRAMES]; /* interp-splice.c's output */
} Loader;

/* Sets the LastError property (the caller logs). */
void loader_set_error(Loader *l, const char *format, ...) _printf_(2, 3);
bool loader_collector_attached(const Loader *l);

/* main.c: reads what is in the BPF ring buffer now and sends it on. */
void loader_drain(Loader *l);

/* trace-convert.c */
int loader_handle_bpf_record(Loader *l, const void *data, size_t size);
/* Sends the deferred samples that waited for file_key's table (0: none), and those whose
 * wait ran out. */
void loader_retry_deferred(Loader *l, uint32_t file_key);
void loader_deferred_free(Loader *l);

/* user-unwind.c: unwinds a sample's stack copy with the loader's mappings and the loaded
 * tables. Fills frames[] like the BPF side (flags in the top byte) and returns the stop
 * reason; *ret_waiting is the file key of a table it needed that is still expected (0: none). */
int loader_user_unwind(Loader *l, const EpProcess *p, const struct ep_bpf_stack_copy *copy, uint64_t *frames,
                       unsigned max, unsigned *ret_n, uint32_t *ret_waiting);
void loader_sweep_processes(Loader *l);
/* Called when a new consumer took the ring: everything must be announced again. */
void loader_ring_reset(Loader *l);

/* process-memory.c: Loader1.OpenProcessMemory's decision. */
typedef struct LoaderProcessMemory {
        int fd; /* /proc/PID/mem, read-only */
        const struct LoaderRuntime *runtime;
        uint16_t runtime_version;
} LoaderProcessMemory;

/* The memory of process pid, for the symbolizer to read a runtime's objects: only of a
 * process that runs a runtime the loader walks, never of the loader or of a process that is
 * not dumpable (the caller refuses the other daemons). -ESRCH: no such process (or the id of a
 * thread); -EAGAIN: what it runs is not known yet; -ENOMEDIUM: it runs no runtime; -EPERM:
 * refused. */
int loader_open_process_memory(Loader *l, pid_t pid, LoaderProcessMemory *ret);

/* process-tracker.c: the BPF side's view of processes (proc_mappings) and the table
 * references of the files they map. */
/* Writes p's file mappings to BPF when they changed since the last write. */
void loader_track_process(Loader *l, EpProcess *p);
/* What a runtime is in file_key became known: every live process that maps it (and whose
 * mappings are in BPF) is tracked by the runtimes again (loader_runtimes_track). */
void loader_retrack_runtimes(Loader *l, uint32_t file_key);
/* ep_process_forget_t: the process is being forgotten. */
void loader_untrack_process(EpProcess *p, void *userdata);
/* Forgets the files no process has mapped for a while and no table holds (every 30 s). */
void loader_prune_files(Loader *l, uint64_t now);
/* p was found dead although no exit event came: removes its BPF entry now. */
void loader_process_dead(Loader *l, EpProcess *p);
/* p exec'd after its mappings were last read: it runs no runtime until they are read
 * again, and its BPF entries (written from the old image, if any) are deleted. */
void loader_process_exec(Loader *l, EpProcess *p);
/* Tracks every process that exists now (at start). */
int loader_scan_processes(Loader *l);
/* Makes the vDSO a file with an unwind table (and symbols), before any process is read. */
void loader_setup_vdso(Loader *l);

typedef struct LoaderCounter {
        const char *name;
        uint64_t value;
} LoaderCounter;
#define LOADER_RUNTIME_COUNTERS_MAX 32

/* An interpreter runtime's loader part (runtime-<rt>.c), registered in runtimes.c; see
 * docs/ARCHITECTURE.md, "How to add a runtime". */
typedef struct LoaderRuntime {
        const char *name;              /* OpenProcessMemory's answer for its processes */
        const char *counters_property; /* its Loader1 property of counters (a{st}) */
        uint8_t frame_kind;            /* EP_FRAME_* of its frames in traces */
        /* p's mappings were written to BPF: writes p's entry in the runtime's BPF map when p
         * runs it and returns the version (>0); else 0, deleting the entry when had_entry. */
        uint16_t (*track)(Loader *l, EpProcess *p, bool had_entry);
        /* p runs it and is forgotten or dead: deletes its BPF entry when delete_bpf_entry (not
         * when the BPF side's exit hook removed it already). */
        void (*untrack)(Loader *l, EpProcess *p, bool delete_bpf_entry);
        /* whether p may run it but that is not known yet: a file of p was asked about (the
         * symbolizer's DetectRuntime) and the answer has not come */
        bool (*detecting)(Loader *l, const EpProcess *p);
        /* pc (a native frame's lookup address) is in one of p's interpreter loops */
        bool (*is_interp_loop)(Loader *l, const EpProcess *p, uint64_t pc);
        /* the trace address of a frame BPF sent as two slots: an address, then a signed offset */
        uint64_t (*frame_addr)(uint64_t object, int64_t offset);
        /* its counters, from the BPF ones (EP_BPF_CNT_*) and its own; returns how many */
        size_t (*counters)(Loader *l, const uint64_t *bpf, LoaderCounter ret[static LOADER_RUNTIME_COUNTERS_MAX]);
        /* the file is forgotten (no process maps it any more): drops what it learnt of it */
        void (*forget_file)(Loader *l, uint32_t key);
        void (*free)(Loader *l);
} LoaderRuntime;

extern const LoaderRuntime loader_runtime_cpython; /* runtime-cpython.c */

/* runtimes.c: the seam; process-tracker.c, trace-convert.c, loader-bus.c and main.c reach a
 * runtime only through these. */
void loader_runtimes_track(Loader *l, EpProcess *p);
void loader_runtimes_untrack(Loader *l, EpProcess *p, bool delete_bpf_entry);
bool loader_runtimes_is_interp_loop(Loader *l, const EpProcess *p, uint64_t pc);
/* Whether what p runs is still being found out: its mappings are not written to BPF yet, or a
 * runtime waits for an answer about one of its files. */
bool loader_runtimes_detecting(Loader *l, const EpProcess *p);
/* The runtime whose counters are that property, or NULL. */
const LoaderRuntime *loader_runtime_by_counters(const char *property);
/* A hash of every runtime's counters, to tell when they changed. */
uint64_t loader_runtimes_counters_hash(Loader *l, const uint64_t *bpf);
void loader_runtimes_forget_file(Loader *l, uint32_t key);
void loader_runtimes_free(Loader *l);

/* loader-bus.c */
int loader_bus_publish(Loader *l);
void loader_bus_emit_changes(Loader *l);
