/* SPDX-License-Identifier: MIT */
/* bpf/native-unwind.h compiled as ordinary C: every rule kind and every stop reason on a
 * synthetic stack, a walk through a signal frame with what each frame is recorded with, and
 * the signal-frame layout checked against a real signal delivered to this process. */

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <ucontext.h>

#include "tests.h"
#include "unwind-rule.h"

/* ---- a fake process: one stack, one mapping, one rule table ---- */

#define STACK_BASE 0x7ff000000000ULL
#define STACK_WORDS 512
#define MAP_START 0x400000ULL
#define MAP_END 0x500000ULL
#define MAP_PGOFF 0x1000ULL

typedef struct Fake {
        uint64_t stack[STACK_WORDS];
        bool unknown_process;
        bool no_table;
        bool use_real_memory;
        /* rules by file offset: [off_start[i], off_start[i+1]) → rules[i] */
        uint32_t off_start[8];
        struct ep_unwind_rule rules[8];
        unsigned n_rules;
        unsigned reads;
} Fake;

#define EP_UNWIND_CTX Fake *
static int ep_read_user(Fake *f, void *dst, uint32_t size, uint64_t addr);
static int ep_find_mapping(Fake *f, uint64_t addr, uint32_t *ret_file_num, uint64_t *ret_file_offset);
static int ep_find_rule(Fake *f, uint32_t file_num, uint32_t file_offset, struct ep_unwind_rule *ret_rule);
#include "native-unwind.h"

static int ep_read_user(Fake *f, void *dst, uint32_t size, uint64_t addr) {
        f->reads++;
        if (f->use_real_memory) {
                memcpy(dst, (const void *) (uintptr_t) addr, size);
                return 0;
        }
        if (addr < STACK_BASE || addr + size > STACK_BASE + sizeof f->stack)
                return -14;
        memcpy(dst, (const uint8_t *) f->stack + (addr - STACK_BASE), size);
        return 0;
}

static int ep_find_mapping(Fake *f, uint64_t addr, uint32_t *ret_file_num, uint64_t *ret_file_offset) {
        if (f->unknown_process)
                return EP_LOOKUP_UNKNOWN_PROCESS;
        if (f->use_real_memory) {
                *ret_file_num = 1;
                *ret_file_offset = 0;
                return EP_LOOKUP_FOUND;
        }
        if (addr < MAP_START || addr >= MAP_END)
                return EP_LOOKUP_NO_MAPPING;
        *ret_file_num = 7;
        *ret_file_offset = addr - MAP_START + MAP_PGOFF;
        return EP_LOOKUP_FOUND;
}

static int ep_find_rule(Fake *f, uint32_t file_num, uint32_t file_offset, struct ep_unwind_rule *ret_rule) {
        if (f->no_table)
                return EP_LOOKUP_NO_TABLE;
        *ret_rule = (struct ep_unwind_rule) { .cfa_kind = EP_CFA_INVALID };
        for (unsigned i = 0; i < f->n_rules; i++)
                if (file_offset >= f->off_start[i])
                        *ret_rule = f->rules[i];
        return EP_LOOKUP_FOUND;
}

static uint64_t sa(unsigned word) {
        return STACK_BASE + 8 * word;
}

static void set_rule(Fake *f, uint32_t from_pc, struct ep_unwind_rule r) {
        f->off_start[f->n_rules] = (uint32_t) (from_pc - MAP_START + MAP_PGOFF);
        f->rules[f->n_rules++] = r;
}

/* ---- rule kinds ---- */

