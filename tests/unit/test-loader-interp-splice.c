/* SPDX-License-Identifier: MIT */
/* interp-splice.c: the interpreter frames BPF sent with a sample it could not unwind to the
 * root end up before their interpreter loop's frames in the loader's own unwind, in order,
 * whatever part of them BPF had already placed; what finds no place is counted. */

#include <stdbool.h>
#include <stdint.h>

#include "interp-splice.h"
#include "native-unwind.h"
#include "profiler.h"
#include "tests.h"

/* Native PCs: LOOP_* are in the interpreter loop, the others are not. */
#define LEAF 0x1000ULL
#define HELPER 0x2000ULL
#define LOOP_A 0x5000ULL
#define LOOP_B 0x5100ULL
#define LOOP_C 0x5200ULL
#define CALLER 0x3000ULL
#define ROOT 0x4000ULL
#define LOOP_START 0x5000ULL
#define LOOP_END 0x6000ULL

static uint64_t ra(uint64_t pc) {
        return pc | (uint64_t) EP_UNWIND_F_RETURN_ADDRESS << EP_BPF_FRAME_FLAGS_SHIFT;
}

/* An interpreter frame's first slot; its second is the code's offset. */
static uint64_t py(uint64_t code, unsigned extra_flags) {
        return code | (uint64_t) (EP_BPF_FRAME_F_RUNTIME | extra_flags) << EP_BPF_FRAME_FLAGS_SHIFT;
}

#define UNPLACED_FIRST (EP_BPF_FRAME_F_UNPLACED | EP_BPF_FRAME_F_ACTIVATION)
#define UNPLACED_MORE EP_BPF_FRAME_F_UNPLACED

static unsigned loop_lookups;

static bool in_loop(void *userdata, uint64_t pc) {
        loop_lookups++;
        ASSERT_TRUE(userdata == &loop_lookups);
        return pc >= LOOP_START && pc < LOOP_END;
}

static EpSpliceResult splice(const uint64_t *bpf, unsigned n_bpf, const uint64_t *native, unsigned n_native,
                             bool complete, uint64_t *out, unsigned max) {
        return ep_splice_interp_frames(bpf, n_bpf, native, n_native, complete, in_loop, &loop_lookups, out, max);
}

static void assert_slots(const uint64_t *got, unsigned n, const uint64_t *want, unsigned n_want) {
        ASSERT_EQ(n, n_want);
        for (unsigned i = 0; i < n; i++) {
                if (got[i] != want[i])
                        fprintf(stderr, "slot %u: 0x%" PRIx64 " != 0x%" PRIx64 "\n", i, got[i], want[i]);
                ASSERT_EQ(got[i], want[i]);
        }
}

/* The loader's unwind of a stack with three loop activations: the leaf, a helper, loop A, a
 * caller, loop B, loop C, the root. */
static void fill_native(uint64_t *n) {
        const uint64_t pcs[] = { LEAF, ra(HELPER + 1), ra(LOOP_A + 1), ra(CALLER + 1), ra(LOOP_B + 1),
                                 ra(LOOP_C + 1), ra(ROOT + 1) };
        memcpy(n, pcs, sizeof pcs);
}

/* bpf's frames, spliced into the loader's unwind of the three-loop stack, give the whole chain:
 * a1 a2 before loop A (3.11+: several Python frames per loop call), b1 before loop B, c1
 * before loop C. */
static void assert_whole_chain(const uint64_t *bpf, unsigned n_bpf) {
        uint64_t native[7], out[64];
        EpSpliceResult r;

        fill_native(native);
        r = splice(bpf, n_bpf, native, 7, true, out, ELEMENTSOF(out));
        const uint64_t want[] = { native[0], native[1], py(0xa1, 0), 10, py(0xa2, 0), 12, native[2], native[3],
                                  py(0xb1, 0), 20, native[4], py(0xc1, 0), 30, native[5], native[6] };
        assert_slots(out, r.n, want, ELEMENTSOF(want));
        ASSERT_EQ(r.placed, 4);
        ASSERT_EQ(r.dropped, 0);
        ASSERT_EQ(ep_native_frame_count(out, r.n), 7);
}

/* BPF stopped at the leaf before any loop: all three activations come unplaced. */
static void test_all_unplaced(void) {
        const uint64_t bpf[] = { LEAF, py(0xa1, UNPLACED_FIRST), 10, py(0xa2, UNPLACED_MORE), 12,
                                 py(0xb1, UNPLACED_FIRST), 20, py(0xc1, UNPLACED_FIRST), 30 };

        assert_whole_chain(bpf, ELEMENTSOF(bpf));
}

/* BPF placed activation A itself, then stopped at the caller (no table): B and C unplaced. */
static void test_partly_placed(void) {
        uint64_t native[7], out[64];
        EpSpliceResult r;

        fill_native(native);
        const uint64_t bpf[] = { native[0], native[1], py(0xa1, 0), 10, native[2], native[3],
                                 py(0xb1, UNPLACED_FIRST), 20, py(0xc1, UNPLACED_FIRST), 30 };
        r = splice(bpf, ELEMENTSOF(bpf), native, 7, true, out, ELEMENTSOF(out));
        const uint64_t want[] = { native[0], native[1], py(0xa1, 0), 10, native[2], native[3],
                                  py(0xb1, 0), 20, native[4], py(0xc1, 0), 30, native[5], native[6] };
        assert_slots(out, r.n, want, ELEMENTSOF(want));
        ASSERT_EQ(r.placed, 2);
        ASSERT_EQ(r.dropped, 0);
}

