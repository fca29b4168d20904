/* SPDX-License-Identifier: MIT */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bpf-programs.h"
#include "log.h"
#include "macro.h"

#include "prog-list.h"
#include "prog-list.skel.h"

struct EpBpfLister {
        struct prog_list *skel;
        struct bpf_link *link;
};

EpBpfLister *ep_bpf_lister_free(EpBpfLister *l) {
        if (!l)
                return NULL;
        bpf_link__destroy(l->link);
        prog_list__destroy(l->skel);
        free(l);
        return NULL;
}

int ep_bpf_lister_new(EpBpfLister **ret) {
        _cleanup_(ep_bpf_lister_freep) EpBpfLister *l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->skel = prog_list__open_and_load();
        if (!l->skel)
                return -errno;
        l->link = bpf_program__attach_iter(l->skel->progs.list_bpf_functions, NULL);
        if (!l->link)
                return -errno;
        *ret = TAKE_PTR(l);
        return 0;
}

typedef struct FuncList {
        EpBpfFunc *funcs;
        size_t n, cap;
} FuncList;

static int list_add(FuncList *l, const struct ep_prog_list_record *rec) {
        if (rec->length == 0 || rec->start == 0) /* interpreted: no machine code of its own */
                return 0;
        if (l->n >= EP_BPF_FUNCS_MAX)
                return -E2BIG;
        if (l->n == l->cap) {
                size_t cap = MAX(l->cap * 2, (size_t) 64);
                EpBpfFunc *p = reallocarray(l->funcs, cap, sizeof *p);
                if (!p)
                        return -ENOMEM;
                l->funcs = p;
                l->cap = cap;
        }

        EpBpfFunc *f = &l->funcs[l->n++];
        char hex[2 * EP_PROG_LIST_TAG_SIZE + 1];
        char prog_name[EP_PROG_LIST_NAME_SIZE + 1] = {};

        f->start = rec->start;
        f->length = rec->length;
        f->prog_id = rec->prog_id;
        for (size_t i = 0; i < EP_PROG_LIST_TAG_SIZE; i++)
                snprintf(hex + 2 * i, 3, "%02x", rec->tag[i]);
        memcpy(prog_name, rec->prog_name, EP_PROG_LIST_NAME_SIZE);
        snprintf(f->name, sizeof f->name, "bpf_prog_%s%s%s", hex, prog_name[0] ? "_" : "", prog_name);
        return 0;
}

static int func_compare(const void *a, const void *b) {
        const EpBpfFunc *x = a, *y = b;
        return x->start < y->start ? -1 : x->start > y->start;
}

/* Reads one iteration: records, possibly split across reads, until the end. */
static int read_records(int fd, FuncList *list) {
        struct ep_prog_list_record recs[256];
        size_t have = 0;

        for (;;) {
                ssize_t k = read(fd, (uint8_t *) recs + have, sizeof recs - have);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (k == 0)
                        return have == 0 ? 0 : -EBADMSG;
                have += (size_t) k;
                size_t whole = have / sizeof recs[0];
                for (size_t i = 0; i < whole; i++) {
                        int r = list_add(list, &recs[i]);
                        if (r < 0)
                                return r;
                }
                have -= whole * sizeof recs[0];
                memmove(recs, &recs[whole], have);
        }
}

int ep_bpf_programs_list(EpBpfLister *l, EpBpfFunc **ret, size_t *ret_n) {
        FuncList list = {};
        int r;

        if (!l || !l->link)
                return -EOPNOTSUPP;
        _cleanup_close_ int fd = bpf_iter_create(bpf_link__fd(l->link));
        if (fd < 0)
                return fd; /* libbpf returns -errno */
        r = read_records(fd, &list);
        if (r == -E2BIG) {
                log_debug("More than %u BPF functions; listing only the first.", EP_BPF_FUNCS_MAX);
                r = 0;
        }
        if (r < 0) {
                free(list.funcs);
                return r;
        }
        if (list.n > 1)
                qsort(list.funcs, list.n, sizeof *list.funcs, func_compare);
        *ret = list.funcs;
        *ret_n = list.n;
        return 0;
}
