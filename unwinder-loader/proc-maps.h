/* SPDX-License-Identifier: MIT */
#pragma once

/* The loader's view of processes: per process the executable mappings (from /proc/PID/maps)
 * with the file each one maps, and the table of distinct files. Files are identified once per
 * (device, inode) by their file ID (common/file-id.h) and get a small file_key, the alias used
 * in the trace ring. The table does not announce anything itself: trace-convert.c does, using
 * the announced_gen fields. */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "file-id.h"
#include "macro.h"
#include "proc-parse.h"
#include "wire.h"

/* The time one read of a process's mappings spends identifying new files (file-probe.h: a
 * thread and an 8 KiB read each), from its first one on (so each read identifies one at
 * least). A process that maps thousands of them is identified over several reads, and the
 * loop goes on with the rest of its work meanwhile. */
#define EP_IDENTIFY_BUDGET_NS (50 * NSEC_PER_MSEC)

typedef struct EpMapping {
        uint64_t start, end, pgoff;
        uint64_t dev, ino; /* the inode it maps; 0 for none (anonymous, the vDSO) */
        uint32_t file_key; /* 0: anonymous, or the file could not be identified */
} EpMapping;

typedef struct EpFile {
        uint32_t key;
        uint8_t id[EP_FILE_ID_SIZE];      /* file-id.h */
        uint8_t htlhash[EP_FILE_ID_SIZE]; /* the same for a system file */
        uint64_t size;
        dev_t dev;                  /* of the inode it was first seen as (file-probe.h) */
        char *path;                 /* as /proc/PID/maps showed it when first seen */
        uint64_t announced_gen;     /* trace ring generation it was last announced in */
        uint64_t used_ns;           /* CLOCK_MONOTONIC: last seen in use (ep_proc_table_prune_files()) */
} EpFile;

typedef struct EpProcess {
        pid_t pid;
        uint64_t start_ticks;        /* /proc/PID/stat starttime; 0 when unknown */
        uint64_t start_time_ns;      /* CLOCK_REALTIME, 0 when unknown */
        char comm[16];
        uid_t uid;                   /* real user (/proc/PID/status), (uid_t) -1 when unknown */
        char *exe;
        char container_id[65];
        EpMapping *mappings;         /* executable mappings, sorted by start */
        size_t n_mappings;
        uint64_t maps_gen;           /* bumped whenever the mappings change */
        uint64_t maps_read_ns;       /* CLOCK_MONOTONIC of the last read, 0 = never */
        uint64_t maps_read_boot_ns;  /* the same in CLOCK_BOOTTIME (compared with sample times) */
        uint64_t reread_interval_ns; /* trace-convert.c: back-off of re-reads for unknown PCs */
        bool maps_stale;             /* execve() seen: read again before the next lookup */
        unsigned unidentified;       /* file mappings not identified for a passing reason */
        bool identify_deferred;      /* ... some only for want of time (EP_IDENTIFY_BUDGET_NS) */
        uint64_t identify_retry_ns;  /* trace-convert.c: back-off of re-reads for those */
        bool gone;                   /* /proc/PID could not be read */
        bool inodes_released;        /* ep_process_release_inodes() was called */
        uint64_t exit_boot_ns;       /* CLOCK_BOOTTIME of the exit event, 0 while alive */
        uint64_t exit_seen_ns;       /* CLOCK_MONOTONIC when the exit was seen */
        uint64_t announced_gen;

        /* process-tracker.c: what the BPF side knows of this process. */
        uint64_t synced_gen;         /* maps_gen last written to BPF; 0 = never */
        uint64_t synced_boot_ns;     /* CLOCK_BOOTTIME of that write */
        uint32_t *held_files;        /* file keys it holds a table reference on, sorted */
        bool slotless;               /* a file of it got no slot: written again once one is freed */
        uint64_t slot_epoch;         /* ... tables.c's slot epoch when it was written */
        size_t n_held;
        /* runtimes.c: the interpreter runtime it runs (its entry in that runtime's BPF map is
         * written), NULL: none; and its version as the runtime says it (CPython: major << 8 |
         * minor) */
        const struct LoaderRuntime *runtime;
        uint16_t runtime_version;

        /* trace-convert.c: samples waiting for tables keep the process (and its exit notice) */
        unsigned n_deferred;
        bool exit_announce_pending;
} EpProcess;

/* How a new file is identified: fills ret_ident, and *ret_pin with a descriptor that
 * holds the inode identified (O_PATH; the table closes it), so that its number stays that
 * file's while the table remembers what it was. The default opens the mapping through
 * /proc/PID/map_files and hashes it; tests replace it. */
