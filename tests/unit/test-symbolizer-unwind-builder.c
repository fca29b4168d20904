/* SPDX-License-Identifier: MIT */
/* The pieces of unwind extraction that need no ELF file: the table builder (sorting, merging,
 * padding gaps, INVALID gaps and terminator, overlaps, rule de-duplication, bounds), the
 * mapping of libdw operations to rules (PLT, DEREF_FP, rbp rules) and DW_EH_PE decoding. */

#include <dwarf.h>
#include <errno.h>

#include "test-util.h"
#include "unwind-builder.h"
#include "unwind-classify.h"
#include "unwind-debugfile.h"
#include "unwind-fde.h"

static const uint8_t file_id[EP_FILE_ID_SIZE] = { 1, 2, 3 };

static struct ep_unwind_rule sp(int32_t off) {
        return (struct ep_unwind_rule) { .cfa_kind = EP_CFA_SP, .cfa_offset = off };
}

static void check_entry(const void *blob, uint32_t i, uint32_t off, uint8_t kind, int32_t cfa) {
        const EpUnwindEntry *e = &ep_unwind_table_entries(blob)[i];
        const struct ep_unwind_rule *r = &ep_unwind_table_rules(blob)[e->rule];

        if (e->file_offset != off || r->cfa_kind != kind || r->cfa_offset != cfa)
                TEST_FAIL("entry %u: {0x%x, kind %u, cfa %d}, expected {0x%x, %u, %d}", i, e->file_offset,
                          r->cfa_kind, r->cfa_offset, off, kind, cfa);
        test_checks++;
}

static void test_builder(void) {
        _cleanup_(ep_unwind_builder_freep) EpUnwindBuilder *b = NULL;
        struct ep_unwind_rule r8 = sp(8), r16 = sp(16);
        void *blob;
        size_t size;

        CHECK_INT(ep_unwind_builder_new(100, &b), 0);
        /* Function A [0x100, 0x120): 8, 16 (at 0x101), 8 (at 0x11f). Added out of order. */
        CHECK_INT(ep_unwind_builder_add(b, 0x200, 0x210, &r8), 0); /* C, after a big gap */
        CHECK_INT(ep_unwind_builder_add(b, 0x100, 0x101, &r8), 0);
        CHECK_INT(ep_unwind_builder_add(b, 0x101, 0x11f, &r16), 0);
        CHECK_INT(ep_unwind_builder_add(b, 0x11f, 0x120, &r8), 0);
        /* Function B after 12 bytes of padding, starting with the rule A ended with. */
        CHECK_INT(ep_unwind_builder_add(b, 0x12c, 0x130, &r8), 0);
        CHECK_INT(ep_unwind_builder_add(b, 0x130, 0x130, &r16), 0); /* empty: ignored */
        /* An overlapping (broken) span inside A: A keeps its bytes. */
        CHECK_INT(ep_unwind_builder_add(b, 0x105, 0x108, &r8), 0);
        CHECK_INT(ep_unwind_builder_add(b, 1ull << 32, (1ull << 32) + 1, &r8), -EFBIG);

        CHECK_INT(ep_unwind_builder_finish(b, file_id, EP_UNWIND_FROM_EH_FRAME, &blob, &size), 0);
        CHECK_INT(ep_unwind_table_validate(blob, size), 0);
        const EpUnwindTableHeader *h = ep_unwind_table_header(blob);
        CHECK_INT(h->n_rules, 3); /* rsp+8, rsp+16, INVALID */
        CHECK_INT(h->flags, EP_UNWIND_FROM_EH_FRAME);
        CHECK_INT(h->n_entries, 6);
        check_entry(blob, 0, 0x100, EP_CFA_SP, 8);
        check_entry(blob, 1, 0x101, EP_CFA_SP, 16);
        check_entry(blob, 2, 0x11f, EP_CFA_SP, 8);       /* through the padding and all of B */
        check_entry(blob, 3, 0x130, EP_CFA_INVALID, 0);  /* the gap before C */
        check_entry(blob, 4, 0x200, EP_CFA_SP, 8);
        check_entry(blob, 5, 0x210, EP_CFA_INVALID, 0);  /* the end */
        CHECK_INT(ep_unwind_table_find(blob, 0xff), -1);
        CHECK_INT(ep_unwind_table_find(blob, 0x128), 2);
        free(blob);
}

