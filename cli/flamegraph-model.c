/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "flamegraph-model.h"
#include "hashmap.h"
#include "utf8.h"

/* Changes smaller than this never get the full colour: when two windows barely differ, the
 * noise between them should look pale, not as alarming as a real regression. */
#define DIFF_MIN_SCALE 0.005

size_t ep_utf8_len(const unsigned char *s) {
        /* A NUL ends the string, and is no continuation byte: 4 bounds the read safely. */
        return ep_utf8_char(s, strnlen((const char *) s, 4), NULL);
}

static double unit_hash(const char *s, unsigned salt) {
        uint64_t h = ep_hash_bytes(s, strlen(s)) ^ (0x9e3779b97f4a7c15ULL * (salt + 1));
        /* Mix once more so each salt gives an independent-looking value. */
        h ^= h >> 31;
        h *= 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 29;
        return (double) (h >> 11) / (double) (1ULL << 53);
}

EpRgb ep_flame_kind_color(const char *name, EpViewKind kind) {
        double a = unit_hash(name, 0), b = unit_hash(name, 1);

        switch (kind) {
        case EP_VIEW_NATIVE: /* warm: red to yellow */
                return (EpRgb) { 215 + (unsigned) (40 * b), 90 + (unsigned) (140 * a), 40 + (unsigned) (40 * b) };
        case EP_VIEW_KERNEL: /* cool blue */
                return (EpRgb) { 70 + (unsigned) (60 * a), 150 + (unsigned) (60 * b), 215 + (unsigned) (40 * a) };
        case EP_VIEW_PYTHON: /* violet */
                return (EpRgb) { 150 + (unsigned) (50 * a), 110 + (unsigned) (50 * b), 215 + (unsigned) (40 * a) };
        case EP_VIEW_PROCESS: /* green */
                return (EpRgb) { 110 + (unsigned) (50 * a), 195 + (unsigned) (40 * b), 110 + (unsigned) (40 * a) };
        case EP_VIEW_ROOT:
                return (EpRgb) { 200, 190, 225 };
        case EP_VIEW_UNKNOWN:
        default: /* grey */
                return (EpRgb) { 175 + (unsigned) (35 * a), 175 + (unsigned) (35 * a), 175 + (unsigned) (35 * a) };
        }
}

static double absd(double x) {
        return x < 0 ? -x : x;
}

static unsigned mix(unsigned from, unsigned to, double t) {
        return (unsigned) ((double) from + ((double) to - (double) from) * t + 0.5);
}

EpRgb ep_flame_diff_color(const EpFlameDiff *d, double delta) {
        static const EpRgb neutral = { 236, 236, 232 }, grew = { 222, 45, 38 }, shrank = { 49, 100, 215 };
        double t = MIN(absd(delta) / d->scale, 1.0);
        EpRgb to = delta > 0 ? grew : shrank;

        return (EpRgb) { mix(neutral.r, to.r, t), mix(neutral.g, to.g, t), mix(neutral.b, to.b, t) };
}

double ep_flame_diff_delta(const EpFlameDiff *d, const EpCallTree *target, uint32_t node) {
        double now = (double) ep_calltree_node(target, node)->total / (double) MAX(d->target_total, (uint64_t) 1);
        double then = node < d->n_nodes ? (double) d->base_total[node] / (double) MAX(d->baseline_total, (uint64_t) 1) : 0;
        return now - then;
}

EpRgb ep_flame_node_color(const EpCallTree *t, const EpFlameOptions *o, uint32_t node) {
        if (o->diff)
                return ep_flame_diff_color(o->diff, ep_flame_diff_delta(o->diff, t, node));
        const EpCallNode *n = ep_calltree_node(t, node);
        return ep_flame_kind_color(ep_calltree_string(t, n->frame.name), n->frame.kind);
}

