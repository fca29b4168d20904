/* SPDX-License-Identifier: MIT */

/* The native (x86-64) unwinder's per-frame step: written once, compiled twice.
 *
 *   - into the BPF sampler (bpf/profiler.bpf.c), where the hooks read user memory with
 *     bpf_probe_read_user() and look mappings and rules up in BPF maps;
 *   - as ordinary C into the replay tests (tests/replay/) and the loader's unit tests, where
 *     the hooks read a captured stack and look rules up in a table blob (common/unwind-table.h).
 *
 * ---- INCLUDE CONTRACT (stable) ---------------------------------------------------------------
 *
 * Included WITHOUT EP_UNWIND_CTX defined, the header gives only its types and constants
 * (struct ep_unwind_regs, EP_LOOKUP_*, EP_UNWIND_F_*, ...), e.g. to embed the registers in the
 * includer's context. Included WITH EP_UNWIND_CTX defined (again, or the first time), it also
 * gives the step functions; by then the includer has DECLARED the three hooks below
 * (prototypes of static inline functions, or macros). Function hooks may be defined after the
 * #include. In BPF they are static __always_inline. Their exact meanings:
 *
 *   EP_UNWIND_CTX
 *       A macro naming the type of the opaque context handed unchanged to every hook
 *       (e.g. `#define EP_UNWIND_CTX struct replay_ctx *`).
 *
 *   int ep_read_user(EP_UNWIND_CTX ctx, void *dst, uint32_t size, uint64_t addr);
 *       Copies size bytes (8, 16 or 24; always a constant) of the target's memory at addr into
 *       dst. Returns 0, or < 0 when the memory cannot be read (the unwind then stops with
 *       EP_STOP_READ_FAILED, or with the fall-back reason during a frame-pointer step).
 *
 *   int ep_find_mapping(EP_UNWIND_CTX ctx, uint64_t addr, uint32_t *ret_file_num,
 *                       uint64_t *ret_file_offset);
 *       Which file maps addr. Returns
 *         EP_LOOKUP_FOUND            file-backed executable mapping: *ret_file_num is the
 *                                    includer's number of the file (opaque here, passed back to
 *                                    ep_find_rule), *ret_file_offset = addr - start + pgoff;
 *         EP_LOOKUP_NO_MAPPING       addr is in no file mapping (anonymous memory, JIT code, a
 *                                    mapping not synchronised yet): one frame-pointer step;
 *         EP_LOOKUP_UNKNOWN_PROCESS  the process's mappings are not known at all (yet): one
 *                                    frame-pointer step.
 *
 *   int ep_find_rule(EP_UNWIND_CTX ctx, uint32_t file_num, uint32_t file_offset,
 *                    struct ep_unwind_rule *ret_rule);
 *       The unwind rule in effect at file_offset of that file (the entry with the greatest
 *       file_offset <= the given one). Returns
 *         EP_LOOKUP_FOUND     *ret_rule filled. An offset the table does not cover must come
 *                             back FOUND with cfa_kind EP_CFA_INVALID; a file known to have
 *                             no CFI at all may come back FOUND with EP_CFA_FP_FALLBACK;
 *         EP_LOOKUP_NO_TABLE  the file's table is not loaded (yet): one frame-pointer step;
 *         EP_LOOKUP_ERROR     the loaded table is inconsistent: stop (EP_STOP_TABLE_ERROR).
 *
 * Types uint8_t..uint64_t must be defined (stdint.h, or clang's freestanding one in BPF);
 * this header includes "unwind-rule.h" and "wire.h" (common/) for the EP_CFA_*,
 * EP_FP_* and EP_STOP_* numbers, so both directories must be on the include path.
 *
 * ---- USE -------------------------------------------------------------------------------------
 *
 *   struct ep_unwind_regs r = { .pc = ip, .sp = sp, .fp = bp, .flags = 0 };
 *   for (;;) {
 *           uint64_t pc = r.pc;
 *           uint32_t flags = r.flags;        // how this frame was reached
 *           int s = ep_unwind_step(ctx, &r);
 *           emit_frame(pc, ep_unwind_frame_flags(flags, r.step));
 *           if (s != EP_UNWIND_NEXT)
 *                   return s;                // EP_STOP_OK: the root was reached
 *   }                                        // (the caller bounds the depth: EP_STOP_MAX_DEPTH)
 *
 * The first frame's pc is the interrupted instruction (flags 0). Every later pc was read as a
 * return address (EP_UNWIND_F_RETURN_ADDRESS), so its rule is looked up at pc - 1 (the call
 * instruction may be the last one of its function); the exception is the pc restored from a
 * signal frame, which is an interrupted instruction again (EP_UNWIND_F_AFTER_SIGNAL, no
 * RETURN_ADDRESS flag). A frame is recorded once its step is known: the step from a signal
 * trampoline (EP_UNWIND_STEP_SIGNAL) tells that its pc, although read as the signal handler's
 * return address, is the trampoline's first instruction, where the kernel made the handler
 * return to (sa_restorer), not the byte after a call: ep_unwind_frame_flags() drops
 * RETURN_ADDRESS from it, so it is named at pc (pc - 1 lies before the trampoline's symbol).
 * Its rule was looked up at pc - 1 all the same: glibc starts the trampoline's CFI one byte
 * early for unwinders that do so, and the symbolizer's tables cover that byte too
 * (symbolizer/unwind-extract.c). In a recorded frame, RETURN_ADDRESS therefore means "named
 * at pc - 1", and an interrupted instruction, a trampoline or a pc a signal interrupted lack it.
 *
 * ---- SEMANTICS (x86-64) ----------------------------------------------------------------------
 *
 *   EP_CFA_SP / EP_CFA_FP   CFA = rsp / rbp + cfa_offset
 *   EP_CFA_DEREF_FP         CFA = *(rbp + cfa_offset)
 *   EP_CFA_PLT              CFA = rsp + 8, + 8 when (pc & 15) >= 11
 *       then: the CFA must be 8-aligned and above rsp (EP_STOP_BAD_CFA otherwise),
 *             return address = *(CFA - 8), caller's rsp = CFA,
 *             caller's rbp per fp_rule (SAME, *(CFA + fp_offset), *(rbp + fp_offset),
 *             UNDEFINED: unknown from here on, a later rbp-based rule stops with
 *             EP_STOP_FP_UNDEFINED), return address 0 = root reached (EP_STOP_OK).
 *   EP_CFA_SIGNAL           rsp points at the kernel's ucontext (struct rt_sigframe after
 *                           pretcode was popped): uc_mcontext at +40, gregs in the order
 *                           r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, i.e.
 *                           rbp = *(rsp + 120), rsp = *(rsp + 160), rip = *(rsp + 168).
 *                           The restored rsp may lie anywhere (sigaltstack).
 *   EP_CFA_STOP             the root (_start, thread entry): EP_STOP_OK.
 *   EP_CFA_INVALID          no unwind information: EP_STOP_NO_UNWIND_INFO.
 *   EP_CFA_FP_FALLBACK, EP_LOOKUP_NO_TABLE, EP_LOOKUP_NO_MAPPING, EP_LOOKUP_UNKNOWN_PROCESS
 *                           one frame-pointer step: return address = *(rbp + 8), caller's
 *                           rbp = *rbp, caller's rsp = rbp + 16; the next frame is marked
 *                           EP_UNWIND_F_AFTER_FP_STEP. When it cannot be taken (rbp zero,
 *                           unaligned, below rsp, unreadable, unknown) the unwind stops with
 *                           the reason the fall-back was needed: EP_STOP_BAD_FP (the table
 *                           asked for it; rbp == 0 there is the root: EP_STOP_OK),
 *                           EP_STOP_TABLE_MISSING, EP_STOP_NO_MAPPING,
 *                           EP_STOP_UNKNOWN_PROCESS.
 *   A return address below 4096 or above the user address space: EP_STOP_BAD_PC.
 */

