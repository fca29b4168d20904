/* SPDX-License-Identifier: MIT */

/* When the BPF walk of a sample stopped short (a table or a mapping not loaded yet), the loader
 * unwinds the sample's stack copy again (user-unwind.c), but only natively: interpreter frames
 * live in the process's heap, which has changed by then. The BPF side sent the ones it could
 * not place as a tail (bpf/profiler.h, EP_BPF_FRAME_F_UNPLACED), one marked group per
 * interpreter-loop activation, innermost first; here each group goes before the next
 * interpreter-loop frame of the loader's unwind, where the BPF walk would have put it. Where
 * BPF's walk went astray before it stopped (frame-pointer steps through code whose table was
 * still missing), the frames it placed past the parting are placed again the same way. */

#include "interp-splice.h"
#include "native-unwind.h"
#include "profiler.h"

static unsigned slot_flags(uint64_t slot) {
        return (unsigned) (slot >> EP_BPF_FRAME_FLAGS_SHIFT);
}

static bool is_interp(uint64_t slot) {
        return slot_flags(slot) & EP_BPF_FRAME_F_RUNTIME;
}

static uint64_t lookup_pc(uint64_t slot) {
        return (slot & EP_BPF_FRAME_ADDR_MASK) - (slot_flags(slot) & EP_UNWIND_F_RETURN_ADDRESS ? 1 : 0);
}

unsigned ep_native_frame_count(const uint64_t *slots, unsigned n) {
        unsigned count = 0;

        for (unsigned i = 0; i < n; i++) {
                if (is_interp(slots[i]))
                        i++;
                else
                        count++;
        }
        return count;
}

typedef struct Splice {
        const uint64_t *bpf;
        unsigned n_bpf;
        unsigned next; /* the next BPF slot to take */
        uint64_t *out;
        unsigned max;
        EpSpliceResult res;
} Splice;

static bool put(Splice *s, uint64_t slot) {
        if (s->res.n >= s->max)
                return false;
        s->out[s->res.n++] = slot;
        return true;
}

/* Takes the interpreter frame at s->next; its placement flags go when it is placed. */
static void take_interp(Splice *s, bool placed) {
        uint64_t first = s->bpf[s->next], second = s->next + 1 < s->n_bpf ? s->bpf[s->next + 1] : 0;
        uint64_t clear = (uint64_t) (EP_BPF_FRAME_F_UNPLACED | EP_BPF_FRAME_F_ACTIVATION) << EP_BPF_FRAME_FLAGS_SHIFT;

        s->next += 2;
        if (s->res.n + 2 > s->max) {
                s->res.dropped++;
                return;
        }
        put(s, placed ? first & ~clear : first);
        put(s, second);
        if (placed)
                s->res.placed++;
}

static void skip_native(Splice *s) {
        while (s->next < s->n_bpf && !is_interp(s->bpf[s->next]))
                s->next++;
}

/* The next activation among BPF's remaining slots: a run of interpreter frames (BPF placed the
 * frames of one activation together, before its loop's frame), cut where a frame starts
 * another one (EP_BPF_FRAME_F_ACTIVATION, among the unplaced). BPF's native frames between
 * runs are not the loader's and are skipped. */
static void take_activation(Splice *s) {
        skip_native(s);
        if (s->next >= s->n_bpf)
                return;
        do
                take_interp(s, true);
        while (s->next < s->n_bpf && is_interp(s->bpf[s->next]) &&
               !(slot_flags(s->bpf[s->next]) & EP_BPF_FRAME_F_ACTIVATION));
}

static unsigned interp_frames_left(const Splice *s) {
        unsigned slots = s->n_bpf - s->next;

        return (slots - ep_native_frame_count(s->bpf + s->next, slots)) / 2;
}

/* How many BPF slots the leading native frames both unwinds agree on span (with the
 * interpreter frames BPF placed among them); *ret_agreed: how many native frames that is. */
static unsigned agreeing_prefix(const uint64_t *bpf, unsigned n_bpf, const uint64_t *native, unsigned n_native,
                                unsigned *ret_agreed) {
        unsigned k = 0, end = 0;

        for (unsigned i = 0; i < n_bpf; i++) {
                if (is_interp(bpf[i])) {
                        i++;
                        continue;
                }
                if (k >= n_native || (bpf[i] & EP_BPF_FRAME_ADDR_MASK) != (native[k] & EP_BPF_FRAME_ADDR_MASK))
                        break;
                k++;
                end = i + 1;
        }
        *ret_agreed = k;
        return end;
}

EpSpliceResult ep_splice_interp_frames(const uint64_t *bpf, unsigned n_bpf, const uint64_t *native,
                                       unsigned n_native, bool native_complete, EpInterpLoopFn is_loop,
                                       void *userdata, uint64_t *out, unsigned max) {
        Splice s = { .bpf = bpf, .n_bpf = n_bpf, .out = out, .max = max };
        unsigned k, head = agreeing_prefix(bpf, n_bpf, native, n_native, &k);

        /* Where the unwinds agree, BPF's frames stand as they are. */
        for (; s.next < head; s.next++)
                if (!put(&s, bpf[s.next])) {
                        s.res.dropped = interp_frames_left(&s);
                        return s.res;
                }

        /* Past that, the loader's frames, each loop's frame after the next activation BPF found
         * (BPF stopped there, or its frames went astray after a frame-pointer step). */
        for (; k < n_native; k++) {
                if (is_loop(userdata, lookup_pc(native[k])))
                        take_activation(&s);
                if (!put(&s, native[k]))
                        break;
        }

        if (native_complete || k < n_native) {
                s.res.dropped += interp_frames_left(&s);
                return s.res;
        }
        /* An incomplete stack keeps the rest at its end, as BPF sent it. */
        for (skip_native(&s); s.next < n_bpf; skip_native(&s))
                take_interp(&s, false);
        return s.res;
}
