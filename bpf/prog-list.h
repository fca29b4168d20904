/* SPDX-License-Identifier: MIT */
#pragma once

/* What bpf/prog-list.bpf.c writes, one record per JIT-compiled function of every loaded BPF
 * program, and unwinder-loader/bpf-programs.c reads. Both sides are built from this tree. */

#define EP_PROG_LIST_TAG_SIZE 8   /* BPF_TAG_SIZE */
#define EP_PROG_LIST_NAME_SIZE 16 /* BPF_OBJ_NAME_LEN */
#define EP_PROG_LIST_SUBPROGS_MAX 256 /* the verifier's MAX_SUBPROGS */

struct ep_prog_list_record {
        __u64 start;     /* first byte of the function's JIT image */
        __u32 length;    /* bytes; 0 for a program the kernel interprets */
        __u32 prog_id;
        __u8 tag[EP_PROG_LIST_TAG_SIZE];       /* the function's own */
        char prog_name[EP_PROG_LIST_NAME_SIZE]; /* the program's */
};