#ifndef EP_NATIVE_UNWIND_TYPES
#define EP_NATIVE_UNWIND_TYPES

#include "wire.h"
#include "unwind-rule.h"

#ifndef EP_UNWIND_INLINE
#define EP_UNWIND_INLINE static inline __attribute__((always_inline))
#endif

/* ep_unwind_step(): the registers now describe the caller; keep going. */
#define EP_UNWIND_NEXT (-1)

/* Lowest and one past the highest user code address we accept (5-level paging: 2^56). */
#define EP_UNWIND_PC_MIN 4096ULL
#define EP_UNWIND_PC_END (1ULL << 56)

/* Layout of the x86-64 signal frame as seen at the sigreturn trampoline (rsp = &ucontext). */
#define EP_SIGFRAME_RBP 120
#define EP_SIGFRAME_RSP 160
#define EP_SIGFRAME_RIP 168

/* Results of the lookup hooks. */
enum {
        EP_LOOKUP_FOUND = 0,
        EP_LOOKUP_NO_MAPPING = 1,
        EP_LOOKUP_UNKNOWN_PROCESS = 2,
        EP_LOOKUP_NO_TABLE = 3,
        EP_LOOKUP_ERROR = 4,
};

/* State of one frame. */
enum {
        EP_UNWIND_F_RETURN_ADDRESS = 1 << 0, /* pc was read as a return address: rule at pc - 1 */
        EP_UNWIND_F_FP_UNKNOWN = 1 << 1,     /* fp is not recoverable (EP_FP_UNDEFINED below) */
        EP_UNWIND_F_AFTER_FP_STEP = 1 << 2,  /* reached by a frame-pointer step: less certain */
        EP_UNWIND_F_AFTER_SIGNAL = 1 << 3,   /* registers restored from a signal frame */
};

