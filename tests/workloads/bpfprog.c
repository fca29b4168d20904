/* SPDX-License-Identifier: MIT */
/* Spends most of its time in a JIT-compiled eBPF program of its own: loads a socket filter of
 * ~4000 instructions named "ep_spin" (kallsyms: bpf_prog_<tag>_ep_spin [bpf]) and runs it with
 * BPF_PROG_TEST_RUN in a loop. Needs root (or CAP_BPF + CAP_SYS_ADMIN: without CAP_SYS_ADMIN
 * the kernel leaves the program out of kallsyms). Usage: bpfprog SECONDS [DELAY]
 * DELAY seconds (default 0) pass before the program is loaded, so a profiler started before
 * sees it appear. Prints "program loaded" on stdout once it is. */
#include <linux/bpf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "workload.h"

#define ADDS 4000

static int sys_bpf(int cmd, union bpf_attr *attr) {
        return (int) syscall(SYS_bpf, cmd, attr, sizeof *attr);
}

/* r0 = 0; r0 += 1 (ADDS times); r0 &= 0xffff; exit: straight-line code the JIT keeps whole. */
static int load_program(void) {
        static struct bpf_insn insns[ADDS + 3];
        static char log[1 << 16];
        size_t n = 0;

        insns[n++] = (struct bpf_insn) { .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 };
        for (int i = 0; i < ADDS; i++)
                insns[n++] = (struct bpf_insn) { .code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = BPF_REG_0, .imm = 1 };
        insns[n++] = (struct bpf_insn) { .code = BPF_ALU64 | BPF_AND | BPF_K, .dst_reg = BPF_REG_0, .imm = 0xffff };
        insns[n++] = (struct bpf_insn) { .code = BPF_JMP | BPF_EXIT };

        union bpf_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
        attr.insns = (uint64_t) (uintptr_t) insns;
        attr.insn_cnt = (uint32_t) n;
        attr.license = (uint64_t) (uintptr_t) "MIT";
        strncpy(attr.prog_name, "ep_spin", sizeof attr.prog_name - 1);
        int fd = sys_bpf(BPF_PROG_LOAD, &attr);
        if (fd < 0) {
                perror("BPF_PROG_LOAD");
                /* Again with the verifier's log (only the errors: the full log overflows). */
                attr.log_buf = (uint64_t) (uintptr_t) log;
                attr.log_size = sizeof log;
                attr.log_level = 1;
                if (sys_bpf(BPF_PROG_LOAD, &attr) < 0)
                        fprintf(stderr, "%.2000s\n", log);
        }
        return fd;
}

__attribute__((noinline)) static int run_program(int fd, double until) {
        static uint8_t packet[64];

        while (workload_now() < until) {
                union bpf_attr attr;
                memset(&attr, 0, sizeof attr);
                attr.test.prog_fd = (uint32_t) fd;
                attr.test.data_in = (uint64_t) (uintptr_t) packet;
                attr.test.data_size_in = sizeof packet;
                attr.test.repeat = 20000;
                if (sys_bpf(BPF_PROG_TEST_RUN, &attr) < 0) {
                        perror("BPF_PROG_TEST_RUN");
                        return -1;
                }
        }
        return 0;
}

int main(int argc, char **argv) {
        workload_delay(argc, argv);
        double until = workload_deadline(argc, argv); /* the duration counts from now */
        int fd = load_program();
        if (fd < 0)
                return 1;
        printf("program loaded\n");
        fflush(stdout);
        return run_program(fd, until) < 0 ? 1 : 0;
}
