/* SPDX-License-Identifier: MIT */
#include <bpf/bpf.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpf-programs.h"
#include "log.h"
#include "macro.h"

typedef struct FuncList {
        EpBpfFunc *funcs;
        size_t n, cap;
} FuncList;

static int list_grow(FuncList *l, size_t more) {
        if (l->n + more <= l->cap)
                return 0;
        size_t cap = MAX(l->cap * 2, l->n + more);
        cap = MAX(cap, (size_t) 64);
        EpBpfFunc *p = reallocarray(l->funcs, cap, sizeof *p);
        if (!p)
                return -ENOMEM;
        l->funcs = p;
        l->cap = cap;
        return 0;
}

static void format_name(char *buf, const uint8_t tag[BPF_TAG_SIZE], const char *prog_name) {
        char hex[2 * BPF_TAG_SIZE + 1];

        for (size_t i = 0; i < BPF_TAG_SIZE; i++)
                snprintf(hex + 2 * i, 3, "%02x", tag[i]);
        snprintf(buf, EP_BPF_FUNC_NAME_MAX, "bpf_prog_%s%s%s", hex, prog_name[0] ? "_" : "", prog_name);
}

/* Appends the functions of one program. The kernel fills the arrays only when asked in a second
 * call sized from the first; both counts are fixed once a program is loaded. Returns 0, or
 * -ENOENT when the program went away meanwhile. */
static int add_program(int fd, uint32_t id, FuncList *l) {
        struct bpf_prog_info info = {};
        uint32_t len = sizeof info;
        int r;

        r = bpf_obj_get_info_by_fd(fd, &info, &len);
        if (r < 0)
                return r;
        uint32_t n = info.nr_jited_ksyms;
        if (n == 0) /* interpreted: no machine code of its own */
                return 0;
        if (info.nr_jited_func_lens != n || n > EP_BPF_FUNCS_MAX)
                return log_debug_errno(-EBADMSG, "BPF program %" PRIu32 ": %" PRIu32 " functions, %" PRIu32
                                       " lengths; skipped.", id, n, info.nr_jited_func_lens);
        if (l->n + n > EP_BPF_FUNCS_MAX)
                return -E2BIG;

        uint32_t n_tags = info.nr_prog_tags;
        _cleanup_free_ uint64_t *ksyms = calloc(n, sizeof *ksyms);
        _cleanup_free_ uint32_t *lens = calloc(n, sizeof *lens);
        _cleanup_free_ uint8_t *tags = n_tags > 0 ? calloc(n_tags, BPF_TAG_SIZE) : NULL;
        if (!ksyms || !lens || (n_tags > 0 && !tags))
                return -ENOMEM;

        char prog_name[BPF_OBJ_NAME_LEN + 1] = {};
        memcpy(prog_name, info.name, BPF_OBJ_NAME_LEN);
        uint8_t prog_tag[BPF_TAG_SIZE];
        memcpy(prog_tag, info.tag, BPF_TAG_SIZE);

        info = (struct bpf_prog_info) {
                .nr_jited_ksyms = n,
                .jited_ksyms = (uint64_t) (uintptr_t) ksyms,
                .nr_jited_func_lens = n,
                .jited_func_lens = (uint64_t) (uintptr_t) lens,
                .nr_prog_tags = n_tags,
                .prog_tags = (uint64_t) (uintptr_t) tags,
        };
        len = sizeof info;
        r = bpf_obj_get_info_by_fd(fd, &info, &len);
        if (r < 0)
                return r;

        r = list_grow(l, n);
        if (r < 0)
                return r;
        for (uint32_t i = 0; i < n; i++) {
                if (ksyms[i] == 0) /* addresses hidden from these credentials */
                        return -EPERM;
                if (lens[i] == 0)
                        continue;
                EpBpfFunc *f = &l->funcs[l->n++];
                f->start = ksyms[i];
                f->length = lens[i];
                f->prog_id = id;
                /* prog_tags holds one tag per function (the subprogram's own); older kernels
                 * have only the program's. */
                format_name(f->name, n_tags == n ? tags + (size_t) i * BPF_TAG_SIZE : prog_tag, prog_name);
        }
        return 0;
}

static int func_compare(const void *a, const void *b) {
        const EpBpfFunc *x = a, *y = b;
        return x->start < y->start ? -1 : x->start > y->start;
}

int ep_bpf_programs_list(EpBpfFunc **ret, size_t *ret_n) {
        _cleanup_free_ EpBpfFunc *funcs = NULL;
        FuncList l = {};
        uint32_t id = 0;
        unsigned seen = 0;
        int r;

        for (;;) {
                r = bpf_prog_get_next_id(id, &id); /* libbpf returns -errno */
                if (r < 0) {
                        if (r == -ENOENT) /* the end of the list */
                                break;
                        free(l.funcs);
                        return r;
                }
                if (++seen > EP_BPF_PROGRAMS_MAX) {
                        log_debug("More than %u BPF programs; listing only the first.", EP_BPF_PROGRAMS_MAX);
                        break;
                }

                _cleanup_close_ int fd = bpf_prog_get_fd_by_id(id);
                if (fd < 0) {
                        r = fd;
                        if (r == -ENOENT) /* unloaded since get_next_id */
                                continue;
                        free(l.funcs);
                        return r;
                }
                r = add_program(fd, id, &l);
                if (r == -E2BIG) {
                        log_debug("More than %u BPF functions; listing only the first.", EP_BPF_FUNCS_MAX);
                        break;
                }
                if (r == -EPERM || r == -ENOMEM) {
                        free(l.funcs);
                        return r;
                }
                /* Anything else concerns that program only (gone meanwhile, odd counts). */
        }

        funcs = l.funcs;
        if (l.n > 1)
                qsort(funcs, l.n, sizeof *funcs, func_compare);
        *ret = TAKE_PTR(funcs);
        *ret_n = l.n;
        return 0;
}