typedef int (*ep_file_identify_t)(pid_t pid, const EpMapsLine *m, void *userdata, EpFileIdentity *ret_ident,
                                  int *ret_pin);

typedef struct EpProcTable EpProcTable;

int ep_proc_table_new(const char *proc_root, uint64_t realtime_minus_boottime_ns, EpProcTable **ret);
EpProcTable *ep_proc_table_free(EpProcTable *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpProcTable *, ep_proc_table_free);
void ep_proc_table_set_identify(EpProcTable *t, ep_file_identify_t identify, void *userdata);
/* Called with every process just before the table forgets it (removed or replaced; not when
 * the whole table is freed). */
typedef void (*ep_process_forget_t)(EpProcess *p, void *userdata);
void ep_proc_table_set_forget(EpProcTable *t, ep_process_forget_t forget, void *userdata);

/* The process, or NULL when it is not tracked. */
EpProcess *ep_proc_table_get(EpProcTable *t, pid_t pid);
/* Starts tracking pid: reads its /proc metadata and mappings. A process whose /proc entry is
 * gone is still added (gone = true, no mappings) so its samples are kept. */
int ep_proc_table_add(EpProcTable *t, pid_t pid, EpProcess **ret);
void ep_proc_table_remove(EpProcTable *t, pid_t pid);
/* Iteration over tracked processes; removing the returned one is allowed. */
bool ep_proc_table_iterate(EpProcTable *t, size_t *state, EpProcess **ret);
size_t ep_proc_table_n_processes(const EpProcTable *t);

/* Re-reads metadata (when the process was replaced by a new one with the same pid or exec'd)
 * and the mappings. Returns 1 when the process identity or metadata changed. */
int ep_process_refresh(EpProcTable *t, EpProcess *p);
/* p exited: the inodes it maps are no longer held by it (their numbers may be reused), while
 * its mappings stay for the traces in flight. Done by ep_process_refresh() when the process is
 * gone and when it is forgotten, at most once. */
void ep_process_release_inodes(EpProcTable *t, EpProcess *p);
/* Replaces the mappings with those parsed from a maps text (the parser behind
 * ep_process_refresh; exposed for tests). */
int ep_process_load_maps(EpProcTable *t, EpProcess *p, FILE *maps);

/* The executable mapping containing addr, or NULL. */
const EpMapping *ep_process_find_mapping(const EpProcess *p, uint64_t addr);

EpFile *ep_proc_table_file(EpProcTable *t, uint32_t key);
size_t ep_proc_table_n_files(const EpProcTable *t);
/* Forgets the files no process maps and used() does not claim, since grace_ns before now
 * (CLOCK_MONOTONIC): so that the table does not grow with every file the host ever ran. forget
 * is told each key first. Keys are not given again, so a consumer that still knows one never
 * takes it for another file. Returns how many went. */
typedef bool (*ep_file_used_t)(uint32_t key, void *userdata);
typedef void (*ep_file_forget_t)(uint32_t key, void *userdata);
size_t ep_proc_table_prune_files(EpProcTable *t, uint64_t now, uint64_t grace_ns, ep_file_used_t used,
                                 ep_file_forget_t forget, void *userdata);
/* A non-root user's share of identified (pinned) inodes: each holds a descriptor. The loader
 * gives each user an eighth of its open-file limit, at most EP_PROC_TABLE_USER_PINS_MAX. */
#define EP_PROC_TABLE_USER_PINS_DEFAULT 4096u
#define EP_PROC_TABLE_USER_PINS_MAX 16384u
void ep_proc_table_set_max_user_pins(EpProcTable *t, unsigned max);
/* Mappings left unidentified because their user held its share. */
uint64_t ep_proc_table_identify_refusals(const EpProcTable *t);
/* Opens and reads of mapped files that took too long (file-probe.h). */
uint64_t ep_proc_table_probe_timeouts(const EpProcTable *t);
/* The key of a known file ID, 0 when unknown. */
uint32_t ep_proc_table_find_file_id(EpProcTable *t, const uint8_t id[EP_FILE_ID_SIZE]);

/* Makes [vdso] mappings (of fd's size) map a file: fd holds a copy of the vDSO image, which is
 * the same in every 64-bit process, so its unwind table and symbols can be had like a file's. */
int ep_proc_table_set_vdso(EpProcTable *t, int fd);

/* Opens a read-only descriptor of file key from any tracked process that maps it, checking
 * its file ID. -ENOENT when no live process maps it any more; -EMFILE, -ENOMEM, ... when
 * none could be opened for want of a resource (ask again). */
int ep_proc_table_open_file(EpProcTable *t, uint32_t key);
