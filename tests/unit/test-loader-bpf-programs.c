/* SPDX-License-Identifier: MIT */
/* unwinder-loader/bpf-programs.c on this kernel: a two-instruction socket filter loaded here is
 * listed, with a non-zero JIT length at the address kallsyms gives it; classic BPF filters (a
 * seccomp filter in a child, SO_ATTACH_FILTER on a socket) are not: they get no program ID,
 * which is why the symbolizer cannot name them and must not give them a neighbour's name. A
 * program with a subprogram is listed function by function, as the kernel itself reports it.
 * The listing works with CAP_BPF alone once the iterator is loaded (the loader's state after
 * start-up), where BPF_PROG_GET_NEXT_ID is refused. Needs root; skipped otherwise. */

#include <bpf/bpf.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <inttypes.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bpf-programs.h"
#include "tests.h"

static EpBpfLister *lister;

/* Loads a socket filter named name; its fd, and its ID in *ret_id. */
static int load_program(const char *name, const struct bpf_insn *insns, size_t n, uint32_t *ret_id) {
        struct bpf_prog_info info = {};
        uint32_t len = sizeof info;
        int fd, r;

        fd = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, name, "GPL", insns, n, NULL);
        if (fd < 0)
                return fd;
        r = bpf_obj_get_info_by_fd(fd, &info, &len);
        if (r < 0) {
                close(fd);
                return r;
        }
        *ret_id = info.id;
        return fd;
}

