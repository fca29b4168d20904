/* SPDX-License-Identifier: MIT */

/* A process's py_procs entry from the facts about a CPython file it maps (python-entry.h): for
 * the loader (runtime-cpython.c) and the replay tests. */

#include <string.h>

#include "python-entry.h"

bool ep_py_name_says_python(const char *path) {
        const char *base = path ? strrchr(path, '/') : NULL;

        base = base ? base + 1 : path;
        return base && strstr(base, "python");
}

bool ep_py_facts_load_bias(const EpCPythonFacts *f, uint64_t start, uint64_t pgoff, uint64_t *ret) {
        for (unsigned i = 0; i < f->n_segments && i < EP_CPYTHON_FACTS_MAX_SEGMENTS; i++) {
                const EpFactsSegment *s = &f->segments[i];
                uint64_t seg_page = s->offset & ~(uint64_t) 4095;

                if (pgoff < seg_page || pgoff >= s->offset + s->filesz)
                        continue;
                /* address of file offset o: start + (o - pgoff); of vaddr v: v - vaddr + offset */
                *ret = start - pgoff + s->offset - s->vaddr;
                return true;
        }
        return false;
}

bool ep_py_facts_in_eval_loop(const EpCPythonFacts *f, uint64_t start, uint64_t pgoff, uint64_t pc) {
        uint64_t bias;

        if (!ep_py_facts_load_bias(f, start, pgoff, &bias))
                return false;
        for (unsigned i = 0; i < f->n_eval && i < EP_CPYTHON_FACTS_MAX_EVAL; i++)
                if (pc - bias >= f->eval[i].start && pc - bias < f->eval[i].end)
                        return true;
        return false;
}

static uint32_t off32(uint32_t v) {
        return v == EP_PY_NO_OFFSET ? EP_BPF_PY_NONE : v;
}

bool ep_py_facts_entry(const EpCPythonFacts *f, const EpPyLayout *y, uint64_t start, uint64_t pgoff,
                       struct ep_bpf_py_proc *ret) {
        struct ep_bpf_py_proc e;
        uint64_t bias, head;

        if (!ep_py_facts_load_bias(f, start, pgoff, &bias))
                return false;
        head = ep_cpython_facts_interp_head(f, y); /* validated: not 0, inside the file's segments */
        if (head == 0)
                return false;
        e = (struct ep_bpf_py_proc) {
                .interp_head = head + bias,
                .version = (uint16_t) (f->major << 8 | f->minor),
                .frame_kind = (uint8_t) y->frame_kind,
                .lasti_unit = (uint8_t) (y->lasti_unit == EP_PY_NO_OFFSET ? 0 : y->lasti_unit),
                .interp_next = y->interp_next,
                .interp_tstate_head = y->interp_tstate_head,
                .tstate_next = y->tstate_next,
                .tstate_thread_id = y->tstate_thread_id,
                .tstate_frame = y->frame_kind == EP_PY_FRAMES_OBJECT ? y->tstate_frame
                                : y->frame_kind == EP_PY_FRAMES_CFRAME ? y->tstate_cframe
                                                                       : y->tstate_current_frame,
                .cframe_current_frame = y->frame_kind == EP_PY_FRAMES_CFRAME ? y->cframe_current_frame
                                                                             : EP_BPF_PY_NONE,
                .frame_back = y->frame_back,
                .frame_code = y->frame_code,
                .frame_lasti = y->frame_kind == EP_PY_FRAMES_OBJECT ? y->frame_lasti : y->frame_instr,
                .frame_is_entry = y->frame_kind == EP_PY_FRAMES_CFRAME && y->minor == 11 ? y->frame_is_entry
                                                                                         : EP_BPF_PY_NONE,
                .frame_owner = off32(y->frame_owner),
                .frame_owner_cstack = y->minor >= 12 ? y->frame_owner_cstack : EP_BPF_PY_NONE,
                .co_code_adaptive = off32(y->co_code_adaptive),
        };
        for (unsigned i = 0; i < f->n_eval && i < EP_BPF_PY_EVAL_RANGES; i++) {
                e.eval_start[i] = f->eval[i].start + bias;
                e.eval_end[i] = f->eval[i].end + bias;
        }
        /* Every offset the walk uses must be known. */
        if (e.interp_tstate_head == EP_BPF_PY_NONE || e.tstate_thread_id == EP_BPF_PY_NONE ||
            e.tstate_frame == EP_BPF_PY_NONE || e.frame_back == EP_BPF_PY_NONE ||
            e.frame_code == EP_BPF_PY_NONE || e.frame_lasti == EP_BPF_PY_NONE ||
            (y->frame_kind != EP_PY_FRAMES_OBJECT && e.co_code_adaptive == EP_BPF_PY_NONE))
                return false;
        *ret = e;
        return true;
}