/* How ep_unwind_step() found the caller (ep_unwind_regs.step, for counters and tests). */
enum {
        EP_UNWIND_STEP_NONE = 0,   /* no step taken (stopped before) */
        EP_UNWIND_STEP_TABLE = 1,  /* an SP/FP/DEREF_FP rule from the table */
        EP_UNWIND_STEP_PLT = 2,    /* a PLT rule */
        EP_UNWIND_STEP_SIGNAL = 3, /* a signal frame */
        EP_UNWIND_STEP_FP = 4,     /* a frame-pointer step (fall-back) */
        _EP_UNWIND_STEP_MAX,
};

struct ep_unwind_regs {
        uint64_t pc;
        uint64_t sp;
        uint64_t fp;    /* rbp */
        uint32_t flags; /* EP_UNWIND_F_* of the frame these registers describe */
        uint32_t step;  /* out: EP_UNWIND_STEP_* of the last ep_unwind_step() */
};

EP_UNWIND_INLINE int ep_unwind_pc_ok(uint64_t pc) {
        return pc >= EP_UNWIND_PC_MIN && pc < EP_UNWIND_PC_END;
}

/* The flags to record a frame with, given the step ep_unwind_step() took from it (r->step
 * after the step, whatever it returned): a signal trampoline's pc is exact (USE above). */
EP_UNWIND_INLINE uint32_t ep_unwind_frame_flags(uint32_t flags, uint32_t step) {
        return step == EP_UNWIND_STEP_SIGNAL ? flags & ~(uint32_t) EP_UNWIND_F_RETURN_ADDRESS : flags;
}

#endif /* EP_NATIVE_UNWIND_TYPES */

#if defined(EP_UNWIND_CTX) && !defined(EP_NATIVE_UNWIND_STEP)
#define EP_NATIVE_UNWIND_STEP

/* One frame-pointer step; why is the stop reason when it cannot be taken. */
EP_UNWIND_INLINE int ep_unwind_fp_step(EP_UNWIND_CTX ctx, struct ep_unwind_regs *r, int why) {
        uint64_t frame[2]; /* [rbp] = caller's rbp, [rbp + 8] = return address */
        int explicit_rule = why == EP_STOP_BAD_FP;

        r->step = EP_UNWIND_STEP_FP;
        if (r->flags & EP_UNWIND_F_FP_UNKNOWN)
                return explicit_rule ? EP_STOP_FP_UNDEFINED : why;
        if (r->fp == 0)
                return explicit_rule ? EP_STOP_OK : why; /* the outermost frame cleared rbp */
        if ((r->fp & 7) || r->fp < r->sp)
                return why;
        if (ep_read_user(ctx, frame, 16, r->fp) < 0)
                return explicit_rule ? EP_STOP_READ_FAILED : why;
        if (frame[1] == 0)
                return explicit_rule ? EP_STOP_OK : why;
        if (!ep_unwind_pc_ok(frame[1]))
                return EP_STOP_BAD_PC;
        r->pc = frame[1];
        r->sp = r->fp + 16;
        r->fp = frame[0];
        r->flags = EP_UNWIND_F_RETURN_ADDRESS | EP_UNWIND_F_AFTER_FP_STEP;
        return EP_UNWIND_NEXT;
}

/* The kernel's signal frame at rsp. */
EP_UNWIND_INLINE int ep_unwind_signal_step(EP_UNWIND_CTX ctx, struct ep_unwind_regs *r) {
        uint64_t sp_ip[2], fp;

        r->step = EP_UNWIND_STEP_SIGNAL;
        if (ep_read_user(ctx, sp_ip, 16, r->sp + EP_SIGFRAME_RSP) < 0 ||
            ep_read_user(ctx, &fp, 8, r->sp + EP_SIGFRAME_RBP) < 0)
                return EP_STOP_READ_FAILED;
        if (sp_ip[1] == 0)
                return EP_STOP_PC_ZERO;
        if (!ep_unwind_pc_ok(sp_ip[1]))
                return EP_STOP_BAD_PC;
        r->pc = sp_ip[1];
        r->sp = sp_ip[0];
        r->fp = fp;
        r->flags = EP_UNWIND_F_AFTER_SIGNAL; /* an interrupted instruction, not a return address */
        return EP_UNWIND_NEXT;
}

/* Steps from the frame described by r to its caller. Returns EP_UNWIND_NEXT with r updated,
 * or the EP_STOP_* reason the unwind ends here (EP_STOP_OK: the root was reached). */
