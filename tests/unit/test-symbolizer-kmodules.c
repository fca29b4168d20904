/* SPDX-License-Identifier: MIT */
/* Kernel modules and the kernel resolver's reload policy: /proc/modules parsing (with malformed
 * lines), build IDs from a synthetic sysfs tree, and, through a fake file source whose kallsyms
 * and module table change under the resolver: module ranges past the last symbol, BPF programs
 * appearing and being replaced, module reloads, and misses in vmlinux that must not re-read. */

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "kallsyms.h"
#include "kmodules.h"
#include "resolve-kernel.h"
#include "resolver.h"
#include "test-util.h"
#include "tests.h"

/* ---- /proc/modules ---- */

static const char modules_text[] =
        "nf_tables 348160 12 nft_chain_nat,nft_ct, Live 0xffffffffc0a00000\n"
        "xfs 2015232 1 - Live 0xffffffffc0600000 (E)\n"
        "loading_mod 4096 0 - Loading 0xffffffffc0900000 (OE)\n"
        "pinned-mod 8192 - - Live 0xffffffffc0910000\r\n"
        "\n"
        "onlyname\n"
        "bad/name 4096 0 - Live 0xffffffffc0000000\n"
        ".. 4096 0 - Live 0xffffffffc0001000\n"
        "zero_size 0 0 - Live 0xffffffffc0002000\n"
        "noaddr 4096 0 - Live\n"
        "nohexprefix 4096 0 - Live ffffffffc0003000\n"
        "badhex 4096 0 - Live 0xffffffffc00zz000\n"
        "toolong 4096 0 - Live 0x1ffffffffc0004000\n"
        "wraps 8192 0 - Live 0xfffffffffffff000\n"
        "badsize 12k 0 - Live 0xffffffffc0005000\n"
        "badrefs 4096 x - Live 0xffffffffc0006000\n"
        "hugesize 99999999999999999999999 0 - Live 0xffffffffc0007000\n"
        "a_name_that_is_much_longer_than_the_kernel_allows_for_any_module_x 4096 0 - Live 0xffffffffc0008000\n"
        "hidden_one 4096 0 - Live 0x0000000000000000\n"
        "last 4096 0 - Unloading 0xffffffffc0920000";

