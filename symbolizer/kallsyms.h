/* SPDX-License-Identifier: MIT */
#pragma once

/* Kernel symbols from /proc/kallsyms text ("ADDR TYPE NAME [MODULE]" per line). Only text
 * symbols (t, T, w, W) are kept: an address in kernel code belongs to the closest text symbol
 * at or below it, within EP_KALLSYMS_MAX_FUNCTION bytes. Module symbols carry their module
 * name ("" for vmlinux); the kernel tags JIT-compiled eBPF programs with module "bpf" and names
 * them bpf_prog_<tag>_<name>, which is kept whole (lines up to 4096 bytes; the kernel's names
 * are at most 512). Classic BPF filters (seccomp, SO_ATTACH_FILTER) are not listed at all. A table whose addresses are all zero
 * (kptr_restrict: the reader lacked CAP_SYSLOG) is refused with -EPERM. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "macro.h"

#define EP_KALLSYMS_MAX_FUNCTION (1u << 20)

typedef struct EpKallsyms EpKallsyms;

int ep_kallsyms_parse_file(FILE *f, EpKallsyms **ret);
int ep_kallsyms_parse_fd(int fd, EpKallsyms **ret); /* reads from the current position; fd stays open */
int ep_kallsyms_parse_text(const char *text, size_t len, EpKallsyms **ret);
EpKallsyms *ep_kallsyms_free(EpKallsyms *k);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpKallsyms *, ep_kallsyms_free);

size_t ep_kallsyms_count(const EpKallsyms *k);
size_t ep_kallsyms_modules(const EpKallsyms *k);

/* vmlinux's text [_stext, _etext) (without those markers: the span of its symbols), or
 * -ENOENT when the table has no vmlinux symbol. */
int ep_kallsyms_text_range(const EpKallsyms *k, uint64_t *ret_start, uint64_t *ret_end);
/* Both name the same addresses the same way (either may be NULL). */
bool ep_kallsyms_same(const EpKallsyms *a, const EpKallsyms *b);

/* The function covering addr: returns 0 with pointers into the table (valid until it is
 * freed), or -ENOENT. Any ret_* may be NULL. */
int ep_kallsyms_lookup(const EpKallsyms *k, uint64_t addr, const char **ret_name,
                       const char **ret_module, uint64_t *ret_sym_addr);