EP_UNWIND_INLINE int ep_unwind_step(EP_UNWIND_CTX ctx, struct ep_unwind_regs *r) {
        struct ep_unwind_rule rule = {};
        uint64_t lookup = r->pc, off = 0, cfa, ra, fp = r->fp, pair[2];
        uint32_t file_num = 0, fp_unknown = r->flags & EP_UNWIND_F_FP_UNKNOWN;
        int k;

        r->step = EP_UNWIND_STEP_NONE;
        if (r->flags & EP_UNWIND_F_RETURN_ADDRESS)
                lookup--;

        k = ep_find_mapping(ctx, lookup, &file_num, &off);
        if (k == EP_LOOKUP_UNKNOWN_PROCESS)
                return ep_unwind_fp_step(ctx, r, EP_STOP_UNKNOWN_PROCESS);
        if (k != EP_LOOKUP_FOUND)
                return ep_unwind_fp_step(ctx, r, EP_STOP_NO_MAPPING);
        if (off > 0xffffffffULL)
                return EP_STOP_NO_UNWIND_INFO; /* tables address files below 4 GiB */

        k = ep_find_rule(ctx, file_num, (uint32_t) off, &rule);
        if (k == EP_LOOKUP_NO_TABLE)
                return ep_unwind_fp_step(ctx, r, EP_STOP_TABLE_MISSING);
        if (k != EP_LOOKUP_FOUND)
                return EP_STOP_TABLE_ERROR;

        switch (rule.cfa_kind) {
        case EP_CFA_SP:
                cfa = r->sp + (int64_t) rule.cfa_offset;
                break;
        case EP_CFA_FP:
                if (fp_unknown)
                        return EP_STOP_FP_UNDEFINED;
                cfa = fp + (int64_t) rule.cfa_offset;
                break;
        case EP_CFA_DEREF_FP:
                if (fp_unknown)
                        return EP_STOP_FP_UNDEFINED;
                if (ep_read_user(ctx, &cfa, 8, fp + (int64_t) rule.cfa_offset) < 0)
                        return EP_STOP_READ_FAILED;
                break;
        case EP_CFA_PLT:
                cfa = r->sp + 8 + ((r->pc & 15) >= 11 ? 8 : 0);
                break;
        case EP_CFA_SIGNAL:
                return ep_unwind_signal_step(ctx, r);
        case EP_CFA_STOP:
                return EP_STOP_OK;
        case EP_CFA_FP_FALLBACK:
                return ep_unwind_fp_step(ctx, r, EP_STOP_BAD_FP);
        case EP_CFA_INVALID:
                return EP_STOP_NO_UNWIND_INFO;
        default:
                return EP_STOP_TABLE_ERROR;
        }

        r->step = rule.cfa_kind == EP_CFA_PLT ? EP_UNWIND_STEP_PLT : EP_UNWIND_STEP_TABLE;
        if ((cfa & 7) || cfa <= r->sp)
                return EP_STOP_BAD_CFA;

        switch (rule.fp_rule) {
        case EP_FP_SAME:
                if (ep_read_user(ctx, &ra, 8, cfa - 8) < 0)
                        return EP_STOP_READ_FAILED;
                break;
        case EP_FP_AT_CFA:
                if (rule.fp_offset == -16) {
                        /* The usual push %rbp right after the call: one read for both. */
                        if (ep_read_user(ctx, pair, 16, cfa - 16) < 0)
                                return EP_STOP_READ_FAILED;
                        fp = pair[0];
                        ra = pair[1];
                } else {
                        if (ep_read_user(ctx, &ra, 8, cfa - 8) < 0 ||
                            ep_read_user(ctx, &fp, 8, cfa + (int64_t) rule.fp_offset) < 0)
                                return EP_STOP_READ_FAILED;
                }
                fp_unknown = 0;
                break;
        case EP_FP_AT_FP:
                if (fp_unknown)
                        return EP_STOP_FP_UNDEFINED;
                if (ep_read_user(ctx, &ra, 8, cfa - 8) < 0 ||
                    ep_read_user(ctx, &fp, 8, fp + (int64_t) rule.fp_offset) < 0)
                        return EP_STOP_READ_FAILED;
                break;
        case EP_FP_UNDEFINED:
                if (ep_read_user(ctx, &ra, 8, cfa - 8) < 0)
                        return EP_STOP_READ_FAILED;
                fp = 0;
                fp_unknown = EP_UNWIND_F_FP_UNKNOWN;
                break;
        default:
                return EP_STOP_TABLE_ERROR;
        }

        if (ra == 0)
                return EP_STOP_OK; /* the return address is undefined: outermost frame */
        if (!ep_unwind_pc_ok(ra))
                return EP_STOP_BAD_PC;
        r->pc = ra;
        r->sp = cfa;
        r->fp = fp;
        r->flags = EP_UNWIND_F_RETURN_ADDRESS | fp_unknown;
        return EP_UNWIND_NEXT;
}

#endif /* EP_UNWIND_CTX */
