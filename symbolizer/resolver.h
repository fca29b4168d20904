/* SPDX-License-Identifier: MIT */
#pragma once

/* Answers symbol and file requests: finds the file (through an EpFileSource, in the daemon
 * the loader's OpenFile / OpenKallsyms), keeps a bounded LRU of opened ELF files and a bounded
 * LRU of results, and names native frames from ELF symbols and kernel frames from kallsyms.
 * Results are shaped for the response message: a status, the ELF-space address, the module
 * and a list of lines, innermost first (an inlined callee before its caller). The work per
 * frame kind lives in resolve-native.c, resolve-kernel.c, resolve-jit.c and resolve-cpython.c. */

#include <stdbool.h>
#include <stdint.h>

#include "elf-symbols.h"
#include "macro.h"
#include "passing-error.h"
#include "stats.h"
#include "wire.h"

/* One JIT-compiled BPF function (a program or a subprogram of it) as the loader lists it
 * (Loader1.ListBpfPrograms): its exact extent, which /proc/kallsyms does not give. */
typedef struct EpBpfProgram {
        uint64_t start, length;
        uint32_t id;   /* the program's ID */
        char name[64]; /* kallsyms style, bpf_prog_<tag>[_<name>]; "" when unknown */
} EpBpfProgram;

/* Where descriptors come from. Each returns a new fd (>= 0, owned by the caller) or a negative
 * errno: -ENOENT the file is gone / does not exist, -ENXIO no provider right now (loader
 * absent), -EPERM refused, -ETIMEDOUT/-EAGAIN/... a passing failure
 * (ep_resolver_error_passing()). Members other than open_file may be NULL (treated as -ENXIO). */
typedef struct EpFileSource {
        int (*open_file)(void *userdata, const uint8_t file_id[EP_FILE_ID_SIZE]);
        int (*open_kallsyms)(void *userdata);
        int (*open_kernel_modules)(void *userdata);      /* /proc/modules text */
        int (*open_perf_map)(void *userdata, uint32_t pid); /* /tmp/perf-PID.map of that process */
        /* The loaded BPF functions (*ret: malloc'ed array, freed by the caller), or a negative
         * errno like the others. */
        int (*list_bpf_programs)(void *userdata, EpBpfProgram **ret, size_t *ret_n);
        /* /proc/PID/mem of that process (O_RDONLY, read with pread at virtual addresses) and
         * the runtime the loader detected in it: runtime "cpython" (NUL-terminated, at most
         * runtime_size bytes) and *ret_version major << 8 | minor, or "" and 0 for none
         * (resolve-cpython.c). */
        int (*open_process_memory)(void *userdata, uint32_t pid, char *runtime, size_t runtime_size,
                                   uint32_t *ret_version);
        void *userdata;
} EpFileSource;

/* One frame to name. */
typedef struct EpSymRequest {
        uint8_t kind;  /* EP_FRAME_* */
        uint8_t flags; /* EP_FRAME_FLAG_* */
        uint8_t file_id[EP_FILE_ID_SIZE]; /* EP_FRAME_NATIVE */
        uint64_t addr; /* file offset (native), kernel address, process address (unmapped) */
        uint32_t pid;  /* EP_FRAME_UNMAPPED, EP_FRAME_CPYTHON: the process addr belongs to */
        uint64_t start_time_ns; /* ... and its start time, so a reused pid is another process */
        const char *path; /* native: the file's path as its process maps it (may be NULL or
                           * not reachable from here); a hint for .gnu_debuglink lookups */
} EpSymRequest;

typedef struct EpSymLine {
        char *function;
        char *file;    /* source file, "" when unknown */
        uint32_t line; /* 0 when unknown */
} EpSymLine;

typedef struct EpSymResult {
        uint8_t status; /* EP_SYM_* */
        uint64_t elf_addr;
        char *module;
        uint16_t n_lines;
        EpSymLine *lines;
} EpSymResult;

typedef struct EpFileInfo {
        uint8_t status; /* EP_SYM_* */
        EpBuildIds ids;
} EpFileInfo;

typedef struct EpResolverConfig {
        uint32_t max_files;           /* opened ELF files kept (LRU) */
        uint64_t max_file_bytes;      /* ... and what they keep resident for symbols (more: least recently used closed) */
        uint32_t max_results;         /* cached results (LRU) */
        uint64_t missing_retry_ns;    /* how long a file the source could not open stays "gone" */
        uint64_t timeout_hold_ns;     /* after a source call timed out, how long files are not asked
                                       * for (answered RETRY at once): one slow loader must not cost
                                       * a call timeout per request of a batch */
        uint64_t kallsyms_refresh_ns; /* re-read kallsyms at most this often, on a miss */
} EpResolverConfig;

