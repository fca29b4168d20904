/* SPDX-License-Identifier: MIT */
#pragma once

/* Asks the loader (org.ebpfprofiler.Loader1) for descriptors of files it may open and we may
 * not: OpenFile(ay file_id) → h and OpenKallsyms() → h. Calls are synchronous with a short
 * timeout. While the loader is absent every call fails at once with -ENXIO. */

#include <stdbool.h>
#include <stdint.h>

#include "daemon.h"
#include "resolver.h"
#include "wire.h"

#define EP_LOADER_CALL_TIMEOUT_USEC (500 * 1000ULL)

typedef struct EpLoaderClient EpLoaderClient;
/* Called when the loader appears (present=true) or goes away. */
typedef void (*ep_loader_changed_t)(bool present, void *userdata);

int ep_loader_client_new(EpDaemon *d, ep_loader_changed_t changed, void *userdata, EpLoaderClient **ret);
EpLoaderClient *ep_loader_client_free(EpLoaderClient *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpLoaderClient *, ep_loader_client_free);

bool ep_loader_client_present(const EpLoaderClient *c);

/* Return a new descriptor, or -ENXIO (no loader), -ENOENT (no such file), -ETIMEDOUT, -EIO. */
int ep_loader_client_open_file(EpLoaderClient *c, const uint8_t file_id[EP_FILE_ID_SIZE]);
int ep_loader_client_open_kallsyms(EpLoaderClient *c);
int ep_loader_client_open_kernel_modules(EpLoaderClient *c);
int ep_loader_client_open_perf_map(EpLoaderClient *c, uint32_t pid);
/* Loader1.OpenProcessMemory(u pid) → (h mem, s runtime, u runtime_version): /proc/PID/mem
 * read-only, and the runtime the loader detected ("cpython", major << 8 | minor), copied into
 * runtime (runtime_size bytes, NUL-terminated). The loader answers only for a process that
 * runs a runtime: -ENOMEDIUM when it runs none, -ENOENT when it is gone, -EAGAIN while the
 * loader does not know yet (a passing failure), -EPERM when it refuses (one of the profiler's
 * daemons, not dumpable). -ENXIO also when the loader predates the method. */
int ep_loader_client_open_process_memory(EpLoaderClient *c, uint32_t pid, char *runtime, size_t runtime_size,
                                         uint32_t *ret_version);
/* Loader1.ListBpfPrograms: the loaded BPF functions with their extents, at most
 * EP_LOADER_BPF_PROGRAMS_MAX (*ret malloc'ed, may be NULL with *ret_n 0). -ENXIO also when the
 * loader predates the method. */
#define EP_LOADER_BPF_PROGRAMS_MAX 65536u
int ep_loader_client_list_bpf_programs(EpLoaderClient *c, EpBpfProgram **ret, size_t *ret_n);

/* The client as a file source for the resolver. */
EpFileSource ep_loader_client_source(EpLoaderClient *c);