static void check_parse(void) {
        _cleanup_(ep_kmodules_freep) EpKmodules *m = NULL, *same = NULL, *moved = NULL;
        EpKmodules *h = NULL;

        CHECK_INT(ep_kmodules_parse_text(modules_text, strlen(modules_text), &m), 0);
        CHECK_INT(ep_kmodules_count(m), 5);
        /* Sorted by address. */
        CHECK_STR(ep_kmodules_get(m, 0)->name, "xfs");
        CHECK_STR(ep_kmodules_get(m, 1)->name, "loading_mod");
        CHECK_STR(ep_kmodules_get(m, 2)->name, "pinned-mod");
        CHECK_STR(ep_kmodules_get(m, 3)->name, "last");
        CHECK_STR(ep_kmodules_get(m, 4)->name, "nf_tables");
        CHECK(!ep_kmodules_get(m, 5));
        CHECK_U64(ep_kmodules_get(m, 4)->start, 0xffffffffc0a00000);
        CHECK_U64(ep_kmodules_get(m, 4)->size, 348160);
        CHECK_INT(ep_kmodules_get(m, 4)->build_id_size, 0);

        /* Ranges are [start, start + size). */
        CHECK(!ep_kmodules_find(m, 0xffffffffc05fffff));
        CHECK_STR(ep_kmodules_find(m, 0xffffffffc0600000)->name, "xfs");
        CHECK_STR(ep_kmodules_find(m, 0xffffffffc0600000 + 2015231)->name, "xfs");
        CHECK(!ep_kmodules_find(m, 0xffffffffc0600000 + 2015232));
        CHECK_STR(ep_kmodules_find(m, 0xffffffffc0911fff)->name, "pinned-mod");
        CHECK(!ep_kmodules_find(m, 0xffffffffc0912000));
        CHECK_STR(ep_kmodules_find(m, 0xffffffffc0a00000 + 348159)->name, "nf_tables");
        CHECK(!ep_kmodules_find(m, 0xffffffffc0a00000 + 348160));
        CHECK(!ep_kmodules_find(m, 0xffffffffffffffff)); /* "wraps" was refused */
        CHECK_STR(ep_kmodules_find_name(m, "last")->name, "last");
        CHECK(!ep_kmodules_find_name(m, "hidden_one"));
        CHECK(!ep_kmodules_find(NULL, 0xffffffffc0600000));

        /* Reference counts and states change without moving code: same layout. */
        static const char refs_changed[] =
                "xfs 2015232 7 nfsd, Live 0xffffffffc0600000\n"
                "nf_tables 348160 0 - Live 0xffffffffc0a00000\n"
                "loading_mod 4096 0 - Live 0xffffffffc0900000\n"
                "pinned-mod 8192 - - Live 0xffffffffc0910000\n"
                "last 4096 0 - Live 0xffffffffc0920000\n";
        CHECK_INT(ep_kmodules_parse_text(refs_changed, strlen(refs_changed), &same), 0);
        CHECK(ep_kmodules_same_layout(m, same));
        static const char one_moved[] =
                "xfs 2015232 7 nfsd, Live 0xffffffffc0600000\n"
                "nf_tables 348160 0 - Live 0xffffffffc0b00000\n"
                "loading_mod 4096 0 - Live 0xffffffffc0900000\n"
                "pinned-mod 8192 - - Live 0xffffffffc0910000\n"
                "last 4096 0 - Live 0xffffffffc0920000\n";
        CHECK_INT(ep_kmodules_parse_text(one_moved, strlen(one_moved), &moved), 0);
        CHECK(!ep_kmodules_same_layout(m, moved));
        CHECK(!ep_kmodules_same_layout(m, NULL));
        CHECK(ep_kmodules_same_layout(NULL, NULL));

        /* Addresses hidden (read without CAP_SYSLOG): refused, not taken as modules at 0. */
        static const char hidden[] = "xfs 2015232 1 - Live 0x0000000000000000\nnf 4096 0 - Live 0x0\n";
        CHECK_INT(ep_kmodules_parse_text(hidden, strlen(hidden), &h), -EPERM);
        CHECK(!h);

        /* No modules loaded: an empty table. */
        CHECK_INT(ep_kmodules_parse_text("", 0, &h), 0);
        CHECK_INT(ep_kmodules_count(h), 0);
        CHECK(!ep_kmodules_find(h, 0xffffffffc0600000));
        h = ep_kmodules_free(h);
        CHECK_INT(ep_kmodules_parse_text("garbage\n", 8, &h), 0);
        CHECK_INT(ep_kmodules_count(h), 0);
        h = ep_kmodules_free(h);

        /* Through a descriptor, as the loader hands it over. */
        int fd = test_memfd_with("modules", modules_text);
        CHECK(fd >= 0);
        CHECK_INT(ep_kmodules_parse_fd(fd, &h), 0);
        CHECK_INT(ep_kmodules_count(h), 5);
        h = ep_kmodules_free(h);
        close(fd);
}

/* ---- build-ID notes and a synthetic sysfs ---- */

static size_t put_note(uint8_t *p, uint32_t type, const char *owner, const uint8_t *desc, uint32_t descsz) {
        uint32_t namesz = (uint32_t) strlen(owner) + 1;
        size_t off = 0;

        memcpy(p + off, &namesz, 4);
        memcpy(p + off + 4, &descsz, 4);
        memcpy(p + off + 8, &type, 4);
        off += 12;
        memset(p + off, 0, (namesz + 3) & ~3u);
        memcpy(p + off, owner, namesz);
        off += (namesz + 3) & ~3u;
        memset(p + off, 0, (descsz + 3) & ~3u);
        memcpy(p + off, desc, descsz);
        off += (descsz + 3) & ~3u;
        return off;
}

static const uint8_t vmlinux_id[20] = { 0x4a, 0x5a, 0x9b, 0x0a, 0xff, 0xb6, 0x6c, 0x43, 0x7a, 0xbc,
                                        0xd4, 0x55, 0xd2, 0x73, 0x8a, 0xf8, 0x79, 0x98, 0x5f, 0xa9 };
