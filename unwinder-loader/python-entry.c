/* SPDX-License-Identifier: MIT */

/* A process's py_procs entry from a CPython file it maps (python-entry.h): for the loader
 * (runtime-cpython.c) and the replay tests. */

#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <string.h>

#include "python-entry.h"

bool ep_py_file_name_says_python(const char *path) {
        const char *base = path ? strrchr(path, '/') : NULL;

        base = base ? base + 1 : path;
        return base && strstr(base, "python");
}

static int read_segments(int fd, EpPyFile *pf) {
        Elf *elf;
        size_t n;

        elf_version(EV_CURRENT);
        elf = elf_begin(fd, ELF_C_READ, NULL);
        if (!elf)
                return -EBADMSG;
        if (elf_getphdrnum(elf, &n) < 0) {
                elf_end(elf);
                return -EBADMSG;
        }
        pf->n_seg = 0;
        for (size_t i = 0; i < n && pf->n_seg < EP_PY_MAX_SEGMENTS; i++) {
                GElf_Phdr ph;

                if (!gelf_getphdr(elf, (int) i, &ph) || ph.p_type != PT_LOAD)
                        continue;
                pf->seg[pf->n_seg++] = (EpPySegment) {
                        .offset = ph.p_offset, .vaddr = ph.p_vaddr, .filesz = ph.p_filesz,
                };
        }
        elf_end(elf);
        return pf->n_seg > 0 ? 0 : -EBADMSG;
}

int ep_py_file_examine(int fd, const char *path, EpPyFile *ret, EpPyFileStep *ret_failed) {
        int r;

        *ret = (EpPyFile) {};
        *ret_failed = EP_PY_FILE_DETECT;
        r = ep_py_detect_fd(fd, path, &ret->rt);
        if (r <= 0)
                return r;
        *ret_failed = EP_PY_FILE_LAYOUT;
        r = ep_py_detect_layout(fd, &ret->rt, &ret->layout);
        if (r >= 0)
                r = read_segments(fd, ret);
        if (r < 0)
                return r;
        *ret_failed = EP_PY_FILE_NO_EVAL_LOOP;
        if (ret->rt.n_eval == 0)
                return -ENOENT;
        return 1;
}

bool ep_py_file_load_bias(const EpPyFile *pf, uint64_t start, uint64_t pgoff, uint64_t *ret) {
        for (unsigned i = 0; i < pf->n_seg; i++) {
                const EpPySegment *s = &pf->seg[i];
                uint64_t seg_page = s->offset & ~(uint64_t) 4095;

                if (pgoff < seg_page || pgoff >= s->offset + s->filesz)
                        continue;
                /* address of file offset o: start + (o - pgoff); of vaddr v: v - vaddr + offset */
                *ret = start - pgoff + s->offset - s->vaddr;
                return true;
        }
        return false;
}

static uint32_t off32(uint32_t v) {
        return v == EP_PY_NO_OFFSET ? EP_BPF_PY_NONE : v;
}

bool ep_py_file_entry(const EpPyFile *pf, uint64_t start, uint64_t pgoff, struct ep_bpf_py_proc *e) {
        const EpPyRuntime *rt = &pf->rt;
        const EpPyLayout *y = &pf->layout;
        uint64_t bias, head;

        if (!ep_py_file_load_bias(pf, start, pgoff, &bias))
                return false;
        if (rt->minor == 6)
                head = rt->interp_head_addr;
        else if (rt->runtime_addr && y->runtime_interpreters_head != EP_PY_NO_OFFSET)
                head = rt->runtime_addr + y->runtime_interpreters_head;
        else
                return false;
        if (head == 0)
                return false;
        *e = (struct ep_bpf_py_proc) {
                .interp_head = head + bias,
                .version = (uint16_t) (rt->major << 8 | rt->minor),
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
        for (unsigned i = 0; i < rt->n_eval && i < EP_BPF_PY_EVAL_RANGES; i++) {
                e->eval_start[i] = rt->eval[i].start + bias;
                e->eval_end[i] = rt->eval[i].end + bias;
        }
        /* Every offset the walk uses must be known. */
        if (e->interp_tstate_head == EP_BPF_PY_NONE || e->tstate_thread_id == EP_BPF_PY_NONE ||
            e->tstate_frame == EP_BPF_PY_NONE || e->frame_back == EP_BPF_PY_NONE ||
            e->frame_code == EP_BPF_PY_NONE || e->frame_lasti == EP_BPF_PY_NONE ||
            (y->frame_kind != EP_PY_FRAMES_OBJECT && e->co_code_adaptive == EP_BPF_PY_NONE))
                return false;
        return true;
}
