/* SPDX-License-Identifier: MIT */
/* The DetectRuntime blob (common/runtime-facts.c): what the symbolizer builds passes, and the
 * loader refuses every malformed one — wrong sizes and headers, counts over their bounds,
 * inverted, empty, oversized or overlapping ranges, addresses outside the segments, garbage
 * in unused entries — leaving its output untouched. */

#include <errno.h>

#include "runtime-facts.h"
#include "tests.h"

/* Shaped like a libpython: R, RX (the eval loop and its cold part), R, RW (.data + .bss). */
static EpCPythonFacts good(unsigned minor) {
        EpCPythonFacts f;

        ep_cpython_facts_init(&f);
        f.major = 3;
        f.minor = minor;
        f.micro = 4;
        f.layout_source = EP_CPYTHON_LAYOUT_TABLE;
        f.n_segments = 4;
        f.segments[0] = (EpFactsSegment) { .offset = 0, .vaddr = 0, .filesz = 0x60000, .memsz = 0x60000 };
        f.segments[1] = (EpFactsSegment) { .offset = 0x60000, .vaddr = 0x60000, .filesz = 0x200000, .memsz = 0x200000 };
        f.segments[2] = (EpFactsSegment) { .offset = 0x260000, .vaddr = 0x260000, .filesz = 0x100000, .memsz = 0x100000 };
        f.segments[3] = (EpFactsSegment) { .offset = 0x360c10, .vaddr = 0x361c10, .filesz = 0x50000, .memsz = 0x80000 };
        f.n_eval = 2;
        f.eval[0] = (EpFactsRange) { .start = 0x100000, .end = 0x110000 };
        f.eval[1] = (EpFactsRange) { .start = 0x70000, .end = 0x71000 };
        if (minor == 6)
                f.interp_head_addr = 0x3e0000; /* in .bss */
        else {
                f.runtime_addr = 0x3a0000;
                f.runtime_size = 0x10000;
        }
        return f;
}

/* Validation fails with want, and leaves *ret alone. */
static void refused(const EpCPythonFacts *f, size_t size, int want) {
        EpCPythonFacts out, before;

        memset(&out, 0xa5, sizeof out);
        before = out;
        ASSERT_EQ(ep_cpython_facts_validate(f, size, &out), want);
        ASSERT_TRUE(memcmp(&out, &before, sizeof out) == 0);
}

#define REFUSED(minor, change, want)                            \
        do {                                                    \
                EpCPythonFacts _f = good(minor);                \
                change;                                         \
                refused(&_f, sizeof _f, want);                  \
        } while (0)

static void test_good(void) {
        EpCPythonFacts f, out;
        EpPyLayout layout;
        uint8_t unaligned[sizeof f + 1];

        for (unsigned minor = 6; minor <= 13; minor++) {
                f = good(minor);
                ASSERT_OK(ep_cpython_facts_validate(&f, sizeof f, &out));
                ASSERT_TRUE(memcmp(&f, &out, sizeof f) == 0);
                ASSERT_OK(ep_py_layout_for_version(3, minor, &layout));
                ASSERT_EQ(ep_cpython_facts_interp_head(&out, &layout),
                          minor == 6 ? 0x3e0000 : 0x3a0000 + layout.runtime_interpreters_head);
        }
        /* Any alignment. */
        f = good(12);
        memcpy(unaligned + 1, &f, sizeof f);
        ASSERT_OK(ep_cpython_facts_validate(unaligned + 1, sizeof f, &out));
        /* No micro version, a 3.13 layout from its own _Py_DebugOffsets, one eval range, one
         * segment (a static executable's text and data in one). */
        f = good(13);
        f.micro = EP_CPYTHON_MICRO_UNKNOWN;
        f.layout_source = EP_CPYTHON_LAYOUT_DEBUG_OFFSETS;
        ASSERT_OK(ep_cpython_facts_validate(&f, sizeof f, &out));
        f = good(11);
        f.n_eval = 1;
        f.eval[1] = (EpFactsRange) {};
        f.n_segments = 1;
        f.segments[0] = (EpFactsSegment) { .offset = 0, .vaddr = 0, .filesz = 0x3b0000, .memsz = 0x400000 };
        memset(f.segments + 1, 0, sizeof f.segments - sizeof f.segments[0]);
        ASSERT_OK(ep_cpython_facts_validate(&f, sizeof f, &out));
}

static void test_size_and_header(void) {
        EpCPythonFacts f = good(12);
        uint8_t big[sizeof f + 8] = {};

        refused(&f, 0, -EBADMSG);
        refused(&f, sizeof f.header - 1, -EBADMSG);
        refused(&f, sizeof f - 1, -EBADMSG);
        memcpy(big, &f, sizeof f);
        ASSERT_EQ(ep_cpython_facts_validate(big, sizeof big, &(EpCPythonFacts) {}), -EBADMSG);
        ASSERT_EQ(ep_cpython_facts_validate(NULL, sizeof f, &(EpCPythonFacts) {}), -EBADMSG);

        REFUSED(12, _f.header.magic ^= 1, -EBADMSG);
        REFUSED(12, _f.header.version = EP_RUNTIME_FACTS_VERSION + 1, -EPROTONOSUPPORT);
        REFUSED(12, _f.header.kind = 2, -EBADMSG);
        REFUSED(12, _f.header.size = sizeof _f + 8, -EBADMSG);
        REFUSED(12, _f.header.reserved = 1, -EBADMSG);
}