static const uint8_t mymod_id[20] = { 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa,
                                      0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04 };

static void write_file(const char *path, const void *data, size_t size) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        CHECK(fd >= 0);
        CHECK(write(fd, data, size) == (ssize_t) size);
        close(fd);
}

/* ROOT/kernel/notes (a "Linux" note, then the GNU build ID, then another note) and
 * ROOT/module/mymod/notes/.note.gnu.build-id; othermod has a notes directory without the
 * note. */
static void make_sysfs(const char *root) {
        char path[4096];
        uint8_t buf[256];
        size_t n = 0;
        const uint8_t version[4] = { 1, 1, 0, 0 };

        snprintf(path, sizeof path, "%s/kernel", root);
        CHECK(mkdir(path, 0755) == 0);
        n += put_note(buf + n, 6, "Linux", version, 4);
        n += put_note(buf + n, 3, "GNU", vmlinux_id, 20);
        n += put_note(buf + n, 0x100, "Xen", version, 4);
        snprintf(path, sizeof path, "%s/kernel/notes", root);
        write_file(path, buf, n);

        snprintf(path, sizeof path, "%s/module", root);
        CHECK(mkdir(path, 0755) == 0);
        snprintf(path, sizeof path, "%s/module/mymod", root);
        CHECK(mkdir(path, 0755) == 0);
        snprintf(path, sizeof path, "%s/module/mymod/notes", root);
        CHECK(mkdir(path, 0755) == 0);
        n = put_note(buf, 3, "GNU", mymod_id, 20);
        snprintf(path, sizeof path, "%s/module/mymod/notes/.note.gnu.build-id", root);
        write_file(path, buf, n);
        snprintf(path, sizeof path, "%s/module/othermod", root);
        CHECK(mkdir(path, 0755) == 0);
        snprintf(path, sizeof path, "%s/module/othermod/notes", root);
        CHECK(mkdir(path, 0755) == 0);
}

static void remove_sysfs(const char *root) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        CHECK(system(cmd) == 0);
}

static void check_notes(const char *root) {
        uint8_t buf[256], id[EP_KMODULE_BUILD_ID_MAX];
        size_t n;

        CHECK_INT(ep_kernel_read_build_id(root, id), 20);
        CHECK(memcmp(id, vmlinux_id, 20) == 0);

        static const char mods[] = "mymod 262144 0 - Live 0xffffffffc0100000\n"
                                   "othermod 4096 0 - Live 0xffffffffc0300000\n"
                                   "gone 4096 0 - Live 0xffffffffc0310000\n";
        _cleanup_(ep_kmodules_freep) EpKmodules *m = NULL;
        CHECK_INT(ep_kmodules_parse_text(mods, strlen(mods), &m), 0);
        CHECK_INT(ep_kmodules_read_build_ids(m, root), 1);
        const EpKmodule *k = ep_kmodules_find_name(m, "mymod");
        CHECK_INT(k->build_id_size, 20);
        CHECK(memcmp(k->build_id, mymod_id, 20) == 0);
        CHECK_INT(ep_kmodules_find_name(m, "othermod")->build_id_size, 0);
        CHECK_INT(ep_kmodules_find_name(m, "gone")->build_id_size, 0);

        /* Malformed streams. */
        n = put_note(buf, 3, "GNU", mymod_id, 20);
        CHECK_INT(ep_elf_notes_find_build_id(buf, n, id), 20);
        CHECK_INT(ep_elf_notes_find_build_id(buf, n - 4, id), -EBADMSG);  /* descriptor cut */
        CHECK_INT(ep_elf_notes_find_build_id(buf, 11, id), -ENOENT);      /* not even a header */
        CHECK_INT(ep_elf_notes_find_build_id(buf, 0, id), -ENOENT);
        uint32_t huge = 0xfffffff0;
        memcpy(buf + 4, &huge, 4); /* descsz */
        CHECK_INT(ep_elf_notes_find_build_id(buf, n, id), -EBADMSG);
        memcpy(buf, &huge, 4); /* namesz */
        CHECK_INT(ep_elf_notes_find_build_id(buf, n, id), -EBADMSG);
        static const uint8_t long_id[EP_KMODULE_BUILD_ID_MAX + 4];
        n = put_note(buf, 3, "GNU", long_id, sizeof long_id); /* too long an ID */
        CHECK_INT(ep_elf_notes_find_build_id(buf, n, id), -EBADMSG);
        n = put_note(buf, 3, "GNUX", mymod_id, 20); /* other owner */
        n += put_note(buf + n, 4, "GNU", mymod_id, 20); /* other type */
        CHECK_INT(ep_elf_notes_find_build_id(buf, n, id), -ENOENT);

        /* The machine's own, when there is one (world-readable on Linux). */
        int r = ep_kernel_read_build_id(NULL, id);
        printf("/sys/kernel/notes: build ID of %d bytes\n", r);
        CHECK(r > 0 || r == -ENOENT || r == -EACCES);
}