size_t ep_flame_legend(const EpFlameOptions *o, EpFlameLegend ret[static EP_FLAME_LEGEND_MAX]) {
        if (o->diff) {
                ret[0] = (EpFlameLegend) { "grew", ep_flame_diff_color(o->diff, o->diff->scale) };
                ret[1] = (EpFlameLegend) { "shrank", ep_flame_diff_color(o->diff, -o->diff->scale) };
                ret[2] = (EpFlameLegend) { "unchanged", ep_flame_diff_color(o->diff, 0) };
                return 3;
        }
        static const EpViewKind kinds[] = { EP_VIEW_NATIVE, EP_VIEW_PYTHON, EP_VIEW_KERNEL, EP_VIEW_UNKNOWN,
                                            EP_VIEW_PROCESS };
        _Static_assert(ELEMENTSOF(kinds) <= EP_FLAME_LEGEND_MAX, "legend too small");
        for (size_t i = 0; i < ELEMENTSOF(kinds); i++) {
                const char *label = ep_view_kind_to_string(kinds[i]);
                ret[i] = (EpFlameLegend) { label, ep_flame_kind_color(label, kinds[i]) };
        }
        return ELEMENTSOF(kinds);
}

static int walk(const EpCallTree *t, uint32_t id, uint64_t offset, EpFlameVisit visit, void *userdata) {
        int r = visit(userdata, id, offset);
        if (r <= 0)
                return r;

        _cleanup_free_ uint32_t *children = NULL;
        size_t n;
        r = ep_calltree_children_sorted(t, id, &children, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                r = walk(t, children[i], offset, visit, userdata);
                if (r < 0)
                        return r;
                offset += ep_calltree_node(t, children[i])->total;
        }
        return 0;
}

int ep_flame_walk(const EpCallTree *t, EpFlameVisit visit, void *userdata) {
        return walk(t, 0, 0, visit, userdata);
}

/* Frames of two different trees compared by their strings: ids differ between trees. The
 * order is the one ep_calltree_children_sorted() sorts by, so sorted lists merge. */
static int frame_cmp2(const EpCallTree *ta, const EpViewFrame *a, const EpCallTree *tb, const EpViewFrame *b) {
        int c = strcmp(ep_calltree_string(ta, a->name), ep_calltree_string(tb, b->name));
        if (c != 0)
                return c;
        c = strcmp(ep_calltree_string(ta, a->module), ep_calltree_string(tb, b->module));
        if (c != 0)
                return c;
        return (a->kind > b->kind) - (a->kind < b->kind);
}

/* Copies the baseline figures of baseline node b onto target node t, then matches their
 * children, both sorted the same way, like a merge. */
