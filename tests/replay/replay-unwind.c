/* SPDX-License-Identifier: MIT */
/* The BPF unwinder's step function (bpf/native-unwind.h) compiled as ordinary C, with its
 * hooks implemented over a core dump and the extracted unwind tables; interleaved, as in the
 * BPF sampler's bpf_loop, with the CPython walk of replay-python.c.
 *
 * Rules are found the way the BPF program finds them (ep_bpf_find_rule in bpf/profiler.bpf.c):
 * each file's blob is paged by the loader's own code (unwinder-loader/table-pages.c) with
 * rules de-duplicated into one global set, and searched with bpf/unwind-pages.h, the BPF
 * program's page search. Every rule found that way is also looked up in the blob itself
 * (ep_unwind_table_find); a disagreement is a table error, so the replay fails loudly. */
#include "replay.h"

#include "native-unwind.h" /* types and constants only: EP_UNWIND_CTX is not defined yet */
#include "table-pages.h"
#include "unwind-table.h"

struct ReplayLookup {
        EpRuleSet *rule_set;
        struct ep_unwind_rule *rules; /* global index → rule, as the unwind_rules map */
        EpPagedTable *pages;          /* per module (n_deltas 0: no table) */
        bool *paged;
        size_t n_modules;
};

void replay_lookup_free(ReplayLookup *l) {
        if (!l)
                return;
        for (size_t i = 0; i < l->n_modules; i++)
                if (l->paged[i])
                        ep_paged_table_done(&l->pages[i]);
        free(l->pages);
        free(l->paged);
        free(l->rules);
        ep_rule_set_free(l->rule_set);
        free(l);
}

static int lookup_new(ReplayProcess *p, ReplayLookup **ret) {
        ReplayLookup *l;
        int r;

        l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->n_modules = p->n_modules;
        l->pages = calloc(p->n_modules ?: 1, sizeof *l->pages);
        l->paged = calloc(p->n_modules ?: 1, sizeof *l->paged);
        l->rules = calloc(EP_BPF_MAX_RULES, sizeof *l->rules);
        r = l->pages && l->paged && l->rules ? ep_rule_set_new(EP_BPF_MAX_RULES, &l->rule_set) : -ENOMEM;
        if (r < 0) {
                replay_lookup_free(l);
                return r;
        }
        l->rules[EP_BPF_RULE_INVALID] = (struct ep_unwind_rule) { .cfa_kind = EP_CFA_INVALID };

        for (size_t i = 0; i < p->n_modules; i++) {
                const ReplayModule *m = p->modules[i];
                _cleanup_free_ uint16_t *global = NULL;
                const EpUnwindTableHeader *h;

                if (!m->table)
                        continue;
                h = ep_unwind_table_header(m->table);
                global = calloc(h->n_rules, sizeof *global);
                if (!global) {
                        replay_lookup_free(l);
                        return -ENOMEM;
                }
                for (uint32_t k = 0; k < h->n_rules; k++) {
                        const struct ep_unwind_rule *rule = &ep_unwind_table_rules(m->table)[k];
                        bool created = false;

                        r = ep_rule_set_ref(l->rule_set, rule, &global[k], &created);
                        if (r < 0) {
                                replay_lookup_free(l);
                                return r;
                        }
                        if (created)
                                l->rules[global[k]] = *rule;
                }
                r = ep_table_page(m->table, global, &l->pages[i]);
                if (r < 0) {
                        replay_lookup_free(l);
                        return r;
                }
                l->paged[i] = true;
        }
        *ret = l;
        return 0;
}

/* ---- the page search of the BPF program, over the loader's pages ---- */

#define EP_PAGES_CTX const EpPagedTable *
static inline int ep_page_delta(const EpPagedTable *t, uint32_t index, struct ep_bpf_delta *ret) {
        if (index >= t->n_deltas)
                return -1;
        *ret = t->deltas[index];
        return 0;
}
#include "unwind-pages.h"

static const EpTablePage *find_page(const EpPagedTable *t, uint32_t page) {
        uint32_t lo = 0, hi = t->n_pages;

        while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;
                if (t->pages[mid].page == page)
                        return &t->pages[mid];
                if (t->pages[mid].page < page)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return NULL;
}

/* ---- the hooks of bpf/native-unwind.h ---- */

#define EP_UNWIND_CTX ReplayProcess *

static inline int ep_read_user(ReplayProcess *p, void *dst, uint32_t size, uint64_t addr) {
        return ep_core_read(p->core, addr, dst, size);
}