/* ---- the resolver over a changing kernel ---- */

static const char *fake_kallsyms;
static const char *fake_modules; /* NULL: this kernel has no modules (-ENOENT) */
static unsigned kallsyms_opens, modules_opens;

static int fake_open_file(void *userdata, const uint8_t id[]) {
        return -ENOENT;
}

static int fake_open_kallsyms(void *userdata) {
        kallsyms_opens++;
        return test_memfd_with("kallsyms", fake_kallsyms);
}

static int fake_open_kernel_modules(void *userdata) {
        modules_opens++;
        return fake_modules ? test_memfd_with("modules", fake_modules) : -ENOENT;
}

#define VMLINUX                                                         \
        "ffffffff81000000 T _stext\n"                                   \
        "ffffffff81000100 T do_syscall_64\n"                            \
        "ffffffff81000400 T entry_SYSCALL_64\n"                         \
        "ffffffff811fff00 T last_text_function\n"                       \
        "ffffffff81200000 T _etext\n"                                   \
        "ffffffff82000000 D some_data\n"

#define MYMOD                                                           \
        "ffffffffc0100000 t mymod_init\t[mymod]\n"                      \
        "ffffffffc0100800 t mymod_work\t[mymod]\n"

static const char kallsyms_v1[] = VMLINUX MYMOD
        "ffffffffc0200000 t bpf_prog_0123456789abcdef_old\t[bpf]\n";
/* A new program far from the old one. */
static const char kallsyms_v2[] = VMLINUX MYMOD
        "ffffffffc0200000 t bpf_prog_0123456789abcdef_old\t[bpf]\n"
        "ffffffffc0400000 t bpf_prog_fedcba9876543210_new\t[bpf]\n";
/* The old program unloaded, another one at its address. */
static const char kallsyms_v3[] = VMLINUX MYMOD
        "ffffffffc0200000 t bpf_prog_1111111111111111_replacement\t[bpf]\n"
        "ffffffffc0400000 t bpf_prog_fedcba9876543210_new\t[bpf]\n";
/* mymod unloaded, othermod loaded where it was. */
static const char kallsyms_v4[] = VMLINUX
        "ffffffffc0100000 t othermod_fn\t[othermod]\n"
        "ffffffffc0200000 t bpf_prog_1111111111111111_replacement\t[bpf]\n"
        "ffffffffc0400000 t bpf_prog_fedcba9876543210_new\t[bpf]\n";

static const char modules_v1[] = "mymod 262144 0 - Live 0xffffffffc0100000\n";
static const char modules_v4[] = "othermod 262144 0 - Live 0xffffffffc0100000\n";

static const EpSymResult *ksym(EpResolver *r, uint64_t addr, uint8_t flags) {
        EpSymRequest req = { .kind = EP_FRAME_KERNEL, .flags = flags, .addr = addr };
        const EpSymResult *res = NULL;
        CHECK_INT(ep_resolver_symbolize(r, &req, &res), 0);
        CHECK(res);
        return res;
}

static void check_ok(EpResolver *r, uint64_t addr, const char *function, const char *module) {
        const EpSymResult *res = ksym(r, addr, 0);
        if (res->status != EP_SYM_OK)
                TEST_FAIL("0x%" PRIx64 ": status %u, expected %s", addr, res->status, function);
        CHECK_INT(res->n_lines, 1);
        CHECK_STR(res->lines[0].function, function);
        CHECK_STR(res->module, module);
        CHECK_U64(res->elf_addr, addr);
}

