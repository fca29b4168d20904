/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "macro.h"
#include "runtime-facts.h"

#define PAGE_MASK_4K UINT64_C(4095)

void ep_cpython_facts_init(EpCPythonFacts *ret) {
        *ret = (EpCPythonFacts) {
                .header = {
                        .magic = EP_RUNTIME_FACTS_MAGIC,
                        .version = EP_RUNTIME_FACTS_VERSION,
                        .kind = EP_RUNTIME_FACTS_CPYTHON,
                        .size = sizeof(EpCPythonFacts),
                },
        };
}

static bool all_zero(const void *p, size_t n) {
        const uint8_t *b = p;

        for (size_t i = 0; i < n; i++)
                if (b[i])
                        return false;
        return true;
}

/* [start, start+size) lies in one segment: in its file part, or anywhere in memory (.bss). */
static bool in_segment(const EpCPythonFacts *f, uint64_t start, uint64_t size, bool in_file) {
        for (uint32_t i = 0; i < f->n_segments; i++) {
                const EpFactsSegment *s = &f->segments[i];
                uint64_t len = in_file ? s->filesz : s->memsz;

                if (start >= s->vaddr && start - s->vaddr <= len && size <= len - (start - s->vaddr))
                        return true;
        }
        return false;
}

static int validate_segments(const EpCPythonFacts *f) {
        if (f->n_segments == 0 || f->n_segments > EP_CPYTHON_FACTS_MAX_SEGMENTS)
                return -ERANGE;
        for (uint32_t i = 0; i < f->n_segments; i++) {
                const EpFactsSegment *s = &f->segments[i];

                if (s->memsz == 0 || s->filesz > s->memsz)
                        return -ERANGE;
                if (s->offset > UINT64_MAX - s->filesz || s->vaddr > UINT64_MAX - s->memsz)
                        return -ERANGE;
                /* mmap() can only map it where the offset and the address share the page offset */
                if ((s->offset & PAGE_MASK_4K) != (s->vaddr & PAGE_MASK_4K))
                        return -ERANGE;
                if (i > 0 && s->vaddr < f->segments[i - 1].vaddr + f->segments[i - 1].memsz)
                        return -ERANGE; /* not ascending, or overlapping */
        }
        if (!all_zero(f->segments + f->n_segments,
                      (EP_CPYTHON_FACTS_MAX_SEGMENTS - f->n_segments) * sizeof(EpFactsSegment)))
                return -ERANGE;
        return 0;
}

static int validate_eval(const EpCPythonFacts *f) {
        if (f->n_eval == 0 || f->n_eval > EP_CPYTHON_FACTS_MAX_EVAL)
                return -ERANGE;
        for (uint32_t i = 0; i < f->n_eval; i++) {
                const EpFactsRange *e = &f->eval[i];

                if (e->start >= e->end || e->end - e->start > EP_CPYTHON_FACTS_MAX_EVAL_SIZE)
                        return -ERANGE;
                if (!in_segment(f, e->start, e->end - e->start, true))
                        return -ERANGE; /* code is in the file */
                for (uint32_t j = 0; j < i; j++)
                        if (e->start < f->eval[j].end && f->eval[j].start < e->end)
                                return -ERANGE;
        }
        if (!all_zero(f->eval + f->n_eval, (EP_CPYTHON_FACTS_MAX_EVAL - f->n_eval) * sizeof(EpFactsRange)))
                return -ERANGE;
        return 0;
}

static int validate_runtime(const EpCPythonFacts *f, const EpPyLayout *layout) {
        if (f->minor == 6) {
                /* No _PyRuntime: the static interp_head, a pointer in .data or .bss. */
                if (f->runtime_addr != 0 || f->runtime_size != 0 || f->interp_head_addr == 0)
                        return -ERANGE;
                return in_segment(f, f->interp_head_addr, sizeof(uint64_t), false) ? 0 : -ERANGE;
        }
        if (f->interp_head_addr != 0 || f->runtime_addr == 0 || layout->runtime_interpreters_head == EP_PY_NO_OFFSET)
                return -ERANGE;
        /* _PyRuntime holds the interpreter list's head. */
        if (f->runtime_size < (uint64_t) layout->runtime_interpreters_head + sizeof(uint64_t))
                return -ERANGE;
        return in_segment(f, f->runtime_addr, f->runtime_size, false) ? 0 : -ERANGE;
}

int ep_cpython_facts_validate(const void *buf, size_t size, EpCPythonFacts *ret) {
        EpRuntimeFactsHeader h;
        EpCPythonFacts f;
        EpPyLayout layout;
        int r;

        if (!buf || size < sizeof(h))
                return -EBADMSG;
        memcpy(&h, buf, sizeof(h));
        if (h.magic != EP_RUNTIME_FACTS_MAGIC)
                return -EBADMSG;
        if (h.version != EP_RUNTIME_FACTS_VERSION)
                return -EPROTONOSUPPORT;
        if (h.kind != EP_RUNTIME_FACTS_CPYTHON || h.size != size || size != sizeof(f) || h.reserved != 0)
                return -EBADMSG;
        memcpy(&f, buf, sizeof(f));

        if (f.major != 3 || ep_py_layout_for_version(f.major, f.minor, &layout) < 0)
                return -EPROTONOSUPPORT;
        if (f.micro != EP_CPYTHON_MICRO_UNKNOWN && f.micro > 99)
                return -ERANGE;
        if (f.layout_source != EP_CPYTHON_LAYOUT_TABLE &&
            !(f.layout_source == EP_CPYTHON_LAYOUT_DEBUG_OFFSETS && f.minor >= 13))
                return -EBADMSG;

        r = validate_segments(&f);
        if (r < 0)
                return r;
        r = validate_eval(&f);
        if (r < 0)
                return r;
        r = validate_runtime(&f, &layout);
        if (r < 0)
                return r;

        *ret = f;
        return 0;
}

uint64_t ep_cpython_facts_interp_head(const EpCPythonFacts *f, const EpPyLayout *layout) {
        if (f->minor == 6)
                return f->interp_head_addr;
        return f->runtime_addr + layout->runtime_interpreters_head;
}
