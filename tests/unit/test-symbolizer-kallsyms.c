/* SPDX-License-Identifier: MIT */
/* The kallsyms parser and lookup on synthetic text: vmlinux and module symbols, data symbols
 * (ignored), aliases, malformed lines, hidden (zero) addresses. */

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kallsyms.h"
#include "test-util.h"

static const char text[] =
        "0000000000000000 A fixed_percpu_data\n"
        "ffffffff81000000 T _stext\n"
        "ffffffff81000000 T startup_64\n"         /* alias at the same address: T kept, first seen wins */
        "ffffffff81001000 t early_helper\n"
        "ffffffff81001800 D some_data\n"          /* data: ignored */
        "ffffffff81002000 T schedule\n"
        "ffffffff81002000 t __schedule_alias\n"   /* alias: the global one is preferred */
        "ffffffff81002400 W weak_func\n"
        "garbage line without fields\n"
        "ffffffff81003000\n"
        "zzzzzzzzzzzzzzzz T not_hex\n"
        "ffffffff81003000 T\n"
        "1ffffffff81003000 T too_many_digits\n"
        "ffffffff81004000 T _etext\n"
        "ffffffffc0100000 t nf_hook_one\t[nf_tables]\n"
        "ffffffffc0100200 T nf_tables_init\t[nf_tables]\n"
        "ffffffffc0100300 d nf_data\t[nf_tables]\n"
        "ffffffffc0140000 t xfs_do_thing\t[xfs]\n"
        "ffffffffc0140100 t bpf_prog_6deef7357e7b4530_sd_fw_ingress\t[bpf]\n"
        "ffffffffc0150000 t last_one\t[xfs]\n";

static void check(const EpKallsyms *k, uint64_t addr, const char *name, const char *module, uint64_t start) {
        const char *n = NULL, *m = NULL;
        uint64_t s = 0;
        int r = ep_kallsyms_lookup(k, addr, &n, &m, &s);

        if (!name) {
                if (r == 0)
                        TEST_FAIL("0x%" PRIx64 " resolved to %s, expected nothing", addr, n);
                CHECK_INT(r, -ENOENT);
                return;
        }
        if (r < 0)
                TEST_FAIL("0x%" PRIx64 ": %s, expected %s", addr, strerror(-r), name);
        CHECK_STR(n, name);
        CHECK_STR(m, module);
        CHECK_U64(s, start);
}

int main(void) {
        _cleanup_(ep_kallsyms_freep) EpKallsyms *k = NULL;

        CHECK_INT(ep_kallsyms_parse_text(text, strlen(text), &k), 0);
        CHECK_INT(ep_kallsyms_count(k), 10); /* distinct text addresses */
        CHECK_INT(ep_kallsyms_modules(k), 3);

        check(k, 0xffffffff80ffffff, NULL, NULL, 0);
        check(k, 0xffffffff81000000, "_stext", "", 0xffffffff81000000);
        check(k, 0xffffffff81000fff, "_stext", "", 0xffffffff81000000);
        check(k, 0xffffffff81001000, "early_helper", "", 0xffffffff81001000);
        check(k, 0xffffffff81001900, "early_helper", "", 0xffffffff81001000); /* data symbol ignored */
        check(k, 0xffffffff81002010, "schedule", "", 0xffffffff81002000);
        check(k, 0xffffffff81002400, "weak_func", "", 0xffffffff81002400);
        check(k, 0xffffffff81003500, "weak_func", "", 0xffffffff81002400);
        check(k, 0xffffffffc0100010, "nf_hook_one", "nf_tables", 0xffffffffc0100000);
        check(k, 0xffffffffc0100250, "nf_tables_init", "nf_tables", 0xffffffffc0100200);
        check(k, 0xffffffffc0100350, "nf_tables_init", "nf_tables", 0xffffffffc0100200);
        /* The gap after a module's last symbol is not stretched over (>= 64 KiB to the next). */
        check(k, 0xffffffffc0130000, NULL, NULL, 0);
        check(k, 0xffffffffc0140080, "xfs_do_thing", "xfs", 0xffffffffc0140000);
        check(k, 0xffffffffc0140180, "bpf_prog_6deef7357e7b4530_sd_fw_ingress", "bpf", 0xffffffffc0140100);
        check(k, 0xffffffffc0150010, "last_one", "xfs", 0xffffffffc0150000);
        /* Far past the last symbol. */
        check(k, 0xffffffffc0150000 + EP_KALLSYMS_MAX_FUNCTION, NULL, NULL, 0);
        check(k, 0xffffffffffffffff, NULL, NULL, 0);

        /* Hidden addresses (kptr_restrict, no CAP_SYSLOG): refused. */
        static const char hidden[] = "0000000000000000 T _stext\n0000000000000000 t foo\t[mod]\n";
        EpKallsyms *h = NULL;
        CHECK_INT(ep_kallsyms_parse_text(hidden, strlen(hidden), &h), -EPERM);
        CHECK(!h);

        /* Nothing usable. */
        static const char empty[] = "nothing here\n\n";
        CHECK_INT(ep_kallsyms_parse_text(empty, strlen(empty), &h), -ENODATA);
        CHECK_INT(ep_kallsyms_parse_text("", 0, &h), -ENODATA);

        /* No trailing newline, CRLF, through a descriptor. */
        static const char crlf[] = "ffffffff81000000 T a\r\nffffffff81000100 T b";
        int fd = test_memfd_with("kallsyms", crlf);
        CHECK(fd >= 0);
        CHECK_INT(ep_kallsyms_parse_fd(fd, &h), 0);
        check(h, 0xffffffff81000050, "a", "", 0xffffffff81000000);
        check(h, 0xffffffff81000150, "b", "", 0xffffffff81000100);
        h = ep_kallsyms_free(h);
        close(fd);

        /* The real thing, when readable with addresses (root): parses and resolves itself. */
        fd = open("/proc/kallsyms", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
                int r = ep_kallsyms_parse_fd(fd, &h);
                close(fd);
                if (r == 0) {
                        const char *n, *m;
                        printf("/proc/kallsyms: %zu text symbols, %zu modules\n", ep_kallsyms_count(h),
                               ep_kallsyms_modules(h));
                        CHECK(ep_kallsyms_count(h) > 1000);
                        FILE *f = fopen("/proc/kallsyms", "re");
                        char line[512];
                        unsigned long long a;
                        char t, name[256];
                        while (f && fgets(line, sizeof line, f))
                                if (sscanf(line, "%llx %c %255s", &a, &t, name) == 3 && t == 'T' &&
                                    streq(name, "schedule")) {
                                        CHECK_INT(ep_kallsyms_lookup(h, a + 1, &n, &m, NULL), 0);
                                        CHECK_STR(n, "schedule");
                                        break;
                                }
                        if (f)
                                fclose(f);
                        h = ep_kallsyms_free(h);
                } else
                        CHECK_INT(r, -EPERM);
        }

        TEST_DONE("test-symbolizer-kallsyms");
}