static void check_not_found(EpResolver *r, uint64_t addr) {
        const EpSymResult *res = ksym(r, addr, 0);
        if (res->status != EP_SYM_NOT_FOUND)
                TEST_FAIL("0x%" PRIx64 ": status %u (%s), expected NOT_FOUND", addr, res->status,
                          res->n_lines ? res->lines[0].function : "");
}

/* The policy's periods in this test. Time is the test's clock (tests_clock): it moves only by
 * tests_clock_advance(), so each limit is checked 1 ns before it ends and as it ends. */
#define RATE_NS (300 * NSEC_PER_MSEC)    /* dynamic_refresh_ns */
#define BPF_AGE_NS (600 * NSEC_PER_MSEC) /* dynamic_max_age_ns */
#define MOD_CHECK_NS (400 * NSEC_PER_MSEC)

static void check_resolver(const char *root) {
        EpFileSource src = { .open_file = fake_open_file, .open_kallsyms = fake_open_kallsyms,
                             .open_kernel_modules = fake_open_kernel_modules };
        EpResolverConfig cfg = EP_RESOLVER_CONFIG_DEFAULT; /* kallsyms_refresh_ns: 60 s */
        EpKernelPolicy policy = EP_KERNEL_POLICY_DEFAULT;
        EpSymStats stats = {};
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;
        const uint8_t *id;

        policy.dynamic_refresh_ns = RATE_NS;
        policy.dynamic_max_age_ns = BPF_AGE_NS;
        policy.modules_check_ns = MOD_CHECK_NS;
        policy.sysfs_root = root;
        fake_kallsyms = kallsyms_v1;
        fake_modules = modules_v1;
        kallsyms_opens = modules_opens = 0;

        CHECK_INT(ep_resolver_new(&src, &cfg, &stats, &r), 0);
        CHECK_INT(ep_resolver_kernel_set_policy(r, &policy), 0);
        CHECK_INT(ep_resolver_kernel_symbols(r), 0);
        CHECK(!ep_resolver_kernel_modules(r));

        /* vmlinux, a module symbol, return addresses (looked up one byte back). */
        check_ok(r, 0xffffffff81000410, "entry_SYSCALL_64", "");
        CHECK_INT(kallsyms_opens, 1);
        CHECK_INT(modules_opens, 1);
        check_ok(r, 0xffffffff81000123, "do_syscall_64", "");
        CHECK_STR(ksym(r, 0xffffffff81000400, EP_FRAME_FLAG_RETURN_ADDRESS)->lines[0].function, "do_syscall_64");
        check_ok(r, 0xffffffffc0100810, "mymod_work", "mymod");
        /* Inside mymod's range [0xffffffffc0100000, +256 KiB), 190 KiB past its last symbol: no
         * symbol covers it, the module still does. */
        check_ok(r, 0xffffffffc0130000, "[mymod]+0x30000", "mymod");
        check_ok(r, 0xffffffffc013ffff, "[mymod]+0x3ffff", "mymod");
        /* Just past the range: nothing (the next symbol is a BPF program 1 MiB further). */
        check_not_found(r, 0xffffffffc0140000);
        check_ok(r, 0xffffffffc0200010, "bpf_prog_0123456789abcdef_old", "bpf");

        /* What the D-Bus properties show. */
        CHECK_INT(ep_resolver_kernel_symbols(r), 8);
        CHECK_INT(ep_resolver_kernel_reloads(r), 0);
        const EpKmodules *mods = ep_resolver_kernel_modules(r);
        CHECK_INT(ep_kmodules_count(mods), 1);
        CHECK_STR(ep_kmodules_get(mods, 0)->name, "mymod");
        CHECK_U64(ep_kmodules_get(mods, 0)->start, 0xffffffffc0100000);
        CHECK_U64(ep_kmodules_get(mods, 0)->size, 262144);
        CHECK_INT(ep_kmodules_get(mods, 0)->build_id_size, 20);
        CHECK(memcmp(ep_kmodules_get(mods, 0)->build_id, mymod_id, 20) == 0);
        CHECK_INT(ep_resolver_kernel_build_id(r, &id), 20);
        CHECK(memcmp(id, vmlinux_id, 20) == 0);

        /* Cached: vmlinux and module results (2 addresses + 1 return address + 1 module symbol
         * + 2 ranges); not the BPF program, not the miss. */
        CHECK_INT(ep_resolver_cache_entries(r), 6);
        uint64_t hits = stats.cache_hits;
        check_ok(r, 0xffffffffc0200010, "bpf_prog_0123456789abcdef_old", "bpf");
        CHECK_U64(stats.cache_hits, hits);
        check_ok(r, 0xffffffff81000410, "entry_SYSCALL_64", "");
        CHECK_U64(stats.cache_hits, hits + 1);

        /* A program is loaded. Right after a read, a miss where it is does not re-read (rate
         * limit) ... */
        fake_kallsyms = kallsyms_v2;
        check_not_found(r, 0xffffffffc0400010);
        CHECK_INT(kallsyms_opens, 1);
        tests_clock_advance(RATE_NS - 1); /* ... up to the last nanosecond of the interval ... */
        check_not_found(r, 0xffffffffc0400010);
        CHECK_INT(kallsyms_opens, 1);
        /* ... and a miss inside vmlinux's text never does before kallsyms_refresh_ns (60 s),
         * whatever the dynamic rate. */
        check_not_found(r, 0xffffffff81180000);
        tests_clock_advance(1);
        check_not_found(r, 0xffffffff81180000);
        check_not_found(r, 0xffffffff81180000);
        CHECK_INT(kallsyms_opens, 1);
        CHECK_INT(ep_resolver_kernel_reloads(r), 0);

        /* Past the rate limit, the miss in the BPF area re-reads and finds the new program. */
        check_ok(r, 0xffffffffc0400010, "bpf_prog_fedcba9876543210_new", "bpf");
        CHECK_INT(kallsyms_opens, 2);
        CHECK_INT(ep_resolver_kernel_reloads(r), 1);
        CHECK_INT(ep_resolver_kernel_symbols(r), 9);
        /* The tables changed: cached kernel results were dropped (and come back on use). */
        CHECK_INT(ep_resolver_cache_entries(r), 0);
        check_ok(r, 0xffffffff81000410, "entry_SYSCALL_64", "");
        CHECK_INT(ep_resolver_cache_entries(r), 1);
        /* Another miss there right away: rate-limited again. */
        check_not_found(r, 0xffffffffc0600000);
        CHECK_INT(kallsyms_opens, 2);

        /* The old program is replaced by another at the same address. Its name is not cached:
         * once the table is older than dynamic_max_age, the hit is checked against a new read. */
        fake_kallsyms = kallsyms_v3;
        check_ok(r, 0xffffffffc0200010, "bpf_prog_0123456789abcdef_old", "bpf"); /* table still young */
        CHECK_INT(kallsyms_opens, 2);
        tests_clock_advance(BPF_AGE_NS - 1);
        check_ok(r, 0xffffffffc0200010, "bpf_prog_0123456789abcdef_old", "bpf"); /* young to the end */
        CHECK_INT(kallsyms_opens, 2);
        tests_clock_advance(1);
        check_ok(r, 0xffffffffc0200010, "bpf_prog_1111111111111111_replacement", "bpf");
        CHECK_INT(kallsyms_opens, 3);
        CHECK_INT(ep_resolver_kernel_reloads(r), 2);

        /* A re-read that changes nothing keeps the cache. */
        check_ok(r, 0xffffffff81000410, "entry_SYSCALL_64", "");
        uint32_t entries = ep_resolver_cache_entries(r);
        CHECK(entries >= 1);
        tests_clock_advance(RATE_NS);
        check_not_found(r, 0xffffffffc0600000); /* re-reads: still nothing there */
        CHECK_INT(kallsyms_opens, 4);
        CHECK_INT(ep_resolver_cache_entries(r), entries);

        /* mymod is unloaded and othermod takes its place. A module hit re-checks the module
         * table (at most every modules_check_ns), sees the change and re-reads everything. */
        fake_kallsyms = kallsyms_v4;
        fake_modules = modules_v4;
        unsigned mopens = modules_opens;
        check_ok(r, 0xffffffffc0100820, "mymod_work", "mymod"); /* checked too recently */
        CHECK_INT(modules_opens, mopens);
        tests_clock_advance(MOD_CHECK_NS - 1);
        check_ok(r, 0xffffffffc0100828, "mymod_work", "mymod"); /* until the period ends */
        CHECK_INT(modules_opens, mopens);
        tests_clock_advance(1);
        check_ok(r, 0xffffffffc0100830, "othermod_fn", "othermod");
        CHECK_INT(modules_opens, mopens + 2); /* the check, then the full re-read */
        CHECK_INT(kallsyms_opens, 5);
        /* The answer cached for mymod just before went with the old tables. */
        check_ok(r, 0xffffffffc0100820, "othermod_fn", "othermod");
        check_ok(r, 0xffffffffc0130000, "[othermod]+0x30000", "othermod");
        mods = ep_resolver_kernel_modules(r);
        CHECK_INT(ep_kmodules_count(mods), 1);
        CHECK_STR(ep_kmodules_get(mods, 0)->name, "othermod");
        CHECK_INT(ep_kmodules_get(mods, 0)->build_id_size, 0); /* its notes have no build ID */
        CHECK_INT(ep_resolver_kernel_reloads(r), 4);
}

