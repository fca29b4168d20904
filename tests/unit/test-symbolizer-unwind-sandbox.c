/* SPDX-License-Identifier: MIT */
/* Extraction in the sandbox child:
 *   - gives the same table as extraction in-process;
 *   - running out of wall-clock time is a transient error;
 *   - a crafted file whose CFI names a register number in the hundreds of millions (found by
 *     the fuzzer: libdw then grows its register table to ~2 GiB) costs the child, not us: an
 *     error for that file, quickly, with our own memory untouched. */

#include <sys/resource.h>

#include "test-symbolizer-unwind-util.h"
#include "unwind-sandbox.h"

static int extract_sandboxed(const char *path, const EpUnwindSandboxLimits *limits, void **ret_blob,
                             size_t *ret_size) {
        uint8_t id[EP_FILE_ID_SIZE];
        uint32_t flags;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);

        if (fd < 0)
                TEST_FAIL("cannot open %s", path);
        CHECK_INT(ep_file_id_from_fd(fd, id, NULL), 0);
        return ep_unwind_extract_sandboxed(fd, id, NULL, limits, ret_blob, ret_size, &flags, NULL);
}

static void test_same_table_as_in_process(void) {
        const char *prog = getenv("UNW_PROG_OMIT");
        _cleanup_free_ void *direct = NULL, *boxed = NULL;
        size_t size = 0;

        CHECK(prog);
        direct = unw_extract(prog, NULL, NULL, NULL);
        CHECK_INT(extract_sandboxed(prog, NULL, &boxed, &size), 0);
        CHECK_INT(ep_unwind_table_validate(boxed, size), 0);
        const EpUnwindTableHeader *h = ep_unwind_table_header(direct);
        CHECK(size == ep_unwind_table_size(h->n_rules, h->n_entries));
        CHECK(memcmp(direct, boxed, size) == 0);
}

static void test_hostile_register_number_is_contained(void) {
        const char *input = getenv("UNW_REGRESS_HUGE_REGISTER");
        EpUnwindSandboxLimits limits = { .memory_bytes = 256ULL << 20, .timeout_usec = 20 * USEC_PER_SEC };
        struct rusage before, after;
        void *blob = NULL;
        size_t size = 0;
        int r;

        CHECK(input);
        CHECK_INT(getrusage(RUSAGE_SELF, &before), 0);
        r = extract_sandboxed(input, &limits, &blob, &size);
        CHECK_INT(getrusage(RUSAGE_SELF, &after), 0);
        if (r >= 0)
                TEST_FAIL("a file naming register ~10^8 in its CFI was accepted (%zu bytes)", size);
        CHECK(r != -ETIME);
        /* Our peak RSS did not grow by the hundreds of MiB the child tried to take. */
        CHECK(after.ru_maxrss - before.ru_maxrss < 64 * 1024);
}

/* Out of wall-clock time (here at once) is the machine's fault as much as the file's: the
 * answer is -ETIMEDOUT, which the loader retries, not -ETIME (a CPU hog: given up on). */
static void test_wall_clock_limit_is_a_transient_error(void) {
        const char *prog = getenv("UNW_PROG_OMIT");
        EpUnwindSandboxLimits limits = { .timeout_usec = 1 };
        void *blob = NULL;
        size_t size = 0;

        CHECK(prog);
        CHECK_INT(extract_sandboxed(prog, &limits, &blob, &size), -ETIMEDOUT);
        CHECK(!blob);
}

int main(void) {
        test_same_table_as_in_process();
        test_wall_clock_limit_is_a_transient_error();
        test_hostile_register_number_is_contained();
        printf("unwind-sandbox: ok\n");
        return 0;
}
