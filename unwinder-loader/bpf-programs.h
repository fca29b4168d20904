/* SPDX-License-Identifier: MIT */
#pragma once

/* The JIT-compiled BPF functions loaded on the system (every program, and each subprogram of
 * it, as its own extent), for Loader1.ListBpfPrograms. /proc/kallsyms names these functions but
 * gives no sizes; their extents let the symbolizer tell a sample in a listed program from one in
 * code the kernel lists nowhere. Classic BPF filters (seccomp filters, SO_ATTACH_FILTER) are
 * JIT-compiled too but have no program ID, so they are in neither list: checked on Linux 6.18,
 * tests/unit/test-loader-bpf-programs.c.
 *
 * Listed by a BPF iterator over programs (bpf/prog-list.bpf.c), loaded once at start-up: loading
 * it is a tracing program's load (CAP_BPF and CAP_PERFMON, which the loader holds then); every
 * listing after reads a new iterator on its link, which needs no capability. So the loader lists
 * with the real addresses and without CAP_SYS_ADMIN, which BPF_PROG_GET_NEXT_ID would need. */

#include <stddef.h>
#include <stdint.h>

#include "macro.h"

#define EP_BPF_FUNCS_MAX 65536u     /* functions returned */
#define EP_BPF_FUNC_NAME_MAX 64     /* "bpf_prog_" + 16 hex + "_" + BPF_OBJ_NAME_LEN, with room */

typedef struct EpBpfFunc {
        uint64_t start;  /* first byte of the JIT image */
        uint32_t length; /* bytes */
        uint32_t prog_id;
        /* As kallsyms would name it: bpf_prog_<tag>[_<program name>], the tag the function's
         * own. Subprograms get the program's name (kallsyms uses their BTF name: it wins when
         * present). */
        char name[EP_BPF_FUNC_NAME_MAX];
} EpBpfFunc;

typedef struct EpBpfLister EpBpfLister;

/* Loads and attaches the iterator. Returns 0, or a negative errno (no iter/bpf_prog in this
 * kernel, not permitted). */
int ep_bpf_lister_new(EpBpfLister **ret);
EpBpfLister *ep_bpf_lister_free(EpBpfLister *l);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpBpfLister *, ep_bpf_lister_free);

/* Lists the functions of all loaded programs, sorted by start. Programs that are not
 * JIT-compiled are left out. Returns 0 (possibly with none) or a negative errno. *ret is freed
 * by the caller. */
int ep_bpf_programs_list(EpBpfLister *l, EpBpfFunc **ret, size_t *ret_n);