static void test_sp_rule_and_return_address_lookup(void) {
        Fake f = {};
        struct ep_unwind_regs r;

        /* [0x401000, 0x401010): CFA = rsp + 16, rbp saved at CFA - 16; from 0x401010 on: STOP.
         * A return address 0x401010 belongs to the call at 0x40100f: rule at pc - 1. */
        set_rule(&f, 0x401000, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_SP, .fp_rule = EP_FP_AT_CFA,
                                                          .fp_offset = -16, .cfa_offset = 16 });
        set_rule(&f, 0x401010, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_STOP });

        f.stack[10] = 0x1234;   /* saved rbp at CFA - 16 */
        f.stack[11] = 0x401010; /* return address at CFA - 8 */
        f.stack[13] = 0x401010; /* the next frame's return address (CFA' = sa(14)) */
        f.stack[12] = 0x5678;
        r = (struct ep_unwind_regs) { .pc = 0x401004, .sp = sa(10), .fp = 99 };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_UNWIND_NEXT);
        ASSERT_EQ(r.step, EP_UNWIND_STEP_TABLE);
        ASSERT_EQ(r.pc, 0x401010);
        ASSERT_EQ(r.sp, sa(12));
        ASSERT_EQ(r.fp, 0x1234);
        ASSERT_EQ(r.flags, EP_UNWIND_F_RETURN_ADDRESS);
        ASSERT_EQ(f.reads, 1); /* rbp and return address in one read */

        /* pc 0x401010 as a return address: looked up at 0x40100f (SP rule), not STOP. */
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_UNWIND_NEXT);
        ASSERT_EQ(r.pc, 0x401010);
        ASSERT_EQ(r.sp, sa(14));
        ASSERT_EQ(r.fp, 0x5678);

        /* The same pc as an interrupted instruction (no return-address flag): STOP. */
        r.flags = 0;
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_STOP_OK);
}

static void test_fp_rules(void) {
        Fake f = {};
        struct ep_unwind_regs r;

        /* CFA = rbp + 16, rbp at CFA - 16 (the classic frame). */
        set_rule(&f, 0x402000, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_FP, .fp_rule = EP_FP_AT_CFA,
                                                          .fp_offset = -16, .cfa_offset = 16 });
        f.stack[20] = sa(40);
        f.stack[21] = 0x402100;
        r = (struct ep_unwind_regs) { .pc = 0x402050, .sp = sa(2), .fp = sa(20) };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_UNWIND_NEXT);
        ASSERT_EQ(r.pc, 0x402100);
        ASSERT_EQ(r.sp, sa(22));
        ASSERT_EQ(r.fp, sa(40));

        /* EP_FP_AT_FP and EP_CFA_DEREF_FP (a realigned frame): CFA = *(rbp - 8), rbp at rbp + 0. */
        f = (Fake) {};
        set_rule(&f, 0x402000, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_DEREF_FP, .fp_rule = EP_FP_AT_FP,
                                                          .fp_offset = 0, .cfa_offset = -8 });
        f.stack[30] = sa(77);     /* *(rbp) = caller's rbp */
        f.stack[29] = sa(50);     /* *(rbp - 8) = CFA */
        f.stack[49] = 0x402200;   /* return address at CFA - 8 */
        r = (struct ep_unwind_regs) { .pc = 0x402010, .sp = sa(4), .fp = sa(30) };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_UNWIND_NEXT);
        ASSERT_EQ(r.pc, 0x402200);
        ASSERT_EQ(r.sp, sa(50));
        ASSERT_EQ(r.fp, sa(77));

        /* EP_FP_UNDEFINED: the caller's rbp is unknown; a later rbp-based rule cannot run. */
        f = (Fake) {};
        set_rule(&f, 0x402000, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_SP, .fp_rule = EP_FP_UNDEFINED,
                                                          .cfa_offset = 8 });
        set_rule(&f, 0x403000, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_FP, .fp_rule = EP_FP_AT_CFA,
                                                          .fp_offset = -16, .cfa_offset = 16 });
        f.stack[0] = 0x403005;
        r = (struct ep_unwind_regs) { .pc = 0x402010, .sp = sa(0), .fp = sa(20) };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_UNWIND_NEXT);
        ASSERT_TRUE(r.flags & EP_UNWIND_F_FP_UNKNOWN);
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_STOP_FP_UNDEFINED);
}

