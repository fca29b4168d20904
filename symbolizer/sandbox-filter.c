/* SPDX-License-Identifier: MIT */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "macro.h"
#include "sandbox-filter.h"

/* Denied whatever their arguments. */
static const int denied[] = {
        /* other processes and the bus */
        SYS_socket, SYS_socketpair, SYS_connect, SYS_bind, SYS_listen, SYS_accept, SYS_accept4,
        SYS_ptrace, SYS_process_vm_readv, SYS_process_vm_writev, SYS_pidfd_open, SYS_pidfd_getfd,
        SYS_pidfd_send_signal, SYS_rt_sigqueueinfo, SYS_rt_tgsigqueueinfo, SYS_kcmp,
        /* programs */
        SYS_execve, SYS_execveat,
        /* file systems */
        SYS_creat, SYS_openat2, SYS_mknod, SYS_mknodat, SYS_unlink, SYS_unlinkat, SYS_rename, SYS_renameat,
        SYS_renameat2, SYS_link, SYS_linkat, SYS_symlink, SYS_symlinkat, SYS_mkdir, SYS_mkdirat, SYS_rmdir,
        SYS_chmod, SYS_fchmod, SYS_fchmodat, SYS_chown, SYS_fchown, SYS_lchown, SYS_fchownat, SYS_truncate,
        SYS_utime, SYS_utimes, SYS_utimensat, SYS_futimesat, SYS_setxattr, SYS_lsetxattr, SYS_fsetxattr,
        SYS_removexattr, SYS_lremovexattr, SYS_fremovexattr, SYS_name_to_handle_at, SYS_open_by_handle_at,
        SYS_mount, SYS_umount2, SYS_pivot_root, SYS_chroot, SYS_fsopen, SYS_fsmount, SYS_fsconfig,
        SYS_move_mount, SYS_open_tree,
        /* what would lift the filter or the limits */
        SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register, SYS_bpf, SYS_perf_event_open,
        SYS_userfaultfd, SYS_unshare, SYS_setns, SYS_add_key, SYS_request_key, SYS_keyctl, SYS_setrlimit,
        SYS_prlimit64, SYS_personality, SYS_seccomp,
};

/* Signals: to itself only (abort() raises SIGABRT with tgkill(self, tid)). */
static const int to_self_only[] = { SYS_kill, SYS_tgkill };

#define ARG_LO(n) (offsetof(struct seccomp_data, args) + (n) * sizeof(uint64_t)) /* little-endian */
#define DENY BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))
#define ALLOW BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
/* O_TMPFILE without O_DIRECTORY, which a directory's plain open (opendir) has */
#define WRITE_FLAGS (O_ACCMODE | O_CREAT | O_TRUNC | O_APPEND | (O_TMPFILE & ~O_DIRECTORY))

int ep_sandbox_filter_install(pid_t self) {
        struct sock_filter f[6 + 2 * ELEMENTSOF(denied) + 5 * ELEMENTSOF(to_self_only) + 2 * 5 + 1];
        struct sock_fprog prog = { .filter = f };
        unsigned n = 0;

        /* x86-64 only, and not its x32 ABI (another number for every call). */
        f[n++] = (struct sock_filter) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
        f[n++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
        f[n++] = (struct sock_filter) BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
        f[n++] = (struct sock_filter) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
        f[n++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u /* __X32_SYSCALL_BIT */, 0, 1);
        f[n++] = (struct sock_filter) DENY;
        for (size_t i = 0; i < ELEMENTSOF(denied); i++) {
                f[n++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t) denied[i], 0, 1);
                f[n++] = (struct sock_filter) DENY;
        }
        for (size_t i = 0; i < ELEMENTSOF(to_self_only); i++) {
                /* nr == call: arg 0 must be our pid, else deny; nr reloaded after */
                f[n++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t) to_self_only[i], 0, 4);
                f[n++] = (struct sock_filter) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(0));
                f[n++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t) self, 1, 0);
                f[n++] = (struct sock_filter) DENY;
                f[n++] = (struct sock_filter) ALLOW;
        }
        /* open(path, flags) and openat(dir, path, flags): reading only */
        f[n++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_open, 0, 4);
        f[n++] = (struct sock_filter) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(1));
        f[n++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, WRITE_FLAGS, 0, 1);
        f[n++] = (struct sock_filter) DENY;
        f[n++] = (struct sock_filter) ALLOW;
        f[n++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat, 0, 4);
        f[n++] = (struct sock_filter) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(2));
        f[n++] = (struct sock_filter) BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, WRITE_FLAGS, 0, 1);
        f[n++] = (struct sock_filter) DENY;
        f[n++] = (struct sock_filter) ALLOW;
        f[n++] = (struct sock_filter) ALLOW;
        assert(n == ELEMENTSOF(f));
        prog.len = (unsigned short) n;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return -errno;
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
                return -errno;
        return 0;
}
