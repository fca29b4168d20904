/* SPDX-License-Identifier: MIT */

/* Unwinding in the loader, with the very frame step the BPF program runs (bpf/native-unwind.h),
 * of the samples the BPF side could not unwind with tables (the process or a mapping was not
 * synchronised yet, a table was not loaded yet): they carry the user registers and a window of
 * the stack (struct ep_bpf_stack_copy). Memory reads are served from that window only — the
 * live stack has moved on since. Mappings come from the loader's cache, rules from the tables
 * in BPF (tables.c). */

#include "loader.h"
#include "log.h"

typedef struct UserUnwind {
        Loader *l;
        const EpProcess *p;
        const struct ep_bpf_stack_copy *copy;
        uint32_t waiting; /* file key of a table it needed that is still to come, 0 = none */
} UserUnwind;

#define EP_UNWIND_CTX UserUnwind *
static int ep_read_user(UserUnwind *u, void *dst, uint32_t size, uint64_t addr);
static int ep_find_mapping(UserUnwind *u, uint64_t addr, uint32_t *ret_file_num, uint64_t *ret_file_offset);
static int ep_find_rule(UserUnwind *u, uint32_t file_num, uint32_t file_offset, struct ep_unwind_rule *ret_rule);
#include "native-unwind.h"

static int ep_read_user(UserUnwind *u, void *dst, uint32_t size, uint64_t addr) {
        const struct ep_bpf_stack_copy *c = u->copy;

        if (addr < c->sp || addr - c->sp > c->len || c->len - (addr - c->sp) < size)
                return -EFAULT;
        memcpy(dst, c->data + (addr - c->sp), size);
        return 0;
}

static int ep_find_mapping(UserUnwind *u, uint64_t addr, uint32_t *ret_file_num, uint64_t *ret_file_offset) {
        const EpMapping *m;

        if (u->p->n_mappings == 0)
                return EP_LOOKUP_UNKNOWN_PROCESS;
        m = ep_process_find_mapping(u->p, addr);
        if (!m || m->file_key == 0)
                return EP_LOOKUP_NO_MAPPING;
        *ret_file_num = m->file_key; /* the hooks' file number is the loader's file key */
        *ret_file_offset = addr - m->start + m->pgoff;
        return EP_LOOKUP_FOUND;
}

static int ep_find_rule(UserUnwind *u, uint32_t file_num, uint32_t file_offset, struct ep_unwind_rule *ret_rule) {
        bool pending;
        int r = ep_tables_find_rule(u->l->tables, file_num, file_offset, ret_rule, &pending);

        if (r == EP_LOOKUP_NO_TABLE && pending) {
                u->waiting = file_num;
                ep_tables_hint_needed(u->l->tables, file_num);
        }
        return r;
}

int loader_user_unwind(Loader *l, const EpProcess *p, const struct ep_bpf_stack_copy *copy, uint64_t *frames,
                       unsigned max, unsigned *ret_n, uint32_t *ret_waiting) {
        UserUnwind u = { .l = l, .p = p, .copy = copy };
        struct ep_unwind_regs r = { .pc = copy->pc, .sp = copy->sp, .fp = copy->fp };
        int stop = EP_STOP_MAX_DEPTH;
        unsigned n = 0;

        while (n < max) {
                uint64_t pc = r.pc;
                uint32_t flags = r.flags;
                int s;

                s = ep_unwind_step(&u, &r);
                /* Recorded once its step is known: a signal trampoline's pc is exact. */
                frames[n++] = (pc & EP_BPF_FRAME_ADDR_MASK) |
                              ((uint64_t) ep_unwind_frame_flags(flags, r.step) << EP_BPF_FRAME_FLAGS_SHIFT);
                if (s != EP_UNWIND_NEXT) {
                        stop = s;
                        break;
                }
        }
        *ret_n = n;
        *ret_waiting = u.waiting;
        return stop;
}