/* A kernel without loadable modules (like the test machine: CONFIG_MODULES=n): the loader
 * answers NoSuchFile once, the resolver does not ask again, kernel frames still resolve. */
static void check_no_modules(const char *root) {
        EpFileSource src = { .open_file = fake_open_file, .open_kallsyms = fake_open_kallsyms,
                             .open_kernel_modules = fake_open_kernel_modules };
        EpKernelPolicy policy = EP_KERNEL_POLICY_DEFAULT;
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;

        policy.dynamic_refresh_ns = RATE_NS;
        policy.sysfs_root = root;
        fake_kallsyms = kallsyms_v2;
        fake_modules = NULL;
        kallsyms_opens = modules_opens = 0;

        CHECK_INT(ep_resolver_new(&src, NULL, NULL, &r), 0);
        CHECK_INT(ep_resolver_kernel_set_policy(r, &policy), 0);
        ep_resolver_kernel_load(r); /* what the properties do */
        CHECK_INT(kallsyms_opens, 1);
        CHECK_INT(ep_resolver_kernel_symbols(r), 9);
        CHECK_INT(ep_kmodules_count(ep_resolver_kernel_modules(r)), 0);
        ep_resolver_kernel_load(r); /* loaded already: nothing to do */
        CHECK_INT(kallsyms_opens, 1);

        check_ok(r, 0xffffffffc0100810, "mymod_work", "mymod"); /* kallsyms alone still names it */
        check_not_found(r, 0xffffffffc0130000);                  /* no range to fall back on */
        tests_clock_advance(RATE_NS - 1);
        check_not_found(r, 0xffffffffc0130000);
        CHECK_INT(kallsyms_opens, 1);
        tests_clock_advance(1);
        check_not_found(r, 0xffffffffc0130000);
        CHECK_INT(kallsyms_opens, 2);
        CHECK_INT(modules_opens, 1);

        /* No kallsyms provider at all (the loader away): RETRY, not cached. */
        EpFileSource none = { .open_file = fake_open_file };
        _cleanup_(ep_resolver_freep) EpResolver *r2 = NULL;
        CHECK_INT(ep_resolver_new(&none, NULL, NULL, &r2), 0);
        CHECK_INT(ksym(r2, 0xffffffff81000410, 0)->status, EP_SYM_RETRY);
        CHECK_INT(ep_resolver_cache_entries(r2), 0);
}

int main(void) {
        char root[] = "/tmp/test-symbolizer-kmodules-XXXXXX";

        ep_clock_set(tests_clock);
        check_parse();
        CHECK(mkdtemp(root));
        make_sysfs(root);
        check_notes(root);
        check_resolver(root);
        check_no_modules(root);
        remove_sysfs(root);

        TEST_DONE("test-symbolizer-kmodules");
}