static inline int ep_find_mapping(ReplayProcess *p, uint64_t addr, uint32_t *ret_file_num,
                                  uint64_t *ret_file_offset) {
        const ReplayRegion *reg = replay_region_at(p, addr);

        if (!reg)
                return EP_LOOKUP_NO_MAPPING;
        for (size_t i = 0; i < p->n_modules; i++)
                if (p->modules[i] == reg->module) {
                        *ret_file_num = (uint32_t) i;
                        *ret_file_offset = addr - reg->start + reg->offset;
                        return EP_LOOKUP_FOUND;
                }
        return EP_LOOKUP_NO_MAPPING;
}

static inline int ep_find_rule(ReplayProcess *p, uint32_t file_num, uint32_t file_offset,
                               struct ep_unwind_rule *ret_rule) {
        const ReplayLookup *l = p->lookup;
        const EpTablePage *pg;
        const ReplayModule *m;
        struct ep_unwind_rule want = { .cfa_kind = EP_CFA_INVALID };
        long i;
        int k;

        if (file_num >= l->n_modules)
                return EP_LOOKUP_ERROR;
        m = p->modules[file_num];
        if (!l->paged[file_num])
                return EP_LOOKUP_NO_TABLE;

        /* As BPF: a missing page is an offset the table does not cover. */
        pg = find_page(&l->pages[file_num], file_offset >> EP_BPF_PAGE_SHIFT);
        if (!pg)
                *ret_rule = (struct ep_unwind_rule) { .cfa_kind = EP_CFA_INVALID };
        else {
                k = ep_page_search(&l->pages[file_num], &pg->v, file_offset & ((1u << EP_BPF_PAGE_SHIFT) - 1));
                if (k < 0)
                        return EP_LOOKUP_ERROR;
                *ret_rule = l->rules[k];
        }

        /* The blob's own answer must be the same. */
        i = ep_unwind_table_find(m->table, file_offset);
        if (i >= 0)
                want = ep_unwind_table_rules(m->table)[ep_unwind_table_entries(m->table)[i].rule];
        if (memcmp(&want, ret_rule, sizeof want) != 0) {
                fprintf(stderr, "ep-replay: %s+0x%x: paged rule (cfa %u/%d fp %u/%d) is not the "
                        "blob's (cfa %u/%d fp %u/%d)\n", m->path, file_offset,
                        ret_rule->cfa_kind, ret_rule->cfa_offset, ret_rule->fp_rule, ret_rule->fp_offset,
                        want.cfa_kind, want.cfa_offset, want.fp_rule, want.fp_offset);
                return EP_LOOKUP_ERROR;
        }
        return EP_LOOKUP_FOUND;
}

#include "stop-reason.h"
#include "native-unwind.h" /* now the step functions, over the hooks above */

int replay_unwind_thread(ReplayProcess *p, const EpCoreThread *t, ReplayFrame *frames, size_t max,
                         size_t *ret_n, const char **ret_stop) {
        struct ep_unwind_regs r = {
                .pc = t->regs[EP_CORE_RIP],
                .sp = t->regs[EP_CORE_RSP],
                .fp = t->regs[EP_CORE_RBP],
        };
        bool python = p->python && replay_python_start(p->python, t);
        size_t n = 0;
        int s = EP_STOP_MAX_DEPTH;

        if (!p->lookup) {
                int k = lookup_new(p, &p->lookup);
                if (k < 0)
                        return k;
        }
        while (n < max) {
                if (python)
                        n += replay_python_frames(p->python, r.flags & EP_UNWIND_F_RETURN_ADDRESS ? r.pc - 1 : r.pc,
                                                  frames + n, max - n);
                if (n >= max)
                        break;
                uint64_t pc = r.pc;
                uint32_t flags = r.flags;

                /* As BPF: the frame is recorded once its step is known (a signal trampoline's pc
                 * is exact). */
                s = ep_unwind_step(p, &r);
                frames[n++] = (ReplayFrame) {
                        .pc = pc,
                        .return_address = ep_unwind_frame_flags(flags, r.step) & EP_UNWIND_F_RETURN_ADDRESS,
                };
                if (s != EP_UNWIND_NEXT)
                        break;
                s = EP_STOP_MAX_DEPTH;
        }
        *ret_n = n;
        *ret_stop = s >= 0 ? ep_stop_reason_name(s) ?: "?" : "?";
        return 0;
}