static void test_fallback_and_bounds(void) {
        _cleanup_(ep_unwind_builder_freep) EpUnwindBuilder *b = NULL, *small = NULL, *many = NULL;
        struct ep_unwind_rule r = sp(8);
        void *blob;
        size_t size;

        /* Nothing added: the one-rule frame-pointer table. */
        CHECK_INT(ep_unwind_builder_new(10, &b), 0);
        CHECK_INT(ep_unwind_builder_finish(b, file_id, 0, &blob, &size), 0);
        CHECK_INT(ep_unwind_table_validate(blob, size), 0);
        CHECK_INT(ep_unwind_table_header(blob)->flags, EP_UNWIND_FP_FALLBACK);
        CHECK_INT(ep_unwind_table_header(blob)->n_entries, 1);
        CHECK_INT(ep_unwind_table_rules(blob)[0].cfa_kind, EP_CFA_FP_FALLBACK);
        free(blob);

        /* The span bound. */
        CHECK_INT(ep_unwind_builder_new(2, &small), 0);
        CHECK_INT(ep_unwind_builder_add(small, 0, 1, &r), 0);
        r.cfa_offset = 16;
        CHECK_INT(ep_unwind_builder_add(small, 1, 2, &r), 0);
        r.cfa_offset = 24;
        CHECK_INT(ep_unwind_builder_add(small, 2, 3, &r), -E2BIG);

        /* More distinct rules than the format holds. */
        CHECK_INT(ep_unwind_builder_new(1u << 20, &many), 0);
        for (uint32_t i = 0; i < EP_UNWIND_TABLE_MAX_RULES + 1; i++) {
                r.cfa_offset = (int32_t) i;
                CHECK_INT(ep_unwind_builder_add(many, i * 16, i * 16 + 16, &r), 0);
        }
        CHECK_INT(ep_unwind_builder_finish(many, file_id, 0, &blob, &size), -E2BIG);
}

static void test_classify(void) {
        struct ep_unwind_rule r = {};
        /* CFA rsp + 24 as libdw gives it (DW_OP_bregx 7 24). */
        Dwarf_Op bregx[] = { { .atom = DW_OP_bregx, .number = 7, .number2 = 24 } };
        CHECK(ep_unwind_cfa_from_ops(bregx, 1, &r));
        CHECK_INT(r.cfa_kind, EP_CFA_SP);
        CHECK_INT(r.cfa_offset, 24);
        Dwarf_Op rbp16[] = { { .atom = DW_OP_breg6, .number = 16 } };
        CHECK(ep_unwind_cfa_from_ops(rbp16, 1, &r));
        CHECK_INT(r.cfa_kind, EP_CFA_FP);
        Dwarf_Op r10[] = { { .atom = DW_OP_bregx, .number = 10, .number2 = 0 } };
        CHECK(!ep_unwind_cfa_from_ops(r10, 1, &r));
        Dwarf_Op deref[] = { { .atom = DW_OP_breg6, .number = (Dwarf_Word) -8 }, { .atom = DW_OP_deref } };
        CHECK(ep_unwind_cfa_from_ops(deref, 2, &r));
        CHECK_INT(r.cfa_kind, EP_CFA_DEREF_FP);
        CHECK_INT(r.cfa_offset, -8);
        Dwarf_Op deref_sp[] = { { .atom = DW_OP_breg7, .number = 160 }, { .atom = DW_OP_deref } };
        CHECK(!ep_unwind_cfa_from_ops(deref_sp, 2, &r));

        Dwarf_Op plt[] = {
                { .atom = DW_OP_breg7, .number = 8 }, { .atom = DW_OP_breg16, .number = 0 }, { .atom = DW_OP_lit15 },
                { .atom = DW_OP_and },                { .atom = DW_OP_lit11 },               { .atom = DW_OP_ge },
                { .atom = DW_OP_lit3 },               { .atom = DW_OP_shl },                 { .atom = DW_OP_plus },
        };
        CHECK(ep_unwind_cfa_from_ops(plt, 9, &r));
        CHECK_INT(r.cfa_kind, EP_CFA_PLT);
        CHECK_INT(r.cfa_offset, 11);
        plt[4].atom = DW_OP_lit10;
        CHECK(ep_unwind_cfa_from_ops(plt, 9, &r));
        CHECK_INT(r.cfa_offset, 10);
        plt[4].atom = DW_OP_lit9;
        CHECK(!ep_unwind_cfa_from_ops(plt, 9, &r));

        /* rbp: same value, undefined, offset(N), expression breg6 N, anything else. */
        CHECK(ep_unwind_fp_from_ops(NULL, 0, false, &r));
        CHECK_INT(r.fp_rule, EP_FP_SAME);
        CHECK(ep_unwind_fp_from_ops(NULL, 0, true, &r));
        CHECK_INT(r.fp_rule, EP_FP_UNDEFINED);
        Dwarf_Op at_cfa[] = { { .atom = DW_OP_call_frame_cfa },
                              { .atom = DW_OP_plus_uconst, .number = (Dwarf_Word) -16 } };
        CHECK(ep_unwind_fp_from_ops(at_cfa, 2, false, &r));
        CHECK_INT(r.fp_rule, EP_FP_AT_CFA);
        CHECK_INT(r.fp_offset, -16);
        Dwarf_Op at_fp[] = { { .atom = DW_OP_call_frame_cfa }, { .atom = DW_OP_breg6, .number = 0 } };
        CHECK(ep_unwind_fp_from_ops(at_fp, 2, false, &r));
        CHECK_INT(r.fp_rule, EP_FP_AT_FP);
        Dwarf_Op far[] = { { .atom = DW_OP_call_frame_cfa }, { .atom = DW_OP_plus_uconst, .number = 1u << 20 } };
        CHECK(!ep_unwind_fp_from_ops(far, 2, false, &r));
        Dwarf_Op value[] = { { .atom = DW_OP_call_frame_cfa }, { .atom = DW_OP_plus_uconst, .number = 8 },
                             { .atom = DW_OP_stack_value } };
        CHECK(!ep_unwind_fp_from_ops(value, 3, false, &r));
}