/* The loader's unwind also stops (at the caller): the activations past it stay at the end,
 * still marked unplaced, as BPF sent them. */
static void test_incomplete_keeps_the_rest(void) {
        uint64_t native[7], out[64];
        const uint64_t bpf[] = { LEAF, py(0xa1, UNPLACED_FIRST), 10, py(0xb1, UNPLACED_FIRST), 20 };
        EpSpliceResult r;

        fill_native(native);
        r = splice(bpf, ELEMENTSOF(bpf), native, 4, false, out, ELEMENTSOF(out));
        const uint64_t want[] = { native[0], native[1], py(0xa1, 0), 10, native[2], native[3],
                                  py(0xb1, UNPLACED_FIRST), 20 };
        assert_slots(out, r.n, want, ELEMENTSOF(want));
        ASSERT_EQ(r.placed, 1);
        ASSERT_EQ(r.dropped, 0);
}

/* A complete unwind with fewer loops than activations: the extra ones cannot be placed. */
static void test_complete_drops_the_rest(void) {
        uint64_t out[64];
        const uint64_t native[] = { LEAF, ra(LOOP_A + 1), ra(ROOT + 1) };
        const uint64_t bpf[] = { LEAF, py(0xa1, UNPLACED_FIRST), 10, py(0xb1, UNPLACED_FIRST), 20,
                                 py(0xb2, UNPLACED_MORE), 21 };
        EpSpliceResult r = splice(bpf, ELEMENTSOF(bpf), native, ELEMENTSOF(native), true, out, ELEMENTSOF(out));
        const uint64_t want[] = { LEAF, py(0xa1, 0), 10, ra(LOOP_A + 1), ra(ROOT + 1) };

        assert_slots(out, r.n, want, ELEMENTSOF(want));
        ASSERT_EQ(r.placed, 1);
        ASSERT_EQ(r.dropped, 2);
}

/* BPF's walk went astray after a frame-pointer step through code whose table was not loaded
 * yet (garbage frames, a loop met by chance): the loader's unwind is right from there on, and
 * every interpreter frame BPF found after the parting goes before the loader's loop frames,
 * activation by activation, also those BPF had placed itself. */
static void test_astray_walk_is_replaced(void) {
        const uint64_t astray = 0x7f0000001234ULL | (uint64_t) (EP_UNWIND_F_RETURN_ADDRESS | EP_UNWIND_F_AFTER_FP_STEP)
                                                           << EP_BPF_FRAME_FLAGS_SHIFT;
        const uint64_t bpf[] = { LEAF, astray, py(0xa1, 0), 10, py(0xa2, 0), 12, ra(LOOP_A + 1),
                                 py(0xb1, UNPLACED_FIRST), 20, py(0xc1, UNPLACED_FIRST), 30 };

        assert_whole_chain(bpf, ELEMENTSOF(bpf));
}

/* No room for everything: what does not fit is counted, and nothing is written past max. */
static void test_no_room(void) {
        uint64_t native[7], out[8] = {};
        const uint64_t bpf[] = { LEAF, py(0xa1, UNPLACED_FIRST), 10, py(0xa2, UNPLACED_MORE), 12,
                                 py(0xb1, UNPLACED_FIRST), 20, py(0xc1, UNPLACED_FIRST), 30 };
        EpSpliceResult r;

        fill_native(native);
        r = splice(bpf, ELEMENTSOF(bpf), native, 7, true, out, 6);
        ASSERT_EQ(r.n, 6);
        ASSERT_EQ(r.placed + r.dropped, 4);
        ASSERT_TRUE(r.dropped >= 2);
        ASSERT_EQ(out[6], 0);
}

/* The return-address flag makes the loop lookup use pc - 1: a call as the loop's last
 * instruction returns to the address just past it. */
static void test_return_address_lookup(void) {
        uint64_t out[16];
        const uint64_t native[] = { LEAF, ra(LOOP_END), ra(ROOT + 1) };
        const uint64_t bpf[] = { LEAF, py(0xa1, UNPLACED_FIRST), 10 };
        EpSpliceResult r = splice(bpf, ELEMENTSOF(bpf), native, ELEMENTSOF(native), true, out, ELEMENTSOF(out));

        ASSERT_EQ(r.placed, 1);
        ASSERT_EQ(out[1], py(0xa1, 0));
}

int main(void) {
        test_all_unplaced();
        test_partly_placed();
        test_incomplete_keeps_the_rest();
        test_complete_drops_the_rest();
        test_astray_walk_is_replaced();
        test_no_room();
        test_return_address_lookup();
        printf("ok (%u checks)\n", tests_checks);
        return 0;
}
