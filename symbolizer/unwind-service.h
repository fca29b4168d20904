/* SPDX-License-Identifier: MIT */
#pragma once

/* Symbolizer1.GetUnwindTable(h file, ay file_id) → (h table), and Symbolizer1.DetectRuntime
 * (runtime-detect.h), each on a worker thread of its own.
 *
 * The loader (root) passes the descriptor of a mapped file; the reply is a sealed read-only
 * memfd (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) holding the table blob of
 * common/unwind-table.h. Work happens on the table worker thread (cache lookup, extraction,
 * cache store: extracting a big library takes a few hundred ms and must not stall symbolization);
 * the method call is answered later from the event loop, woken by an eventfd. Each worker
 * serves its requests in order. The table worker owns the cache (opened on first use, so a
 * daemon that is never asked creates no files); neither touches sd-bus objects.
 *
 * Errors: org.ebpfprofiler.Error.NoUnwindInfo (not x86-64, nothing executable),
 * org.ebpfprofiler.Error.BadFile (not ELF, malformed CFI, over a bound, unreadable, or the
 * descriptor's file ID is not the one given), InvalidArgs (file ID not 16 bytes),
 * AccessDenied (caller neither root nor our own user). */

#include <stdint.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "macro.h"
#include "stats.h"
#include "unwind-lookup.h"

#define EP_ERROR_NO_UNWIND_INFO "org.ebpfprofiler.Error.NoUnwindInfo"
#define EP_ERROR_BAD_FILE "org.ebpfprofiler.Error.BadFile"

typedef struct EpUnwindService EpUnwindService;

typedef struct EpUnwindServiceConfig {
        const char *cache_dir;      /* NULL or "": no cache */
        uint64_t cache_max_bytes;   /* 0: EP_UNWIND_CACHE_DEFAULT_MAX */
        const char *debug_root;     /* NULL: /usr/lib/debug */
} EpUnwindServiceConfig;

/* sym_stats (may be NULL) receives LastError texts. */
int ep_unwind_service_new(sd_event *event, const EpUnwindServiceConfig *config, EpSymStats *sym_stats,
                          EpUnwindService **ret);
/* Stops the workers (waits for the files in progress); unanswered calls are dropped. */
EpUnwindService *ep_unwind_service_free(EpUnwindService *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpUnwindService *, ep_unwind_service_free);

/* The method handler body: checks and queues the call; returns 1 (reply follows) or an error. */
int ep_unwind_service_handle(EpUnwindService *s, sd_bus_message *msg, sd_bus_error *error);
/* The same for Symbolizer1.DetectRuntime(h file, ay file_id) → (s runtime, ay facts)
 * (runtime-detect.h): on the detection worker, in the sandbox, so that it never waits for an
 * extraction (a detection takes milliseconds, an extraction of a cold file seconds, and a
 * process's Python frames wait for the detection). Not counted in UnwindQueue. */
int ep_unwind_service_handle_detect(EpUnwindService *s, sd_bus_message *msg, sd_bus_error *error);

/* Counters, updated on the event loop as answers go out. */
const EpUnwindStats *ep_unwind_service_stats(const EpUnwindService *s);

/* The D-Bus properties (all "t"): UnwindTables, UnwindCacheHits, UnwindCacheMisses,
 * UnwindExtractErrors, UnwindExtractNsec, UnwindCacheBytes, UnwindQueue. */
#define EP_UNWIND_PROPERTIES 7
extern const char *const ep_unwind_property_names[EP_UNWIND_PROPERTIES];
/* The value of the property called name (0 for an unknown name or no service). */
uint64_t ep_unwind_property(const EpUnwindService *s, const char *name);
/* Appends the names of the properties that differ between now and was to names[]; returns how
 * many. */
size_t ep_unwind_properties_changed(const EpUnwindStats *now, const EpUnwindStats *was, const char **names);
