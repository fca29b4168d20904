/* SPDX-License-Identifier: MIT */
#pragma once

/* What the kernel resolver (resolve-kernel.c) knows, for the D-Bus properties, and its reload
 * policy, which tests shorten. The per-frame entry point is in resolver-internal.h. */

#include <stddef.h>
#include <stdint.h>

#include "kmodules.h"
#include "resolver.h"

/* When the kernel tables (kallsyms, /proc/modules) are read again. vmlinux never changes, so a
 * miss inside its text re-reads only every EpResolverConfig.kallsyms_refresh_ns. Modules and
 * BPF programs come and go: */
typedef struct EpKernelPolicy {
        uint64_t dynamic_refresh_ns; /* a miss outside vmlinux's text re-reads at most this often */
        uint64_t dynamic_max_age_ns; /* a BPF (or other JIT) symbol found in a table older than
                                      * this is looked up again in a fresh one */
        uint64_t modules_check_ns;   /* a module hit re-checks /proc/modules at most this often */
        uint64_t retry_ns;           /* after a failed read */
        const char *sysfs_root;      /* build IDs are read below it (NULL: "/sys"); not copied */
} EpKernelPolicy;

#define EP_KERNEL_POLICY_DEFAULT                          \
        ((EpKernelPolicy) {                               \
                .dynamic_refresh_ns = 2 * NSEC_PER_SEC,   \
                .dynamic_max_age_ns = 5 * NSEC_PER_SEC,   \
                .modules_check_ns = 10 * NSEC_PER_SEC,    \
                .retry_ns = 5 * NSEC_PER_SEC,             \
        })

int ep_resolver_kernel_set_policy(EpResolver *r, const EpKernelPolicy *policy);

/* Reads the tables if no kernel frame was asked for yet (and no read failed recently), so the
 * properties mean something right after start. */
void ep_resolver_kernel_load(EpResolver *r);

uint32_t ep_resolver_kernel_symbols(EpResolver *r);  /* text symbols in the current table */
uint64_t ep_resolver_kernel_reloads(EpResolver *r);  /* successful reads after the first */
const EpKmodules *ep_resolver_kernel_modules(EpResolver *r); /* NULL before the first read */
/* vmlinux's GNU build ID: its size (0 unknown), *ret pointing into the resolver. */
size_t ep_resolver_kernel_build_id(EpResolver *r, const uint8_t **ret);