static void test_encodings(void) {
        const uint8_t data[] = { 0xfc, 0xff, 0xff, 0xff, 0xe5, 0x8e, 0x26, 0x7f, 0x01, 0x02 };
        const uint8_t *p = data;
        uint64_t v;

        CHECK_INT(ep_fde_read_encoded(&p, data + 10, DW_EH_PE_pcrel | DW_EH_PE_sdata4, 8, false, &v), 0);
        CHECK_U64(v, (uint64_t) -4);
        CHECK(p == data + 4);
        CHECK_INT(ep_fde_read_encoded(&p, data + 10, DW_EH_PE_uleb128, 8, false, &v), 0);
        CHECK_U64(v, 624485);
        CHECK_INT(ep_fde_read_encoded(&p, data + 10, DW_EH_PE_sleb128, 8, false, &v), 0);
        CHECK_U64(v, (uint64_t) -1); /* 0x7f */
        CHECK_INT(ep_fde_read_encoded(&p, data + 10, DW_EH_PE_udata2, 8, true, &v), 0);
        CHECK_U64(v, 0x0102);
        CHECK_INT(ep_fde_read_encoded(&p, data + 10, DW_EH_PE_udata4, 8, false, &v), -EBADMSG); /* past the end */
        p = data;
        CHECK_INT(ep_fde_read_encoded(&p, data + 10, 0x07, 8, false, &v), -EBADMSG); /* unknown format */
        const uint8_t endless[] = { 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01 };
        p = endless;
        CHECK_INT(ep_fde_read_encoded(&p, endless + sizeof endless, DW_EH_PE_uleb128, 8, false, &v), -EBADMSG);
}

static void test_debug_candidates(void) {
        const uint8_t id[] = { 0xab, 0xcd, 0xef, 0x01 };
        char *c[EP_DEBUG_MAX_CANDIDATES] = {};
        int n;

        n = ep_unwind_debug_candidates(NULL, id, sizeof id, "libfoo.so.debug", "/usr/lib/libfoo.so.1", c);
        CHECK_INT(n, 4);
        CHECK_STR(c[0], "/usr/lib/debug/.build-id/ab/cdef01.debug");
        CHECK_STR(c[1], "/usr/lib/libfoo.so.debug");
        CHECK_STR(c[2], "/usr/lib/.debug/libfoo.so.debug");
        CHECK_STR(c[3], "/usr/lib/debug/usr/lib/libfoo.so.debug");
        for (int i = 0; i < n; i++)
                free(c[i]);

        /* A debuglink with a slash, or no hint: only the build ID. */
        n = ep_unwind_debug_candidates("/r", id, sizeof id, "../../etc/shadow", "/usr/lib/libfoo.so.1", c);
        CHECK_INT(n, 1);
        CHECK_STR(c[0], "/r/.build-id/ab/cdef01.debug");
        free(c[0]);
        n = ep_unwind_debug_candidates("/r", NULL, 0, "x.debug", NULL, c);
        CHECK_INT(n, 0);
}

int main(void) {
        test_builder();
        test_fallback_and_bounds();
        test_classify();
        test_encodings();
        test_debug_candidates();
        TEST_DONE("symbolizer-unwind-builder");
}