static void test_plt(void) {
        Fake f = {};
        struct ep_unwind_regs r;

        set_rule(&f, 0x404000, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_PLT });
        f.stack[0] = 0x404500; /* return address when the push has not run */
        f.stack[1] = 0x404600; /* ... and when it has (index pushed at sa(0)) */

        r = (struct ep_unwind_regs) { .pc = 0x404026, .sp = sa(0), .fp = 5 }; /* (pc & 15) = 6 */
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_UNWIND_NEXT);
        ASSERT_EQ(r.step, EP_UNWIND_STEP_PLT);
        ASSERT_EQ(r.pc, 0x404500);
        ASSERT_EQ(r.sp, sa(1));
        ASSERT_EQ(r.fp, 5); /* EP_FP_SAME */

        r = (struct ep_unwind_regs) { .pc = 0x40402b, .sp = sa(0), .fp = 5 }; /* (pc & 15) = 11 */
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_UNWIND_NEXT);
        ASSERT_EQ(r.pc, 0x404600);
        ASSERT_EQ(r.sp, sa(2));
}

/* ---- stops and fall-backs ---- */

static void test_stops(void) {
        Fake f = {};
        struct ep_unwind_regs r;

        set_rule(&f, 0x405000, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_SP, .cfa_offset = 8 });
        set_rule(&f, 0x405100, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_INVALID });
        set_rule(&f, 0x405200, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_SP, .cfa_offset = 12 });
        set_rule(&f, 0x405300, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_SP, .cfa_offset = 0 });
        set_rule(&f, 0x405400, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_FP_FALLBACK });

        /* Return address 0: the outermost frame. */
        r = (struct ep_unwind_regs) { .pc = 0x405010, .sp = sa(3) };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_STOP_OK);
        /* A return address that cannot be code. */
        f.stack[3] = 0x10;
        r = (struct ep_unwind_regs) { .pc = 0x405010, .sp = sa(3) };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_STOP_BAD_PC);
        f.stack[3] = 0xffffffff81000000ULL;
        r = (struct ep_unwind_regs) { .pc = 0x405010, .sp = sa(3) };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_STOP_BAD_PC);
        /* Stack unreadable. */
        r = (struct ep_unwind_regs) { .pc = 0x405010, .sp = STACK_BASE + sizeof f.stack };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_STOP_READ_FAILED);
        /* No rule. */
        r = (struct ep_unwind_regs) { .pc = 0x405110, .sp = sa(3) };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_STOP_NO_UNWIND_INFO);
        /* Unaligned CFA; a CFA not above rsp. */
        r = (struct ep_unwind_regs) { .pc = 0x405210, .sp = sa(3) };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_STOP_BAD_CFA);
        r = (struct ep_unwind_regs) { .pc = 0x405310, .sp = sa(3) };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_STOP_BAD_CFA);
        /* The file asks for frame pointers: rbp == 0 is the root there. */
        r = (struct ep_unwind_regs) { .pc = 0x405410, .sp = sa(3), .fp = 0 };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_STOP_OK);
        ASSERT_EQ(r.step, EP_UNWIND_STEP_FP);
        r = (struct ep_unwind_regs) { .pc = 0x405410, .sp = sa(3), .fp = sa(1) }; /* below rsp */
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_STOP_BAD_FP);
}