/* r0 = 0, exit. */
static int load_tiny(uint32_t *ret_id) {
        const struct bpf_insn insns[] = {
                { .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
                { .code = BPF_JMP | BPF_EXIT },
        };
        return load_program("ep_tiny", insns, ELEMENTSOF(insns), ret_id);
}

/* The kallsyms name at addr, if any. */
static bool kallsyms_name_at(uint64_t addr, char *buf, size_t size) {
        _cleanup_fclose_ FILE *f = fopen("/proc/kallsyms", "re");
        char line[1024];

        if (!f)
                return false;
        while (fgets(line, sizeof line, f)) {
                unsigned long long a;
                char type, name[512];
                if (sscanf(line, "%llx %c %511s", &a, &type, name) == 3 && a == addr) {
                        snprintf(buf, size, "%s", name);
                        return true;
                }
        }
        return false;
}

/* Functions of programs without a name (what a classic filter converted to eBPF would be). */
static size_t nameless(const EpBpfFunc *f, size_t n) {
        size_t c = 0;
        for (size_t i = 0; i < n; i++)
                c += strlen(f[i].name) == strlen("bpf_prog_") + 2 * BPF_TAG_SIZE;
        return c;
}

/* Is the program with that ID listed now? */
static bool program_listed(uint32_t id) {
        _cleanup_free_ EpBpfFunc *funcs = NULL;
        size_t n = 0;

        ASSERT_OK(ep_bpf_programs_list(lister, &funcs, &n));
        for (size_t i = 0; i < n; i++)
                if (funcs[i].prog_id == id)
                        return true;
        return false;
}

static void check_listed(void) {
        _cleanup_free_ EpBpfFunc *funcs = NULL;
        _cleanup_close_ int fd = -EBADF;
        uint32_t id = 0;
        size_t n = 0;
        const EpBpfFunc *mine = NULL;
        char kname[512];

        fd = load_tiny(&id);
        ASSERT_OK(fd);
        ASSERT_OK(ep_bpf_programs_list(lister, &funcs, &n));
        ASSERT_TRUE(n >= 1);
        for (size_t i = 0; i < n; i++) {
                if (i > 0)
                        ASSERT_TRUE(funcs[i - 1].start <= funcs[i].start); /* sorted */
                ASSERT_TRUE(funcs[i].start != 0 && funcs[i].length > 0);
                if (funcs[i].prog_id == id) {
                        ASSERT_TRUE(!mine); /* no subprograms */
                        mine = &funcs[i];
                }
        }
        ASSERT_TRUE(mine);
        printf("ep_tiny: id %u at 0x%" PRIx64 ", %u bytes, %s\n", id, mine->start, mine->length, mine->name);
        ASSERT_TRUE(startswith(mine->name, "bpf_prog_"));
        ASSERT_TRUE(strlen(mine->name) == strlen("bpf_prog_") + 2 * BPF_TAG_SIZE + strlen("_ep_tiny"));
        ASSERT_STREQ(mine->name + strlen(mine->name) - strlen("_ep_tiny"), "_ep_tiny");
        /* The name and start kallsyms has (when it lists BPF programs: net.core.bpf_jit_kallsyms). */
        if (kallsyms_name_at(mine->start, kname, sizeof kname))
                ASSERT_STREQ(kname, mine->name);
        else
                printf("ep_tiny is not in /proc/kallsyms (bpf_jit_kallsyms off?)\n");

        /* Unloaded (its last reference closed): gone from the list. The kernel frees it from a
         * work item, so wait for that. */
        close(TAKE_FD(fd));
        ASSERT_EVENTUALLY(!program_listed(id), 30, "program %u still listed after its last fd was closed", id);
}

/* main calls sub; both return 0. */
static int load_with_subprogram(uint32_t *ret_id) {
        const struct bpf_insn insns[] = {
                { .code = BPF_JMP | BPF_CALL, .src_reg = BPF_PSEUDO_CALL, .imm = 1 },
                { .code = BPF_JMP | BPF_EXIT },
                { .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
                { .code = BPF_JMP | BPF_EXIT },
        };
        return load_program("ep_two", insns, ELEMENTSOF(insns), ret_id);
}

/* What the kernel reports of the program itself, function by function, is what is listed. */
static void check_subprograms(void) {
        _cleanup_free_ EpBpfFunc *funcs = NULL;
        _cleanup_close_ int fd = -EBADF;
        uint64_t ksyms[2] = {};
        uint32_t lens[2] = {}, id = 0;
        size_t n = 0, found = 0;

        fd = load_with_subprogram(&id);
        ASSERT_OK(fd);
        struct bpf_prog_info info = {
                .nr_jited_ksyms = 2, .jited_ksyms = (uint64_t) (uintptr_t) ksyms,
                .nr_jited_func_lens = 2, .jited_func_lens = (uint64_t) (uintptr_t) lens,
        };
        uint32_t len = sizeof info;
        ASSERT_OK(bpf_obj_get_info_by_fd(fd, &info, &len));
        ASSERT_TRUE(info.nr_jited_ksyms == 2);

        ASSERT_OK(ep_bpf_programs_list(lister, &funcs, &n));
        for (size_t i = 0; i < n; i++) {
                if (funcs[i].prog_id != id)
                        continue;
                ASSERT_TRUE(found < 2);
                ASSERT_TRUE(funcs[i].start == ksyms[found] && funcs[i].length == lens[found]);
                ASSERT_TRUE(endswith(funcs[i].name, "_ep_two"));
                found++;
        }
        printf("ep_two: %zu functions listed, at 0x%" PRIx64 " and 0x%" PRIx64 "\n", found, ksyms[0], ksyms[1]);
        ASSERT_TRUE(found == 2);
}

/* In a child with CAP_BPF alone: the iterator lists the program, BPF_PROG_GET_NEXT_ID does not. */
static void check_without_sys_admin(void) {
        _cleanup_close_ int fd = -EBADF;
        uint32_t id = 0;
        int status;

        fd = load_tiny(&id);
        ASSERT_OK(fd);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
                struct __user_cap_data_struct c[2] = {};
                c[CAP_BPF / 32].effective = c[CAP_BPF / 32].permitted = 1u << (CAP_BPF % 32);
                if (syscall(SYS_capset, &h, c) < 0)
                        _exit(10);
                uint32_t next = 0;
                if (bpf_prog_get_next_id(0, &next) != -EPERM)
                        _exit(11);
                _cleanup_free_ EpBpfFunc *funcs = NULL;
                size_t n = 0;
                if (ep_bpf_programs_list(lister, &funcs, &n) < 0)
                        _exit(12);
                for (size_t i = 0; i < n; i++)
                        if (funcs[i].prog_id == id && funcs[i].start != 0 && funcs[i].length > 0)
                                _exit(0);
                _exit(13);
        }
        ASSERT_TRUE(waitpid(pid, &status, 0) == pid);
        printf("listing with CAP_BPF alone: exit status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void check_classic_not_listed(void) {
        _cleanup_free_ EpBpfFunc *before = NULL, *during = NULL;
        size_t n_before = 0, n_during = 0;
        int go[2], done[2];
        char c;

        ASSERT_OK(ep_bpf_programs_list(lister, &before, &n_before));

        /* A socket with a classic filter, here. */
        int sk[2];
        struct sock_filter accept_all[] = { BPF_STMT(BPF_RET | BPF_K, 0xffff) };
        struct sock_fprog sprog = { .len = ELEMENTSOF(accept_all), .filter = accept_all };
        ASSERT_TRUE(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sk) == 0);
        ASSERT_TRUE(setsockopt(sk[0], SOL_SOCKET, SO_ATTACH_FILTER, &sprog, sizeof sprog) == 0);

        /* A seccomp filter, in a child that keeps it while we look. It reads an argument, so the
         * kernel cannot replace it by its action cache and JIT-compiles it. */
        ASSERT_TRUE(pipe2(go, O_CLOEXEC) == 0 && pipe2(done, O_CLOEXEC) == 0);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                struct sock_filter f[] = {
                        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
                        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x7f123456, 0, 1),
                        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
                        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
                };
                struct sock_fprog prog = { .len = ELEMENTSOF(f), .filter = f };
                if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
                    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
                        _exit(1);
                if (write(go[1], "x", 1) != 1 || read(done[0], &c, 1) < 0)
                        _exit(2);
                _exit(0);
        }
        ASSERT_TRUE(read(go[0], &c, 1) == 1);
        ASSERT_OK(ep_bpf_programs_list(lister, &during, &n_during));
        ASSERT_TRUE(write(done[1], "x", 1) == 1);
        int status;
        ASSERT_TRUE(waitpid(pid, &status, 0) == pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

        /* Other programs may come and go meanwhile (other profilers), but none without a name:
         * libbpf names every program it loads. */
        printf("functions: %zu before, %zu with two classic filters installed; nameless: %zu, %zu\n",
               n_before, n_during, nameless(before, n_before), nameless(during, n_during));
        ASSERT_TRUE(nameless(during, n_during) <= nameless(before, n_before));
        close(sk[0]);
        close(sk[1]);
        close(go[0]);
        close(go[1]);
        close(done[0]);
        close(done[1]);
}

int main(void) {
        if (geteuid() != 0) {
                printf("test-loader-bpf-programs: needs root, skipped\n");
                return 77;
        }
        uint32_t id;
        int fd = load_tiny(&id);
        if (fd < 0) {
                printf("test-loader-bpf-programs: cannot load a BPF program (%s), skipped\n", strerror(-fd));
                return 77;
        }
        close(fd);
        ASSERT_OK(ep_bpf_lister_new(&lister));

        check_listed();
        check_subprograms();
        check_without_sys_admin();
        check_classic_not_listed();
        ep_bpf_lister_free(lister);
        return tests_summary("test-loader-bpf-programs");
}