#define EP_RESOLVER_CONFIG_DEFAULT                        \
        ((EpResolverConfig) {                             \
                .max_files = 64,                          \
                .max_file_bytes = UINT64_C(32) << 20,     \
                .max_results = 32768,                     \
                .missing_retry_ns = 10 * NSEC_PER_SEC,    \
                .timeout_hold_ns = 1 * NSEC_PER_SEC,      \
                .kallsyms_refresh_ns = 60 * NSEC_PER_SEC, \
        })

typedef struct EpResolver EpResolver;
typedef struct EpSymbolCache EpSymbolCache; /* symbol-cache.h */

/* Bump when resolve-*.c may answer differently for the same file and address (new DWARF,
 * demangling, Go support...): answers persisted by an older symbolizer are then dropped
 * instead of reused (symbol-cache.h). */
#define EP_RESOLVER_ANSWERS_VERSION 1

int ep_resolver_new(const EpFileSource *source, const EpResolverConfig *config, EpSymStats *stats,
                    EpResolver **ret);
EpResolver *ep_resolver_free(EpResolver *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpResolver *, ep_resolver_free);

/* Symbolizes one frame. *ret points at a result owned by the resolver, valid until the next
 * call. Fails only on -ENOMEM (every other problem is a status in the result). */
int ep_resolver_symbolize(EpResolver *r, const EpSymRequest *req, const EpSymResult **ret);
int ep_resolver_file_info(EpResolver *r, const uint8_t file_id[EP_FILE_ID_SIZE], EpFileInfo *ret);

/* Consults cache (may be NULL: none) when a native frame is not in the in-memory cache, and
 * queues final native answers to it. Not owned: it must outlive the resolver or be detached. */
void ep_resolver_set_symbol_cache(EpResolver *r, EpSymbolCache *cache);

/* A parser of native files in another process (native-worker.h), which the resolver asks
 * instead of parsing them itself. answer: a native frame's answer, as the resolver's own
 * (native-worker-wire.h; only -ENOMEM is an error); file_info: as ep_resolver_file_info();
 * forget_file, source_changed: as the resolver's own; files_open, go_malformed: its counts. */
typedef struct EpNativeAnswer EpNativeAnswer;
typedef struct EpNativeParser {
        int (*answer)(void *userdata, const EpSymRequest *req, EpNativeAnswer *ret);
        int (*file_info)(void *userdata, const uint8_t file_id[EP_FILE_ID_SIZE], EpFileInfo *ret);
        void (*forget_file)(void *userdata, const uint8_t file_id[EP_FILE_ID_SIZE]);
        void (*source_changed)(void *userdata);
        uint32_t (*files_open)(void *userdata);
        uint64_t (*go_malformed)(void *userdata);
        void *userdata;
} EpNativeParser;

/* Native files are parsed by p from now on (NULL: in this process). */
void ep_resolver_set_native_parser(EpResolver *r, const EpNativeParser *p);

/* The file source changed (the loader came back): forget files it could not open. */
void ep_resolver_source_changed(EpResolver *r);

uint32_t ep_resolver_cache_entries(const EpResolver *r);
/* Go tables or lookups found malformed (resolve-go.c). */
uint64_t ep_resolver_go_malformed(const EpResolver *r);
uint32_t ep_resolver_files_open(const EpResolver *r);

/* Native files answered without the separate debug file they need are watched (at most
 * EP_RESOLVER_DEBUG_WATCH_MAX, least recently answered dropped first). This looks for each
 * one's debug file again (a few stat() calls per file, no open); for each that has one now,
 * its answers are forgotten (cached, persisted) and changed(file_id, userdata) is called: the
 * requester asks again. Returns how many changed. */
#define EP_RESOLVER_DEBUG_WATCH_MAX 4096
typedef void (*EpFileChangedFn)(const uint8_t file_id[EP_FILE_ID_SIZE], void *userdata);
int ep_resolver_recheck_debug_files(EpResolver *r, EpFileChangedFn changed, void *userdata);
uint32_t ep_resolver_debug_watched(const EpResolver *r);

void ep_sym_result_done(EpSymResult *res);

/* EP_SYM_RETRY for a passing error (ep_error_passing(): answered RETRY, never cached), else
 * EP_SYM_NO_FILE (the file or the process is gone, refused: definite). */
uint8_t ep_resolver_missing_status(int error);
