/* SPDX-License-Identifier: MIT */
#pragma once

/* The per-file unwind tables in BPF (bpf/profiler.h, "native unwinding maps").
 *
 * Files are referenced by the processes that map them (process-tracker.c). The first
 * reference gives the file a BPF file number (slot) and queues a request for its table; the
 * symbolizer client (symbolizer-client.c) takes requests from the queue and hands back what
 * the symbolizer answered. A table blob is validated (the symbolizer is less trusted than the
 * loader), its rules are merged into the global rule set, it is paged (table-pages.c) and
 * loaded: pages first, then the file's own delta array (sized to it) into the outer array, so
 * BPF never sees a table without its pages. A file nobody maps is unloaded after a delay
 * (table first, then pages), and its slot is reused. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf-setup.h"
#include "macro.h"
#include "unwind-rule.h"
#include "wire.h"

typedef struct EpTables EpTables;

typedef struct EpTablesStats {
        uint32_t files;       /* files holding a BPF slot */
        uint32_t loaded;      /* tables in BPF */
        uint32_t fp_only;     /* files without CFI: frame-pointer steps */
        uint32_t pending;     /* queued or being asked for */
        uint32_t rules;       /* distinct rules in unwind_rules */
        uint64_t bytes;       /* kernel memory of the tables: delta arrays, pages, rule array */
        uint64_t requests;    /* GetUnwindTable calls made */
        uint64_t errors;      /* bad answers, failed loads, symbolizer errors (not "no CFI") */
        uint64_t no_slot;     /* references that found every slot taken */
        uint64_t too_big;     /* tables refused for taking more than one file's share */
        uint64_t user_full;   /* references refused for a user holding its share of the slots */
} EpTablesStats;

/* Results handed to ep_tables_request_done(). */
enum {
        EP_TABLE_OK = 0,          /* blob, size: the table */
        EP_TABLE_NO_CFI = 1,      /* the file has no unwind information: frame-pointer steps */
        EP_TABLE_BAD_FILE = 2,    /* the symbolizer could not read the file: given up */
        EP_TABLE_RETRY = 3,       /* transient (symbolizer gone, timeout, file not openable) */
        EP_TABLE_UNSUPPORTED = 4, /* the symbolizer has no GetUnwindTable: wait for a new one */
        EP_TABLE_UNAVAILABLE = 5, /* no live process maps the file: asked again when one does */
};

int ep_tables_new(const EpUnwindMaps *maps, uint32_t max_files, uint64_t unload_delay_ns, EpTables **ret);
EpTables *ep_tables_free(EpTables *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpTables *, ep_tables_free);

/* Called when the queue gains a request. */
void ep_tables_set_kick(EpTables *t, void (*kick)(void *userdata), void *userdata);

/* A process of user uid maps file_key (once per process, whatever the number of mappings).
 * Returns the file's BPF file number, 0 when no slot is free or a user other than root holds
 * its share of them already, an eighth (its frames then take frame-pointer steps). A slot is
 * charged to the user whose process took it, until the file is unloaded. */
uint32_t ep_tables_ref(EpTables *t, uint32_t file_key, uid_t uid);
void ep_tables_unref(EpTables *t, uint32_t file_key);
/* Changes whenever a slot is freed: a process that got 0 for a file asks again then. */
uint64_t ep_tables_slot_epoch(const EpTables *t);
/* A sample needed this file's table: ask for it before the files that only were mapped. */
void ep_tables_hint_needed(EpTables *t, uint32_t file_key);

/* The next file to ask the symbolizer about. */
bool ep_tables_next_request(EpTables *t, uint32_t *ret_key);
/* The answer for file_key (EP_TABLE_*). id is the file ID the table must carry. */
void ep_tables_request_done(EpTables *t, uint32_t file_key, const uint8_t id[EP_FILE_ID_SIZE], int result,
                            const void *blob, size_t size);
/* The symbolizer (re)appeared: files waiting for a retry are asked again now. */
void ep_tables_retry_now(EpTables *t);

/* Tables are published into the outer array in batches: publish_soon() is called when one is
 * ready, and the caller runs ep_tables_publish() shortly after (without a callback, at once). */
void ep_tables_set_publish_cb(EpTables *t, void (*publish_soon)(void *userdata), void *userdata);
void ep_tables_publish(EpTables *t);

/* Called when a file's table is no longer to be waited for: loaded, or known not to come
 * (samples waiting for it can be unwound now). */
void ep_tables_set_loaded_cb(EpTables *t, void (*loaded)(uint32_t file_key, void *userdata), void *userdata);

/* For unwinding in the loader (bpf/native-unwind.h's ep_find_rule over what BPF holds): the
 * rule at file_offset of file_key. Returns EP_LOOKUP_FOUND, EP_LOOKUP_NO_TABLE (then
 * *ret_pending says whether a table is still expected) or EP_LOOKUP_ERROR. */
int ep_tables_find_rule(EpTables *t, uint32_t file_key, uint32_t file_offset, struct ep_unwind_rule *ret_rule,
                        bool *ret_pending);

/* Unloads tables unused for longer than the delay; re-queues retries that are due. */
void ep_tables_sweep(EpTables *t);
void ep_tables_stats(const EpTables *t, EpTablesStats *ret);

/* One file's table, for Loader1.ListTables. */
typedef struct EpTableInfo {
        const char *state; /* "queued", "loaded", "retry", ...: docs/dbus.md */
        uint64_t state_ns; /* time since the state last changed */
        uint64_t bytes;    /* kernel memory of its table */
        unsigned attempts; /* transient failures in a row */
        bool waited_for;   /* a table is still expected: samples in the file are deferred for it */
} EpTableInfo;

/* The files the tables know, in no order: *state starts at 0. */
bool ep_tables_iterate(EpTables *t, size_t *state, uint32_t *ret_key);
/* -ENOENT for a file the tables do not know (never referenced, or dropped). */
int ep_tables_file_info(EpTables *t, uint32_t file_key, EpTableInfo *ret);
