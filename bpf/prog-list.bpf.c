/* SPDX-License-Identifier: MIT */
/* A BPF iterator over the loaded BPF programs (iter/bpf_prog): for each JIT-compiled function,
 * its extent, program ID, tag and program name, the facts Loader1.ListBpfPrograms gives. The
 * loader loads and attaches it at start-up (a tracing program: CAP_PERFMON, held then); each
 * listing after is a read of a new iterator on that link, which needs no capability. The
 * alternative, BPF_PROG_GET_NEXT_ID and BPF_PROG_GET_FD_BY_ID, needs CAP_SYS_ADMIN for as long as
 * the loader runs. */

#include "vmlinux-min.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "prog-list.h"

char LICENSE[] SEC("license") = "GPL";

static __always_inline void write_function(struct seq_file *seq, const struct bpf_prog *fn, __u32 id,
                                           const char *prog_name) {
        struct ep_prog_list_record rec = {
                .start = (__u64) BPF_CORE_READ(fn, bpf_func),
                .length = BPF_CORE_READ(fn, jited_len),
                .prog_id = id,
        };

        BPF_CORE_READ_INTO(&rec.tag, fn, tag);
        __builtin_memcpy(rec.prog_name, prog_name, sizeof rec.prog_name);
        bpf_seq_write(seq, &rec, sizeof rec);
}

SEC("iter/bpf_prog")
int list_bpf_functions(struct bpf_iter__bpf_prog *ctx) {
        struct seq_file *seq = ctx->meta->seq;
        struct bpf_prog *prog = ctx->prog;
        char prog_name[EP_PROG_LIST_NAME_SIZE];

        if (!prog) /* the call after the last program */
                return 0;
        struct bpf_prog_aux *aux = BPF_CORE_READ(prog, aux);
        __u32 id = BPF_CORE_READ(aux, id);
        __u32 n = BPF_CORE_READ(aux, func_cnt);
        BPF_CORE_READ_INTO(&prog_name, aux, name);

        /* A program with subprograms: its functions are aux->func[0..func_cnt), the program's
         * own entry among them (what BPF_OBJ_GET_INFO_BY_FD gives as jited_ksyms). */
        if (n == 0) {
                write_function(seq, prog, id, prog_name);
                return 0;
        }
        struct bpf_prog **funcs = BPF_CORE_READ(aux, func);
        for (__u32 i = 0; i < n && i < EP_PROG_LIST_SUBPROGS_MAX; i++) {
                struct bpf_prog *fn = NULL;
                if (bpf_probe_read_kernel(&fn, sizeof fn, &funcs[i]) < 0 || !fn)
                        break;
                write_function(seq, fn, id, prog_name);
        }
        return 0;
}