static void test_fp_fallbacks(void) {
        Fake f = {};
        struct ep_unwind_regs r;

        /* A frame-pointer chain: sa(10) → sa(20) → 0. */
        f.stack[10] = sa(20);
        f.stack[11] = 0x406100;
        f.stack[20] = 0;
        f.stack[21] = 0x406200;

        /* No table loaded: frame-pointer steps; at rbp == 0 the reason is the missing table. */
        f.no_table = true;
        r = (struct ep_unwind_regs) { .pc = 0x406000, .sp = sa(2), .fp = sa(10) };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_UNWIND_NEXT);
        ASSERT_EQ(r.step, EP_UNWIND_STEP_FP);
        ASSERT_EQ(r.pc, 0x406100);
        ASSERT_EQ(r.sp, sa(12));
        ASSERT_EQ(r.fp, sa(20));
        ASSERT_EQ(r.flags, EP_UNWIND_F_RETURN_ADDRESS | EP_UNWIND_F_AFTER_FP_STEP);
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_UNWIND_NEXT);
        ASSERT_EQ(r.pc, 0x406200);
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_STOP_TABLE_MISSING);

        /* Unknown process, PC outside every mapping: the same step, their own reasons. */
        f.no_table = false;
        f.unknown_process = true;
        r = (struct ep_unwind_regs) { .pc = 0x406000, .sp = sa(2), .fp = sa(10) + 4 }; /* unaligned */
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_STOP_UNKNOWN_PROCESS);
        f.unknown_process = false;
        r = (struct ep_unwind_regs) { .pc = 0x900000, .sp = sa(2), .fp = sa(10) };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_UNWIND_NEXT);
        ASSERT_EQ(r.pc, 0x406100);
        r = (struct ep_unwind_regs) { .pc = 0x900000, .sp = sa(2), .fp = STACK_BASE + sizeof f.stack };
        ASSERT_EQ(ep_unwind_step(&f, &r), EP_STOP_NO_MAPPING);
}

/* ---- a walk through a signal frame: what each frame is recorded with ---- */

typedef struct Recorded {
        uint64_t pc;
        uint32_t flags;
} Recorded;

/* The walk as BPF, the loader and the replay record it (native-unwind.h, USE). */
static int walk(Fake *f, struct ep_unwind_regs r, Recorded *out, unsigned max, unsigned *ret_n) {
        unsigned n = 0;
        int s = EP_STOP_MAX_DEPTH;

        while (n < max) {
                uint64_t pc = r.pc;
                uint32_t flags = r.flags;

                s = ep_unwind_step(f, &r);
                out[n++] = (Recorded) { .pc = pc, .flags = ep_unwind_frame_flags(flags, r.step) };
                if (s != EP_UNWIND_NEXT)
                        break;
        }
        *ret_n = n;
        return s;
}

static void test_walk_through_signal_frame(void) {
        Fake f = {};
        Recorded fr[8];
        unsigned n;

        /* handler at 0x401000, returns to the trampoline at 0x403000, whose rule starts one byte
         * early (glibc's nop before __restore_rt, covered by its CFI); the byte before that has
         * none. The signal interrupted 0x403010, the first instruction of a function whose
         * caller is the root. */
        set_rule(&f, 0x401000, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_SP, .cfa_offset = 8 });
        set_rule(&f, 0x402000, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_INVALID });
        set_rule(&f, 0x402fff, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_SIGNAL });
        set_rule(&f, 0x403010, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_SP, .cfa_offset = 16 });
        set_rule(&f, 0x404000, (struct ep_unwind_rule) { .cfa_kind = EP_CFA_STOP });

        f.stack[0] = 0x403000; /* the handler's return address: the trampoline */
        /* The ucontext at the handler's CFA, sa(1). */
        f.stack[1 + EP_SIGFRAME_RBP / 8] = 0x5555;
        f.stack[1 + EP_SIGFRAME_RSP / 8] = sa(40);
        f.stack[1 + EP_SIGFRAME_RIP / 8] = 0x403010;
        f.stack[41] = 0x404010; /* the interrupted function's return address */

        ASSERT_EQ(walk(&f, (struct ep_unwind_regs) { .pc = 0x401005, .sp = sa(0) }, fr, 8, &n), EP_STOP_OK);
        ASSERT_EQ(n, 4);
        ASSERT_EQ(fr[0].pc, 0x401005);
        ASSERT_EQ(fr[0].flags, 0);
        /* The trampoline: reached as a return address, its rule looked up at pc - 1, but its pc
         * is its first instruction: no return-address flag, it is named at pc. */
        ASSERT_EQ(fr[1].pc, 0x403000);
        ASSERT_EQ(fr[1].flags, 0);
        /* The interrupted instruction: exact (looked up at pc - 1 it would be the trampoline). */
        ASSERT_EQ(fr[2].pc, 0x403010);
        ASSERT_EQ(fr[2].flags, EP_UNWIND_F_AFTER_SIGNAL);
        /* Its caller: a return address again. */
        ASSERT_EQ(fr[3].pc, 0x404010);
        ASSERT_EQ(fr[3].flags, EP_UNWIND_F_RETURN_ADDRESS);

        /* A trampoline reached by a frame-pointer step keeps that flag, loses the other. */
        ASSERT_EQ(ep_unwind_frame_flags(EP_UNWIND_F_RETURN_ADDRESS | EP_UNWIND_F_AFTER_FP_STEP, EP_UNWIND_STEP_SIGNAL),
                  EP_UNWIND_F_AFTER_FP_STEP);
        /* A trampoline whose signal frame cannot be read is a trampoline all the same. */
        f.stack[1 + EP_SIGFRAME_RIP / 8] = 0;
        ASSERT_EQ(walk(&f, (struct ep_unwind_regs) { .pc = 0x401005, .sp = sa(0) }, fr, 8, &n), EP_STOP_PC_ZERO);
        ASSERT_EQ(n, 2);
        ASSERT_EQ(fr[1].flags, 0);
}

