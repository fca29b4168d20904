/* SPDX-License-Identifier: MIT */
/* BPF code named with the loader's program extents (Loader1.ListBpfPrograms) as well as
 * kallsyms, through a fake file source: an address between two programs is not given the first
 * one's name (a classic BPF filter lives there, which neither list has); a listed program that
 * kallsyms lacks gets the loader's name, or bpf_prog_<id> when it has none; kallsyms symbols
 * with no extent (trampolines) keep their names; without a list (older loader, error) the old
 * kallsyms-only answers; a program appearing in a gap is found after the rate limit. */

#include <sys/mman.h>
#include <unistd.h>

#include "daemon.h"
#include "resolve-kernel.h"
#include "resolver.h"
#include "test-util.h"
#include "tests.h"

#define BASE 0xffffffffc0200000ull

static const char *fake_kallsyms;
static const EpBpfProgram *fake_progs;
static size_t fake_n_progs;
static int fake_list_error;
static unsigned list_calls;

static int fake_open_file(void *userdata, const uint8_t id[]) {
        return -ENOENT;
}

static int fake_open_kallsyms(void *userdata) {
        return test_memfd_with("kallsyms", fake_kallsyms);
}

static int fake_list_bpf_programs(void *userdata, EpBpfProgram **ret, size_t *ret_n) {
        list_calls++;
        if (fake_list_error < 0)
                return fake_list_error;
        *ret = NULL;
        *ret_n = 0;
        if (fake_n_progs == 0)
                return 0;
        *ret = malloc(fake_n_progs * sizeof **ret);
        if (!*ret)
                return -ENOMEM;
        /* Handed over in reverse: the resolver must not rely on the loader's order. */
        for (size_t i = 0; i < fake_n_progs; i++)
                (*ret)[i] = fake_progs[fake_n_progs - 1 - i];
        *ret_n = fake_n_progs;
        return 0;
}

#define VMLINUX                                                         \
        "ffffffff81000000 T _stext\n"                                   \
        "ffffffff81000100 T __seccomp_filter\n"                         \
        "ffffffff81200000 T _etext\n"

/* first [BASE, +0x100), then a gap where a seccomp filter runs, hidden (listed, not in kallsyms)
 * at +0x800, a nameless program at +0xa00, second at +0x1000, a trampoline at +0x2000, a
 * module's last symbol at +0x3000 and a listed program after it at +0x3800. */
static const char kallsyms_v1[] = VMLINUX
        "ffffffffc0200000 t bpf_prog_aaaaaaaaaaaaaaaa_first\t[bpf]\n"
        "ffffffffc0201000 t bpf_prog_bbbbbbbbbbbbbbbb_second\t[bpf]\n"
        "ffffffffc0202000 t bpf_trampoline_6442\t[bpf]\n"
        "ffffffffc0203000 t mymod_last\t[mymod]\n";

static const EpBpfProgram progs_v1[] = {
        { .start = BASE, .length = 0x100, .id = 10, .name = "bpf_prog_aaaaaaaaaaaaaaaa_first" },
        { .start = BASE + 0x800, .length = 0x40, .id = 11, .name = "bpf_prog_cccccccccccccccc_hidden" },
        { .start = BASE + 0xa00, .length = 0x10, .id = 42, .name = "" },
        { .start = BASE + 0x1000, .length = 0x80, .id = 12, .name = "bpf_prog_bbbbbbbbbbbbbbbb_second" },
        { .start = BASE + 0x3800, .length = 0x20, .id = 14, .name = "bpf_prog_eeeeeeeeeeeeeeee_after_mod" },
};

/* A program loaded into the gap. */
static const char kallsyms_v2[] = VMLINUX
        "ffffffffc0200000 t bpf_prog_aaaaaaaaaaaaaaaa_first\t[bpf]\n"
        "ffffffffc0200300 t bpf_prog_dddddddddddddddd_newcomer\t[bpf]\n"
        "ffffffffc0201000 t bpf_prog_bbbbbbbbbbbbbbbb_second\t[bpf]\n"
        "ffffffffc0202000 t bpf_trampoline_6442\t[bpf]\n";

