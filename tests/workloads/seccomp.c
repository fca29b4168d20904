/* SPDX-License-Identifier: MIT */
/* Spends most of its time in a JIT-compiled seccomp filter: installs a classic BPF filter of
 * ~4000 instructions (comparisons of the first syscall argument against values it never has,
 * then ALLOW), then makes cheap syscalls in a loop. The filter reads an argument on purpose: a
 * filter that looks only at the syscall number is evaluated once when it is attached (the
 * kernel's seccomp action cache, Linux 5.11+) and never runs again for an allowed syscall.
 * Usage: seccomp SECONDS [DELAY]
 * DELAY seconds (default 0) pass before the filter is installed, so a profiler started before
 * the workload sees the program appear. Prints "filter installed" on stdout once it is. */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "workload.h"

#define BLOCK 200   /* comparisons per block: a conditional jump reaches at most 255 ahead */
#define BLOCKS 20   /* 1 + 20 * 202 + 1 = 4042 instructions, below BPF_MAXINSNS (4096) */

/* Each block: BLOCK comparisons that would jump to the block's KILL (never: getppid's unused
 * first argument is 0, the values compared are not), a jump over that KILL, the KILL. Real
 * conditional jumps, so the JIT keeps every comparison. */
static int install_filter(void) {
        static struct sock_filter insns[1 + BLOCKS * (BLOCK + 2) + 1];
        size_t n = 0;

        insns[n++] = (struct sock_filter) BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                                                 offsetof(struct seccomp_data, args[0]));
        for (unsigned b = 0; b < BLOCKS; b++) {
                for (unsigned i = 0; i < BLOCK; i++)
                        insns[n++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
                                                                   0x7f000000u + b * BLOCK + i,
                                                                   (unsigned char) (BLOCK - i), 0);
                insns[n++] = (struct sock_filter) BPF_STMT(BPF_JMP | BPF_JA, 1);
                insns[n++] = (struct sock_filter) BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
        }
        insns[n++] = (struct sock_filter) BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);

        struct sock_fprog prog = { .len = (unsigned short) n, .filter = insns };
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return -1;
        return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

__attribute__((noinline)) static void cheap_syscalls(double until) {
        while (workload_now() < until)
                for (int i = 0; i < 1000; i++)
                        syscall(SYS_getppid, 0);
}

int main(int argc, char **argv) {
        workload_delay(argc, argv);
        double until = workload_deadline(argc, argv); /* the duration counts from now */
        if (install_filter() < 0) {
                perror("seccomp");
                return 1;
        }
        printf("filter installed\n");
        fflush(stdout);
        cheap_syscalls(until);
        return 0;
}
