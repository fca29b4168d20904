/* SPDX-License-Identifier: MIT */
#pragma once

/* Shared between resolver.c (caches, dispatch) and the per-kind resolvers registered in
 * resolvers.c: resolve-native.c (ELF files), resolve-kernel.c (kallsyms, modules, BPF
 * programs), resolve-jit.c (perf maps of processes) and resolve-cpython.c (CPython code objects). Each per-kind file owns its own state, reached
 * through an opaque pointer in EpResolver, created on first use and freed by its _free(). */

#include "hashmap.h"
#include "lru.h"
#include "native-file.h"
#include "native-worker-wire.h"
#include "resolver.h"
#include "symbol-cache.h"

typedef struct ResolverKernel ResolverKernel;
typedef struct ResolverJit ResolverJit;
typedef struct ResolverGo ResolverGo;
typedef struct ResolverPython ResolverPython;
typedef struct DebugWatch DebugWatch;
typedef struct EpSymbolCache EpSymbolCache;

typedef enum FileState {
        FILE_OPEN,
        FILE_BAD,     /* not a usable ELF: answered BAD_FILE until evicted */
        FILE_MISSING, /* the source could not open it: answered NO_FILE for a while */
} FileState;

typedef struct FileEntry {
        FileState state;
        EpElfFile *elf;
        uint64_t bytes; /* charged to the budget of open files: ep_elf_kept_bytes() */
        uint64_t since_ns;
} FileEntry;

/* The result cache's key. For the kinds whose frames belong to one process (frame-kind.h),
 * file_id holds the pid (4 bytes) and the start time (8 bytes). */
typedef struct ResultKey {
        uint8_t kind, flags;
        uint8_t pad[6];
        uint8_t file_id[EP_FILE_ID_SIZE];
        uint64_t addr;
} ResultKey;

struct EpResolver {
        EpFileSource source;
        EpResolverConfig config;
        EpSymStats *stats;

        EpLru *files;
        FileEntry *file_slots;
        uint32_t files_open;
        uint64_t file_bytes; /* what the open files keep resident for their symbols, together */
        uint64_t open_timed_out_ns; /* when open_file last timed out; 0: it did not */

        EpLru *results;
        EpSymResult *result_slots;
        EpSymResult scratch; /* results that are not cached */

        ResolverKernel *kernel;
        ResolverJit *jit;
        ResolverGo *go;
        ResolverPython *python;
        EpSymbolCache *symbol_cache; /* not owned; NULL: nothing persisted */
        EpHashmap *persisted_files;  /* file ID → PersistedFile, for this session of symbol_cache */

        EpNativeParser native_parser; /* answer NULL: native files are parsed here */
        /* The record of the last native answer (ep_resolver_native_record_take()), for persist(). */
        EpSymbolFileRecord native_record;
        bool has_native_record;

        EpLru *debug_watch;            /* file IDs answered without their debug file */
        DebugWatch *debug_watch_slots; /* ... how to look for it again (resolver-debug-watch.c) */
};

/* What the resolver did with a file's record in the symbol cache (symbol-cache.h). */
typedef struct PersistedFile {
        uint8_t recorded; /* record_mark() of the record queued, 0: none yet */
        bool checked;     /* its record was checked against the debug roots */
} PersistedFile;

/* CLOCK_MONOTONIC through ep_now_ns(), which tests can set (ep_clock_set()). */
uint64_t ep_resolver_now_ns(void);

/* Replaces *res with a result of one line (function_owned may be NULL: no line; it is taken
 * even on failure). Returns 0 or -ENOMEM. */
int ep_resolver_result_set(EpSymResult *res, uint8_t status, uint64_t elf_addr, const char *module,
                           char *function_owned);

/* The opened file with that ID: 0, or -ENOEXEC/-EIO (bad file), -ENOENT/-ENXIO/... (no
 * file), -ENOMEM. */
int ep_resolver_get_file(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], EpElfFile **ret);
/* A read of an open file failed with -ENOEXEC/-EIO: answer BAD_FILE for it from now on. */
void ep_resolver_bad_file_seen(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], int error);
/* Forgets every cached result of that frame kind (kernel symbols moved, a perf map changed). */
void ep_resolver_drop_results(EpResolver *r, uint8_t kind);
/* Forgets everything known about a native file's answers: cached and persisted results, the
 * opened file with its debug search. The next request computes them again. */