/* ---- the signal frame, on a real signal ---- */

_Static_assert(offsetof(ucontext_t, uc_mcontext.gregs[REG_RBP]) == EP_SIGFRAME_RBP, "rbp in the sigframe");
_Static_assert(offsetof(ucontext_t, uc_mcontext.gregs[REG_RSP]) == EP_SIGFRAME_RSP, "rsp in the sigframe");
_Static_assert(offsetof(ucontext_t, uc_mcontext.gregs[REG_RIP]) == EP_SIGFRAME_RIP, "rip in the sigframe");

static volatile int signal_checked;

static __attribute__((noinline)) void on_signal(int sig, siginfo_t *info, void *ucv) {
        ucontext_t *uc = ucv;
        Fake f = { .use_real_memory = true, .n_rules = 1 };
        /* The handler returns into the sigreturn trampoline; there, rsp is the handler's CFA. */
        struct ep_unwind_regs r = {
                .pc = (uint64_t) __builtin_return_address(0),
                .sp = (uint64_t) __builtin_dwarf_cfa(),
                .fp = 0,
                .flags = EP_UNWIND_F_RETURN_ADDRESS,
        };

        f.rules[0] = (struct ep_unwind_rule) { .cfa_kind = EP_CFA_SIGNAL };
        if ((uint64_t) uc != r.sp) {
                fprintf(stderr, "ucontext at %p, handler CFA at 0x%" PRIx64 "\n", (void *) uc, r.sp);
                signal_checked = -1;
                return;
        }
        if (ep_unwind_step(&f, &r) != EP_UNWIND_NEXT || r.step != EP_UNWIND_STEP_SIGNAL ||
            r.pc != (uint64_t) uc->uc_mcontext.gregs[REG_RIP] || r.sp != (uint64_t) uc->uc_mcontext.gregs[REG_RSP] ||
            r.fp != (uint64_t) uc->uc_mcontext.gregs[REG_RBP] || r.flags != EP_UNWIND_F_AFTER_SIGNAL ||
            ep_unwind_frame_flags(EP_UNWIND_F_RETURN_ADDRESS, r.step) != 0) {
                signal_checked = -2;
                return;
        }
        signal_checked = 1;
}

static void test_signal_frame(void) {
        struct sigaction sa = { .sa_sigaction = on_signal, .sa_flags = SA_SIGINFO };

        ASSERT_OK(sigaction(SIGUSR1, &sa, NULL));
        raise(SIGUSR1);
        ASSERT_EQ(signal_checked, 1);
        signal(SIGUSR1, SIG_DFL);
}

int main(void) {
        test_sp_rule_and_return_address_lookup();
        test_fp_rules();
        test_plt();
        test_stops();
        test_fp_fallbacks();
        test_walk_through_signal_frame();
        test_signal_frame();
        return tests_summary("test-loader-native-unwind");
}