static const EpBpfProgram progs_v2[] = {
        { .start = BASE, .length = 0x100, .id = 10, .name = "bpf_prog_aaaaaaaaaaaaaaaa_first" },
        { .start = BASE + 0x300, .length = 0x100, .id = 13, .name = "bpf_prog_dddddddddddddddd_newcomer" },
        { .start = BASE + 0x800, .length = 0x40, .id = 11, .name = "bpf_prog_cccccccccccccccc_hidden" },
        { .start = BASE + 0xa00, .length = 0x10, .id = 42, .name = "" },
        { .start = BASE + 0x1000, .length = 0x80, .id = 12, .name = "bpf_prog_bbbbbbbbbbbbbbbb_second" },
};

#define UNLISTED "[bpf] unlisted program"
/* dynamic_refresh_ns. Time is the test's clock (tests_clock): it moves only by
 * tests_clock_advance(), so nothing here races the rate limit. */
#define RATE_NS (300 * NSEC_PER_MSEC)

static const EpSymResult *ksym(EpResolver *r, uint64_t addr, uint8_t flags) {
        EpSymRequest req = { .kind = EP_FRAME_KERNEL, .flags = flags, .addr = addr };
        const EpSymResult *res = NULL;
        CHECK_INT(ep_resolver_symbolize(r, &req, &res), 0);
        CHECK(res);
        return res;
}

static void check_named(EpResolver *r, uint64_t addr, uint8_t flags, const char *function, const char *module) {
        const EpSymResult *res = ksym(r, addr, flags);
        if (res->status != EP_SYM_OK)
                TEST_FAIL("0x%" PRIx64 ": status %u, expected %s", addr, res->status, function);
        CHECK_INT(res->n_lines, 1);
        if (strcmp(res->lines[0].function, function) != 0)
                TEST_FAIL("0x%" PRIx64 ": %s, expected %s", addr, res->lines[0].function, function);
        CHECK_STR(res->module, module);
        CHECK_U64(res->elf_addr, addr);
}

static void check_ok(EpResolver *r, uint64_t addr, const char *function) {
        check_named(r, addr, 0, function, strcmp(function, "__seccomp_filter") == 0 ? "" : "bpf");
}

static EpResolver *new_resolver(EpFileSource *src) {
        EpKernelPolicy policy = EP_KERNEL_POLICY_DEFAULT;
        EpResolver *r = NULL;

        policy.dynamic_refresh_ns = RATE_NS;
        policy.dynamic_max_age_ns = 60 * NSEC_PER_SEC; /* hits never re-read in this test */
        CHECK_INT(ep_resolver_new(src, NULL, NULL, &r), 0);
        CHECK_INT(ep_resolver_kernel_set_policy(r, &policy), 0);
        return r;
}