static int match_paths(EpFlameDiff *d, const EpCallTree *target, uint32_t t, const EpCallTree *baseline,
                       uint32_t b) {
        const EpCallNode *bn = ep_calltree_node(baseline, b);
        d->base_total[t] = bn->total;
        d->base_self[t] = bn->self;

        _cleanup_free_ uint32_t *tc = NULL, *bc = NULL;
        size_t n_tc, n_bc;
        int r = ep_calltree_children_sorted(target, t, &tc, &n_tc);
        if (r < 0)
                return r;
        r = ep_calltree_children_sorted(baseline, b, &bc, &n_bc);
        if (r < 0)
                return r;

        for (size_t i = 0, j = 0; i < n_tc && j < n_bc;) {
                int c = frame_cmp2(target, &ep_calltree_node(target, tc[i])->frame, baseline,
                                   &ep_calltree_node(baseline, bc[j])->frame);
                if (c < 0)
                        i++;
                else if (c > 0)
                        j++;
                else {
                        r = match_paths(d, target, tc[i++], baseline, bc[j++]);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

static _Thread_local const EpCallTree *sort_tree;

static int stat_by_frame(const void *a, const void *b) {
        const EpFunctionStat *x = a, *y = b;
        return frame_cmp2(sort_tree, &x->frame, sort_tree, &y->frame);
}

static int stat_by_total(const void *a, const void *b) {
        const EpFunctionStat *x = a, *y = b;
        if (x->total != y->total)
                return x->total < y->total ? 1 : -1;
        return stat_by_frame(a, b);
}

static void sort_stats(const EpCallTree *t, EpFunctionStat *s, size_t n, int (*cmp)(const void *, const void *)) {
        if (n == 0)
                return;
        sort_tree = t;
        qsort(s, n, sizeof(*s), cmp);
        sort_tree = NULL;
}

/* The baseline's functions that the target has no sample of at all. */
static int find_removed(EpFlameDiff *d, const EpCallTree *target, const EpCallTree *baseline) {
        _cleanup_free_ EpFunctionStat *ts = NULL, *bs = NULL;
        size_t n_ts, n_bs;
        int r;

        r = ep_calltree_functions(target, &ts, &n_ts);
        if (r < 0)
                return r;
        r = ep_calltree_functions(baseline, &bs, &n_bs);
        if (r < 0)
                return r;
        sort_stats(target, ts, n_ts, stat_by_frame);
        sort_stats(baseline, bs, n_bs, stat_by_frame);

        /* Compact the unmatched baseline entries to the front of bs. */
        size_t n = 0;
        for (size_t i = 0, j = 0; j < n_bs;) {
                int c = i < n_ts ? frame_cmp2(target, &ts[i].frame, baseline, &bs[j].frame) : 1;
                if (c < 0)
                        i++;
                else if (c == 0) {
                        i++;
                        j++;
                } else
                        bs[n++] = bs[j++];
        }
        sort_stats(baseline, bs, n, stat_by_total);

        d->removed_name = calloc(MAX(n, (size_t) 1), sizeof(char *));
        d->removed_module = calloc(MAX(n, (size_t) 1), sizeof(char *));
        if (!d->removed_name || !d->removed_module)
                return -ENOMEM;
        /* The strings are copied: the diff must not keep the baseline tree alive. */
        for (size_t i = 0; i < n; i++) {
                d->removed_name[i] = strdup(ep_calltree_string(baseline, bs[i].frame.name));
                d->removed_module[i] = strdup(ep_calltree_string(baseline, bs[i].frame.module));
                d->n_removed = i + 1;
                if (!d->removed_name[i] || !d->removed_module[i])
                        return -ENOMEM;
        }
        d->removed = TAKE_PTR(bs);
        return 0;
}

int ep_flame_diff_new(const EpCallTree *target, const EpCallTree *baseline, EpFlameDiff **ret) {
        _cleanup_flame_diff_ EpFlameDiff *d = calloc(1, sizeof(*d));
        if (!d)
                return -ENOMEM;

        d->n_nodes = ep_calltree_size(target);
        d->base_total = calloc(d->n_nodes, sizeof(uint64_t));
        d->base_self = calloc(d->n_nodes, sizeof(uint64_t));
        if (!d->base_total || !d->base_self)
                return -ENOMEM;
        d->target_total = ep_calltree_node(target, 0)->total;
        d->baseline_total = ep_calltree_node(baseline, 0)->total;

        /* The roots always match ("all"), whatever the windows hold. */
        int r = match_paths(d, target, 0, baseline, 0);
        if (r < 0)
                return r;
        r = find_removed(d, target, baseline);
        if (r < 0)
                return r;

        d->scale = DIFF_MIN_SCALE;
        for (size_t i = 1; i < d->n_nodes; i++)
                d->scale = MAX(d->scale, absd(ep_flame_diff_delta(d, target, (uint32_t) i)));

        *ret = TAKE_PTR(d);
        return 0;
}

EpFlameDiff *ep_flame_diff_free(EpFlameDiff *d) {
        if (!d)
                return NULL;
        for (size_t i = 0; i < d->n_removed; i++) {
                free(d->removed_name[i]);
                free(d->removed_module[i]);
        }
        free(d->removed_name);
        free(d->removed_module);
        free(d->removed);
        free(d->base_total);
        free(d->base_self);
        free(d);
        return NULL;
}