static void test_version(void) {
        REFUSED(12, _f.major = 2, -EPROTONOSUPPORT);
        REFUSED(12, _f.minor = 5, -EPROTONOSUPPORT);
        REFUSED(12, _f.minor = 14, -EPROTONOSUPPORT);
        REFUSED(12, _f.minor = UINT32_MAX, -EPROTONOSUPPORT);
        REFUSED(12, _f.micro = 100, -ERANGE);
        REFUSED(12, _f.layout_source = 0, -EBADMSG);
        REFUSED(12, _f.layout_source = 3, -EBADMSG);
        /* Only 3.13 describes itself. */
        REFUSED(12, _f.layout_source = EP_CPYTHON_LAYOUT_DEBUG_OFFSETS, -EBADMSG);
}

static void test_counts(void) {
        REFUSED(12, _f.n_eval = 0, -ERANGE);
        REFUSED(12, _f.n_eval = EP_CPYTHON_FACTS_MAX_EVAL + 1, -ERANGE);
        REFUSED(12, _f.n_eval = UINT32_MAX, -ERANGE);
        REFUSED(12, _f.n_segments = 0, -ERANGE);
        REFUSED(12, _f.n_segments = EP_CPYTHON_FACTS_MAX_SEGMENTS + 1, -ERANGE);
        REFUSED(12, _f.n_segments = UINT32_MAX, -ERANGE);
        /* Fewer than there are: the rest is garbage in unused entries. */
        REFUSED(12, _f.n_eval = 1, -ERANGE);
        REFUSED(12, _f.n_segments = 3, -ERANGE);
        REFUSED(12, _f.eval[3].end = 1, -ERANGE);
        REFUSED(12, _f.segments[15].vaddr = 1, -ERANGE);
}

static void test_eval_ranges(void) {
        REFUSED(12, _f.eval[0].start = _f.eval[0].end + 1, -ERANGE);          /* inverted */
        REFUSED(12, _f.eval[1].end = _f.eval[1].start, -ERANGE);              /* empty */
        REFUSED(12, _f.eval[0].end = _f.eval[0].start + EP_CPYTHON_FACTS_MAX_EVAL_SIZE + 1, -ERANGE);
        REFUSED(12, (_f.eval[0].start = 0x3e0000, _f.eval[0].end = 0x3e0100), -ERANGE); /* in .bss */
        REFUSED(12, (_f.eval[0].start = 0x5000000, _f.eval[0].end = 0x5000100), -ERANGE); /* nowhere */
        REFUSED(12, (_f.eval[0].start = UINT64_MAX - 0x10, _f.eval[0].end = UINT64_MAX), -ERANGE);
        REFUSED(12, (_f.eval[1].start = 0x10f000, _f.eval[1].end = 0x111000), -ERANGE); /* overlap */
        REFUSED(12, _f.eval[0].end = 0x260001, -ERANGE); /* across a segment's end */
}

static void test_segments(void) {
        REFUSED(12, _f.segments[2].filesz = _f.segments[2].memsz + 1, -ERANGE);
        REFUSED(12, _f.segments[0].memsz = 0, -ERANGE);
        REFUSED(12, _f.segments[3].offset += 8, -ERANGE);   /* page offsets differ */
        REFUSED(12, (_f.segments[2].vaddr = 0x240000, _f.segments[2].offset = 0x240000), -ERANGE); /* overlap */
        REFUSED(12, (_f.segments[0] = _f.segments[1], _f.segments[1] = good(12).segments[0]), -ERANGE); /* descending */
        REFUSED(12, (_f.segments[3].offset = UINT64_MAX & ~4095ull, _f.segments[3].vaddr = 0x361000), -ERANGE);
        REFUSED(12, (_f.segments[3].vaddr = UINT64_MAX & ~4095ull, _f.segments[3].offset = 0x360000), -ERANGE);
}

static void test_runtime(void) {
        EpPyLayout layout;

        ASSERT_OK(ep_py_layout_for_version(3, 12, &layout));
        REFUSED(12, _f.runtime_addr = 0, -ERANGE);
        REFUSED(12, _f.runtime_size = layout.runtime_interpreters_head, -ERANGE); /* the head outside */
        REFUSED(12, _f.runtime_addr = 0x3e1000, -ERANGE);  /* past the end of .bss */
        REFUSED(12, _f.runtime_addr = 0x5000000, -ERANGE); /* nowhere */
        REFUSED(12, _f.runtime_size = UINT64_MAX, -ERANGE);
        REFUSED(12, _f.interp_head_addr = 0x3e0000, -ERANGE); /* 3.6's field */
        REFUSED(6, _f.interp_head_addr = 0, -ERANGE);
        REFUSED(6, _f.interp_head_addr = 0x5000000, -ERANGE);
        REFUSED(6, _f.interp_head_addr = 0x3e1c0c, -ERANGE); /* 8 bytes across the end */
        REFUSED(6, _f.runtime_addr = 0x3a0000, -ERANGE);     /* 3.6 has no _PyRuntime */
}

int main(void) {
        test_good();
        test_size_and_header();
        test_version();
        test_counts();
        test_eval_ranges();
        test_segments();
        test_runtime();
        return tests_summary("common-runtime-facts");
}