static void check_extents(void) {
        EpFileSource src = { .open_file = fake_open_file, .open_kallsyms = fake_open_kallsyms,
                             .list_bpf_programs = fake_list_bpf_programs };
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;

        fake_kallsyms = kallsyms_v1;
        fake_progs = progs_v1;
        fake_n_progs = ELEMENTSOF(progs_v1);
        fake_list_error = 0;
        list_calls = 0;
        r = new_resolver(&src);

        /* Inside listed programs kallsyms names. */
        check_ok(r, BASE, "bpf_prog_aaaaaaaaaaaaaaaa_first");
        CHECK_INT(list_calls, 1);
        check_ok(r, BASE + 0xff, "bpf_prog_aaaaaaaaaaaaaaaa_first");
        check_ok(r, BASE + 0x1010, "bpf_prog_bbbbbbbbbbbbbbbb_second");
        /* A return address just past first's end belongs to its last instruction. */
        check_named(r, BASE + 0x100, EP_FRAME_FLAG_RETURN_ADDRESS, "bpf_prog_aaaaaaaaaaaaaaaa_first", "bpf");
        CHECK_INT(list_calls, 1);

        /* Between first's end and the next listed function: not first (kallsyms alone would say
         * so: it has no sizes). A miss in the BPF area, so it is not cached either. */
        check_ok(r, BASE + 0x100, UNLISTED);
        check_ok(r, BASE + 0x200, UNLISTED);
        check_ok(r, BASE + 0x7ff, UNLISTED);
        check_ok(r, BASE + 0x1080, UNLISTED); /* past second */
        CHECK_INT(list_calls, 1);             /* rate-limited */

        /* Listed, not in kallsyms: the loader's name; without one, the program ID. */
        check_ok(r, BASE + 0x800, "bpf_prog_cccccccccccccccc_hidden");
        check_ok(r, BASE + 0x83f, "bpf_prog_cccccccccccccccc_hidden");
        check_ok(r, BASE + 0x840, UNLISTED);
        check_ok(r, BASE + 0xa08, "bpf_prog_42");

        /* kallsyms symbols no listed program starts at keep their kallsyms name. */
        check_ok(r, BASE + 0x2400, "bpf_trampoline_6442");
        /* A listed program after a module's last symbol (they share the module area) is the
         * program, not the module; past it, the module symbol stays (it is no BPF program). */
        check_named(r, BASE + 0x3810, 0, "bpf_prog_eeeeeeeeeeeeeeee_after_mod", "bpf");
        check_named(r, BASE + 0x3100, 0, "mymod_last", "mymod");
        check_named(r, BASE + 0x3900, 0, "mymod_last", "mymod");
        /* vmlinux is not touched. */
        check_ok(r, 0xffffffff81000180, "__seccomp_filter");
        /* A filter below every listed program, or far past the last one: no kallsyms symbol
         * close enough, in no module; still no one else's name. */
        check_ok(r, BASE - 0x10000, UNLISTED);
        check_ok(r, BASE + 0x400000, UNLISTED);

        /* Nothing in BPF code is cached; the vmlinux and module answers are. */
        CHECK_INT(ep_resolver_cache_entries(r), 3);

        /* A program loaded into the gap: once the rate limit passed, the miss re-reads both
         * tables and names it. */
        fake_kallsyms = kallsyms_v2;
        fake_progs = progs_v2;
        fake_n_progs = ELEMENTSOF(progs_v2);
        check_ok(r, BASE + 0x310, UNLISTED);
        CHECK_INT(list_calls, 1);
        tests_clock_advance(RATE_NS - 1);
        check_ok(r, BASE + 0x310, UNLISTED); /* rate-limited to the last nanosecond */
        CHECK_INT(list_calls, 1);
        tests_clock_advance(1);
        check_ok(r, BASE + 0x310, "bpf_prog_dddddddddddddddd_newcomer");
        CHECK_INT(list_calls, 2);
        CHECK_INT(ep_resolver_kernel_reloads(r), 1);
        check_ok(r, BASE + 0x200, UNLISTED);
        check_ok(r, BASE + 0x400, UNLISTED);

        /* The list fails on the next read: back to kallsyms alone (stale extents could cut a
         * replacement program short). */
        fake_list_error = -EIO;
        tests_clock_advance(RATE_NS);
        check_ok(r, BASE + 0x500, "bpf_prog_dddddddddddddddd_newcomer"); /* re-read, no extents */
        CHECK_INT(list_calls, 3);
        check_ok(r, BASE + 0x200, "bpf_prog_aaaaaaaaaaaaaaaa_first");
        CHECK_INT(list_calls, 3);
}

/* No list_bpf_programs (or a loader without the method): kallsyms alone, as before. */
static void check_without_list(void) {
        EpFileSource src = { .open_file = fake_open_file, .open_kallsyms = fake_open_kallsyms };
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;

        fake_kallsyms = kallsyms_v1;
        r = new_resolver(&src);
        check_ok(r, BASE + 0x200, "bpf_prog_aaaaaaaaaaaaaaaa_first");
        check_ok(r, BASE + 0x810, "bpf_prog_aaaaaaaaaaaaaaaa_first");
        check_ok(r, BASE + 0x1080, "bpf_prog_bbbbbbbbbbbbbbbb_second");

        /* An empty list is a list: no program is loaded (kallsyms is older), nothing bounds the
         * symbols it still has. */
        EpFileSource src2 = src;
        _cleanup_(ep_resolver_freep) EpResolver *r2 = NULL;
        src2.list_bpf_programs = fake_list_bpf_programs;
        fake_list_error = 0;
        fake_n_progs = 0;
        r2 = new_resolver(&src2);
        check_ok(r2, BASE + 0x200, "bpf_prog_aaaaaaaaaaaaaaaa_first");
}

int main(void) {
        ep_clock_set(tests_clock);
        check_extents();
        check_without_list();
        TEST_DONE("test-symbolizer-bpf-extents");
}
