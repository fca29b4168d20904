/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* Places interpreter frames into the loader's own unwind of a sample (interp-splice.c). Frames
 * are user frame slots as the BPF side writes them (bpf/profiler.h): a native frame takes one
 * slot, an interpreter frame two. */

/* True when the native frame at lookup address pc (pc - 1 for a return address) runs an
 * interpreter loop activation of the sampled process. */
typedef bool (*EpInterpLoopFn)(void *userdata, uint64_t pc);

typedef struct EpSpliceResult {
        unsigned n;       /* slots written */
        unsigned placed;  /* interpreter frames put before a loop's frame of the loader's unwind */
        unsigned dropped; /* interpreter frames that found no place (or no room) */
} EpSpliceResult;

/* Native frames among n slots. */
unsigned ep_native_frame_count(const uint64_t *slots, unsigned n);

/* Merges the BPF side's slots (its native frames with the interpreter frames it placed, then
 * the EP_BPF_FRAME_F_UNPLACED ones) with the loader's native unwind of the same stack, which
 * went further: BPF's slots as they are while their native frames are the loader's, then the
 * rest of the loader's frames, each interpreter-loop frame preceded by the next activation of
 * BPF's interpreter frames not written yet (those it placed after the unwinds part ways, then
 * the unplaced ones). When the loader's unwind is incomplete (native_complete false), the
 * frames left over stay at its end, as the BPF side sent them; otherwise they are dropped
 * (counted). */
EpSpliceResult ep_splice_interp_frames(const uint64_t *bpf, unsigned n_bpf, const uint64_t *native,
                                       unsigned n_native, bool native_complete, EpInterpLoopFn is_loop,
                                       void *userdata, uint64_t *out, unsigned max);