void ep_resolver_forget_file(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE]);
/* What a file's answers are computed with, as the symbol cache records it (symbol-cache.h):
 * 0 and *ret (free with ep_symbol_file_record_done()), or -ENOMEM. */
int ep_resolver_file_record(EpElfFile *elf, const EpNativeDebugInfo *info, EpSymbolFileRecord *ret);

/* resolver-debug-watch.c: the files answered without the separate debug file they need,
 * looked for again by ep_resolver_recheck_debug_files(). _watch() takes rec's contents (rec
 * is emptied); _watch_record() watches the file a native answer was computed from when rec
 * says its debug file was needed and not found. Both return 0 or -ENOMEM. */
int ep_resolver_debug_watch_init(EpResolver *r);
void ep_resolver_debug_watch_free(EpResolver *r);
int ep_resolver_debug_watch(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], EpSymbolFileRecord *rec);
int ep_resolver_debug_watch_record(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], const EpSymbolFileRecord *rec);

/* resolve-native.c: a native frame's answer from the file, parsed in this process (the
 * worker's, or the symbolizer's without one): *a (empty on entry) with its result, whether it
 * may be cached, and the file's record. Only -ENOMEM is an error. */
int ep_native_answer(EpResolver *r, const EpSymRequest *req, EpNativeAnswer *a);
/* What a native answer was computed with: watched for a debug file (when it lacked one) and
 * kept for persisting the answer (rec's contents are taken; rec is emptied). 0 or -ENOMEM. */
int ep_resolver_native_record_take(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], EpSymbolFileRecord *rec);

/* Each fills *out (empty on entry) and sets *ret_cacheable when the answer may be reused for
 * the same key. Only -ENOMEM is returned as an error; everything else is a status. */
int ep_resolve_native(EpResolver *r, const EpSymRequest *req, EpSymResult *out, bool *ret_cacheable);
int ep_resolve_kernel(EpResolver *r, const EpSymRequest *req, EpSymResult *out, bool *ret_cacheable);
int ep_resolve_jit(EpResolver *r, const EpSymRequest *req, EpSymResult *out, bool *ret_cacheable);
int ep_resolve_python(EpResolver *r, const EpSymRequest *req, EpSymResult *out, bool *ret_cacheable);

/* Go programs, from .gopclntab (resolve-go.c): called by ep_resolve_native() first. lookup is
 * the ELF address to look up (already moved back into the call instruction for return
 * addresses), elf_addr the one to report. Returns 1 with *out filled when the file is a Go
 * program whose table covers lookup, 0 when other sources should be tried (not Go, or not
 * covered), -ENOMEM. */
int ep_resolve_go(EpResolver *r, const uint8_t file_id[EP_FILE_ID_SIZE], EpElfFile *elf, uint64_t lookup,
                  uint64_t elf_addr, EpSymResult *out);
void ep_resolve_go_free(EpResolver *r);

/* The file source came back: forget what it could not provide before. */
void ep_resolve_kernel_source_changed(EpResolver *r);
void ep_resolve_jit_source_changed(EpResolver *r);
void ep_resolve_python_source_changed(EpResolver *r);

void ep_resolve_kernel_free(EpResolver *r);
void ep_resolve_jit_free(EpResolver *r);
void ep_resolve_python_free(EpResolver *r);

/* What names a frame kind: resolve fills *out (empty on entry) and sets *ret_cacheable when the
 * answer may be reused for the same key (only -ENOMEM is an error; the rest is a status);
 * source_changed forgets what the file source could not provide before; free releases the
 * kind's state. Either of the last two may be NULL. */
typedef struct EpResolverKind {
        int (*resolve)(EpResolver *r, const EpSymRequest *req, EpSymResult *out, bool *ret_cacheable);
        void (*source_changed)(EpResolver *r);
        void (*free)(EpResolver *r);
} EpResolverKind;

/* resolvers.c: indexed by EP_FRAME_*; a kind nothing names has no resolve. */
extern const EpResolverKind ep_resolvers[_EP_FRAME_KIND_MAX];
