/* SPDX-License-Identifier: MIT */
#pragma once

/* The JIT-compiled BPF functions loaded on the system (every program, and each subprogram of
 * it, as its own extent), for Loader1.ListBpfPrograms. /proc/kallsyms names these functions but
 * gives no sizes; their extents let the symbolizer tell a sample in a listed program from one in
 * code the kernel lists nowhere. Classic BPF filters (seccomp filters, SO_ATTACH_FILTER) are
 * JIT-compiled too but have no program ID, so they are in neither list: checked on Linux 6.18,
 * tests/unit/test-loader-bpf-programs.c. Needs CAP_SYS_ADMIN (BPF_PROG_GET_FD_BY_ID) and
 * CAP_SYSLOG-like credentials for real addresses (the kernel zeroes them otherwise). */

#include <stddef.h>
#include <stdint.h>

#define EP_BPF_PROGRAMS_MAX 65536u  /* programs looked at */
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

/* Lists the functions of all loaded programs, sorted by start. Programs that vanish while they
 * are listed, or that are not JIT-compiled, are left out. Returns 0 (possibly with none),
 * -EPERM when the kernel hides the addresses or refuses the IDs, another negative errno on
 * failure. *ret is freed by the caller. */
int ep_bpf_programs_list(EpBpfFunc **ret, size_t *ret_n);
